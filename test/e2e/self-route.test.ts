/**
 * Self-route over real sockets: a key with self_route_only, or a body with `"self_route": true`, is
 * served only by provider machines whose device token belongs to the caller's own account, and costs
 * nothing (usage is still recorded). Account A owns a machine; account B hosts another machine for the
 * same build; account C has no machine. Covered: routing (even against load), money, 409 without a live
 * device token, 503 when no own machine serves the model, 429 capacity_exhausted when the own machines
 * are busy (no queue), the self-route catalog of /v1/models, validation and the allowlist.
 */
import { describe, expect, test } from "bun:test";
import type { Inference } from "../../src/protocol/frames.ts";
import { type Behaviour, connectFakeProvider, echo, type FakeProvider } from "../support/fake-provider.ts";
import { type CallResult, seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";
import { chatBody, errorOf, postChat, providerToken, type SseReader, sseReader, startServer, type TestServer } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
const CREDIT = 5_000_000;

/** Accept, send one chunk, then keep the slot until the client leaves. Anything else: echo. */
const holdOrEcho: Behaviour = (inf) =>
  inf.request.messages[0]?.content === "hold" ? [{ do: "accept" }, { do: "chunk", delta: { content: "held" } }, { do: "hang" }] : echo(inf);

interface Ctx {
  readonly t: TestApp;
  readonly server: TestServer;
  /** Account A: a self-route-only key, an ordinary key and a device token. */
  readonly a: {
    readonly accountId: string;
    readonly selfKey: string;
    readonly selfKeyId: string;
    readonly plainKey: string;
    readonly plainKeyId: string;
    readonly token: string;
  };
  /** Account B: only hosts machines. */
  readonly b: { readonly accountId: string; readonly token: string };
  /** Account C: an ordinary key, no device token. */
  readonly c: { readonly accountId: string; readonly apiKey: string };
  machine(token: string, options?: { behave?: Behaviour; models?: string[]; maxConcurrency?: number }): Promise<FakeProvider>;
  chat(apiKey: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response>;
  /** A streamed request that holds a slot on whichever machine gets it; `release` ends it. */
  hold(apiKey: string, extra?: Record<string, unknown>): Promise<{ reader: SseReader; release(): void }>;
}

async function setup(): Promise<Ctx & AsyncDisposable> {
  // No heartbeats (so no machine is ever "warm" and load alone orders candidates) and a liveness
  // timeout no test reaches.
  const t = await testApp({ env: { UMBRA_PROVIDER_LIVENESS_MS: "3600000" } });
  await seedCatalog(t);
  const aSelf = await seedAccount(t, { self_route_only: true });
  const aPlain = await t.app.admin.createKey({ account_id: aSelf.accountId });
  const b = await t.app.admin.createAccount({ name: "host" });
  const c = await seedAccount(t);
  const server = startServer(t);
  const machines: FakeProvider[] = [];
  const holds: AbortController[] = [];
  const chat = (apiKey: string, body: Record<string, unknown>, signal?: AbortSignal) =>
    postChat(server.url, apiKey, body, signal ? { signal } : {});
  return {
    t,
    server,
    a: {
      accountId: aSelf.accountId,
      selfKey: aSelf.apiKey,
      selfKeyId: aSelf.keyId,
      plainKey: aPlain.key,
      plainKeyId: aPlain.id,
      token: await providerToken(t, aSelf.accountId),
    },
    b: { accountId: b.id, token: await providerToken(t, b.id) },
    c: { accountId: c.accountId, apiKey: c.apiKey },
    async machine(token, options = {}) {
      const p = await connectFakeProvider({
        url: server.url,
        token,
        models: options.models ?? [BUILD],
        behave: options.behave ?? holdOrEcho,
        maxConcurrency: options.maxConcurrency ?? 4,
        heartbeat: false,
      });
      machines.push(p);
      return p;
    },
    chat,
    async hold(apiKey, extra = {}) {
      const controller = new AbortController();
      holds.push(controller);
      const response = await chat(apiKey, chatBody("hold", { stream: true, ...extra }), controller.signal);
      expect(response.status).toBe(200);
      const reader = sseReader(response);
      await reader.next(); // first content: the slot is taken
      return { reader, release: () => controller.abort() };
    },
    async [Symbol.asyncDispose]() {
      for (const h of holds) h.abort();
      for (const p of machines.splice(0).reverse()) await p[Symbol.asyncDispose]();
      await server[Symbol.asyncDispose]();
      await t[Symbol.asyncDispose]();
    },
  };
}

/** The device token of a connected machine: what usage rows name as the serving provider. */
const tokenOf = (ctx: Ctx, p: FakeProvider) => ctx.t.app.fleet.list().find((s) => s.id === p.providerId)?.identity.tokenId ?? null;
const inferences = (p: FakeProvider) => p.received.filter((f): f is Inference => f.type === "inference");

async function contentOf(response: Response): Promise<string> {
  const text = await response.text();
  expect(response.status, text).toBe(200);
  return (JSON.parse(text) as { choices: { message: { content: string } }[] }).choices[0]?.message.content ?? "";
}

const envelope = (type: string, code: string, param?: string) => ({
  error: { message: expect.any(String), type, code, ...(param ? { param } : {}) },
});

/** Waits until no session of the fleet belongs to the account (the server saw the disconnects). */
async function gone(t: TestApp, accountId: string): Promise<void> {
  await waitFor(() => t.app.fleet.list().every((s) => s.identity.accountId !== accountId), `the account's machines to leave the fleet`);
}

/** The account's usage rows once `count` are durable (a released stream settles after its client left). */
async function usageRows(t: TestApp, accountId: string, count: number) {
  return waitFor(async () => {
    await t.app.flush();
    const rows = await t.store.usage.list(accountId, 100);
    return rows.length >= count && rows;
  }, `${count} usage rows`);
}

const ids = (r: CallResult) => (r.body as { data: { id: string }[] }).data.map((m) => m.id);

describe("routing and money", () => {
  test("a self-route-only key goes to its own machine even when another is less loaded, and costs nothing", async () => {
    await using ctx = await setup();
    const mine = await ctx.machine(ctx.a.token);
    const theirs = await ctx.machine(ctx.b.token);

    // One request in flight on A's machine: B's is now the less loaded one.
    const held = await ctx.hold(ctx.a.selfKey);
    expect(inferences(mine)).toHaveLength(1);
    for (const stream of [false, true]) {
      for (let i = 0; i < 2; i++) {
        const response = await ctx.chat(ctx.a.selfKey, chatBody(`mine ${i}`, { stream }));
        expect(response.status).toBe(200);
        await response.text();
      }
    }
    // `"self_route": false` does not lift the key's restriction.
    expect(await contentOf(await ctx.chat(ctx.a.selfKey, chatBody("still mine", { self_route: false })))).toBe("still mine");
    expect([inferences(mine).length, inferences(theirs).length]).toEqual([6, 0]);
    // Nothing is reserved for a self-routed request, even while one is in flight.
    expect(ctx.t.app.wallets.reservedFor(ctx.a.accountId)).toBe(0);

    held.release();
    const usage = await usageRows(ctx.t, ctx.a.accountId, 6);
    expect(usage.map((u) => ({ cost: u.cost, providerId: u.providerId, keyId: u.keyId })).sort((x, y) => x.cost - y.cost)).toEqual(
      Array.from({ length: 6 }, () => ({ cost: 0, providerId: tokenOf(ctx, mine), keyId: ctx.a.selfKeyId })),
    );
    expect(usage.map((u) => u.outcome).sort()).toEqual(["cancelled", "completed", "completed", "completed", "completed", "completed"]);
    expect(usage.every((u) => u.promptTokens > 0)).toBe(true);

    const account = await ctx.t.app.admin.getAccount(ctx.a.accountId);
    expect([account.balance_micro_usd, account.reserved_micro_usd, account.earnings_micro_usd]).toEqual([CREDIT, 0, 0]);
    expect((await ctx.t.app.admin.accountLedger(ctx.a.accountId, {})).data.map((e) => e.kind)).toEqual(["credit"]);
    expect((await ctx.t.app.admin.getAccount(ctx.b.accountId)).earnings_micro_usd).toBe(0);
  });

  test('an ordinary key with `"self_route": true` goes to its own machine for free; without it, to any machine, charged', async () => {
    await using ctx = await setup();
    const mine = await ctx.machine(ctx.a.token);
    const theirs = await ctx.machine(ctx.b.token);
    const held = await ctx.hold(ctx.a.plainKey, { self_route: true });

    expect(await contentOf(await ctx.chat(ctx.a.plainKey, chatBody("free", { self_route: true })))).toBe("free");
    expect([inferences(mine).length, inferences(theirs).length]).toEqual([2, 0]);
    // Without self_route, the less loaded machine (B's) serves it, and A pays.
    expect(await contentOf(await ctx.chat(ctx.a.plainKey, chatBody("paid")))).toBe("paid");
    expect([inferences(mine).length, inferences(theirs).length]).toEqual([2, 1]);

    held.release();
    const usage = await usageRows(ctx.t, ctx.a.accountId, 3);
    const paid = usage.filter((u) => u.cost > 0);
    expect(paid.map((u) => [u.providerId, u.keyId])).toEqual([[tokenOf(ctx, theirs), ctx.a.plainKeyId]]);
    expect(usage.filter((u) => u.cost === 0).map((u) => u.providerId)).toEqual([tokenOf(ctx, mine), tokenOf(ctx, mine)]);

    const ledger = (await ctx.t.app.admin.accountLedger(ctx.a.accountId, {})).data;
    expect(ledger.map((e) => [e.kind, e.amount_micro_usd])).toEqual([
      ["charge", -(paid[0]?.cost ?? 0)],
      ["credit", CREDIT],
    ]);
    expect((await ctx.t.app.admin.getAccount(ctx.a.accountId)).balance_micro_usd).toBe(CREDIT - (paid[0]?.cost ?? 0));
  });
});

describe("refusals", () => {
  test("no live device token on the account -> 409 self_route_conflict (none, then only a revoked one)", async () => {
    await using ctx = await setup();
    const theirs = await ctx.machine(ctx.b.token);
    const conflict = {
      status: 409,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("conflict_error", "self_route_conflict"),
    };
    const selfOnly = (await ctx.t.app.admin.createKey({ account_id: ctx.c.accountId, self_route_only: true })).key;

    expect(await errorOf(await ctx.chat(ctx.c.apiKey, chatBody("x", { self_route: true })))).toEqual(conflict);
    expect(await errorOf(await ctx.chat(selfOnly, chatBody("x", { stream: true })))).toEqual(conflict);

    const token = await ctx.t.app.admin.createProviderToken({ account_id: ctx.c.accountId });
    await ctx.t.app.admin.revokeProviderToken(token.id);
    expect(await errorOf(await ctx.chat(ctx.c.apiKey, chatBody("x", { self_route: true })))).toEqual(conflict);
    expect(await errorOf(await ctx.chat(selfOnly, chatBody("x")))).toEqual(conflict);
    expect(inferences(theirs)).toEqual([]);
    // The same key without self_route is served as usual.
    expect(await contentOf(await ctx.chat(ctx.c.apiKey, chatBody("served")))).toBe("served");
  });

  test("a live device token but no own machine serving the model -> 503 model_unavailable; others' machines stay untouched", async () => {
    await using ctx = await setup();
    const theirs = await ctx.machine(ctx.b.token);
    const unavailable = {
      status: 503,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("service_unavailable", "model_unavailable", "model"),
    };
    // Linked, no machine connected.
    expect(await errorOf(await ctx.chat(ctx.a.selfKey, chatBody("x")))).toEqual(unavailable);
    // A's machine serves another build only.
    const mine = await ctx.machine(ctx.a.token, { models: ["other/plain"] });
    expect(await errorOf(await ctx.chat(ctx.a.selfKey, chatBody("x")))).toEqual(unavailable);
    expect(await errorOf(await ctx.chat(ctx.a.plainKey, chatBody("x", { self_route: true, stream: true })))).toEqual(unavailable);
    expect(inferences(theirs)).toEqual([]);
    // The build A's machine does serve is answered there.
    expect(await contentOf(await ctx.chat(ctx.a.selfKey, { ...chatBody("plain"), model: "other/plain" }))).toBe("plain");
    expect(inferences(mine)).toHaveLength(1);
  });

  test("own machines all busy -> 429 capacity_exhausted with Retry-After at once (no queue, no other machine)", async () => {
    await using ctx = await setup();
    const mine = await ctx.machine(ctx.a.token, { maxConcurrency: 1 });
    const theirs = await ctx.machine(ctx.b.token);
    const held = await ctx.hold(ctx.a.selfKey);

    for (const stream of [false, true]) {
      expect(await errorOf(await ctx.chat(ctx.a.selfKey, chatBody("x", { stream })))).toEqual({
        status: 429,
        contentType: "application/json",
        retryAfter: expect.stringMatching(/^\d+$/),
        body: envelope("rate_limit_error", "capacity_exhausted"),
      });
    }
    expect(await errorOf(await ctx.chat(ctx.a.plainKey, chatBody("x", { self_route: true })))).toMatchObject({ status: 429 });
    expect([inferences(mine).length, inferences(theirs).length]).toEqual([1, 0]);
    expect(ctx.t.app.fleet.waiting(BUILD)).toBe(0);

    // Once the slot is free again, the machine serves.
    held.release();
    await waitFor(() => ctx.t.app.fleet.list().find((s) => s.id === mine.providerId)?.active === 0, "A's slot to be freed");
    expect(await contentOf(await ctx.chat(ctx.a.selfKey, chatBody("again")))).toBe("again");
  });

  test("own machine refusing with busy (provider side) -> 429 capacity_exhausted, never another account's machine", async () => {
    await using ctx = await setup();
    const mine = await ctx.machine(ctx.a.token, { behave: () => [{ do: "error", code: "busy" }] });
    const theirs = await ctx.machine(ctx.b.token);
    expect(await errorOf(await ctx.chat(ctx.a.selfKey, chatBody("x")))).toEqual({
      status: 429,
      contentType: "application/json",
      retryAfter: expect.stringMatching(/^\d+$/),
      body: envelope("rate_limit_error", "capacity_exhausted"),
    });
    expect([inferences(mine).length, inferences(theirs).length]).toEqual([1, 0]);
  });

  test('`"self_route": "yes"` -> 400 with param self_route', async () => {
    await using ctx = await setup();
    await ctx.machine(ctx.a.token);
    for (const value of ["yes", 1, {}]) {
      expect(await errorOf(await ctx.chat(ctx.a.plainKey, chatBody("x", { self_route: value })))).toEqual({
        status: 400,
        contentType: "application/json",
        retryAfter: null,
        body: envelope("invalid_request_error", "invalid_value", "self_route"),
      });
    }
  });

  test("self-routed requests respect the key's allowlist (403 before any self-route check)", async () => {
    await using ctx = await setup();
    const mine = await ctx.machine(ctx.a.token);
    const forbidden = {
      status: 403,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("permission_error", "model_not_allowed", "model"),
    };
    const narrowSelf = (
      await ctx.t.app.admin.createKey({ account_id: ctx.a.accountId, self_route_only: true, allowed_models: ["other/plain"] })
    ).key;
    const narrowC = (await ctx.t.app.admin.createKey({ account_id: ctx.c.accountId, allowed_models: ["other/plain"] })).key;

    expect(await errorOf(await ctx.chat(narrowSelf, chatBody("x")))).toEqual(forbidden);
    // C has no machine: the allowlist still answers first.
    expect(await errorOf(await ctx.chat(narrowC, chatBody("x", { self_route: true })))).toEqual(forbidden);
    expect(inferences(mine)).toEqual([]);
    // The listing is the intersection: allowed (other/plain) and served by A (the org build) share nothing.
    expect(ids(await ctx.t.call("GET", "/v1/models", { token: narrowSelf }))).toEqual([]);
  });
});

describe("GET /v1/models for a self-route-only key", () => {
  test("lists and retrieves only the live models its own machines serve", async () => {
    await using ctx = await setup();
    await ctx.machine(ctx.b.token, { models: [BUILD, "other/plain"] });
    const list = async (key: string, query = "") => {
      const r = await ctx.t.call("GET", `/v1/models${query}`, { token: key });
      expect(r.status).toBe(200);
      return ids(r);
    };
    const retrieve = async (key: string, id: string) =>
      (await ctx.t.call("GET", `/v1/models/${encodeURIComponent(id)}`, { token: key })).status;

    // No own machine: nothing, although B's machine serves both.
    expect(await list(ctx.a.selfKey)).toEqual([]);
    expect(await retrieve(ctx.a.selfKey, "org/model")).toBe(404);

    const mine = await ctx.machine(ctx.a.token);
    expect(await list(ctx.a.selfKey)).toEqual(["org/model"]);
    expect(await list(ctx.a.selfKey, "?include_builds=1")).toEqual([BUILD, "org/model"]);
    expect(await retrieve(ctx.a.selfKey, "org/model")).toBe(200);
    expect(await retrieve(ctx.a.selfKey, BUILD)).toBe(200);
    const notFound = await ctx.t.call("GET", "/v1/models/other%2Fplain", { token: ctx.a.selfKey });
    expect({ status: notFound.status, body: notFound.body }).toEqual({
      status: 404,
      body: envelope("not_found_error", "model_not_found", "model"),
    });
    // An ordinary key of the same account sees the whole catalog.
    expect(await list(ctx.a.plainKey)).toEqual(["org/model", "other/plain"]);

    await mine[Symbol.asyncDispose]();
    await gone(ctx.t, ctx.a.accountId);
    expect(await list(ctx.a.selfKey)).toEqual([]);
    expect(await retrieve(ctx.a.selfKey, "org/model")).toBe(404);
    expect(await list(ctx.a.plainKey)).toEqual(["org/model", "other/plain"]);
  });
});
