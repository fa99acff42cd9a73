/**
 * Bad input, in-process (issue 7 point 2 d): property-based fuzzing with fast-check of chat request
 * bodies, budget values (written as raw JSON literals too), raw bytes, headers and model ids, against the
 * app built exactly as production (test/support/harness.ts) with a scripted provider on a real WebSocket.
 *
 * Every answer is checked against the contract (fuzz-inputs.ts): never a 500, every error the spec's
 * envelope with a status, type and code it lists, the 400 naming a parameter at fault; a request that
 * passes validation succeeds with 200, as JSON or as a stream ending in [DONE], and reaches its provider
 * with the budget of the spec's rules. The provider answers with the budget it received, so the test sees
 * what the coordinator forwarded without any request text.
 *
 * Seeds are fixed (FUZZ_SEED overrides, FUZZ_RUNS_SCALE multiplies the runs); a failure prints the seed,
 * the shrunk counterexample and the path to replay it (fast-check's report).
 */
import { afterAll, beforeAll, describe, expect } from "bun:test";
import fc from "fast-check";
import { connectFakeProvider, type FakeProvider, type Step } from "../support/fake-provider.ts";
import { type TestApp, testApp } from "../support/harness.ts";
import { parseSse, providerToken, startServer, type TestServer } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";
import {
  type Answer,
  budgetLiteral,
  chatBody,
  checkChat,
  type Expected,
  expectEnvelope,
  expectedChat,
  FUZZ_ALIAS,
  FUZZ_BUILD,
  FUZZ_BUILD_LIMIT,
  FUZZ_DEFAULT_MAX_TOKENS,
  FUZZ_PLAIN,
  headerSet,
  KNOWN_MODELS,
  modelId,
  parseBody,
  rawBody,
  runsOf,
  seedOf,
} from "./fuzz-inputs.ts";
import { reliabilityCase } from "./report.ts";

const GROUP = "bad input (in-process)";

interface World {
  readonly t: TestApp;
  readonly server: TestServer;
  readonly provider: FakeProvider;
  readonly apiKey: string;
  readonly accountId: string;
  /** A live provider device token (not a consumer credential). */
  readonly providerToken: string;
}

let world: World;

/** The provider answers every request with the budget it was given, as one chunk. */
const budgetEcho = (inf: { request: { max_tokens: number } }): readonly Step[] => [
  { do: "accept" },
  { do: "chunk", delta: { content: String(inf.request.max_tokens) } },
  { do: "complete", usage: { prompt_tokens: 1, completion_tokens: 1 } },
];

beforeAll(async () => {
  const t = await testApp({ env: { UMBRA_DEFAULT_MAX_TOKENS: String(FUZZ_DEFAULT_MAX_TOKENS), UMBRA_LOG_LEVEL: "warn" } });
  await t.app.admin.upsertModel(FUZZ_BUILD, { max_output_length: FUZZ_BUILD_LIMIT });
  await t.app.admin.upsertModel(FUZZ_PLAIN, {});
  await t.app.admin.setAlias(FUZZ_ALIAS, { build_id: FUZZ_BUILD });
  const consumer = await t.app.admin.createAccount({ name: "fuzz" });
  // Enough for the largest reservation (100,000,000 output tokens at the fallback price) many times over.
  await t.app.admin.creditAccount(consumer.id, { amount_micro_usd: 1_000_000_000_000 });
  const key = await t.app.admin.createKey({ account_id: consumer.id });
  const host = await t.app.admin.createAccount({ name: "host" });
  const server = startServer(t);
  const provider = await connectFakeProvider({
    url: server.url,
    token: await providerToken(t, host.id),
    models: [FUZZ_BUILD, FUZZ_PLAIN],
    maxConcurrency: 64,
    behave: budgetEcho,
  });
  world = { t, server, provider, apiKey: key.key, accountId: consumer.id, providerToken: await providerToken(t, host.id) };
});

afterAll(async () => {
  await world.provider[Symbol.asyncDispose]();
  await world.server[Symbol.asyncDispose]();
  await world.t[Symbol.asyncDispose]();
});

async function request(method: string, path: string, headers: Record<string, string>, body?: Uint8Array | string): Promise<Answer> {
  const init: RequestInit = { method, headers };
  if (body !== undefined) init.body = body;
  const response = await world.t.app.http.handle(new Request(`http://localhost${path}`, init));
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, body: parsed };
}

const jsonHeaders = () => ({ authorization: `Bearer ${world.apiKey}`, "content-type": "application/json" });

/** The completion text of a 200 answer (JSON or a whole event stream), after checking its framing. */
function contentOf(answer: Answer, expected: Expected): string | undefined {
  if (answer.status !== 200 || expected.kind !== "ok") return undefined;
  if (expected.stream) {
    expect(answer.headers.get("content-type")).toBe("text/event-stream");
    const { data } = parseSse(String(answer.body));
    expect(data.at(-1)).toBe("[DONE]");
    const chunks = data
      .slice(0, -1)
      .map((d) => JSON.parse(d) as { object: string; model: string; choices: { delta: { content?: string } }[] });
    for (const c of chunks)
      expect({ object: c.object, model: c.model }).toEqual({ object: "chat.completion.chunk", model: expected.model });
    return chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
  }
  const body = answer.body as { object: string; model: string; choices: { message: { content: string } }[] };
  expect({ object: body.object, model: body.model }).toEqual({ object: "chat.completion", model: expected.model });
  return body.choices[0]?.message.content;
}

/** Parses bytes the way a JSON body is read (UTF-8, BOM dropped); `parsed` false when not JSON or empty. */
function decodeJson(bytes: Uint8Array): { parsed: boolean; value: unknown } {
  const text = new TextDecoder().decode(bytes);
  if (text.length === 0) return { parsed: false, value: undefined };
  try {
    return { parsed: true, value: parseBody(text) };
  } catch {
    return { parsed: false, value: undefined };
  }
}

async function checkBytes(bytes: Uint8Array, headers: Record<string, string> = jsonHeaders()): Promise<Expected> {
  const { parsed, value } = decodeJson(bytes);
  const expected = expectedChat(value, parsed);
  const answer = await request("POST", "/v1/chat/completions", headers, bytes);
  checkChat(expected, answer, contentOf(answer, expected));
  return expected;
}

const tally = (counts: Map<string, number>, key: string) => counts.set(key, (counts.get(key) ?? 0) + 1);
const shown = (counts: Map<string, number>) =>
  [...counts]
    .sort()
    .map(([k, n]) => `${k} ${n}`)
    .join(", ");

describe(GROUP, () => {
  reliabilityCase(GROUP, "chat request bodies", async (c) => {
    const seed = seedOf(7001);
    const runs = runsOf(1000);
    c.tried(
      `${runs} fast-check chat bodies (seed ${seed}): every field sometimes absent, null or the wrong type; odd model ids; pass-through, identity and deeply nested fields`,
    );
    const outcomes = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(chatBody, async (body) => {
        const expected = await checkBytes(new TextEncoder().encode(JSON.stringify(body)));
        tally(outcomes, expected.kind);
      }),
      { seed, numRuns: runs },
    );
    expect(outcomes.get("ok") ?? 0).toBeGreaterThan(runs / 10);
    expect(outcomes.get("invalid") ?? 0).toBeGreaterThan(runs / 10);
    c.held(
      `every answer as the contract says (${shown(outcomes)}): no 500, errors in the envelope with a listed status/type/code and the parameter at fault`,
    );
    c.held("every valid request answered 200 (JSON or a stream ending in [DONE]) and reached the provider with the spec's budget");
    const account = await waitFor(async () => {
      const a = await world.t.app.admin.getAccount(world.accountId);
      return a.reserved_micro_usd === 0 ? a : undefined;
    }, "no reservation left");
    expect(account.reserved_micro_usd).toBe(0);
    c.held("no reservation left behind");
  });

  reliabilityCase(GROUP, "budget values as raw JSON literals", async (c) => {
    const seed = seedOf(7002);
    const runs = runsOf(600);
    c.tried(
      `${runs} bodies (seed ${seed}) whose max_tokens / max_completion_tokens are raw literals: negative, zero, -0, huge (2^63, 1e308, 1e400), floats, exponents, strings, null, booleans, arrays, non-JSON (NaN, 0x10, +1)`,
    );
    const outcomes = new Map<string, number>();
    const arb = fc.record({
      model: fc.constantFrom(...KNOWN_MODELS.keys()),
      stream: fc.boolean(),
      maxTokens: budgetLiteral,
      maxCompletionTokens: budgetLiteral,
    });
    await fc.assert(
      fc.asyncProperty(arb, async ({ model, stream, maxTokens, maxCompletionTokens }) => {
        const fields = [
          `"model":${JSON.stringify(model)}`,
          `"messages":[{"role":"user","content":"count the budget"}]`,
          `"stream":${stream}`,
        ];
        if (maxTokens !== undefined) fields.push(`"max_tokens":${maxTokens}`);
        if (maxCompletionTokens !== undefined) fields.push(`"max_completion_tokens":${maxCompletionTokens}`);
        const expected = await checkBytes(new TextEncoder().encode(`{${fields.join(",")}}`));
        tally(outcomes, expected.kind === "invalid" ? `400 ${expected.params.map((p) => p ?? "invalid_json").join("/")}` : expected.kind);
      }),
      { seed, numRuns: runs },
    );
    expect(outcomes.get("ok") ?? 0).toBeGreaterThan(runs / 10);
    c.held(
      `rules 1-4 held (${shown(outcomes)}): omitted, null, 0 -> default ${FUZZ_DEFAULT_MAX_TOKENS} within the model limit; positive -> that budget clamped; negative, fractional, non-numeric -> 400 naming the field; max_tokens wins`,
    );
  });

  reliabilityCase(GROUP, "raw request bytes", async (c) => {
    const seed = seedOf(7003);
    const runs = runsOf(500);
    c.tried(
      `${runs} raw bodies (seed ${seed}): random bytes, text, JSON of every shape, truncated chat bodies, a BOM, duplicate keys, __proto__ keys`,
    );
    const outcomes = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(rawBody, async (bytes) => {
        tally(outcomes, (await checkBytes(bytes)).kind);
      }),
      { seed, numRuns: runs },
    );
    c.held(
      `no 500; non-JSON or non-object bodies are 400 invalid_json; parseable ones follow the same oracle as structured bodies (${shown(outcomes)})`,
    );
  });

  reliabilityCase(GROUP, "headers", async (c) => {
    const seed = seedOf(7004);
    const runs = runsOf(500);
    c.tried(
      `${runs} header sets (seed ${seed}): Authorization variants (none, empty, wrong scheme, extra words, a provider device token, junk JWTs), content types (incl. the sealed one), Accept, random x- headers`,
    );
    const outcomes = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(headerSet, chatBody, async (h, body) => {
        const headers: Record<string, string> = { ...h.extra };
        const auth = h.authorization?.replaceAll("PROVIDER_TOKEN", world.providerToken).replaceAll("KEY", world.apiKey);
        if (auth !== undefined) headers.authorization = auth;
        if (h.contentType !== undefined) headers["content-type"] = h.contentType;
        if (h.accept !== undefined) headers.accept = h.accept;
        const bytes = new TextEncoder().encode(JSON.stringify(body));
        const answer = await request("POST", "/v1/chat/completions", headers, bytes);
        const valid = h.authorization === "Bearer KEY";
        const eitherWay = ["Bearer  KEY", "Bearer KEY "].includes(h.authorization ?? "");
        if (!valid && !(eitherWay && answer.status !== 401)) {
          expect(expectEnvelope(answer).type).toBe("authentication_error");
          expect(answer.status).toBe(401);
          tally(outcomes, "401");
          return;
        }
        const sealed = h.contentType?.split(";")[0]?.trim().toLowerCase() === "application/vnd.umbra.sealed+json";
        if (sealed) {
          // A plain JSON body sent as sealed is a malformed envelope: a plain 400 on the envelope's fields.
          const e = expectEnvelope(answer);
          expect(answer.status).toBe(400);
          expect([undefined, "version", "enc", "ciphertext"]).toContain(e.param);
          tally(outcomes, "sealed 400");
          return;
        }
        const { parsed, value } = decodeJson(bytes);
        const expected = expectedChat(value, parsed);
        checkChat(expected, answer, contentOf(answer, expected));
        tally(outcomes, `authorized ${answer.status}`);
      }),
      { seed, numRuns: runs },
    );
    c.held(
      `credentials checked first (401 authentication_error in the envelope, a provider token refused); content type does not change the JSON contract; the sealed type with a plain body is a 400 on the envelope (${shown(outcomes)})`,
    );
  });

  reliabilityCase(GROUP, "model ids on GET /v1/models/{id}", async (c) => {
    const seed = seedOf(7005);
    const runs = runsOf(600);
    c.tried(
      `${runs} ids (seed ${seed}): known ids, near misses, unicode, NUL, lone surrogates, %, ?, #, .., empty and very long, sent percent-encoded whole, per segment, or double-encoded`,
    );
    const statuses = new Map<string, number>();
    const arb = fc.record({ id: modelId, encoding: fc.constantFrom("whole", "segments", "double") });
    await fc.assert(
      fc.asyncProperty(arb, async ({ id, encoding }) => {
        // Ids that a URL cannot carry unchanged: lone surrogates (encodeURIComponent throws), and
        // dot segments when sent per segment (the URL parser resolves them before the server sees them).
        if (id === "") return; // "/v1/models/" is the list, not an id
        let path: string;
        try {
          if (encoding === "whole") path = encodeURIComponent(id);
          else if (encoding === "double") path = encodeURIComponent(encodeURIComponent(id));
          else path = id.split("/").map(encodeURIComponent).join("/");
        } catch {
          return;
        }
        if (path.split("/").some((s) => s === "" || s === "." || s === "..")) return;
        const answer = await request("GET", `/v1/models/${path}`, { authorization: `Bearer ${world.apiKey}` });
        const expectedId = encoding === "double" ? encodeURIComponent(id) : id;
        tally(statuses, String(answer.status));
        if (KNOWN_MODELS.has(expectedId)) {
          expect(answer.status).toBe(200);
          expect((answer.body as { id: string }).id).toBe(expectedId);
          return;
        }
        const e = expectEnvelope(answer);
        expect({ status: answer.status, code: e.code, param: e.param }).toEqual({ status: 404, code: "model_not_found", param: "model" });
      }),
      { seed, numRuns: runs },
    );
    c.held(
      `known ids (percent-encoded whole or per segment) answer 200 with that id; every other id 404 model_not_found, param model, in the envelope (${shown(statuses)})`,
    );
  });

  reliabilityCase(GROUP, "list query on GET /v1/models", async (c) => {
    const seed = seedOf(7006);
    const runs = runsOf(100);
    c.tried(`${runs} include_builds values (seed ${seed}), repeated or not, with unknown query parameters`);
    const arb = fc.record({
      values: fc.array(fc.oneof(fc.constant("1"), fc.string({ maxLength: 6 })), { maxLength: 2 }),
      other: fc.dictionary(fc.stringMatching(/^[a-z_]{1,8}$/), fc.string({ maxLength: 6 }), { maxKeys: 2 }),
    });
    await fc.assert(
      fc.asyncProperty(arb, async ({ values, other }) => {
        const query = new URLSearchParams(Object.entries(other).filter(([k]) => k !== "include_builds"));
        for (const v of values) query.append("include_builds", v);
        const answer = await request("GET", `/v1/models?${query}`, { authorization: `Bearer ${world.apiKey}` });
        // A repeated parameter may be read either way; a single one must be exactly 1 to list.
        const listable = values.length === 0 || values.every((v) => v === "1");
        if (answer.status === 200) {
          expect((answer.body as { object: string }).object).toBe("list");
          if (values.length < 2) expect(listable).toBe(true);
          return;
        }
        const e = expectEnvelope(answer);
        expect({ status: answer.status, param: e.param }).toEqual({ status: 400, param: "include_builds" });
        if (values.length < 2) expect(listable).toBe(false);
      }),
      { seed, numRuns: runs },
    );
    c.held(
      "include_builds absent or 1 lists (200); any other single value is a 400 on include_builds; unknown parameters are ignored; repeats are a 200 or that 400",
    );
  });
});
