/**
 * dispatch() (src/inference/dispatch.ts) with a ClusterNode as its RemoteProviders, replicas in-process
 * over the machine's NATS (skipped, saying so, without a server): a request on a replica without
 * providers commits on another replica's provider; a dead owner's "no responders" fails over to the next
 * remote provider (its frame is attempt 1); only busy remote providers give 503, none at all 503
 * model_unavailable; self-routed requests never leave the replica.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { usageLimits } from "../../../src/billing/usage-bounds.ts";
import { ApiError } from "../../../src/errors/api-error.ts";
import { type DispatchRequest, dispatch } from "../../../src/inference/dispatch.ts";
import { close, type FakeProvider, natsPrefix, type Replica, replica, testNats } from "../../support/nats.ts";
import { waitFor } from "../../support/wait.ts";

const BUILD = "org/remote-build-4bit";
const available = await testNats("test/unit/cluster/dispatch-remote.test.ts");
const opened: Replica[] = [];
afterEach(async () => {
  for (const r of opened.splice(0)) await close(r);
});

async function cluster(...ids: string[]): Promise<Replica[]> {
  const prefix = natsPrefix();
  for (const id of ids) opened.push(await replica(id, prefix));
  return opened.slice(-ids.length);
}

const settings = { firstContentTimeoutMs: 20_000, acceptTimeoutMs: 10_000, maxAttempts: 3, maxQueuedPerModel: 0 };
const body = { messages: [{ role: "user" as const, content: "hi" }], max_tokens: 16 };

function request(extra: Partial<DispatchRequest> = {}): DispatchRequest {
  return {
    requestId: `req_${crypto.randomUUID().slice(0, 12)}`,
    buildId: BUILD,
    body,
    limits: usageLimits(body),
    signal: new AbortController().signal,
    requestDeadline: Date.now() + 60_000,
    ...extra,
  };
}

/** Answers the provider's first inference with accepted and one chunk. */
async function serve(p: FakeProvider): Promise<number> {
  const f = await waitFor(() => p.frames.find((x) => x.type === "inference"), "the inference at the provider");
  if (f.type !== "inference") throw new Error("unreachable");
  for (const frame of [{ type: "accepted" }, { type: "chunk", seq: 0, delta: { content: "Hi" } }]) {
    p.session.onFrame(JSON.stringify({ request_id: f.request_id, attempt: f.attempt, ...frame }));
  }
  return f.attempt;
}

describe.skipIf(!available)("dispatch across replicas", () => {
  test("a request on A commits on C's provider", async () => {
    const [a, c] = (await cluster("a", "c")) as [Replica, Replica];
    const p = await c.provider(BUILD);
    await waitFor(() => a.node.candidates(BUILD).length === 1, "C's provider in A's view");
    const committed = dispatch(a.fleet, settings, request(), Date.now, a.node);
    expect(await serve(p)).toBe(0);
    const { attempt, first } = await committed;
    expect([first, attempt.providerId, attempt.providerAccountId]).toEqual([
      { type: "chunk", delta: { content: "Hi" } },
      p.session.id,
      "acct_c",
    ]);
    attempt.cancel("client_gone");
    await waitFor(() => p.session.active === 0, "the slot freed on C");
  });

  test("a dead owner before first content fails over to the next remote provider", async () => {
    const [a, b] = (await cluster("a", "b")) as [Replica, Replica];
    const live = await b.provider(BUILD);
    // A digest that still names a provider whose replica is gone (nobody answers for it): tried first.
    const remote = {
      candidates: () => [
        { providerId: "prov_gone", accountId: "acct_gone" },
        { providerId: live.session.id, accountId: "acct_b" },
      ],
      serves: () => true,
      forward: a.node.forward.bind(a.node),
    };
    const committed = dispatch(a.fleet, settings, request(), Date.now, remote);
    committed.catch(() => {}); // awaited below; a failed assertion must not leave it unhandled
    expect(await serve(live)).toBe(1);
    const { attempt } = await committed;
    expect(attempt.providerId).toBe(live.session.id);
    attempt.cancel("client_gone");
  });

  test("remote providers all busy: 503 service_unavailable; none anywhere: model_unavailable", async () => {
    const [a, c] = (await cluster("a", "c")) as [Replica, Replica];
    const p = await c.provider(BUILD, 1);
    await waitFor(() => a.node.candidates(BUILD).length === 1, "C's provider in A's view");
    const first = dispatch(a.fleet, settings, request(), Date.now, a.node);
    first.catch(() => {});
    await serve(p);
    const held = await first;
    await waitFor(() => a.node.candidates(BUILD).length === 0 && a.node.serves(BUILD), "C's provider busy in A's view");
    const busy = await dispatch(a.fleet, settings, request(), Date.now, a.node).catch((e) => e);
    expect(busy instanceof ApiError ? [busy.status, busy.code] : busy).toEqual([503, "service_unavailable"]);
    held.attempt.cancel("client_gone");
    const none = await dispatch(a.fleet, settings, request({ buildId: "org/nobody-4bit" }), Date.now, a.node).catch((e) => e);
    expect(none instanceof ApiError ? [none.status, none.code] : none).toEqual([503, "model_unavailable"]);
  });

  test("a self-routed request reaches the account's own machine on another replica, never another account's", async () => {
    const [a, c] = (await cluster("a", "c")) as [Replica, Replica];
    const p = await c.provider(BUILD);
    await waitFor(() => a.node.candidates(BUILD).length === 1, "C's provider in A's view");
    const other = await dispatch(a.fleet, settings, request({ selfRoute: { accountId: "acct_x" } }), Date.now, a.node).catch((x) => x);
    expect([other instanceof ApiError ? [other.status, other.code] : other, p.frames]).toEqual([[503, "model_unavailable"], []]);
    const committed = dispatch(a.fleet, settings, request({ selfRoute: { accountId: "acct_c" } }), Date.now, a.node);
    committed.catch(() => {});
    expect(await serve(p)).toBe(0);
    const { attempt } = await committed;
    expect([attempt.providerId, attempt.providerAccountId]).toEqual([p.session.id, "acct_c"]);
    attempt.cancel("client_gone");
  });

  test("an owner whose provider belongs to another account than the digest said: the attempt fails, the work is cancelled", async () => {
    const [a, c] = (await cluster("a", "c")) as [Replica, Replica];
    const p = await c.provider(BUILD);
    const remote = {
      candidates: () => [{ providerId: p.session.id, accountId: "acct_wrong" }],
      serves: () => true,
      forward: a.node.forward.bind(a.node),
    };
    const e = await dispatch(a.fleet, settings, request(), Date.now, remote).catch((x) => x);
    expect(e instanceof ApiError ? [e.status, e.code] : e).toEqual([502, "provider_error"]);
    await waitFor(() => p.session.active === 0, "the slot freed on C");
  });
});
