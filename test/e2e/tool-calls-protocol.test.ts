/**
 * The coordinator's side of tool-call frames (docs/protocol.md "Tool calls"), with scripted providers on
 * a real socket: frames accepted in order (one seq over chunks and tool calls, sealed or not) and relayed
 * in OpenAI's shapes; a tool call is first content (commit, then an in-band error on failure); every
 * order violation ends the session (1002), in a sealed session as invalid output (502
 * invalid_provider_output, no failover); tool-call text counts toward the output bound.
 */
import { describe, expect, test } from "bun:test";
import { toBase64url } from "../../src/crypto/encoding.ts";
import { CLOSE } from "../../src/protocol/frames.ts";
import { chatEnv } from "../support/chat-env.ts";
import type { SealedContext, Step } from "../support/fake-provider.ts";
import { chatBody, postChat, readSse } from "../support/server.ts";

const _BUILD = "org/base-build-4bit";
const TOOLS = { tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }] };

const OPEN = { index: 0, id: "call_a", name: "get_weather", arguments: '{"city":' };
const MORE = { index: 0, arguments: '"Paris"}' };
const SECOND = { index: 1, id: "call_b", name: "get_time" };
const USAGE = { prompt_tokens: 5, completion_tokens: 3 };
const INVALID = {
  error: { message: "the provider's output failed verification", type: "provider_error", code: "invalid_provider_output" },
};
const FAILED = { error: { message: "the provider failed before producing content", type: "provider_error", code: "provider_error" } };
const FAILED_AFTER = {
  error: { message: "the provider failed while generating the response", type: "provider_error", code: "provider_error" },
};

/** Text then two calls (one in two fragments), one seq over all four frames, then complete. */
const ANSWER: readonly Step[] = [
  { do: "accept" },
  { do: "chunk", delta: { content: "Checking." } },
  { do: "tool_call", call: OPEN },
  { do: "tool_call", call: MORE },
  { do: "tool_call", call: SECOND },
  { do: "complete", finishReason: "tool_calls", usage: USAGE },
];
const EXPECTED_MESSAGE = {
  role: "assistant",
  content: "Checking.",
  tool_calls: [
    { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
    { id: "call_b", type: "function", function: { name: "get_time", arguments: "" } },
  ],
};

describe.each([
  ["plaintext", false],
  ["sealed", true],
])("a %s session relays tool calls", (_, sealed) => {
  test("JSON: content and message.tool_calls; complete's seq counts chunks and tool calls", async () => {
    await using ctx = await chatEnv();
    await ctx.provider({ behave: () => ANSWER, sealed: sealed });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("weather?", TOOLS));
    const body = (await response.json()) as { choices: unknown[] };
    expect([response.status, body.choices]).toEqual([200, [{ index: 0, message: EXPECTED_MESSAGE, finish_reason: "tool_calls" }]]);
  });

  test("stream: the same frames as chunks, in order", async () => {
    await using ctx = await chatEnv();
    await ctx.provider({ behave: () => ANSWER, sealed: sealed });
    const { data } = await readSse(await postChat(ctx.server.url, ctx.apiKey, chatBody("weather?", { ...TOOLS, stream: true })));
    const deltas = data.slice(0, 4).map((d) => (JSON.parse(d) as { choices: { delta: unknown }[] }).choices[0]?.delta);
    expect(deltas).toEqual([
      { role: "assistant", content: "Checking." },
      { tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] },
      { tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "get_time", arguments: "" } }] },
    ]);
    expect(data.length).toBe(7);
    expect(data.at(-1)).toBe("[DONE]");
  });
});

describe("a tool call is first content", () => {
  test("the stream commits on it: a failure after it is one in-band error event, no [DONE] and no failover", async () => {
    await using ctx = await chatEnv();
    await ctx.provider({ behave: () => [{ do: "accept" }, { do: "tool_call", call: OPEN }, { do: "error", code: "engine_error" }] });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("weather?", { ...TOOLS, stream: true }));
    expect(response.status).toBe(200);
    const { data } = await readSse(response);
    expect(data.map((d) => JSON.parse(d) as unknown)).toEqual([
      expect.objectContaining({
        choices: [{ index: 0, delta: { role: "assistant", tool_calls: [expect.objectContaining({ id: "call_a" })] }, finish_reason: null }],
      }),
      { error: { message: "the provider failed while generating the response", type: "provider_error", code: "provider_error" } },
    ]);
  });
});

const sealedToolCall = (ctx: SealedContext, call: unknown) =>
  JSON.stringify({ type: "sealed_tool_call", ...ctx.ids, ...ctx.seal(call, false) });

describe.each<[string, boolean, readonly Step[], string]>([
  [
    "a continuation before any call opened",
    true,
    [{ do: "accept" }, { do: "tool_call", call: MORE }],
    "tool_call index 0 continues no open call (last is -1)",
  ],
  [
    "index 1 opening first",
    true,
    [{ do: "accept" }, { do: "tool_call", call: { ...SECOND } }],
    "tool_call index 1 opens a call, expected 0",
  ],
  [
    "a fragment going back to an earlier call (after the first call: committed)",
    false,
    [{ do: "accept" }, { do: "tool_call", call: OPEN }, { do: "tool_call", call: SECOND }, { do: "tool_call", call: MORE }],
    "tool_call index 0 continues no open call (last is 1)",
  ],
  ["a tool call before accepted", true, [{ do: "tool_call", call: OPEN }], "tool_call before accepted"],
])("plaintext: %s", (_, beforeContent, steps, reason) => {
  test("ends the session with 1002; the request fails (before first content after failing over, here to nobody): 502", async () => {
    await using ctx = await chatEnv();
    const p = await ctx.provider({ behave: () => steps });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("weather?", TOOLS));
    expect({ status: response.status, body: await response.json() }).toEqual({ status: 502, body: beforeContent ? FAILED : FAILED_AFTER });
    expect(await p.closed).toEqual({ code: CLOSE.protocolError, reason });
  });
});

test("plaintext: a seq gap across chunk and tool_call frames ends the session with 1002 (after the first content: 502)", async () => {
  await using ctx = await chatEnv();
  const p = await ctx.provider({
    behave: (inf) => [
      { do: "accept" },
      { do: "chunk", delta: { content: "x" } },
      { do: "raw", text: JSON.stringify({ type: "tool_call", request_id: inf.request_id, attempt: inf.attempt, seq: 2, tool_call: OPEN }) },
    ],
  });
  const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("weather?", TOOLS));
  expect({ status: response.status, body: await response.json() }).toEqual({ status: 502, body: FAILED_AFTER });
  expect(await p.closed).toEqual({ code: CLOSE.protocolError, reason: "tool_call seq 2, expected 1" });
});

describe.each<[string, readonly Step[]]>([
  ["a tool call out of order", [{ do: "accept" }, { do: "tool_call", call: MORE }]],
  [
    "a plaintext tool_call frame",
    [{ do: "accept" }, { do: "frames", make: (c) => [JSON.stringify({ type: "tool_call", ...c.ids, seq: 0, tool_call: OPEN })] }],
  ],
  [
    "a tampered sealed tool call",
    [
      { do: "accept" },
      {
        do: "frames",
        make: (c) => {
          const frame = JSON.parse(sealedToolCall(c, OPEN)) as { sealed: string };
          const bytes = Buffer.from(frame.sealed, "base64url");
          bytes[0] = (bytes[0] as number) ^ 1;
          return [JSON.stringify({ ...frame, sealed: toBase64url(bytes) })];
        },
      },
    ],
  ],
  [
    "a sealed payload that is not a tool call",
    [{ do: "accept" }, { do: "frames", make: (c) => [sealedToolCall(c, { index: 0, id: "a" })] }],
  ],
])("sealed: %s", (_, steps) => {
  test("is invalid output: 502 invalid_provider_output without failover, the session closed with 1002", async () => {
    await using ctx = await chatEnv();
    const p = await ctx.provider({ behave: () => steps, sealed: true });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("weather?", TOOLS));
    expect({ status: response.status, body: await response.json() }).toEqual({ status: 502, body: INVALID });
    expect((await p.closed).code).toBe(CLOSE.protocolError);
  });
});

test("tool-call text counts toward the output bound: arguments far beyond the budget are invalid output", async () => {
  await using ctx = await chatEnv();
  const p = await ctx.provider({ behave: () => [{ do: "accept" }, { do: "tool_call", call: { ...OPEN, arguments: "x".repeat(70_000) } }] });
  const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("weather?", { ...TOOLS, max_tokens: 1 }));
  expect({ status: response.status, body: await response.json() }).toEqual({ status: 502, body: INVALID });
  expect(await p.closed).toEqual({ code: CLOSE.protocolError, reason: "output far beyond the output budget" });
});
