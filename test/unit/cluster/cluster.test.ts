/**
 * Forwarded dispatch between in-process replicas over the machine's NATS (test/support/nats.ts; each test
 * has its own subject prefix; skipped, saying so, without a server). Covered: a dispatch on A served by a
 * provider on C with the same events a local attempt gives; the owner refusing its own full slots; a dead
 * owner (connection closed) answering "no responders"; a cancel from A reaching C's provider; a dead
 * forwarder making the owner cancel; a request larger than max_payload in parts; digests and their expiry.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { RequestError } from "@nats-io/transport-node";
import type { RemoteTarget } from "../../../src/cluster/forwarder.ts";
import type { Attempt, AttemptEvent } from "../../../src/fleet/attempt.ts";
import type { Inference } from "../../../src/protocol/frames.ts";
import { close, NATS_URL, natsPrefix, type Replica, replica, testNats } from "../../support/nats.ts";
import { startTcpProxy } from "../../support/tcp-proxy.ts";
import { waitFor } from "../../support/wait.ts";

const BUILD = "org/model-build-4bit";
const available = await testNats("test/unit/cluster/cluster.test.ts");
const opened: Replica[] = [];

afterEach(async () => {
  for (const r of opened.splice(0)) await close(r);
});

async function cluster(...ids: string[]): Promise<Replica[]> {
  const prefix = natsPrefix();
  const out: Replica[] = [];
  for (const id of ids) out.push(await replica(id, prefix));
  opened.push(...out);
  return out;
}

/** True once a request to the provider's subject gets "no responders" (the server saw its owner go). */
async function gone(r: Replica, providerId: string): Promise<boolean> {
  try {
    await r.nc.request(`${r.node.prefix}.prov.${providerId}`, new Uint8Array(0), { timeout: 1000 });
    return false;
  } catch (e) {
    return e instanceof RequestError && e.isNoResponders();
  }
}

let counter = 0;
function inference(content = "hello", attempt = 0): Inference {
  return {
    type: "inference",
    request_id: `req_${++counter}_${crypto.randomUUID().slice(0, 8)}`,
    attempt,
    model: BUILD,
    first_content_deadline_ms: 30_000,
    request: { messages: [{ role: "user", content }], max_tokens: 64 },
  };
}

/** Events until a terminal one. */
async function drain(attempt: Attempt): Promise<AttemptEvent[]> {
  const out: AttemptEvent[] = [];
  for (;;) {
    const e = await attempt.next();
    out.push(e);
    if (e.type !== "accepted" && e.type !== "chunk" && e.type !== "tool_call") return out;
  }
}

/** The provider side of one attempt: its frames as the session reads them. */
function answer(p: { session: { onFrame(t: string): void } }, request_id: string, frames: Record<string, unknown>[]): void {
  for (const f of frames) p.session.onFrame(JSON.stringify({ request_id, attempt: 0, ...f }));
}

describe.skipIf(!available)("forwarded dispatch over NATS", () => {
  test("a dispatch on A is served by a provider on C, with the events of a local attempt", async () => {
    const [a, , c] = await cluster("a", "b", "c");
    const p = await (c as Replica).provider(BUILD);
    const target = await waitFor(() => a?.node.remote.candidates(BUILD)[0], "C's provider in A's view");
    expect(target).toEqual({ replica: "c", providerId: p.session.id, accountId: "acct_c", deviceTokenId: p.session.identity.tokenId });
    const frame = inference();
    const attempt = (a as Replica).node.forward(target, frame);
    // Usage rows of forwarded requests name the serving machine's device token, as local ones do.
    expect(attempt.deviceTokenId).toBe(p.session.identity.tokenId);
    await waitFor(() => p.frames.length === 1, "the inference at C's provider");
    expect(p.frames[0]).toEqual(frame);
    expect(p.session.active).toBe(1);
    answer(p, frame.request_id, [
      { type: "accepted" },
      { type: "chunk", seq: 0, delta: { content: "Hi" } },
      { type: "tool_call", seq: 1, tool_call: { index: 0, id: "call_1", name: "f", arguments: "{}" } },
      { type: "complete", seq: 2, finish_reason: "stop", usage: { prompt_tokens: 3, completion_tokens: 2 } },
    ]);
    expect(await drain(attempt)).toEqual([
      { type: "accepted" },
      { type: "chunk", delta: { content: "Hi" } },
      { type: "tool_call", call: { index: 0, id: "call_1", name: "f", arguments: "{}" } },
      { type: "complete", finishReason: "stop", usage: { prompt_tokens: 3, completion_tokens: 2 } },
    ]);
    expect([attempt.providerId, attempt.providerAccountId, attempt.acceptedAt !== undefined, attempt.firstContentAt !== undefined]).toEqual(
      [p.session.id, "acct_c", true, true],
    );
    expect([attempt.relayed.chunks, attempt.relayed.toolCalls, attempt.relayed.contentBytes]).toEqual([2, 1, 2]);
    await waitFor(() => c?.node.owner.open === 0 && p.session.active === 0, "the owner's stream closed and the slot freed");
  });

  test("the owner refuses when its provider's slots are full: busy, and the request never reaches it", async () => {
    const [a, c] = await cluster("a", "c");
    const p = await (c as Replica).provider(BUILD, 1);
    const target = { providerId: p.session.id, accountId: "acct_c" };
    const first = (a as Replica).node.forward(target, inference());
    await waitFor(() => p.frames.length === 1, "the first request at the provider");
    const second = (a as Replica).node.forward(target, inference());
    expect(await second.next()).toEqual({ type: "error", code: "busy" });
    expect(p.frames.length).toBe(1);
    first.cancel("client_gone");
  });

  test("a dead owner (connection closed) is 'no responders': lost before first content, so failover", async () => {
    const [a, c] = await cluster("a", "c");
    const p = await (c as Replica).provider(BUILD);
    await waitFor(() => a?.node.remote.candidates(BUILD).length === 1, "C's provider in A's view");
    await (c as Replica).nc.close();
    await waitFor(() => gone(a as Replica, p.session.id), "the server dropped C's subscriptions");
    const attempt = (a as Replica).node.forward({ providerId: p.session.id, accountId: "acct_c" }, inference());
    expect(await attempt.next()).toEqual({ type: "lost", reason: "no responders: the provider's replica is gone" });
    await waitFor(() => a?.node.remote.candidates(BUILD).length === 0, "C dropped from A's view after its digests stopped");
    expect(a?.node.remote.replicaIds).toEqual([]);
  });

  test("a provider that disconnects loses its presence at once: no responders", async () => {
    const [a, c] = await cluster("a", "c");
    const p = await (c as Replica).provider(BUILD);
    p.session.onTransportClosed();
    await waitFor(() => c?.node.present.length === 0, "presence withdrawn");
    const attempt = (a as Replica).node.forward({ providerId: p.session.id, accountId: "acct_c" }, inference());
    expect(await attempt.next()).toEqual({ type: "lost", reason: "no responders: the provider's replica is gone" });
  });

  test("a cancel on A reaches the provider on C and frees its slot", async () => {
    const [a, c] = await cluster("a", "c");
    const p = await (c as Replica).provider(BUILD);
    const frame = inference();
    const attempt = (a as Replica).node.forward({ providerId: p.session.id, accountId: "acct_c" }, frame);
    await waitFor(() => p.frames.length === 1, "the inference at the provider");
    answer(p, frame.request_id, [{ type: "accepted" }, { type: "chunk", seq: 0, delta: { content: "x" } }]);
    expect([await attempt.next(), await attempt.next()]).toEqual([{ type: "accepted" }, { type: "chunk", delta: { content: "x" } }]);
    attempt.cancel("client_gone");
    await waitFor(() => p.frames.length === 2, "the cancel at the provider");
    expect(p.frames[1]).toEqual({ type: "cancel", request_id: frame.request_id, attempt: 0, reason: "client_gone" });
    await waitFor(() => p.session.active === 0 && c?.node.owner.open === 0, "slot freed, stream closed");
  });

  test("a dead forwarder (its acks stop) makes the owner cancel the provider's work", async () => {
    const [a, c] = await cluster("a", "c");
    const p = await (c as Replica).provider(BUILD);
    const frame = inference();
    (a as Replica).node.forward({ providerId: p.session.id, accountId: "acct_c" }, frame);
    await waitFor(() => p.frames.length === 1, "the inference at the provider");
    (a as Replica).node.stop();
    await (a as Replica).nc.close();
    await waitFor(() => p.frames.length === 2, "the owner's cancel at the provider");
    expect(p.frames[1]).toEqual({ type: "cancel", request_id: frame.request_id, attempt: 0, reason: "client_gone" });
    expect(p.session.active).toBe(0);
  });

  test("a request beyond max_payload travels in parts and arrives whole", async () => {
    const [a, c] = await cluster("a", "c");
    const p = await (c as Replica).provider(BUILD);
    const max = (a as Replica).nc.info?.max_payload ?? 1024 * 1024;
    const frame = inference("é".repeat(Math.ceil(max * 1.3)));
    const attempt = (a as Replica).node.forward({ providerId: p.session.id, accountId: "acct_c" }, frame);
    await waitFor(() => p.frames.length === 1, "the inference at the provider");
    expect(p.frames[0]).toEqual(frame);
    attempt.cancel("client_gone");
  });

  test("an answer chunk beyond max_payload arrives split, its text whole", async () => {
    const [a, c] = await cluster("a", "c");
    const p = await (c as Replica).provider(BUILD);
    const frame = inference();
    const attempt = (a as Replica).node.forward(
      { providerId: p.session.id, accountId: "acct_c" },
      { ...frame, request: { ...frame.request, max_tokens: 100_000 } },
    );
    await waitFor(() => p.frames.length === 1, "the inference at the provider");
    const text = "z".repeat(900_000);
    answer(p, frame.request_id, [
      { type: "accepted" },
      { type: "chunk", seq: 0, delta: { content: text } },
      { type: "complete", seq: 1, finish_reason: "stop", usage: { prompt_tokens: 3, completion_tokens: 2 } },
    ]);
    const events = await drain(attempt);
    const joined = events.map((e) => (e.type === "chunk" ? (e.delta.content ?? "") : "")).join("");
    expect([joined.length, events.at(-1)]).toEqual([text.length, expect.objectContaining({ type: "complete" })]);
  });

  test("digests: capacity and public entries of the other replicas, dropped when they stop", async () => {
    const [a, b, c] = await cluster("a", "b", "c");
    const pb = await (b as Replica).provider(BUILD, 2);
    const pc = await (c as Replica).provider(BUILD, 3);
    await waitFor(() => a?.node.remote.capacity(BUILD).providerCount === 2, "both providers in A's view");
    expect(a?.node.remote.capacity(BUILD)).toEqual({
      providerCount: 2,
      routableProviders: 2,
      warmProviders: 0,
      canAccept: true,
      attestedProviders: 0,
      trustLevel: "none",
    });
    const ids = (a as Replica).node.remote.publicAttestations().map((e) => e.provider_id);
    expect(ids.sort()).toEqual([pb.session.id, pc.session.id].sort());
    expect(a?.node.remote.replicaIds.sort()).toEqual(["b", "c"]);
    const version = (a as Replica).node.remote.version;
    (c as Replica).node.stop();
    await waitFor(() => a?.node.remote.replicaIds.length === 1, "C dropped after missed digests");
    expect(a?.node.remote.capacity(BUILD).providerCount).toBe(1);
    // The public list of A moves with it: C's entry is gone.
    expect([(a as Replica).node.remote.version > version, (a as Replica).node.remote.publicAttestations().length]).toEqual([true, 1]);
  });

  test("a dropped NATS connection ends what crossed it at once: forwarded attempts lost, others forgotten, served ones cancelled", async () => {
    const prefix = natsPrefix();
    const url = new URL(NATS_URL);
    await using proxy = startTcpProxy({ hostname: url.hostname, port: Number(url.port || 4222) });
    // Long keepalives: without the drop being noticed, the attempts would wait 3 x 5 s of silence.
    const slow = { keepaliveMs: 5_000, digestMs: 100 };
    const a = await replica("a", prefix, slow, `nats://127.0.0.1:${proxy.port}`);
    const c = await replica("c", prefix, slow);
    opened.push(a, c);
    const toC = await c.provider(BUILD);
    const onA = await a.provider(BUILD);
    const target = await waitFor(() => a.node.remote.candidates(BUILD)[0], "C's provider in A's view");
    await waitFor(() => c.node.remote.candidates(BUILD)[0], "A's provider in C's view");
    const sent = a.node.forward(target, inference());
    await waitFor(() => toC.frames.length === 1, "A's request at C's provider");
    const served = c.node.forward(c.node.remote.candidates(BUILD)[0] as RemoteTarget, inference());
    await waitFor(() => onA.frames.length === 1, "C's request at A's provider");
    const started = Date.now();
    proxy.cut();
    expect(await drain(sent)).toEqual([{ type: "lost", reason: "the NATS connection dropped" }]);
    // A's side: C forgotten, the attempt it served for C cancelled (its provider told).
    await waitFor(() => onA.frames.some((f) => f.type === "cancel"), "the attempt A served for C cancelled");
    expect([a.node.remote.candidates(BUILD), a.node.remote.replicaIds, Date.now() - started < 5_000]).toEqual([[], [], true]);
    served.cancel("client_gone");
  });
});
