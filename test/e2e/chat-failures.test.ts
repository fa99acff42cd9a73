/**
 * The spec's phase table for a chat request, over real sockets with fake providers:
 *   pre-commit failure  -> failover to another provider, or a JSON error with its real status;
 *   committed failure   -> HTTP 200 stream, then one `data: {"error": ...}` event and no [DONE];
 *   cancellation        -> the provider receives `cancel` with the right reason.
 * After each failure the coordinator still serves an ordinary request.
 */
import { describe, expect, test } from "bun:test";
import { RequestEncodingError } from "../../src/fleet/session.ts";
import { dispatch } from "../../src/inference/dispatch.ts";
import { type CoordinatorFrame, type EngineRequestBody, encode, type Inference } from "../../src/protocol/frames.ts";
import { type ChatEnv, chatEnv } from "../support/chat-env.ts";
import { echo, type FakeProvider, type Step } from "../support/fake-provider.ts";
import { chatBody, errorOf, postChat, readSse, sseReader } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";

const inferences = (p: FakeProvider) => p.received.filter((f): f is Inference => f.type === "inference");
function firstInference(p: FakeProvider): Inference {
  const found = inferences(p)[0];
  if (!found) throw new Error("the provider received no inference");
  return found;
}
const isCancel = (reason: string) => (f: CoordinatorFrame) => f.type === "cancel" && f.reason === reason;

/** The content of a non-streaming answer. */
async function contentOf(response: Response): Promise<string> {
  expect(response.status).toBe(200);
  const body = (await response.json()) as { choices: { message: { content: string } }[] };
  return body.choices[0]?.message.content ?? "";
}

/** The concatenated content of a streamed answer and its last event. */
function streamed(data: string[]): { content: string; last: string | undefined } {
  let content = "";
  for (const d of data) {
    if (d === "[DONE]") continue;
    const chunk = JSON.parse(d) as { choices?: { delta?: { content?: string } }[] };
    content += chunk.choices?.[0]?.delta?.content ?? "";
  }
  return { content, last: data.at(-1) };
}

/** After a failure, the coordinator still serves an ordinary request (on a fresh healthy provider). */
async function stillServes(ctx: ChatEnv): Promise<void> {
  await ctx.disconnectAll();
  await ctx.provider();
  const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("still alive", { stream: true }));
  expect(response.status).toBe(200);
  const { content, last } = streamed((await readSse(response)).data);
  expect([content, last]).toEqual(["still alive", "[DONE]"]);
}

const envelope = (type: string, code: string) => ({ error: { message: expect.any(String), type, code } });

describe("pre-commit failover", () => {
  test.each<[string, readonly Step[]]>([
    ["a provider error (engine_error)", [{ do: "accept" }, { do: "error", code: "engine_error" }]],
    ["a provider error before accepting", [{ do: "error", code: "engine_unavailable" }]],
    ["a provider disconnect", [{ do: "accept" }, { do: "close" }]],
    ["an accepted attempt that ends with only empty chunks then dies", [{ do: "accept" }, { do: "chunk", delta: {} }, { do: "close" }]],
  ])("%s before first content -> the second provider answers", async (_name, steps) => {
    await using ctx = await chatEnv();
    // Equal load, neither warm nor measured: candidates keep connection order, so the bad one is tried first.
    const bad = await ctx.provider({ behave: () => steps });
    const good = await ctx.provider();
    for (const stream of [false, true]) {
      const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("alpha beta", { stream }));
      if (stream) {
        expect(response.status).toBe(200);
        expect(streamed((await readSse(response)).data)).toEqual({ content: "alpha beta", last: "[DONE]" });
      } else {
        expect(await contentOf(response)).toBe("alpha beta");
      }
    }
    expect(inferences(bad).length).toBeGreaterThanOrEqual(1);
    expect(inferences(good).length).toBe(2);
    // The attempt on the second provider is a new attempt number of the same request.
    const first = firstInference(bad);
    const retried = inferences(good).find((f) => f.request_id === first?.request_id);
    expect(retried?.attempt).toBe(1);
    // Every attempt, failed or answered, left the fleet's count of running attempts (FleetLoad).
    await waitFor(() => ctx.t.app.fleet.runningAttempts === 0, "no attempt running");
  });

  test("a silent provider (never accepts) is cancelled with reason failover and the second answers", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_ACCEPT_TIMEOUT_MS: "200" } });
    const silent = await ctx.provider({ behave: () => [{ do: "hang" }] });
    const good = await ctx.provider();
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("gamma delta"));
    expect(await contentOf(response)).toBe("gamma delta");
    const cancel = await silent.waitFor(isCancel("failover"));
    const dispatched = firstInference(silent);
    expect(cancel).toEqual({ type: "cancel", request_id: dispatched.request_id, attempt: dispatched.attempt, reason: "failover" });
    expect(inferences(good)).toHaveLength(1);
  });
});

describe("pre-commit failure -> JSON error with its real status", () => {
  test.each([false, true])("every provider fails -> 502 provider_error JSON (stream %p)", async (stream) => {
    await using ctx = await chatEnv();
    const a = await ctx.provider({ behave: () => [{ do: "accept" }, { do: "error", code: "engine_error" }] });
    const b = await ctx.provider({ behave: () => [{ do: "error", code: "engine_error" }] });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream }));
    expect(await errorOf(response)).toEqual({
      status: 502,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("provider_error", "provider_error"),
    });
    expect([inferences(a).length, inferences(b).length]).toEqual([1, 1]);
    await stillServes(ctx);
    await waitFor(() => ctx.t.app.fleet.runningAttempts === 0, "no attempt running");
  });

  test.each<[string, string | undefined]>([
    ["context_length_exceeded", "messages"],
    ["invalid_request", undefined],
  ])("a runtime refusal (%s) -> 400 without failover", async (code, param) => {
    await using ctx = await chatEnv();
    const refusing = await ctx.provider({ behave: () => [{ do: "accept" }, { do: "error", code }] });
    const other = await ctx.provider();
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream: true }));
    expect(await errorOf(response)).toEqual({
      status: 400,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_value", ...(param ? { param } : {}) } },
    });
    expect([inferences(refusing).length, inferences(other).length]).toEqual([1, 0]);
  });

  test("UMBRA_MAX_ATTEMPTS bounds how many providers are tried", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MAX_ATTEMPTS: "2" } });
    const failing = [];
    for (let i = 0; i < 3; i++) failing.push(await ctx.provider({ behave: () => [{ do: "error", code: "engine_error" }] }));
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x"));
    expect(response.status).toBe(502);
    expect(failing.map((p) => inferences(p).length).reduce((s, n) => s + n, 0)).toBe(2);
  });

  test("every provider busy -> 503 service_unavailable with Retry-After", async () => {
    await using ctx = await chatEnv();
    await ctx.provider({ behave: () => [{ do: "error", code: "busy" }] });
    await ctx.provider({ behave: () => [{ do: "accept" }, { do: "error", code: "draining" }] });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream: true }));
    const error = await errorOf(response);
    expect(error).toEqual({
      status: 503,
      contentType: "application/json",
      retryAfter: expect.stringMatching(/^\d+$/),
      body: envelope("service_unavailable", "service_unavailable"),
    });
  });

  test("no provider at all -> 503 model_unavailable", async () => {
    await using ctx = await chatEnv();
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream: true }));
    expect(await errorOf(response)).toEqual({
      status: 503,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "service_unavailable", code: "model_unavailable", param: "model" } },
    });
  });

  test("providers only for other models -> 503 model_unavailable", async () => {
    await using ctx = await chatEnv();
    const other = await ctx.provider({ models: ["other/plain"] });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x"));
    expect(await errorOf(response)).toEqual({
      status: 503,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "service_unavailable", code: "model_unavailable", param: "model" } },
    });
    expect(inferences(other)).toEqual([]);
    // The other model is served.
    expect(await contentOf(await postChat(ctx.server.url, ctx.apiKey, { ...chatBody("plain"), model: "other/plain" }))).toBe("plain");
  });

  test("every provider at max concurrency and no admission queue -> 503 service_unavailable with an integer Retry-After", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MAX_QUEUED_PER_MODEL: "0" } });
    const p = await ctx.provider({
      behave: (inf) => (inf.request.messages[0]?.content === "hold" ? [{ do: "accept" }, { do: "hang" }] : echo(inf)),
      maxConcurrency: 1,
    });
    const controller = new AbortController();
    const held = postChat(ctx.server.url, ctx.apiKey, chatBody("hold", { stream: true }), { signal: controller.signal }).catch(
      () => undefined,
    );
    await p.waitFor((f) => f.type === "inference");
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream: true }));
    expect(await errorOf(response)).toEqual({
      status: 503,
      contentType: "application/json",
      retryAfter: expect.stringMatching(/^\d+$/),
      body: envelope("service_unavailable", "service_unavailable"),
    });
    expect(inferences(p)).toHaveLength(1);
    // Freeing the slot (the held client leaves) makes the provider usable again.
    controller.abort();
    await held;
    await p.waitFor(isCancel("client_gone"));
    expect(await contentOf(await postChat(ctx.server.url, ctx.apiKey, chatBody("free again")))).toBe("free again");
  });

  test.each([false, true])(
    "no content before UMBRA_FIRST_CONTENT_TIMEOUT_MS -> 429 first_content_timeout, provider cancelled (deadline) (stream %p)",
    async (stream) => {
      await using ctx = await chatEnv({ env: { UMBRA_FIRST_CONTENT_TIMEOUT_MS: "300" } });
      const p = await ctx.provider({ behave: () => [{ do: "accept" }, { do: "hang" }] });
      const started = Date.now();
      const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream }));
      const error = await errorOf(response);
      expect(Date.now() - started).toBeGreaterThanOrEqual(290);
      expect(error).toEqual({
        status: 429,
        contentType: "application/json",
        retryAfter: expect.stringMatching(/^\d+$/),
        body: envelope("rate_limit_error", "first_content_timeout"),
      });
      expect(Number(error.retryAfter)).toBeGreaterThanOrEqual(0);
      const dispatched = firstInference(p);
      expect(await p.waitFor(isCancel("deadline"))).toEqual({
        type: "cancel",
        request_id: dispatched.request_id,
        attempt: dispatched.attempt,
        reason: "deadline",
      });
      await stillServes(ctx);
    },
  );

  test("the first-content deadline covers all attempts together", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_FIRST_CONTENT_TIMEOUT_MS: "400", UMBRA_ACCEPT_TIMEOUT_MS: "250" } });
    const a = await ctx.provider({ behave: () => [{ do: "hang" }] });
    const b = await ctx.provider({ behave: () => [{ do: "accept" }, { do: "hang" }] });
    const started = Date.now();
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x"));
    expect(response.status).toBe(429);
    expect(Date.now() - started).toBeLessThan(1500);
    // The silent one (tried first: connection order) was failed over, the other accepted and ran into the
    // deadline that started with the first attempt.
    expect([(await a.waitFor(isCancel("failover"))).type, (await b.waitFor(isCancel("deadline"))).type]).toEqual(["cancel", "cancel"]);
    expect([inferences(a).length, inferences(b).length]).toEqual([1, 1]);
  });
});

describe("committed failure -> in-band error, no [DONE]", () => {
  const twoChunks: Step[] = [{ do: "accept" }, { do: "chunk", delta: { content: "one " } }, { do: "chunk", delta: { content: "two" } }];

  test.each<[string, readonly Step[], string, string]>([
    ["disconnect after 2 chunks", [...twoChunks, { do: "close" }], "provider_error", "provider_error"],
    [
      "error frame (engine_error) after 2 chunks",
      [...twoChunks, { do: "error", code: "engine_error" }],
      "provider_error",
      "provider_error",
    ],
    ["error frame (timeout) after 2 chunks", [...twoChunks, { do: "error", code: "timeout" }], "timeout", "timeout"],
  ])("%s -> 200 stream with the chunks, then one error event", async (_name, steps, type, code) => {
    await using ctx = await chatEnv();
    await ctx.provider({ behave: () => steps });
    await ctx.provider({ behave: () => steps });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream: true }));
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toStartWith("text/event-stream");
    const { data, raw } = await readSse(response);
    expect(data).not.toContain("[DONE]");
    expect(data).toHaveLength(3);
    expect(streamed(data.slice(0, 2)).content).toBe("one two");
    expect(JSON.parse(data[2] ?? "null")).toEqual(envelope(type, code));
    expect(raw.endsWith("\n\n")).toBe(true);
    await stillServes(ctx);
  });

  test.each<[string, readonly Step[], number, string]>([
    ["disconnect", [...twoChunks, { do: "close" }], 502, "provider_error"],
    ["engine_error", [...twoChunks, { do: "error", code: "engine_error" }], 502, "provider_error"],
  ])("the same failure (%s) without streaming -> a JSON error", async (_name, steps, status, code) => {
    await using ctx = await chatEnv();
    await ctx.provider({ behave: () => steps });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x"));
    expect(await errorOf(response)).toEqual({
      status,
      contentType: "application/json",
      retryAfter: null,
      body: envelope(code, code),
    });
    await stillServes(ctx);
  });

  test("a committed request is never failed over: the second provider is not asked", async () => {
    await using ctx = await chatEnv();
    const a = await ctx.provider({ behave: () => [...twoChunks, { do: "close" }] });
    const b = await ctx.provider({ behave: () => [...twoChunks, { do: "close" }] });
    await readSse(await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream: true })));
    expect(inferences(a).length + inferences(b).length).toBe(1);
  });

  test("request timeout after commit -> in-band timeout error, provider cancelled (deadline)", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_REQUEST_TIMEOUT_MS: "300" } });
    const p = await ctx.provider({ behave: () => [{ do: "accept" }, { do: "chunk", delta: { content: "first" } }, { do: "hang" }] });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream: true }));
    expect(response.status).toBe(200);
    const { data } = await readSse(response);
    expect(data).toHaveLength(2);
    expect(streamed(data.slice(0, 1)).content).toBe("first");
    expect(JSON.parse(data[1] ?? "null")).toEqual(envelope("timeout", "timeout"));
    const dispatched = firstInference(p);
    expect(await p.waitFor(isCancel("deadline"))).toEqual({
      type: "cancel",
      request_id: dispatched.request_id,
      attempt: dispatched.attempt,
      reason: "deadline",
    });
    await stillServes(ctx);
  });

  test("request timeout after commit without streaming -> 504 timeout JSON", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_REQUEST_TIMEOUT_MS: "300" } });
    const p = await ctx.provider({ behave: () => [{ do: "accept" }, { do: "chunk", delta: { content: "first" } }, { do: "hang" }] });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x"));
    expect(await errorOf(response)).toEqual({
      status: 504,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("timeout", "timeout"),
    });
    await p.waitFor(isCancel("deadline"));
  });
});

describe("admission queue", () => {
  /** A provider with one slot whose "hold" requests never finish until released. */
  async function oneSlot(ctx: ChatEnv) {
    return ctx.provider({
      behave: (inf) => (inf.request.messages[0]?.content === "hold" ? [{ do: "accept" }, { do: "hang" }] : echo(inf)),
      maxConcurrency: 1,
    });
  }

  test("a request waits for a busy provider's slot and is served when it frees", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MAX_QUEUED_PER_MODEL: "4" } });
    const p = await oneSlot(ctx);
    const controller = new AbortController();
    const held = postChat(ctx.server.url, ctx.apiKey, chatBody("hold"), { signal: controller.signal }).catch(() => undefined);
    await p.waitFor((f) => f.type === "inference");
    const waiting = postChat(ctx.server.url, ctx.apiKey, chatBody("queued then served"));
    await waitFor(() => ctx.t.app.fleet.waiting(BUILD) === 1, "one request waiting");
    controller.abort();
    await held;
    expect(await contentOf(await waiting)).toBe("queued then served");
    expect(ctx.t.app.fleet.waiting(BUILD)).toBe(0);
  });

  test("a full queue answers 429 capacity_exhausted with an integer Retry-After", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MAX_QUEUED_PER_MODEL: "1" } });
    const p = await oneSlot(ctx);
    const controller = new AbortController();
    const held = postChat(ctx.server.url, ctx.apiKey, chatBody("hold"), { signal: controller.signal }).catch(() => undefined);
    await p.waitFor((f) => f.type === "inference");
    const queued = postChat(ctx.server.url, ctx.apiKey, chatBody("second"), { signal: controller.signal }).catch(() => undefined);
    await waitFor(() => ctx.t.app.fleet.waiting(BUILD) === 1, "the queue is full");
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("third", { stream: true }));
    expect(await errorOf(response)).toEqual({
      status: 429,
      contentType: "application/json",
      retryAfter: expect.stringMatching(/^\d+$/),
      body: envelope("rate_limit_error", "capacity_exhausted"),
    });
    controller.abort();
    await Promise.all([held, queued]);
  });

  test("a queued request that waits past the first-content deadline gets 429 first_content_timeout", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MAX_QUEUED_PER_MODEL: "4", UMBRA_FIRST_CONTENT_TIMEOUT_MS: "200" } });
    // Every request hangs: whether the queued one times out waiting or after the held one's slot frees
    // (the held one has the same deadline), no content ever comes.
    const p = await ctx.provider({ behave: () => [{ do: "accept" }, { do: "hang" }], maxConcurrency: 1 });
    const controller = new AbortController();
    const held = postChat(ctx.server.url, ctx.apiKey, chatBody("hold"), { signal: controller.signal }).catch(() => undefined);
    await p.waitFor((f) => f.type === "inference");
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("too late"));
    expect((await errorOf(response)).body).toEqual(envelope("rate_limit_error", "first_content_timeout"));
    expect(ctx.t.app.fleet.waiting(BUILD)).toBe(0);
    controller.abort();
    await held;
  });
});

describe("client cancellation", () => {
  test.each([false, true])(
    "client aborts while waiting for first content -> provider cancelled (client_gone) (stream %p)",
    async (stream) => {
      await using ctx = await chatEnv();
      const p = await ctx.provider({
        behave: (inf) => (inf.request.messages[0]?.content === "slow" ? [{ do: "accept" }, { do: "hang" }] : echo(inf)),
      });
      const controller = new AbortController();
      const pending = postChat(ctx.server.url, ctx.apiKey, chatBody("slow", { stream }), { signal: controller.signal });
      const inference = (await p.waitFor((f) => f.type === "inference")) as Inference;
      controller.abort();
      await expect(pending).rejects.toThrow();
      expect(await p.waitFor(isCancel("client_gone"))).toEqual({
        type: "cancel",
        request_id: inference.request_id,
        attempt: inference.attempt,
        reason: "client_gone",
      });
      // The slot was freed: the same provider serves the next request.
      expect(await contentOf(await postChat(ctx.server.url, ctx.apiKey, chatBody("next one")))).toBe("next one");
      // A client that left is not our error: recorded as 499, nothing logged at error level.
      const metrics = await (await fetch(`${ctx.server.url}/metrics`)).text();
      expect(metrics).toContain('umbra_http_requests_total{method="POST",route="/v1/chat/completions",status="499"} 1');
      expect(metrics).not.toContain('route="/v1/chat/completions",status="500"');
      expect(ctx.t.logs.filter((l) => l.includes('"level":"error"'))).toEqual([]);
    },
  );

  test("the request timeout also bounds the wait for first content: 504 timeout", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_REQUEST_TIMEOUT_MS: "150", UMBRA_FIRST_CONTENT_TIMEOUT_MS: "10000" } });
    const p = await ctx.provider({ behave: () => [{ do: "accept" }, { do: "hang" }] });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("never"));
    expect([response.status, ((await response.json()) as { error: { type: string; code: string } }).error]).toEqual([
      504,
      expect.objectContaining({ type: "timeout", code: "timeout" }),
    ]);
    await p.waitFor(isCancel("deadline"));
  });

  test("client aborts a non-streaming request after first content -> provider cancelled (client_gone)", async () => {
    await using ctx = await chatEnv();
    const p = await ctx.provider({
      behave: (inf) =>
        inf.request.messages[0]?.content === "long"
          ? [{ do: "accept" }, { do: "chunk", delta: { content: "part" } }, { do: "hang" }]
          : echo(inf),
    });
    const controller = new AbortController();
    const pending = postChat(ctx.server.url, ctx.apiKey, chatBody("long"), { signal: controller.signal });
    const inference = (await p.waitFor((f) => f.type === "inference")) as Inference;
    // The chunk is sent right after accepted; wait until the coordinator has it (the attempt committed).
    await waitFor(() => ctx.t.app.fleet.list()[0]?.firstContentMs !== undefined, "first content at the coordinator");
    controller.abort();
    await expect(pending).rejects.toThrow();
    expect(await p.waitFor(isCancel("client_gone"))).toEqual({
      type: "cancel",
      request_id: inference.request_id,
      attempt: inference.attempt,
      reason: "client_gone",
    });
    expect(await contentOf(await postChat(ctx.server.url, ctx.apiKey, chatBody("after abort")))).toBe("after abort");
  });

  test("client aborts mid-stream -> provider cancelled (client_gone)", async () => {
    await using ctx = await chatEnv();
    const p = await ctx.provider({
      behave: (inf) =>
        inf.request.messages[0]?.content === "long"
          ? [{ do: "accept" }, { do: "chunk", delta: { content: "part" } }, { do: "hang" }]
          : echo(inf),
    });
    const controller = new AbortController();
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("long", { stream: true }), { signal: controller.signal });
    expect(response.status).toBe(200);
    const reader = sseReader(response);
    expect(streamed([(await reader.next()) ?? ""]).content).toBe("part");
    const inference = firstInference(p);
    controller.abort();
    expect(await p.waitFor(isCancel("client_gone"))).toEqual({
      type: "cancel",
      request_id: inference.request_id,
      attempt: inference.attempt,
      reason: "client_gone",
    });
    expect(await contentOf(await postChat(ctx.server.url, ctx.apiKey, chatBody("after abort")))).toBe("after abort");
  });

  test("a provider that keeps streaming after the client left is cancelled and its late frames are ignored", async () => {
    await using ctx = await chatEnv();
    const p = await ctx.provider({
      behave: (inf) =>
        inf.request.messages[0]?.content === "chatty"
          ? [{ do: "accept" }, { do: "chunk", delta: { content: "a" } }, { do: "hang" }]
          : echo(inf),
    });
    const controller = new AbortController();
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("chatty", { stream: true }), { signal: controller.signal });
    const reader = sseReader(response);
    await reader.next();
    const inference = firstInference(p);
    controller.abort();
    await p.waitFor(isCancel("client_gone"));
    const ids = { request_id: inference.request_id, attempt: inference.attempt };
    p.send(encode({ type: "chunk", ...ids, seq: 1, delta: { content: "late" } }));
    p.send(encode({ type: "complete", ...ids, seq: 2, finish_reason: "stop", usage: { prompt_tokens: 1, completion_tokens: 2 } }));
    // Sent after the late frames on the same socket: the session survived them.
    expect(await contentOf(await postChat(ctx.server.url, ctx.apiKey, chatBody("survived")))).toBe("survived");
  });
});

describe("a body nested too deep", () => {
  /** A valid chat body (JSON text) with one extra top-level field `name` holding `value`. */
  const withField = (name: string, value: string) =>
    `{"model":"org/model","messages":[{"role":"user","content":"alpha beta"}],${JSON.stringify(name)}:${value}}`;
  const post = (url: string, apiKey: string, text: string) =>
    fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: text,
    });

  test.each([
    ["a pass-through field 50,000 arrays deep", "response_format", `${"[".repeat(50_000)}${"]".repeat(50_000)}`],
    ["a pass-through field 20,000 objects deep", "tools", `${'{"a":'.repeat(20_000)}1${"}".repeat(20_000)}`],
    ["a field one level over the bound", "extra", `${"[".repeat(64)}${"]".repeat(64)}`],
  ])("%s -> 400 invalid_value naming the field; no provider asked, nothing counted as a provider failure", async (_, field, value) => {
    await using ctx = await chatEnv();
    const first = await ctx.provider();
    const second = await ctx.provider();
    const response = await post(ctx.server.url, ctx.apiKey, withField(field, value));
    expect(await errorOf(response)).toEqual({
      status: 400,
      contentType: "application/json",
      retryAfter: null,
      body: {
        error: { message: "a field nests deeper than 64 levels", type: "invalid_request_error", code: "invalid_value", param: field },
      },
    });
    // Messages nested too deep name `messages`.
    const deepMessage = `{"model":"org/model","messages":[{"role":"user","content":"x","name":${"[".repeat(100)}${"]".repeat(100)}}]}`;
    expect(((await (await post(ctx.server.url, ctx.apiKey, deepMessage)).json()) as { error: { param: string } }).error.param).toBe(
      "messages",
    );
    expect([inferences(first), inferences(second), first.received.filter((f) => f.type === "cancel")]).toEqual([[], [], []]);
    const metrics = await ctx.t.app.metrics.render();
    expect(metrics).toContain('umbra_http_requests_total{method="POST",route="/v1/chat/completions",status="400"} 2');
    expect(metrics).not.toMatch(/status="5\d\d"/);
    // The provider tried first is not marked: it serves the next ordinary request.
    expect(await contentOf(await postChat(ctx.server.url, ctx.apiKey, chatBody("still here")))).toBe("still here");
    expect(inferences(first).length).toBe(1);
  });

  test("63 levels under the body (64 with it) pass through", async () => {
    await using ctx = await chatEnv();
    const provider = await ctx.provider();
    const response = await post(ctx.server.url, ctx.apiKey, withField("extra", `${"[".repeat(63)}${"]".repeat(63)}`));
    expect(await contentOf(response)).toBe("alpha beta");
    expect(JSON.stringify(firstInference(provider).request.extra)).toBe(`${"[".repeat(63)}${"]".repeat(63)}`);
  });
});

// Each mode has its own chat environment: the three run side by side.
describe.concurrent("a request the coordinator cannot serialize for its provider", () => {
  // Validation keeps such requests out (nesting bound); should one get through, it is the coordinator's
  // failure: thrown as such (500 internal_error at the boundary), not failed over, no provider blamed.
  const deep = () => {
    let v: unknown = [];
    for (let i = 0; i < 100_000; i++) v = [v];
    return v;
  };
  test.each([
    ["plaintext", {}],
    ["sealed", { sealed: true }],
    ["sealed with session keys", { sealed: true, sessionKeys: true }],
  ])("%s session: RequestEncodingError, no provider asked, the slots are free", async (_, mode) => {
    await using ctx = await chatEnv();
    const first = await ctx.provider(mode);
    const second = await ctx.provider(mode);
    await waitFor(() => ctx.t.app.fleet.candidates(BUILD, () => true).length === 2, "both providers ready");
    for (const extra of [{ extra: deep() }, { seed: 1n }]) {
      const body = { messages: [{ role: "user", content: "x" }], max_tokens: 5, ...extra } as unknown as EngineRequestBody;
      const attempt = dispatch(
        ctx.t.app.fleet,
        ctx.t.config,
        {
          requestId: `req_${Object.keys(extra)[0]}`,
          buildId: BUILD,
          body,
          // Not usageLimits(body): that serializes the body too, and this one must only fail at dispatch.
          limits: { promptTokens: 1_000, budget: 5, outputAllowance: 32 },
          signal: new AbortController().signal,
          requestDeadline: Date.now() + 60_000,
        },
        Date.now,
      );
      await expect(attempt).rejects.toBeInstanceOf(RequestEncodingError);
    }
    const sent = (p: FakeProvider) => p.received.filter((f) => f.type !== "welcome" && f.type !== "challenge");
    expect([sent(first), sent(second)]).toEqual([[], []]);
    expect(ctx.t.app.fleet.candidates(BUILD, () => true).map((s) => ({ active: s.active, closed: s.closed }))).toEqual([
      { active: 0, closed: false },
      { active: 0, closed: false },
    ]);
    // The first provider is not marked: the next ordinary request goes to it.
    expect(await contentOf(await postChat(ctx.server.url, ctx.apiKey, chatBody("still here")))).toBe("still here");
    expect(sent(first).length).toBe(1);
  });
});
