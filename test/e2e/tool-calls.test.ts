/**
 * Tool calls through the whole chain, at the HTTP level with plain fetch: a coordinator on a real socket
 * and a real `umbra-provider start` process (echo engine in its tool mode, sealed session, development
 * attestation: hardware, so every answer carries a receipt). JSON and streamed answers with one and two
 * parallel calls in OpenAI's shapes, the stream assembling into the JSON answer, receipts verified over
 * the tool calls as a consumer can, a structured answer, and a full two-turn tool loop.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { parseIdentityKey, verifyIdentitySignature } from "../../attestation/provider/index.ts";
import { toHex } from "../../src/crypto/encoding.ts";
import { receiptBytes, responseSha256 } from "../../src/crypto/receipts.ts";
import { seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";
import { type ProviderProcess, startProvider } from "../support/processes.ts";
import { postChat, providerToken, readSse, startServer, type TestServer } from "../support/server.ts";

const BUILD = "org/base-build-4bit";
const MODEL = "org/model";

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
};
const TIME = {
  type: "function",
  function: { name: "get_time", parameters: { type: "object", properties: { zone: { type: "string" } }, required: ["zone"] } },
};
const TOOLS = [WEATHER, TIME];

interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}
interface Answer {
  choices: { index: number; message: { role: string; content: string | null; tool_calls?: ToolCall[] }; finish_reason: string }[];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  se_signature?: string;
  response_hash?: string;
  metadata?: { receipt_version: number; provider_key_id: string; request_hash: string; model_build: string; trust_level: string };
}

let t: TestApp;
let server: TestServer;
let apiKey: string;
let provider: ProviderProcess;

beforeAll(async () => {
  t = await testApp();
  await seedCatalog(t);
  const seeded = await seedAccount(t);
  apiKey = seeded.apiKey;
  const token = await providerToken(t, seeded.accountId);
  server = startServer(t);
  provider = startProvider([
    "--coordinator",
    server.url,
    "--token",
    token,
    "--engine",
    "echo",
    "--model",
    BUILD,
    "--dev-attestation",
    "on",
  ]);
  await provider.connected;
});

afterAll(async () => {
  await provider[Symbol.asyncDispose]();
  await server[Symbol.asyncDispose]();
  await t[Symbol.asyncDispose]();
});

const ask = (content: string, extra: Record<string, unknown> = {}) =>
  postChat(server.url, apiKey, { model: MODEL, messages: [{ role: "user", content }], tools: TOOLS, ...extra });

/** Verifies a receipt as docs/examples/verify-receipt.ts does: the response hash from what was received, then the signature. */
async function verifyReceipt(
  response: Response,
  receipt: Pick<Answer, "se_signature" | "response_hash" | "metadata">,
  usage: Answer["usage"],
  content: string | null,
  calls: readonly ToolCall[],
): Promise<void> {
  const { se_signature, response_hash, metadata } = receipt;
  if (!se_signature || !response_hash || !metadata) throw new Error("no receipt");
  expect([metadata.receipt_version, metadata.trust_level]).toEqual([2, "hardware"]);
  const assembled = calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments }));
  expect(toHex(responseSha256(content, assembled))).toBe(response_hash);
  const providers = (await (await fetch(`${server.url}/v1/providers/attestation`)).json()) as {
    data: { identity_key: string; identity_key_sha256: string }[];
  };
  const key = providers.data.find((p) => p.identity_key_sha256 === metadata.provider_key_id)?.identity_key;
  if (!key) throw new Error("the signer is not published");
  const claims = {
    requestId: response.headers.get("x-request-id") as string,
    modelBuild: metadata.model_build,
    requestSha256: Buffer.from(metadata.request_hash, "hex"),
    responseSha256: Buffer.from(response_hash, "hex"),
    usage: { promptTokens: usage.prompt_tokens, cachedTokens: 0, completionTokens: usage.completion_tokens },
  };
  const signature = Buffer.from(se_signature, "base64url");
  expect(() =>
    verifyIdentitySignature(parseIdentityKey(Buffer.from(key, "base64url")), receiptBytes(claims), signature, "receipt"),
  ).not.toThrow();
  // A receipt over the content alone (version 1's hash) does not verify: the tool calls are covered.
  if (calls.length > 0) {
    const contentOnly = { ...claims, responseSha256: responseSha256(content) };
    expect(() =>
      verifyIdentitySignature(parseIdentityKey(Buffer.from(key, "base64url")), receiptBytes(contentOnly), signature, "receipt"),
    ).toThrow();
  }
}

/** The tool calls of a stream, assembled as OpenAI clients do (by index; arguments joined). */
function assemble(chunks: readonly Record<string, unknown>[]): ToolCall[] {
  const calls: ToolCall[] = [];
  for (const c of chunks) {
    const choices = c.choices as {
      delta: { tool_calls?: { index: number; id?: string; function: { name?: string; arguments: string } }[] };
    }[];
    for (const entry of choices[0]?.delta.tool_calls ?? []) {
      const call = calls[entry.index];
      if (call) call.function.arguments += entry.function.arguments;
      else
        calls[entry.index] = {
          id: entry.id ?? "",
          type: "function",
          function: { name: entry.function.name ?? "", arguments: entry.function.arguments },
        };
    }
  }
  return calls;
}

describe("tool calls through a real provider process", () => {
  test.each<[string, string, { name: string; arguments: Record<string, unknown> }[]]>([
    [
      "one call",
      "weather in Paris? get_weather",
      [{ name: "get_weather", arguments: { city: "weather in Paris? get_weather", unit: "celsius" } }],
    ],
    [
      "two parallel calls, in the order named",
      "get_time then get_weather",
      [
        { name: "get_time", arguments: { zone: "get_time then get_weather" } },
        { name: "get_weather", arguments: { city: "get_time then get_weather", unit: "celsius" } },
      ],
    ],
  ])("JSON, %s: message.tool_calls, content null, finish_reason tool_calls, a receipt over the calls", async (_, question, expected) => {
    const response = await ask(question);
    const body = (await response.json()) as Answer;
    expect(response.status).toBe(200);
    const calls = body.choices[0]?.message.tool_calls ?? [];
    expect(body.choices).toEqual([
      {
        index: 0,
        message: {
          role: "assistant",
          content: "",
          tool_calls: expected.map((e, i) => ({
            id: expect.stringMatching(new RegExp(`^call_${i}_[0-9a-f]{8}$`)),
            type: "function",
            function: { name: e.name, arguments: JSON.stringify(e.arguments) },
          })),
        },
        finish_reason: "tool_calls",
      },
    ]);
    await verifyReceipt(response, body, body.usage, null, calls);
  });

  test("stream: delta.tool_calls fragments in order (id and name first), indexes kept, usage, finish tool_calls, one [DONE]; it assembles into the JSON answer", async () => {
    const question = "get_weather and get_time, please";
    const json = (await (await ask(question)).json()) as Answer;
    const response = await ask(question, { stream: true });
    expect([response.status, response.headers.get("content-type")]).toEqual([200, "text/event-stream"]);
    const { data } = await readSse(response);
    expect(data.filter((d) => d === "[DONE]")).toEqual(["[DONE]"]);
    expect(data.at(-1)).toBe("[DONE]");
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Record<string, unknown>);
    const toolChunks = chunks.filter((c) => (c.choices as { delta?: { tool_calls?: unknown } }[])[0]?.delta?.tool_calls !== undefined);
    const entries = toolChunks.map((c) => (c.choices as { delta: { tool_calls: Record<string, unknown>[] } }[])[0]?.delta.tool_calls);
    // One entry per event; a call's first entry has id, type and name, later ones only arguments.
    expect(entries.every((e) => e?.length === 1)).toBe(true);
    const flat = entries.map((e) => e?.[0] as { index: number; id?: string; type?: string; function: Record<string, unknown> });
    expect(flat.map((e) => e.index)).toEqual([...flat.map((e) => e.index)].sort());
    expect(flat.map((e, i) => (i === 0 || flat[i - 1]?.index !== e.index ? Object.keys(e).sort() : Object.keys(e)))).toEqual(
      flat.map((e, i) => (i === 0 || flat[i - 1]?.index !== e.index ? ["function", "id", "index", "type"] : ["index", "function"])),
    );
    expect(flat.filter((e) => e.index === 0).length).toBeGreaterThan(1);
    // Every tool chunk has finish_reason null; then the usage chunk, the terminal chunk with the receipt.
    expect(toolChunks.every((c) => (c.choices as { finish_reason: unknown }[])[0]?.finish_reason === null)).toBe(true);
    const [usageChunk, terminal] = chunks.slice(-2) as [Record<string, unknown>, Record<string, unknown>];
    expect([usageChunk.choices, terminal.choices]).toEqual([[], [{ index: 0, delta: {}, finish_reason: "tool_calls" }]]);
    const calls = assemble(chunks);
    expect(calls).toEqual(json.choices[0]?.message.tool_calls as ToolCall[]);
    await verifyReceipt(response, terminal as unknown as Answer, usageChunk.usage as Answer["usage"], null, calls);
  });

  test("a full two-turn loop: calls, the tool results sent back, an answer built on them", async () => {
    const first = (await (await ask("get_weather and get_time")).json()) as Answer;
    const calls = first.choices[0]?.message.tool_calls ?? [];
    expect(calls.map((c) => c.function.name)).toEqual(["get_weather", "get_time"]);
    const results = ['{"temp": 21, "sky": "clear"}', "12:00"];
    const response = await postChat(server.url, apiKey, {
      model: MODEL,
      tools: TOOLS,
      messages: [
        { role: "user", content: "get_weather and get_time" },
        { role: "assistant", content: null, tool_calls: calls },
        ...calls.map((c, i) => ({ role: "tool", tool_call_id: c.id, content: results[i] })),
      ],
    });
    const body = (await response.json()) as Answer;
    expect([response.status, body.choices]).toEqual([
      200,
      [{ index: 0, message: { role: "assistant", content: `tool result: ${results.join(" ")}` }, finish_reason: "stop" }],
    ]);
    await verifyReceipt(response, body, body.usage, body.choices[0]?.message.content ?? null, []);
  });

  test("structured output: response_format json_schema gives a JSON document in the schema", async () => {
    const schema = {
      type: "object",
      properties: { answer: { type: "string" }, confidence: { type: "number", minimum: 0.5 } },
      required: ["answer", "confidence"],
      additionalProperties: false,
    };
    const response = await postChat(server.url, apiKey, {
      model: MODEL,
      messages: [{ role: "user", content: "is it sunny" }],
      response_format: { type: "json_schema", json_schema: { name: "verdict", strict: true, schema } },
    });
    const body = (await response.json()) as Answer;
    expect([response.status, JSON.parse(body.choices[0]?.message.content ?? "")]).toEqual([
      200,
      { answer: "is it sunny", confidence: 0.5 },
    ]);
  });
});
