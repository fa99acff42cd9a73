/**
 * Every route of the OpenAPI document against real answers: a coordinator on a real socket (chat-env.ts),
 * a real provider process with development attestation (hardware trust, signed receipts, tool calls and
 * structured answers from the echo engine), and a fake provider that fails after its first content. Each
 * answer's status must be documented for its operation and its body (JSON, or each event of a stream;
 * sealed answers outside and, opened, inside) must be valid against the documented schema, strictly: a
 * field the code writes that the document does not name fails. Request bodies are checked too: the ones
 * the route accepts are valid against the documented request schema, the ones it refuses for a field are not.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createParser } from "eventsource-parser";
import { openApiDocument } from "../../src/api/openapi/document.ts";
import { RESPONSE_NONCE_HEADER, SEALED_CONTENT_TYPE, sealConsumerRequest } from "../../src/crypto/consumer-seal.ts";
import { fromBase64url } from "../../src/crypto/encoding.ts";
import { type ChatEnv, chatEnv } from "../support/chat-env.ts";
import type { Behaviour } from "../support/fake-provider.ts";
import { seedAccount } from "../support/harness.ts";
import { type Answer, OpenApiChecker } from "../support/openapi-check.ts";
import { chatBody } from "../support/server.ts";

const checker = new OpenApiChecker(JSON.parse(JSON.stringify(openApiDocument())));
const CHAT = "/v1/chat/completions";
/** Accepts, sends one chunk, then fails: a JSON answer is 502, a stream ends with an in-band error. */
const flaky: Behaviour = () => [{ do: "accept" }, { do: "chunk", delta: { content: "partial " } }, { do: "error", code: "engine_error" }];
const WEATHER = {
  type: "function",
  function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
};

let ctx: ChatEnv;
const keys: Record<"allowlisted" | "capped" | "poor" | "slow" | "machineless", string> = {
  allowlisted: "",
  capped: "",
  poor: "",
  slow: "",
  machineless: "",
};

beforeAll(async () => {
  ctx = await chatEnv({ env: { UMBRA_MAX_BODY_BYTES: "65536" } });
  const admin = ctx.t.app.admin;
  await admin.upsertModel("org/flaky", {});
  await admin.upsertModel("org/idle", {});
  keys.allowlisted = (await admin.createKey({ account_id: ctx.accountId, allowed_models: ["other/plain"] })).key;
  keys.capped = (await admin.createKey({ account_id: ctx.accountId, spend_cap_micro_usd: 1 })).key;
  keys.slow = (await admin.createKey({ account_id: ctx.accountId, rpm: 1 })).key;
  keys.poor = (await seedAccount(ctx.t, {}, 0)).apiKey;
  keys.machineless = (await seedAccount(ctx.t)).apiKey;
  await ctx.providerProcess(["--dev-attestation", "on"]);
  await ctx.provider({ models: ["org/flaky"], behave: flaky });
}, 60_000);

afterAll(async () => {
  await ctx?.[Symbol.asyncDispose]();
});

/** Sends a request and checks the answer against the document; returns its status and text. */
async function exchange(
  method: string,
  template: string,
  path: string,
  init: { key?: string; body?: unknown; raw?: string; type?: string } = {},
) {
  const headers: Record<string, string> = {};
  if (init.key) headers.authorization = `Bearer ${init.key}`;
  const body = init.raw ?? (init.body === undefined ? undefined : JSON.stringify(init.body));
  if (body !== undefined) headers["content-type"] = init.type ?? "application/json";
  const response = await fetch(`${ctx.server.url}${path}`, { method, headers, ...(body !== undefined ? { body } : {}) });
  const answer: Answer = { status: response.status, headers: response.headers, text: await response.text() };
  expect(checker.response(method, template, answer)).toEqual([]);
  return answer;
}

const get = (template: string, path = template, key?: string) => exchange("GET", template, path, key ? { key } : {});
const chat = (body: unknown, key = ctx.apiKey) => exchange("POST", CHAT, CHAT, { key, body });
const codeOf = (a: Answer) => (JSON.parse(a.text) as { error: { code: string } }).error.code;

describe("public routes", () => {
  test("health probes, the document, prices and the coordinator's attestation", async () => {
    expect((await get("/healthz")).status).toBe(200);
    expect((await get("/readyz")).status).toBe(200);
    expect((await get("/v1/openapi.json")).status).toBe(200);
    expect((await get("/v1/pricing")).status).toBe(200);
    const attestation = JSON.parse((await get("/v1/attestation")).text) as { platform: string; development: boolean };
    expect([attestation.platform, attestation.development]).toEqual(["dev", true]);
  });

  test("the provider list: both providers (one attested, one not), a page, a filter, a bad value", async () => {
    const all = JSON.parse((await get("/v1/providers/attestation")).text) as {
      data: { trust_level: string; identity_key_sha256: string | null }[];
    };
    expect(all.data.map((p) => p.trust_level).sort()).toEqual(["hardware", "none"]);
    const page = JSON.parse((await get("/v1/providers/attestation", "/v1/providers/attestation?limit=1")).text) as { has_more: boolean };
    expect(page.has_more).toBe(true);
    const keyId = all.data.find((p) => p.identity_key_sha256 !== null)?.identity_key_sha256;
    const one = JSON.parse((await get("/v1/providers/attestation", `/v1/providers/attestation?identity_key_sha256=${keyId}`)).text) as {
      data: unknown[];
    };
    expect(one.data.length).toBe(1);
    expect((await get("/v1/providers/attestation", "/v1/providers/attestation?limit=0")).status).toBe(400);
  });
});

describe("models", () => {
  test("list, list with builds, a bad include_builds, no credential", async () => {
    const list = JSON.parse((await get("/v1/models", "/v1/models", ctx.apiKey)).text) as {
      data: { id: string; metadata: { trust_level: string } }[];
    };
    expect(list.data.find((m) => m.id === "org/model")?.metadata.trust_level).toBe("hardware");
    expect((await get("/v1/models", "/v1/models?include_builds=1", ctx.apiKey)).status).toBe(200);
    expect(codeOf(await get("/v1/models", "/v1/models?include_builds=2", ctx.apiKey))).toBe("invalid_value");
    expect(codeOf(await get("/v1/models"))).toBe("invalid_api_key");
  });

  test("retrieve by id with slashes or %2F, unknown, no credential", async () => {
    expect((await get("/v1/models/{id}", "/v1/models/org/model", ctx.apiKey)).status).toBe(200);
    expect((await get("/v1/models/{id}", "/v1/models/org%2Fbase-build-4bit", ctx.apiKey)).status).toBe(200);
    expect(codeOf(await get("/v1/models/{id}", "/v1/models/org/none", ctx.apiKey))).toBe("model_not_found");
    expect((await get("/v1/models/{id}", "/v1/models/org/model")).status).toBe(401);
  });
});

describe("chat completions: answers", () => {
  test.each([
    ["text", chatBody("hello over json")],
    ["text, stream", chatBody("hello over a stream", { stream: true, stream_options: { include_usage: true } })],
    ["tool calls", chatBody("weather?", { tools: [WEATHER], tool_choice: "required" })],
    [
      "tool calls, stream",
      chatBody("weather?", { tools: [WEATHER], tool_choice: { type: "function", function: { name: "get_weather" } }, stream: true }),
    ],
    [
      "structured",
      chatBody("json please", {
        response_format: { type: "json_schema", json_schema: { name: "answer", schema: WEATHER.function.parameters } },
      }),
    ],
  ])("%s: 200 with a receipt", async (_, body) => {
    expect(checker.request("POST", CHAT, "application/json", body)).toEqual([]);
    const answer = await chat(body);
    expect([answer.status, answer.text.includes('"se_signature"'), answer.headers.get("x-request-id") !== null]).toEqual([200, true, true]);
  });

  test("a failure after first content: 502 as JSON, one in-band error event in a stream", async () => {
    expect(codeOf(await chat(chatBody("x", { model: "org/flaky" })))).toBe("provider_error");
    const stream = await chat(chatBody("x", { model: "org/flaky", stream: true }));
    expect([stream.status, stream.text.includes('data: {"error":'), stream.text.includes("[DONE]")]).toEqual([200, true, false]);
  });
});

describe("chat completions: refusals", () => {
  test.each<[string, unknown, string]>([
    ["no messages", { model: "org/model" }, "missing_field"],
    ["a negative budget", chatBody("x", { max_tokens: -1 }), "invalid_value"],
    ["n greater than 1", chatBody("x", { n: 2 }), "unsupported_value"],
    ["an unknown role", { model: "org/model", messages: [{ role: "robot", content: "x" }] }, "invalid_value"],
    ["a tool name with a space", chatBody("x", { tools: [{ type: "function", function: { name: "get weather" } }] }), "invalid_value"],
  ])("400 for %s, and the document's request schema refuses it too", async (_, body, code) => {
    expect(checker.request("POST", CHAT, "application/json", body)).not.toEqual([]);
    expect(codeOf(await chat(body))).toBe(code);
  });

  test("400 for a body that is not JSON, 401 without a credential, 413 for a body over the limit", async () => {
    expect(codeOf(await exchange("POST", CHAT, CHAT, { key: ctx.apiKey, raw: "{not json" }))).toBe("invalid_json");
    expect(codeOf(await chat(chatBody("x"), ""))).toBe("invalid_api_key");
    expect(codeOf(await chat(chatBody("x".repeat(70_000))))).toBe("request_too_large");
  });

  test("402 for the balance and for the spend cap, 403 outside the allowlist, 404 for an unknown model", async () => {
    const funds = await chat(chatBody("x"), keys.poor);
    expect([funds.status, JSON.parse(funds.text).error.type]).toEqual([402, "insufficient_funds"]);
    const cap = await chat(chatBody("x"), keys.capped);
    expect([cap.status, JSON.parse(cap.text).error.type]).toEqual([402, "insufficient_quota"]);
    expect(codeOf(await chat(chatBody("x"), keys.allowlisted))).toBe("model_not_allowed");
    expect(codeOf(await chat(chatBody("x", { model: "org/none" })))).toBe("model_not_found");
  });

  test("409 self-route without a machine, 422 a schema that does not compile, 503 no provider, 429 the key's rpm", async () => {
    expect(codeOf(await chat(chatBody("x", { self_route: true }), keys.machineless))).toBe("self_route_conflict");
    const broken = { type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { $ref: "#/nowhere" } } } } };
    expect(codeOf(await chat(chatBody("x", { tools: [broken] })))).toBe("tool_schema_invalid");
    expect(codeOf(await chat(chatBody("x", { model: "org/idle" }), keys.slow))).toBe("model_unavailable");
    const limited = await chat(chatBody("x", { model: "org/idle" }), keys.slow);
    expect([codeOf(limited), limited.headers.get("retry-after") !== null]).toEqual(["rate_limit_exceeded", true]);
  });
});

describe("chat completions: sealed transport", () => {
  /** Posts `body` sealed; checks the sealed answer and, opened, the plain one inside. */
  async function sealed(body: unknown) {
    const attestation = JSON.parse((await get("/v1/attestation")).text) as { sealing_public_key: string };
    const binding = { path: CHAT, credential: ctx.apiKey, timestamp: Math.floor(Date.now() / 1000) };
    const key = fromBase64url(attestation.sealing_public_key, "sealing_public_key");
    const { envelope, answers } = await sealConsumerRequest(key, new TextEncoder().encode(JSON.stringify(body)), binding);
    expect(checker.request("POST", CHAT, SEALED_CONTENT_TYPE, envelope)).toEqual([]);
    const outer = await exchange("POST", CHAT, CHAT, { key: ctx.apiKey, body: envelope, type: SEALED_CONTENT_TYPE });
    const opener = answers.opener(outer.headers.get(RESPONSE_NONCE_HEADER));
    const streamed = outer.headers.get("content-type") === "text/event-stream";
    let text = "";
    if (streamed) {
      const decoder = new TextDecoder();
      createParser({
        onEvent: (e) => {
          const bytes = opener.stream(e.data);
          if (bytes !== null) text += decoder.decode(bytes, { stream: true });
        },
      }).feed(outer.text);
    } else text = new TextDecoder().decode(opener.body(JSON.parse(outer.text)));
    // The plain answer inside: the outer headers (x-request-id ...), its own content type.
    const headers = new Headers(outer.headers);
    headers.set("content-type", streamed ? "text/event-stream" : "application/json");
    const inner: Answer = { status: outer.status, headers, text };
    expect(checker.response("POST", CHAT, inner)).toEqual([]);
    return inner;
  }

  test("JSON, stream and an error, each sealed back", async () => {
    expect((await sealed(chatBody("sealed json"))).status).toBe(200);
    expect((await sealed(chatBody("sealed stream", { stream: true }))).text).toContain("data: [DONE]");
    expect(codeOf(await sealed(chatBody("x", { model: "org/none" })))).toBe("model_not_found");
  });

  test("a malformed envelope is a plain 400", async () => {
    const refused = await exchange("POST", CHAT, CHAT, { key: ctx.apiKey, body: { version: 1 }, type: SEALED_CONTENT_TYPE });
    expect([refused.status, refused.headers.get(RESPONSE_NONCE_HEADER)]).toEqual([400, null]);
  });
});

describe("coverage", () => {
  test("every documented operation was exercised", () => {
    const exercised = new Set([...checker.covered].map((c) => c.split(" ").slice(0, 2).join(" ")));
    expect(checker.operations().filter((o) => !exercised.has(o))).toEqual([]);
  });

  test("chat: 200 and every refusal a consumer can cause", () => {
    const statuses = [...checker.covered].filter((c) => c.startsWith(`POST ${CHAT} `)).map((c) => Number(c.split(" ")[2]));
    expect([...new Set(statuses)].sort((a, b) => a - b)).toEqual([200, 400, 401, 402, 403, 404, 409, 413, 422, 429, 502, 503]);
  });
});
