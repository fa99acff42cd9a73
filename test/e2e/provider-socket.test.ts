/**
 * GET /v1/provider/connect over a real socket: upgrade authentication, protocol violations (each closes
 * only the offending provider, with the right close code, while a healthy provider keeps streaming),
 * version negotiation, late frames after a cancel, liveness eviction with failover, the capacity
 * figures /v1/models derives from the fleet, and the session limit per device token (issue 18: one token
 * had opened 2,000 sessions).
 */
import { describe, expect, test } from "bun:test";
import { CLOSE, encode, type Inference, MAX_BATCH_FRAMES, MAX_FRAME_BYTES } from "../../src/protocol/frames.ts";
import { chatEnv } from "../support/chat-env.ts";
import { connectFakeProvider, echo, type FakeProvider, type Step } from "../support/fake-provider.ts";
import type { TestApp } from "../support/harness.ts";
import { chatBody, postChat, providerToken, readSse, sseReader } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
const CONNECT = "/v1/provider/connect";

const inferences = (p: FakeProvider) => p.received.filter((f): f is Inference => f.type === "inference");

/** A bare WebSocket with the provider token: for frames the fake provider cannot send (before hello). */
async function rawSocket(url: string, token: string) {
  const ws = new WebSocket(`${url.replace(/^http/, "ws")}${CONNECT}`, {
    headers: { authorization: `Bearer ${token}` },
  } as unknown as string[]);
  const messages: string[] = [];
  ws.addEventListener("message", (e) => messages.push(String(e.data)));
  const closed = new Promise<{ code: number; reason: string }>((resolve) => {
    ws.addEventListener("close", (e) => resolve({ code: e.code, reason: e.reason }));
  });
  await new Promise<void>((resolve, reject) => {
    ws.addEventListener("open", () => resolve(), { once: true });
    ws.addEventListener("error", () => reject(new Error("could not connect")), { once: true });
  });
  return {
    ws,
    messages,
    closed,
    async [Symbol.asyncDispose]() {
      if (ws.readyState === WebSocket.OPEN) ws.close();
      await closed;
    },
  };
}

function hello(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    type: "hello",
    protocol_versions: [2],
    provider_version: "test",
    engine: "fake",
    models: [{ build_id: BUILD }],
    max_concurrency: 4,
    ...extra,
  });
}

function content(data: string[]): string {
  return data
    .filter((d) => d !== "[DONE]")
    .map((d) => (JSON.parse(d) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content ?? "")
    .join("");
}

describe("revocation", () => {
  test("revoking a device token over the admin API closes its live session at once (4001)", async () => {
    await using ctx = await chatEnv();
    const { t, accountId, server } = ctx;
    const created = await t.app.admin.createProviderToken({ account_id: accountId });
    await using p = await connectFakeProvider({ url: server.url, token: created.token, models: [BUILD] });
    await using other = await connectFakeProvider({ url: server.url, token: await providerToken(t, accountId), models: [BUILD] });
    const revoked = await t.admin("DELETE", `/provider-tokens/${created.id}`);
    expect(revoked.status).toBe(200);
    expect((await p.closed).code).toBe(CLOSE.unauthorized);
    expect(t.app.fleet.list().map((s) => s.id)).toEqual([other.providerId]);
  });

  test("a token revoked elsewhere (the admin CLI, another process) is noticed by the periodic re-check", async () => {
    await using ctx = await chatEnv();
    const { t, accountId, server } = ctx;
    const created = await t.app.admin.createProviderToken({ account_id: accountId });
    await using p = await connectFakeProvider({ url: server.url, token: created.token, models: [BUILD] });
    // Straight to the store: no in-process hook fires.
    await t.store.providerTokens.revoke(created.id, Date.now());
    expect(t.app.fleet.list()).toHaveLength(1);
    await t.app.fleet.revalidateTokens(async (id) => (await t.store.providerTokens.get(id))?.revokedAt === null);
    expect((await p.closed).code).toBe(CLOSE.unauthorized);
  });
});

/** An upgrade request by fetch: answers with the HTTP refusal, if any (a permitted one would upgrade). */
function upgradeRequest(url: string, token: string): Promise<Response> {
  return fetch(`${url}${CONNECT}`, {
    headers: {
      authorization: `Bearer ${token}`,
      connection: "Upgrade",
      upgrade: "websocket",
      "sec-websocket-version": "13",
      "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
    },
  });
}

describe("session limit per device token", () => {
  test("past the limit (default 4, counting sockets that never said hello) upgrades are refused: 429 rate_limit_exceeded", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_PROVIDER_LIVENESS_MS: "3600000" } });
    const { t, accountId, token, server } = ctx;
    const a = await ctx.provider({ heartbeat: false });
    await ctx.provider({ heartbeat: false });
    // Half-open: upgraded, no hello. They count as much as welcomed sessions.
    await using silent = await rawSocket(server.url, token);
    await using _silent2 = await rawSocket(server.url, token);
    await waitFor(() => t.app.fleet.size === 4, "four sessions");

    const refused = await Promise.all(Array.from({ length: 20 }, () => upgradeRequest(server.url, token)));
    const answers = await Promise.all(
      refused.map(async (r) => ({ status: r.status, retryAfter: r.headers.get("retry-after"), body: await r.json() })),
    );
    expect(answers).toEqual(
      Array.from({ length: 20 }, () => ({
        status: 429,
        retryAfter: "30",
        body: {
          error: {
            message: "this device token already has 4 open sessions (the limit is 4)",
            type: "rate_limit_error",
            code: "rate_limit_exceeded",
          },
        },
      })),
    );
    await expect(connectFakeProvider({ url: server.url, token, models: [BUILD] })).rejects.toThrow();
    expect(t.app.fleet.size).toBe(4);

    // Other tokens are not affected; a session that ends frees its place.
    await using _other = await connectFakeProvider({ url: server.url, token: await providerToken(t, accountId), models: [BUILD] });
    expect(t.app.fleet.size).toBe(5);
    silent.ws.close();
    a.close();
    await waitFor(() => t.app.fleet.size === 3, "two sessions ended");
    const again = await ctx.provider({ heartbeat: false });
    expect(again.providerId).toMatch(/^prov_/);
    expect(t.app.fleet.size).toBe(4);
  });

  test("a flood of parallel connections with one token: never more sessions than the limit (the rest: 429 or close 4029)", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MAX_SESSIONS_PER_TOKEN: "2", UMBRA_PROVIDER_LIVENESS_MS: "3600000" } });
    const { t, token, server } = ctx;
    const outcomes = Array.from({ length: 40 }, () => {
      const ws = new WebSocket(`${server.url.replace(/^http/, "ws")}${CONNECT}`, {
        headers: { authorization: `Bearer ${token}` },
      } as unknown as string[]);
      let opened = false;
      ws.addEventListener("open", () => {
        opened = true;
      });
      const closed = new Promise<{ opened: boolean; code: number }>((resolve) => {
        ws.addEventListener("close", (e) => resolve({ opened, code: e.code }));
      });
      return { ws, closed, settled: false as boolean };
    });
    for (const o of outcomes) void o.closed.then(() => (o.settled = true));
    await waitFor(() => outcomes.filter((o) => o.settled).length === 38, "38 refusals");
    const refusals = await Promise.all(outcomes.filter((o) => o.settled).map((o) => o.closed));
    // Refused before the upgrade (the client sees no open, close 1006) or at open (close 4029).
    expect(refusals.filter((r) => !(r.opened ? r.code === CLOSE.tooManySessions : r.code === 1006))).toEqual([]);
    expect(t.app.fleet.size).toBe(2);
    const kept = outcomes.filter((o) => !o.settled);
    expect(kept.map((o) => o.ws.readyState)).toEqual([WebSocket.OPEN, WebSocket.OPEN]);
    for (const o of kept) o.ws.close();
    await Promise.all(kept.map((o) => o.closed));
    await waitFor(() => t.app.fleet.size === 0, "the fleet empties");
  });
});

describe("upgrade authentication", () => {
  test.each<[string, (t: TestApp, ctx: { apiKey: string; accountId: string }) => Promise<Record<string, string>>]>([
    ["no token", async () => ({})],
    ["an empty bearer", async () => ({ authorization: "Bearer " })],
    ["a consumer API key", async (_t, { apiKey }) => ({ authorization: `Bearer ${apiKey}` })],
    ["an unknown provider token", async () => ({ authorization: "Bearer umbra_pt_nope" })],
    [
      "a revoked provider token",
      async (t, { accountId }) => {
        const created = await t.app.admin.createProviderToken({ account_id: accountId });
        await t.app.admin.revokeProviderToken(created.id);
        return { authorization: `Bearer ${created.token}` };
      },
    ],
  ])("%s -> 401 with the error envelope", async (_name, headersFor) => {
    await using ctx = await chatEnv();
    const { t, apiKey, accountId, server } = ctx;
    const headers = await headersFor(t, { apiKey, accountId });
    const response = await fetch(`${server.url}${CONNECT}`, {
      headers: {
        ...headers,
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
      },
    });
    expect({ status: response.status, contentType: response.headers.get("content-type"), body: await response.json() }).toEqual({
      status: 401,
      contentType: "application/json",
      body: { error: { message: expect.any(String), type: "authentication_error", code: "invalid_token" } },
    });
    expect(t.app.fleet.size).toBe(0);
  });

  test("a WebSocket client with a revoked token cannot connect", async () => {
    await using ctx = await chatEnv();
    const { t, accountId, server } = ctx;
    const created = await t.app.admin.createProviderToken({ account_id: accountId });
    await t.app.admin.revokeProviderToken(created.id);
    await expect(connectFakeProvider({ url: server.url, token: created.token, models: [BUILD] })).rejects.toThrow();
    expect(t.app.fleet.size).toBe(0);
  });

  test("a valid token is welcomed with the configured heartbeat and liveness", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_PROVIDER_HEARTBEAT_MS: "1000", UMBRA_PROVIDER_LIVENESS_MS: "4000" } });
    const { t } = ctx;
    const p = await ctx.provider();
    expect(p.received[0]).toEqual({
      type: "welcome",
      protocol_version: 2,
      provider_id: p.providerId,
      trust_level: "none",
      heartbeat_interval_ms: 1000,
      liveness_timeout_ms: 4000,
      batch_frames: true,
    });
    expect(t.app.fleet.list().map((s) => s.id)).toEqual([p.providerId]);
  });
});

/** How a misbehaving provider breaks the protocol; `victim` requests (if any) are sent to it. */
interface Violation {
  readonly behave?: (inf: Inference) => readonly Step[];
  /** Sends the offending frames; may send a victim chat request that must still be answered (failover). */
  readonly trigger: (bad: FakeProvider, victim: () => Promise<string>) => Promise<void>;
  readonly code: number;
}

const ids = (inf: Inference) => ({ request_id: inf.request_id, attempt: inf.attempt });

const VIOLATIONS: Record<string, Violation> = {
  "garbage (not JSON)": { trigger: async (bad) => bad.send("this is not json {"), code: CLOSE.protocolError },
  "a JSON array": { trigger: async (bad) => bad.send("[1,2,3]"), code: CLOSE.protocolError },
  "an unknown frame type": { trigger: async (bad) => bad.send(JSON.stringify({ type: "teleport" })), code: CLOSE.protocolError },
  "an empty batch": { trigger: async (bad) => bad.send("[]"), code: CLOSE.protocolError },
  "a batch whose second frame is invalid": {
    trigger: async (bad) =>
      bad.send(`[${JSON.stringify({ type: "heartbeat", status: "idle", warm_models: [], active: 0, queued: 0 })},{"type":"teleport"}]`),
    code: CLOSE.protocolError,
  },
  "a batch of more than 4,096 frames": {
    trigger: async (bad) =>
      bad.send(
        `[${Array(MAX_BATCH_FRAMES + 1)
          .fill(JSON.stringify({ type: "heartbeat", status: "idle", warm_models: [], active: 0, queued: 0 }))
          .join(",")}]`,
      ),
    code: CLOSE.protocolError,
  },
  "a seq gap inside one batch": {
    behave: (inf) => [
      {
        do: "raw",
        text: `[${encode({ type: "accepted", ...ids(inf) })},${encode({ type: "chunk", ...ids(inf), seq: 1, delta: { content: "skipped 0" } })}]`,
      },
    ],
    trigger: async (_bad, victim) => expect(await victim()).toBe("victim request"),
    code: CLOSE.protocolError,
  },
  "a heartbeat with a mistyped field": {
    trigger: async (bad) => bad.send(JSON.stringify({ type: "heartbeat", status: "bored", warm_models: [], active: 0, queued: 0 })),
    code: CLOSE.protocolError,
  },
  "a second hello": { trigger: async (bad) => bad.send(hello()), code: CLOSE.protocolError },
  "a chunk for an attempt never dispatched": {
    trigger: async (bad) => bad.send(encode({ type: "chunk", request_id: "req_never", attempt: 0, seq: 0, delta: { content: "x" } })),
    code: CLOSE.protocolError,
  },
  "a chunk before accepted": {
    behave: () => [{ do: "chunk", delta: { content: "too early" } }],
    trigger: async (_bad, victim) => expect(await victim()).toBe("victim request"),
    code: CLOSE.protocolError,
  },
  "a seq gap": {
    behave: (inf) => [
      { do: "accept" },
      { do: "raw", text: encode({ type: "chunk", ...ids(inf), seq: 1, delta: { content: "skipped 0" } }) },
    ],
    trigger: async (_bad, victim) => expect(await victim()).toBe("victim request"),
    code: CLOSE.protocolError,
  },
  "a duplicate accepted": {
    behave: () => [{ do: "accept" }, { do: "accept" }],
    trigger: async (_bad, victim) => expect(await victim()).toBe("victim request"),
    code: CLOSE.protocolError,
  },
  "complete with the wrong chunk count": {
    behave: (inf) => [
      { do: "accept" },
      {
        do: "raw",
        text: encode({ type: "complete", ...ids(inf), seq: 3, finish_reason: "stop", usage: { prompt_tokens: 1, completion_tokens: 1 } }),
      },
    ],
    trigger: async (_bad, victim) => expect(await victim()).toBe("victim request"),
    code: CLOSE.protocolError,
  },
  "an error code outside the vocabulary": {
    behave: (inf) => [{ do: "accept" }, { do: "raw", text: JSON.stringify({ type: "error", ...ids(inf), code: "kaboom" }) }],
    trigger: async (_bad, victim) => expect(await victim()).toBe("victim request"),
    code: CLOSE.protocolError,
  },
  "a frame after the attempt completed": {
    behave: (inf) => [...echo(inf), { do: "raw", text: encode({ type: "chunk", ...ids(inf), seq: 9, delta: { content: "more" } }) }],
    trigger: async (_bad, victim) => expect(await victim()).toBe("victim request"),
    code: CLOSE.protocolError,
  },
  "an oversized frame (> 1 MiB)": {
    trigger: async (bad) =>
      bad.send(JSON.stringify({ type: "heartbeat", status: "idle", warm_models: ["x".repeat(MAX_FRAME_BYTES)], active: 0, queued: 0 })),
    code: CLOSE.tooBig,
  },
};

describe("protocol violations close only the offending provider", () => {
  test.each(Object.keys(VIOLATIONS))("%s", async (name) => {
    const violation = VIOLATIONS[name] as Violation;
    await using ctx = await chatEnv();
    const { t, apiKey, server } = ctx;
    // The healthy provider holds a stream open (first chunk sent) across the violation.
    const healthy = await ctx.provider({
      behave: (inf) =>
        inf.request.messages[0]?.content === "hold" ? [{ do: "accept" }, { do: "chunk", delta: { content: "one " } }] : echo(inf),
    });
    const held = await postChat(server.url, apiKey, chatBody("hold", { stream: true }));
    expect(held.status).toBe(200);
    const reader = sseReader(held);
    expect(content([(await reader.next()) ?? ""])).toBe("one ");
    const holdFrame = inferences(healthy)[0] as Inference;

    // The offender is less loaded than the healthy provider, so victim requests are dispatched to it first.
    const bad = await ctx.provider({ ...(violation.behave ? { behave: violation.behave } : {}) });
    const victim = async () => {
      const response = await postChat(server.url, apiKey, chatBody("victim request"));
      expect(response.status).toBe(200);
      return ((await response.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content ?? "";
    };
    await violation.trigger(bad, victim);
    expect((await bad.closed).code).toBe(violation.code);
    if (violation.behave) expect(inferences(bad)).toHaveLength(1);
    expect(t.app.fleet.list().map((s) => s.id)).toEqual([healthy.providerId]);

    // The healthy stream finishes normally.
    healthy.send(encode({ type: "chunk", ...ids(holdFrame), seq: 1, delta: { content: "two" } }));
    healthy.send(
      encode({ type: "complete", ...ids(holdFrame), seq: 2, finish_reason: "stop", usage: { prompt_tokens: 1, completion_tokens: 2 } }),
    );
    const rest = await reader.rest();
    expect(content(rest)).toBe("two");
    expect(rest.at(-1)).toBe("[DONE]");
    // And it serves new requests.
    expect(content((await readSse(await postChat(server.url, apiKey, chatBody("new request", { stream: true })))).data)).toBe(
      "new request",
    );
  });

  test("a whole answer in one batch message (welcome.batch_frames) is applied frame by frame, in order", async () => {
    await using ctx = await chatEnv();
    const { t, apiKey, server } = ctx;
    const p = await ctx.provider({
      behave: (inf) => [
        {
          do: "raw",
          text: `[${[
            encode({ type: "accepted", ...ids(inf) }),
            encode({ type: "chunk", ...ids(inf), seq: 0, delta: { content: "one " } }),
            encode({ type: "chunk", ...ids(inf), seq: 1, delta: { content: "two" } }),
            encode({ type: "complete", ...ids(inf), seq: 2, finish_reason: "stop", usage: { prompt_tokens: 3, completion_tokens: 2 } }),
          ].join(",")}]`,
        },
      ],
    });
    const json = await postChat(server.url, apiKey, chatBody("batched"));
    expect(json.status).toBe(200);
    const body = (await json.json()) as { choices: { message: { content: string } }[]; usage: { completion_tokens: number } };
    expect([body.choices[0]?.message.content, body.usage.completion_tokens]).toEqual(["one two", 2]);
    const stream = await readSse(await postChat(server.url, apiKey, chatBody("batched", { stream: true })));
    expect(content(stream.data)).toBe("one two");
    expect(stream.data.at(-1)).toBe("[DONE]");
    expect(t.app.fleet.list().map((s) => s.id)).toEqual([p.providerId]);
  });

  test("a frame before hello -> 1002", async () => {
    await using ctx = await chatEnv();
    const { t, token, server } = ctx;
    await using raw = await rawSocket(server.url, token);
    raw.ws.send(JSON.stringify({ type: "heartbeat", status: "idle", warm_models: [], active: 0, queued: 0 }));
    expect((await raw.closed).code).toBe(CLOSE.protocolError);
    expect(raw.messages).toEqual([]);
    expect(t.app.fleet.size).toBe(0);
  });

  test("garbage before hello -> 1002", async () => {
    await using ctx = await chatEnv();
    const { token, server } = ctx;
    await using raw = await rawSocket(server.url, token);
    raw.ws.send("\u0000\u0001binary-ish");
    expect((await raw.closed).code).toBe(CLOSE.protocolError);
  });

  test("a hello with only unsupported protocol versions -> 4002, never welcomed", async () => {
    await using ctx = await chatEnv();
    const { t } = ctx;
    const p = await ctx.provider({ hello: { protocol_versions: [99] } });
    expect(await p.closed).toEqual({ code: CLOSE.version, reason: "no supported protocol version (coordinator speaks 2)" });
    expect(p.received).toEqual([]);
    expect(t.app.fleet.size).toBe(0);
  });

  test("a version 1 hello (retired: it cannot relay tool calls) -> 4002 saying so, never welcomed", async () => {
    await using ctx = await chatEnv();
    const { t } = ctx;
    const p = await ctx.provider({ hello: { protocol_versions: [1] } });
    expect(await p.closed).toEqual({ code: CLOSE.version, reason: "protocol version 1 is retired: upgrade umbra-provider" });
    expect(p.received).toEqual([]);
    expect(t.app.fleet.size).toBe(0);
  });

  test("a hello listing several versions including 2 is welcomed with version 2", async () => {
    await using ctx = await chatEnv();
    const p = await ctx.provider({ hello: { protocol_versions: [3, 2, 1] } });
    expect(p.received[0]?.type === "welcome" && p.received[0].protocol_version).toBe(2);
  });
});

describe("late frames and liveness", () => {
  test("late frames for a cancelled (failed-over) attempt do not end the session", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_ACCEPT_TIMEOUT_MS: "150" } });
    const { t, apiKey, token, server } = ctx;
    const slow = await ctx.provider({ behave: (inf) => (inf.request.messages[0]?.content === "first" ? [{ do: "hang" }] : echo(inf)) });
    const fast = await connectFakeProvider({ url: server.url, token, models: [BUILD] });
    expect(content((await readSse(await postChat(server.url, apiKey, chatBody("first", { stream: true })))).data)).toBe("first");
    const cancel = await slow.waitFor((f) => f.type === "cancel");
    expect(cancel.type === "cancel" && cancel.reason).toBe("failover");
    const late = inferences(slow)[0] as Inference;
    slow.send(encode({ type: "accepted", ...ids(late) }));
    slow.send(encode({ type: "chunk", ...ids(late), seq: 0, delta: { content: "late" } }));
    slow.send(encode({ type: "complete", ...ids(late), seq: 1, finish_reason: "stop", usage: { prompt_tokens: 1, completion_tokens: 1 } }));
    slow.send(encode({ type: "error", ...ids(late), code: "cancelled" }));
    // Only the slow provider is left: it must still be connected and serve (its frames after the late
    // ones prove the coordinator processed those first).
    await fast[Symbol.asyncDispose]();
    expect(content((await readSse(await postChat(server.url, apiKey, chatBody("second", { stream: true })))).data)).toBe("second");
    expect(t.app.fleet.list().map((s) => s.id)).toEqual([slow.providerId]);
  });

  test("a provider that stops heartbeating is evicted (4008) and its request fails over", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_PROVIDER_HEARTBEAT_MS: "50", UMBRA_PROVIDER_LIVENESS_MS: "400" } });
    const { t, apiKey, server } = ctx;
    const silent = await ctx.provider({ heartbeat: false, behave: () => [{ do: "accept" }, { do: "hang" }] });
    const started = Date.now();
    const pending = postChat(server.url, apiKey, chatBody("fail me over"));
    await silent.waitFor((f) => f.type === "inference");
    // The healthy provider joins after the dispatch, so the silent one held the request.
    await ctx.provider();
    const response = await pending;
    expect(response.status).toBe(200);
    expect(((await response.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content).toBe("fail me over");
    expect((await silent.closed).code).toBe(CLOSE.timeout);
    expect(Date.now() - started).toBeGreaterThanOrEqual(350);
    expect(t.app.fleet.size).toBe(1);
  });

  test("heartbeating providers are not evicted", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_PROVIDER_HEARTBEAT_MS: "50", UMBRA_PROVIDER_LIVENESS_MS: "300" } });
    const { t, apiKey, server } = ctx;
    const p = await ctx.provider({ behave: (inf) => [{ do: "accept" }, { do: "wait", ms: 900 }, ...echo(inf).slice(1)] });
    // The answer takes three liveness periods; heartbeats keep the session alive throughout.
    expect(content((await readSse(await postChat(server.url, apiKey, chatBody("kept alive", { stream: true })))).data)).toBe("kept alive");
    expect(t.app.fleet.list().map((s) => s.id)).toEqual([p.providerId]);
  });

  test("a connection that never says hello is closed after the liveness timeout", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_PROVIDER_HEARTBEAT_MS: "50", UMBRA_PROVIDER_LIVENESS_MS: "200" } });
    const { t, token, server } = ctx;
    await using raw = await rawSocket(server.url, token);
    expect((await raw.closed).code).toBe(CLOSE.timeout);
    expect(t.app.fleet.size).toBe(0);
  });
});

describe("/v1/models capacity metadata", () => {
  test("provider_count, routable, warm, can_accept follow the fleet; nothing is attested", async () => {
    await using ctx = await chatEnv();
    const { t, apiKey, server } = ctx;
    const metadata = async () => {
      const response = await fetch(`${server.url}/v1/models/org%2Fmodel`, { headers: { authorization: `Bearer ${apiKey}` } });
      expect(response.status).toBe(200);
      return ((await response.json()) as { metadata: Record<string, unknown> }).metadata;
    };
    const figures = (provider_count: number, routable_providers: number, warm_providers: number, can_accept: boolean) => ({
      model_type: "chat",
      quantization: "4bit",
      provider_count,
      attested_providers: 0,
      trust_level: "none",
      routable_providers,
      warm_providers,
      can_accept,
    });

    expect(await metadata()).toEqual(figures(0, 0, 0, false));

    // A provider for another build does not count.
    await ctx.provider({ models: ["other/plain"], heartbeat: false });
    expect(await metadata()).toEqual(figures(0, 0, 0, false));

    const p = await ctx.provider({ heartbeat: false, maxConcurrency: 1, behave: () => [{ do: "accept" }, { do: "hang" }] });
    expect(await metadata()).toEqual(figures(1, 1, 0, true));

    const beat = (status: string, warm: string[]) =>
      p.send(JSON.stringify({ type: "heartbeat", status, warm_models: warm, active: 0, queued: 0 }));
    beat("serving", [BUILD]);
    await waitFor(() => t.app.fleet.capacity(BUILD).warmProviders === 1, "the heartbeat to be processed");
    expect(await metadata()).toEqual(figures(1, 1, 1, true));

    // Its only slot taken: still routable, cannot accept.
    const controller = new AbortController();
    const held = postChat(server.url, apiKey, chatBody("hold"), { signal: controller.signal }).catch(() => undefined);
    await p.waitFor((f) => f.type === "inference");
    expect(await metadata()).toEqual(figures(1, 1, 1, false));
    controller.abort();
    await held;
    await p.waitFor((f) => f.type === "cancel");
    await waitFor(() => t.app.fleet.capacity(BUILD).canAccept, "the slot to be freed");
    expect(await metadata()).toEqual(figures(1, 1, 1, true));

    // Draining: counted, not routable, cannot accept.
    beat("draining", [BUILD]);
    await waitFor(() => t.app.fleet.capacity(BUILD).routableProviders === 0, "the draining heartbeat to be processed");
    expect(await metadata()).toEqual(figures(1, 0, 1, false));

    p.close();
    await p.closed;
    expect(await metadata()).toEqual(figures(0, 0, 0, false));
  });
});
