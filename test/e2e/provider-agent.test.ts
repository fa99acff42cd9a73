/**
 * The provider agent against a fake coordinator over a real WebSocket (port 0): hello, heartbeats,
 * attempts, refusals, cancel, protocol violations, reconnect with backoff, auth and version refusals,
 * refused sessions (too many per token, untrusted) retried after the longest backoff, drain.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { ChunkOpener } from "../../src/crypto/chunks.ts";
import { fromBase64url, toBase64url } from "../../src/crypto/encoding.ts";
import { sealRequest } from "../../src/crypto/seal.ts";
import type { SessionSealer } from "../../src/crypto/session.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { CLOSE, type Inference, PROTOCOL_VERSION, type ProviderFrame } from "../../src/protocol/frames.ts";
import { type Agent, type AgentOptions, startAgent } from "../../src/provider/agent.ts";
import { createEchoEngine } from "../../src/provider/engines/echo.ts";
import { VERSION } from "../../src/version.ts";
import { FakeCoordinator } from "../support/fake-coordinator.ts";
import { manualEngine } from "../support/manual-engine.ts";
import { waitFor } from "../support/wait.ts";

const TOKEN = "device-token";
const agents: Agent[] = [];

afterEach(async () => {
  await Promise.all(agents.splice(0).map((a) => a.stop()));
});

function agentFor(fake: FakeCoordinator, options: Partial<AgentOptions> = {}): Agent {
  const agent = startAgent({
    url: fake.connectUrl,
    token: TOKEN,
    engine: createEchoEngine({ models: ["org/echo"] }),
    maxConcurrency: 4,
    backoff: { initialMs: 10, maxMs: 80 },
    random: () => 1,
    ...options,
  });
  agents.push(agent);
  return agent;
}

function inference(requestId: string, model: string, content = "hello brave new world", extra: Partial<Inference> = {}): Inference {
  return {
    type: "inference",
    request_id: requestId,
    attempt: 0,
    model,
    first_content_deadline_ms: 30_000,
    request: { messages: [{ role: "user", content }], max_tokens: 100, temperature: 0.2 },
    ...extra,
  };
}

const last = (fake: FakeCoordinator, requestId: string): ProviderFrame | undefined => fake.framesFor(requestId).at(-1);
const terminal = (fake: FakeCoordinator, requestId: string) => {
  const f = last(fake, requestId);
  return f && (f.type === "complete" || f.type === "error") ? f : undefined;
};

describe("session", () => {
  test("hello announces version, engine, models and capacity with the bearer token; welcome is reflected in state", async () => {
    await using fake = new FakeCoordinator();
    const agent = agentFor(fake, { maxConcurrency: 3 });
    await waitFor(() => agent.state().connected, "welcome");
    expect(fake.authorizations).toEqual([`Bearer ${TOKEN}`]);
    expect(fake.frames[0]).toEqual({
      conn: 1,
      frame: {
        type: "hello",
        protocol_versions: [PROTOCOL_VERSION],
        provider_version: VERSION,
        engine: "echo",
        models: [{ build_id: "org/echo" }],
        max_concurrency: 3,
        encryption_key: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
        session_keys: true,
        binary_frames: true,
      },
    });
    expect(agent.state()).toEqual({
      phase: "connected",
      connected: true,
      providerId: "prov_test_1",
      trustLevel: "none",
      models: ["org/echo"],
      active: 0,
      maxConcurrency: 3,
      requestsServed: 0,
      tokensServed: 0,
      sessions: 1,
    });
  });

  test("heartbeats start at welcome and repeat at the coordinator's interval", async () => {
    await using fake = new FakeCoordinator({ welcome: { heartbeat_interval_ms: 20 } });
    agentFor(fake);
    await waitFor(() => fake.ofType("heartbeat").length >= 3, "three heartbeats");
    expect(fake.ofType("heartbeat")[0]).toEqual({ type: "heartbeat", status: "idle", warm_models: ["org/echo"], active: 0, queued: 0 });
  });

  test("heartbeat reports serving and the active count while an attempt runs", async () => {
    await using fake = new FakeCoordinator({ welcome: { heartbeat_interval_ms: 20 } });
    const engine = manualEngine();
    agentFor(fake, { engine });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "first heartbeat");
    fake.send(inference("req_hb", "org/manual"));
    const serving = await waitFor(() => fake.ofType("heartbeat").find((h) => h.status === "serving"), "a serving heartbeat");
    expect(serving).toEqual({ type: "heartbeat", status: "serving", warm_models: ["org/manual"], active: 1, queued: 0 });
    engine.calls[0]?.finish();
  });
});

describe("attempts", () => {
  test("text produced in one burst shares one chunk frame", async () => {
    await using fake = new FakeCoordinator();
    const agent = agentFor(fake);
    await waitFor(() => agent.state().connected, "welcome");
    fake.send(inference("req_burst", "org/echo", "hello brave new world"));
    await waitFor(() => terminal(fake, "req_burst"), "complete");
    const ids = { request_id: "req_burst", attempt: 0 };
    expect(fake.framesFor("req_burst")).toEqual([
      { type: "accepted", ...ids },
      { type: "chunk", ...ids, seq: 0, delta: { content: "hello brave new world" } },
      { type: "complete", ...ids, seq: 1, finish_reason: "stop", usage: { prompt_tokens: 8, completion_tokens: 4 } },
    ]);
  });

  test("accepted, chunks with consecutive seq, complete with usage", async () => {
    await using fake = new FakeCoordinator();
    // Tokens a few ms apart: each goes out in its own frame.
    const agent = agentFor(fake, { engine: createEchoEngine({ models: ["org/echo"], tokensPerSecond: 500 }) });
    await waitFor(() => agent.state().connected, "welcome");
    fake.send(inference("req_1", "org/echo", "hello brave new world"));
    await waitFor(() => terminal(fake, "req_1"), "complete");
    const ids = { request_id: "req_1", attempt: 0 };
    expect(fake.framesFor("req_1")).toEqual([
      { type: "accepted", ...ids },
      { type: "chunk", ...ids, seq: 0, delta: { content: "hello " } },
      { type: "chunk", ...ids, seq: 1, delta: { content: "brave " } },
      { type: "chunk", ...ids, seq: 2, delta: { content: "new " } },
      { type: "chunk", ...ids, seq: 3, delta: { content: "world" } },
      { type: "complete", ...ids, seq: 4, finish_reason: "stop", usage: { prompt_tokens: 8, completion_tokens: 4 } },
    ]);
    expect([agent.state().requestsServed, agent.state().tokensServed, agent.state().active]).toEqual([1, 4, 0]);
  });

  test("to a coordinator that accepts batches, the frames of one event-loop turn leave as one message, in order", async () => {
    await using fake = new FakeCoordinator({ welcome: { batch_frames: true } });
    const agent = agentFor(fake, { engine: createEchoEngine({ models: ["org/echo"], tokensPerSecond: 500 }), maxConcurrency: 8 });
    await waitFor(() => agent.state().connected, "welcome");
    const before = fake.messages.length;
    // Eight streams at once: their tokens are due in the same turns.
    const ids = Array.from({ length: 8 }, (_, i) => `req_batch_${i}`);
    for (const id of ids) fake.send(inference(id, "org/echo", "hello brave new world"));
    await waitFor(() => ids.every((id) => terminal(fake, id)), "every attempt complete");
    for (const id of ids) {
      // Deltas of one attempt due in the same turn may leave as one chunk (a loaded machine makes that
      // happen): the frames are in order, seq has no gap, and the chunks join to the whole answer.
      const at = { request_id: id, attempt: 0 };
      const frames = fake.framesFor(id);
      const chunks = frames.slice(1, -1) as { type: string; seq?: number; delta?: { content: string } }[];
      expect(frames[0]).toEqual({ type: "accepted", ...at });
      expect(chunks.map((c) => [c.type, c.seq])).toEqual(chunks.map((_, i) => ["chunk", i]));
      expect(chunks.map((c) => c.delta?.content).join("")).toBe("hello brave new world");
      expect(frames.at(-1)).toEqual({
        type: "complete",
        ...at,
        seq: chunks.length,
        finish_reason: "stop",
        usage: { prompt_tokens: 8, completion_tokens: 4 },
      });
    }
    const sent = fake.messages.slice(before);
    const frames = sent.reduce((n, m) => n + m.frames, 0);
    // At least accepted, one chunk and complete per attempt (deltas due in one turn may share a chunk).
    expect(frames).toBeGreaterThanOrEqual(8 * 3);
    expect(sent.some((m) => m.batch && m.frames > 1)).toBe(true);
    expect(sent.length).toBeLessThan(frames);
    expect(fake.violations).toEqual([]);
  });

  test("without batch_frames in the welcome (an older coordinator), every frame is its own message", async () => {
    await using fake = new FakeCoordinator();
    const agent = agentFor(fake, { engine: createEchoEngine({ models: ["org/echo"], tokensPerSecond: 500 }), maxConcurrency: 8 });
    await waitFor(() => agent.state().connected, "welcome");
    const ids = Array.from({ length: 8 }, (_, i) => `req_single_${i}`);
    for (const id of ids) fake.send(inference(id, "org/echo", "hello brave new world"));
    await waitFor(() => ids.every((id) => terminal(fake, id)), "every attempt complete");
    expect(fake.messages.every((m) => !m.batch && m.frames === 1)).toBe(true);
    expect(fake.frames.length).toBe(fake.messages.length);
  });

  test("an engine failure after accepted is one error frame with its code", async () => {
    await using fake = new FakeCoordinator();
    const engine = manualEngine();
    agentFor(fake, { engine });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_f", "org/manual"));
    const call = await waitFor(() => engine.calls[0], "engine call");
    call.emit("partial");
    call.fail("context_length_exceeded");
    await waitFor(() => terminal(fake, "req_f"), "error frame");
    const ids = { request_id: "req_f", attempt: 0 };
    expect(fake.framesFor("req_f")).toEqual([
      { type: "accepted", ...ids },
      { type: "chunk", ...ids, seq: 0, delta: { content: "partial" } },
      { type: "error", ...ids, code: "context_length_exceeded", message: "manual failure" },
    ]);
  });

  test("a model this provider does not serve is refused with model_not_loaded, without accepted", async () => {
    await using fake = new FakeCoordinator();
    agentFor(fake);
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_m", "org/other"));
    await waitFor(() => terminal(fake, "req_m"), "refusal");
    expect(fake.framesFor("req_m")).toEqual([
      { type: "error", request_id: "req_m", attempt: 0, code: "model_not_loaded", message: "model not served by this provider" },
    ]);
  });

  test("beyond max concurrency the attempt is refused with busy; a freed slot serves again", async () => {
    await using fake = new FakeCoordinator();
    const engine = manualEngine();
    const agent = agentFor(fake, { engine, maxConcurrency: 2 });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_a", "org/manual"));
    fake.send(inference("req_b", "org/manual"));
    fake.send(inference("req_c", "org/manual"));
    await waitFor(() => terminal(fake, "req_c"), "refusal of the third attempt");
    expect(fake.framesFor("req_c")).toEqual([
      { type: "error", request_id: "req_c", attempt: 0, code: "busy", message: "at max concurrency" },
    ]);
    expect(agent.state().active).toBe(2);
    engine.calls[0]?.finish();
    await waitFor(() => terminal(fake, "req_a"), "first attempt complete");
    fake.send(inference("req_d", "org/manual"));
    await waitFor(() => engine.calls.length === 3, "engine call for the fourth attempt");
    expect(fake.framesFor("req_d")).toEqual([{ type: "accepted", request_id: "req_d", attempt: 0 }]);
  });

  test("cancel aborts the engine at once and nothing more is sent for that attempt", async () => {
    await using fake = new FakeCoordinator();
    const engine = manualEngine();
    const agent = agentFor(fake, { engine });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_x", "org/manual"));
    const call = await waitFor(() => engine.calls[0], "engine call");
    call.emit("first");
    await waitFor(() => fake.framesFor("req_x").length === 2, "first chunk");
    fake.send({ type: "cancel", request_id: "req_x", attempt: 0, reason: "client_gone" });
    await waitFor(() => call.ended, "engine generator to end");
    expect(call.signal.aborted).toBe(true);
    expect(agent.state().active).toBe(0);
    call.emit("late");
    call.finish();
    // Frames on one connection arrive in order: once this later attempt completes, anything sent for
    // req_x before it would have arrived.
    fake.send(inference("req_y", "org/manual"));
    (await waitFor(() => engine.calls[1], "second engine call")).finish();
    await waitFor(() => terminal(fake, "req_y"), "second attempt complete");
    expect(fake.framesFor("req_x")).toEqual([
      { type: "accepted", request_id: "req_x", attempt: 0 },
      { type: "chunk", request_id: "req_x", attempt: 0, seq: 0, delta: { content: "first" } },
    ]);
  });

  test("no first content before the deadline: error timeout and the engine is aborted", async () => {
    await using fake = new FakeCoordinator();
    const engine = manualEngine();
    agentFor(fake, { engine });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_t", "org/manual", "x", { first_content_deadline_ms: 30 }));
    await waitFor(() => terminal(fake, "req_t"), "timeout error");
    expect(fake.framesFor("req_t")).toEqual([
      { type: "accepted", request_id: "req_t", attempt: 0 },
      { type: "error", request_id: "req_t", attempt: 0, code: "timeout", message: "no first content before the deadline" },
    ]);
    await waitFor(() => engine.calls[0]?.ended, "engine aborted");
  });

  test("a delta too large for one frame is split into several chunks that join to the same text", async () => {
    await using fake = new FakeCoordinator();
    const engine = manualEngine();
    agentFor(fake, { engine });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_big", "org/manual"));
    const text = `${"é😀".repeat(40_000)}"\n`;
    const call = await waitFor(() => engine.calls[0], "engine call");
    call.emit(text);
    call.finish();
    await waitFor(() => terminal(fake, "req_big"), "complete");
    const chunks = fake.framesFor("req_big").filter((f) => f.type === "chunk");
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks.map((c) => (c.type === "chunk" ? c.delta.content : "")).join("")).toBe(text);
    expect(chunks.map((c) => (c.type === "chunk" ? c.seq : -1))).toEqual(chunks.map((_, i) => i));
    expect(fake.violations).toEqual([]);
  });

  test("a lost connection aborts the attempts that ran on it", async () => {
    await using fake = new FakeCoordinator();
    const engine = manualEngine();
    const agent = agentFor(fake, { engine });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_l", "org/manual"));
    const call = await waitFor(() => engine.calls[0], "engine call");
    fake.closeConnection(CLOSE.goingAway, "restarting");
    await waitFor(() => call.ended, "engine aborted");
    expect(call.signal.aborted).toBe(true);
    await waitFor(() => agent.state().sessions === 2, "second session");
    expect(agent.state().active).toBe(0);
  });
});

describe("malformed coordinator frames close with 1002 and the agent reconnects", () => {
  const cases: [string, string][] = [
    ["not JSON", "{not json"],
    ["unknown type", JSON.stringify({ type: "bogus" })],
    ["inference without messages", JSON.stringify({ ...inference("r", "org/echo"), request: { max_tokens: 5 } })],
    [
      "a second welcome",
      JSON.stringify({
        type: "welcome",
        protocol_version: 2,
        provider_id: "p",
        trust_level: "none",
        heartbeat_interval_ms: 10,
        liveness_timeout_ms: 10,
      }),
    ],
  ];
  test.each(cases)("%s", async (_, text) => {
    await using fake = new FakeCoordinator();
    const agent = agentFor(fake);
    await waitFor(() => agent.state().sessions === 1, "first session");
    fake.send(text);
    await waitFor(() => fake.closes.find((c) => c.conn === 1), "close of the first connection");
    expect(fake.closes[0]?.code).toBe(CLOSE.protocolError);
    await waitFor(() => agent.state().sessions === 2, "second session");
    expect(fake.ofType("hello").length).toBe(2);
    // The encryption key is rotated on every connection.
    const keys = fake.ofType("hello").map((h) => h.encryption_key);
    expect(new Set(keys).size).toBe(2);
  });
});

describe("reconnect", () => {
  test("after a coordinator restart: exponential backoff, then a new session, then the backoff resets", async () => {
    await using fake = new FakeCoordinator();
    const logs: string[] = [];
    const agent = agentFor(fake, { logger: createLogger("debug", (line) => logs.push(line)) });
    const delays = () =>
      logs
        .map((l) => JSON.parse(l) as { msg: string; duration_ms?: number })
        .filter((l) => l.msg === "reconnecting")
        .map((l) => l.duration_ms);
    await waitFor(() => agent.state().sessions === 1, "first session");
    await fake.stop();
    await waitFor(() => delays().length >= 5, "five reconnect attempts");
    expect(delays().slice(0, 5)).toEqual([10, 20, 40, 80, 80]);
    expect(agent.state().phase).toBe("reconnecting");
    fake.restart();
    await waitFor(() => agent.state().sessions === 2, "session after restart");
    const before = delays().length;
    fake.closeConnection(CLOSE.goingAway, "again");
    await waitFor(() => delays().length > before, "next reconnect");
    expect(delays()[before]).toBe(10);
    await waitFor(() => agent.state().sessions === 3, "third session");
  });

  test("jitter scales the delay between half and all of it", async () => {
    await using fake = new FakeCoordinator();
    const logs: string[] = [];
    const agent = agentFor(fake, { random: () => 0, logger: createLogger("debug", (line) => logs.push(line)) });
    await waitFor(() => agent.state().sessions === 1, "first session");
    await fake.stop();
    const delays = () =>
      logs
        .map((l) => JSON.parse(l) as { msg: string; duration_ms?: number })
        .filter((l) => l.msg === "reconnecting")
        .map((l) => l.duration_ms);
    await waitFor(() => delays().length >= 3, "three reconnect attempts");
    expect(delays().slice(0, 3)).toEqual([5, 10, 20]);
  });
});

describe("refused sessions are retried after the longest backoff, with a warning", () => {
  const refusalLogs = (logs: string[]) =>
    logs
      .map((l) => JSON.parse(l) as { level: string; msg: string; status?: number; duration_ms?: number })
      .filter((l) => l.level === "warn" && l.msg.startsWith("the coordinator "))
      .map((l) => ({ msg: l.msg, status: l.status, duration_ms: l.duration_ms }));

  test.each<[string, ConstructorParameters<typeof FakeCoordinator>[0], number, string]>([
    [
      "close 4029 after hello (too many sessions for the token)",
      { closeOnHello: { code: CLOSE.tooManySessions, reason: "this device token already has 4 open sessions (the limit is 4)" } },
      CLOSE.tooManySessions,
      "the coordinator refused another session for this device token (too many open); retrying later",
    ],
    [
      "upgrade refused with HTTP 429",
      { token: "another-token", refuseUpgradeWith: 429 },
      429,
      "the coordinator refused another session for this device token (too many open); retrying later",
    ],
    [
      "close 4003 after hello (evidence earned no trust)",
      { closeOnHello: { code: CLOSE.untrusted, reason: "this coordinator admits attested providers only: no attestation evidence" } },
      CLOSE.untrusted,
      "the coordinator admits attested providers only and refused this machine's evidence; retrying later",
    ],
  ])("%s", async (_, options, status, msg) => {
    await using fake = new FakeCoordinator(options);
    const logs: string[] = [];
    const agent = agentFor(fake, { logger: createLogger("debug", (line) => logs.push(line)) });
    await waitFor(() => refusalLogs(logs).length >= 3, "three refusals");
    // Every retry waits the longest backoff (80 ms here), not 10, 20, 40 ms: no hot loop.
    expect(refusalLogs(logs).slice(0, 3)).toEqual([
      { msg, status, duration_ms: 80 },
      { msg, status, duration_ms: 80 },
      { msg, status, duration_ms: 80 },
    ]);
    expect(agent.state().phase).toBe("reconnecting");
  });
});

describe("refusals that stop the agent for good", () => {
  test.each([
    ["close 4001 after the upgrade", {}],
    ["upgrade refused with HTTP 401", { refuseUpgradeWith: 401 }],
  ])("unauthorized: %s", async (_, options) => {
    await using fake = new FakeCoordinator({ token: "another-token", ...options });
    const agent = agentFor(fake);
    const exit = await agent.done;
    expect(exit.reason).toBe("unauthorized");
    expect(exit.message).toContain("refused the device token");
    expect(agent.state().phase).toBe("stopped");
    expect(fake.connections).toBe(1);
  });

  test("close 4002 after hello: version", async () => {
    await using fake = new FakeCoordinator({ closeOnHello: { code: CLOSE.version, reason: "no supported protocol version" } });
    const agent = agentFor(fake);
    expect((await agent.done).reason).toBe("version");
    expect(fake.connections).toBe(1);
  });

  test("a welcome with another protocol version: the agent closes with 4002 and stops", async () => {
    await using fake = new FakeCoordinator({ welcome: { protocol_version: 3 } });
    const agent = agentFor(fake);
    expect((await agent.done).reason).toBe("version");
    await waitFor(() => fake.closes[0], "close");
    expect(fake.closes[0]?.code).toBe(CLOSE.version);
  });
});

describe("drain and stop", () => {
  test("drain refuses new work, finishes the active attempt, then closes with 1000", async () => {
    await using fake = new FakeCoordinator();
    const engine = manualEngine();
    const agent = agentFor(fake, { engine });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_d1", "org/manual"));
    const call = await waitFor(() => engine.calls[0], "engine call");
    const drained = agent.drain();
    await waitFor(() => fake.ofType("heartbeat").find((h) => h.status === "draining"), "draining heartbeat");
    expect(fake.ofType("heartbeat").at(-1)).toEqual({
      type: "heartbeat",
      status: "draining",
      warm_models: ["org/manual"],
      active: 1,
      queued: 0,
    });
    fake.send(inference("req_d2", "org/manual"));
    await waitFor(() => terminal(fake, "req_d2"), "refusal while draining");
    expect(fake.framesFor("req_d2")).toEqual([
      { type: "error", request_id: "req_d2", attempt: 0, code: "draining", message: "provider is draining" },
    ]);
    expect(fake.closes).toEqual([]);
    call.emit("done soon");
    call.finish({ prompt_tokens: 3, completion_tokens: 2 });
    expect(await drained).toEqual({ reason: "drained", message: "drained and disconnected" });
    expect(fake.framesFor("req_d1").map((f) => f.type)).toEqual(["accepted", "chunk", "complete"]);
    await waitFor(() => fake.closes[0], "close");
    expect(fake.closes).toEqual([{ conn: 1, code: CLOSE.normal, reason: "drained" }]);
    expect(fake.connections).toBe(1);
  });

  test("the drain timeout ends what is still running with error draining", async () => {
    await using fake = new FakeCoordinator();
    const engine = manualEngine();
    const agent = agentFor(fake, { engine, drainTimeoutMs: 30 });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_slow", "org/manual"));
    await waitFor(() => engine.calls[0], "engine call");
    expect((await agent.drain()).reason).toBe("drained");
    expect(engine.calls[0]?.signal.aborted).toBe(true);
    await waitFor(() => fake.closes[0], "close");
    expect(fake.framesFor("req_slow")).toEqual([
      { type: "accepted", request_id: "req_slow", attempt: 0 },
      { type: "error", request_id: "req_slow", attempt: 0, code: "draining", message: "drain timeout reached" },
    ]);
    expect(fake.closes[0]?.code).toBe(CLOSE.normal);
  });

  test("stop closes at once with 1001 and aborts running attempts", async () => {
    await using fake = new FakeCoordinator();
    const engine = manualEngine();
    const agent = agentFor(fake, { engine });
    await waitFor(() => fake.ofType("heartbeat").length > 0, "welcome");
    fake.send(inference("req_s", "org/manual"));
    const call = await waitFor(() => engine.calls[0], "engine call");
    expect((await agent.stop()).reason).toBe("stopped");
    await waitFor(() => call.ended, "engine aborted");
    await waitFor(() => fake.closes[0], "close");
    expect(fake.closes[0]?.code).toBe(CLOSE.goingAway);
    expect(fake.framesFor("req_s")).toEqual([{ type: "accepted", request_id: "req_s", attempt: 0 }]);
  });
});

describe("session keys", () => {
  const request = { messages: [{ role: "user", content: "one two three" }], max_tokens: 100 };

  const binding = (requestId: string) => ({ protocolVersion: PROTOCOL_VERSION, requestId, attempt: 0 });
  const opening = (requestId: string, responseKey: Uint8Array) => new ChunkOpener({ responseKey, requestId, attempt: 0 });

  /** A sealed_inference frame for attempt 0 of `requestId`, keyed by a session counter (`n`) or its own HPKE setup (`enc`). */
  function sealedFrame(requestId: string, keying: { n: number } | { enc: string }, ciphertext: Uint8Array) {
    return {
      type: "sealed_inference" as const,
      request_id: requestId,
      attempt: 0,
      model: "org/echo",
      first_content_deadline_ms: 30_000,
      ...keying,
      ciphertext: toBase64url(ciphertext),
    };
  }

  /** Seals `request` under the connection's session and sends it; returns what opens the answer. */
  function sendSealed(fake: FakeCoordinator, requestId: string, replay?: { n: number; ciphertext: Uint8Array }) {
    const sealer = fake.sealers.get(fake.current);
    if (!sealer) throw new Error("no session on the connection");
    const sealed = replay
      ? { ...replay, responseKey: new Uint8Array(32) }
      : sealer.seal(new TextEncoder().encode(JSON.stringify(request)), binding(requestId));
    fake.send(sealedFrame(requestId, { n: sealed.n }, sealed.ciphertext));
    return { ...sealed, opener: opening(requestId, sealed.responseKey) };
  }

  function answerOf(fake: FakeCoordinator, requestId: string, opener: ChunkOpener): string {
    let text = "";
    for (const f of fake.framesFor(requestId)) {
      if (f.type !== "sealed_chunk" && f.type !== "sealed_complete") continue;
      const final = f.type === "sealed_complete";
      const plaintext = opener.open({
        seq: f.seq,
        final,
        ciphertext: typeof f.sealed === "string" ? fromBase64url(f.sealed, "sealed") : f.sealed,
      });
      if (!final) text += (JSON.parse(new TextDecoder().decode(plaintext)) as { content?: string }).content ?? "";
    }
    opener.finish();
    return text;
  }

  test("the welcome's session_enc sets up the session: requests counted by n open and are answered sealed", async () => {
    await using fake = new FakeCoordinator({ sessionKeys: true });
    const agent = agentFor(fake);
    await waitFor(() => agent.state().connected, "welcome");
    const a = sendSealed(fake, "req_s1");
    const b = sendSealed(fake, "req_s2");
    expect([a.n, b.n]).toEqual([1, 2]);
    await waitFor(() => fake.framesFor("req_s2").some((f) => f.type === "sealed_complete"), "second answer");
    await waitFor(() => fake.framesFor("req_s1").some((f) => f.type === "sealed_complete"), "first answer");
    expect(answerOf(fake, "req_s1", a.opener)).toBe("one two three");
    expect(answerOf(fake, "req_s2", b.opener)).toBe("one two three");
  });

  test("requests sent right behind the welcome (queued before the provider connected) are opened and answered in order", async () => {
    const openers = new Map<string, ChunkOpener>();
    await using fake = new FakeCoordinator({
      sessionKeys: true,
      afterWelcome: (_conn, sealer) =>
        ["req_w1", "req_w2", "req_w3"].map((requestId) => {
          const sealed = (sealer as SessionSealer).seal(new TextEncoder().encode(JSON.stringify(request)), binding(requestId));
          openers.set(requestId, opening(requestId, sealed.responseKey));
          return sealedFrame(requestId, { n: sealed.n }, sealed.ciphertext);
        }),
    });
    agentFor(fake);
    for (const id of ["req_w1", "req_w2", "req_w3"]) {
      await waitFor(() => fake.framesFor(id).some((f) => f.type === "sealed_complete" || f.type === "error"), `answer to ${id}`);
      expect(answerOf(fake, id, openers.get(id) as ChunkOpener)).toBe("one two three");
    }
    expect(fake.ofType("accepted").map((f) => f.request_id)).toEqual(["req_w1", "req_w2", "req_w3"]);
  });

  /** Seals `request` with its own HPKE setup to the connection's hello key and sends it (older coordinators). */
  async function sendHpkeSealed(fake: FakeCoordinator, requestId: string) {
    const hello = fake.ofType("hello").at(-1);
    if (!hello?.encryption_key) throw new Error("no hello key");
    const sealed = await sealRequest(
      fromBase64url(hello.encryption_key),
      new TextEncoder().encode(JSON.stringify(request)),
      binding(requestId),
    );
    fake.send(sealedFrame(requestId, { enc: toBase64url(sealed.enc) }, sealed.ciphertext));
    return opening(requestId, sealed.responseKey);
  }

  test("to a coordinator that agreed to binary batches, sealed frames leave as bytes in binary messages", async () => {
    await using fake = new FakeCoordinator({ sessionKeys: true, welcome: { batch_frames: true, binary_frames: true } });
    const agent = agentFor(fake, { engine: createEchoEngine({ models: ["org/echo"], tokensPerSecond: 500 }), maxConcurrency: 8 });
    await waitFor(() => agent.state().connected, "welcome");
    const before = fake.messages.length;
    const sent = ["req_b1", "req_b2", "req_b3"].map((id) => ({ id, ...sendSealed(fake, id) }));
    for (const s of sent) {
      await waitFor(() => fake.framesFor(s.id).some((f) => f.type === "sealed_complete"), `answer to ${s.id}`);
      const sealed = fake.framesFor(s.id).filter((f) => f.type === "sealed_chunk" || f.type === "sealed_complete");
      // Parsed from binary records: the sealed bytes themselves, not base64url text.
      expect(sealed.every((f) => "sealed" in f && f.sealed instanceof Uint8Array)).toBe(true);
      expect(answerOf(fake, s.id, s.opener)).toBe("one two three");
    }
    const messages = fake.messages.slice(before);
    expect(messages.every((m) => m.binary)).toBe(true);
    expect(messages.some((m) => m.frames > 1)).toBe(true);
    expect(fake.violations).toEqual([]);
  });

  test("a provider told not to offer binary batches sends JSON, even to a welcome that says binary_frames", async () => {
    await using fake = new FakeCoordinator({ sessionKeys: true, welcome: { batch_frames: true, binary_frames: true } });
    const agent = agentFor(fake, { binaryFrames: false });
    await waitFor(() => agent.state().connected, "welcome");
    expect(fake.ofType("hello").at(-1)?.binary_frames).toBeUndefined();
    const a = sendSealed(fake, "req_j1");
    await waitFor(() => fake.framesFor("req_j1").some((f) => f.type === "sealed_complete"), "answer");
    expect(answerOf(fake, "req_j1", a.opener)).toBe("one two three");
    expect(fake.messages.every((m) => !m.binary)).toBe(true);
  });

  test("without session keys (an older coordinator), a request with its own HPKE setup is opened and answered", async () => {
    await using fake = new FakeCoordinator();
    const agent = agentFor(fake);
    await waitFor(() => agent.state().connected, "welcome");
    const opener = await sendHpkeSealed(fake, "req_h1");
    await waitFor(() => fake.framesFor("req_h1").some((f) => f.type === "sealed_complete"), "answer");
    expect(answerOf(fake, "req_h1", opener)).toBe("one two three");
  });

  test("once the session is set up the connection's private key is gone: a request with its own HPKE setup is refused", async () => {
    await using fake = new FakeCoordinator({ sessionKeys: true });
    const agent = agentFor(fake);
    await waitFor(() => agent.state().connected, "welcome");
    const first = sendSealed(fake, "req_s0"); // the session works
    await waitFor(() => fake.framesFor("req_s0").some((f) => f.type === "sealed_complete"), "session answer");
    expect(answerOf(fake, "req_s0", first.opener)).toBe("one two three");
    await sendHpkeSealed(fake, "req_h2");
    await waitFor(() => terminal(fake, "req_h2"), "refusal");
    expect(terminal(fake, "req_h2")).toMatchObject({ type: "error", code: "invalid_request" });
  });

  test("a replayed request (n not above the last opened) is refused with invalid_request and not run", async () => {
    await using fake = new FakeCoordinator({ sessionKeys: true });
    const engine = manualEngine(["org/echo"]);
    const agent = agentFor(fake, { engine });
    await waitFor(() => agent.state().connected, "welcome");
    const first = sendSealed(fake, "req_r1");
    await waitFor(() => engine.calls.length === 1, "first call");
    sendSealed(fake, "req_r2", { n: first.n, ciphertext: first.ciphertext });
    await waitFor(() => terminal(fake, "req_r2"), "refusal");
    expect(terminal(fake, "req_r2")).toMatchObject({ type: "error", code: "invalid_request" });
    expect(engine.calls.length).toBe(1);
  });

  test.each([
    ["a low-order point", "A".repeat(43)],
    ["not canonical base64url", `${"A".repeat(42)}B`],
  ])("a session_enc that cannot be set up (%s) closes with 1002; the agent reconnects with a new key", async (_, enc) => {
    await using fake = new FakeCoordinator({ sessionKeys: true, welcome: { session_enc: enc } });
    const agent = agentFor(fake);
    await waitFor(() => fake.closes.find((c) => c.conn === 1), "close of the first connection");
    expect(fake.closes[0]).toMatchObject({ code: CLOSE.protocolError, reason: "session key setup failed" });
    await waitFor(() => fake.ofType("hello").length >= 2, "second hello");
    expect(agent.state().phase).not.toBe("stopped");
  });

  test("a request counted by n on a connection without session keys is refused with invalid_request", async () => {
    await using fake = new FakeCoordinator();
    const agent = agentFor(fake);
    await waitFor(() => agent.state().connected, "welcome");
    fake.send(sealedFrame("req_nosession", { n: 1 }, new Uint8Array(64)));
    await waitFor(() => terminal(fake, "req_nosession"), "refusal");
    expect(terminal(fake, "req_nosession")).toMatchObject({ type: "error", code: "invalid_request" });
    expect(fake.framesFor("req_nosession").some((f) => f.type === "accepted")).toBe(false);
  });

  test("sessionKeys: false leaves session_keys out of the hello (the coordinator then seals each request itself)", async () => {
    await using fake = new FakeCoordinator({ sessionKeys: true });
    const agent = agentFor(fake, { sessionKeys: false });
    await waitFor(() => agent.state().connected, "welcome");
    expect(fake.ofType("hello")[0]?.session_keys).toBeUndefined();
    expect(fake.sealers.size).toBe(0);
  });
});
