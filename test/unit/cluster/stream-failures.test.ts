/**
 * The forwarder against a scripted owner (a raw NATS subscription answering by hand): a gap in the
 * numbering, an owner that falls silent, a malformed message and a refusal each end the attempt with one
 * clean event (`lost` before first content: the dispatcher fails over; after it, the stream writer's one
 * in-band error), and the owner is told to cancel. A malformed request to a real owner is refused, not thrown.
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { NatsConnection } from "@nats-io/transport-node";
import { type ClusterLink, forward } from "../../../src/cluster/forwarder.ts";
import { decodeControl, decodeOwner, decodeRequestPart, encodeOwner, type OwnerMessage, subjects } from "../../../src/cluster/wire.ts";
import type { Attempt, AttemptEvent } from "../../../src/fleet/attempt.ts";
import { streamCompletion } from "../../../src/inference/stream-pump.ts";
import { close, natsConnect, natsPrefix, type Replica, replica, testNats } from "../../support/nats.ts";
import { waitFor } from "../../support/wait.ts";

const available = await testNats("test/unit/cluster/stream-failures.test.ts");
const connections: NatsConnection[] = [];
const replicas: Replica[] = [];

afterEach(async () => {
  for (const r of replicas.splice(0)) await close(r);
  for (const nc of connections.splice(0)) await nc.close();
});

const frame = (id: string) => ({
  type: "inference" as const,
  request_id: id,
  attempt: 0,
  model: "org/m-4bit",
  first_content_deadline_ms: 10_000,
  request: { messages: [{ role: "user" as const, content: "hi" }], max_tokens: 8 },
});

/**
 * A forwarder link and a scripted owner of provider `prov_fake`: `script` answers the request with the
 * given messages (their `s` as written); `control` collects what the forwarder sends on the control subject.
 */
async function scripted(script: (OwnerMessage | Uint8Array)[]) {
  const prefix = natsPrefix();
  const [fwd, own] = [await natsConnect(), await natsConnect()];
  connections.push(fwd, own);
  const id = `req_${crypto.randomUUID().slice(0, 8)}`;
  const control: unknown[] = [];
  own.subscribe(subjects.control(prefix, id, 0), { callback: (_, m) => void control.push(decodeControl(m.data)) });
  own.subscribe(subjects.provider(prefix, "prov_fake"), {
    callback: (_, m) => {
      decodeRequestPart(m.data);
      for (const s of script) own.publish(m.reply ?? "", s instanceof Uint8Array ? s : encodeOwner(s));
    },
  });
  await own.flush();
  const link: ClusterLink = { nc: fwd, prefix, keepaliveMs: 100, missedKeepalives: 3, now: Date.now };
  const attempt = forward(link, { providerId: "prov_fake", accountId: "acct_x" }, frame(id));
  return { attempt, control };
}

async function drain(attempt: Attempt): Promise<AttemptEvent[]> {
  const out: AttemptEvent[] = [];
  for (;;) {
    const e = await attempt.next();
    out.push(e);
    if (e.type !== "accepted" && e.type !== "chunk" && e.type !== "tool_call") return out;
  }
}

const accepted = { type: "accepted" } as const;
const chunk = { type: "chunk", delta: { content: "Hi" } } as const;

describe.skipIf(!available)("forwarded stream failures", () => {
  test("a gap before first content: lost (failover), and the owner is told to cancel", async () => {
    const { attempt, control } = await scripted([
      { s: 0, k: "ok", acct: "acct_x" },
      { s: 2, k: "ev", e: [accepted] },
    ]);
    expect(await drain(attempt)).toEqual([{ type: "lost", reason: "stream gap: message 2, expected 1" }]);
    await waitFor(() => control.length > 0, "the cancel on the control subject");
    expect(control[0]).toEqual({ k: "cancel", r: "failover" });
  });

  test("a gap after first content: the stream writer ends with one in-band error", async () => {
    const { attempt } = await scripted([
      { s: 0, k: "ok", acct: "acct_x" },
      { s: 1, k: "ev", e: [accepted, chunk] },
      { s: 3, k: "ev", e: [chunk] },
    ]);
    expect([await attempt.next(), await attempt.next()]).toEqual([accepted, chunk]);
    const ctx = { id: "chatcmpl-x", model: "m", maxTokens: 8, created: 1 };
    const outcomes: string[] = [];
    const stream = await streamCompletion({ attempt, first: chunk }, ctx, async (o) => void outcomes.push(o.status));
    const text = await new Response(stream).text();
    const events = text.split("\n\n").filter(Boolean);
    expect(events.length).toBe(2);
    expect(JSON.parse((events[1] as string).slice(6)).error.code).toBe("provider_error");
    expect(text.includes("[DONE]")).toBe(false);
    expect(outcomes).toEqual(["failed"]);
  });

  test("an owner that falls silent after ok: lost once its keepalives stop", async () => {
    const { attempt, control } = await scripted([{ s: 0, k: "ok", acct: "acct_x" }]);
    expect(await drain(attempt)).toEqual([{ type: "lost", reason: "the owner replica stopped answering" }]);
    await waitFor(() => control.some((m) => (m as { k: string }).k === "cancel"), "the cancel on the control subject");
    expect(control).toContainEqual({ k: "ack", s: 0 });
    expect(control.at(-1)).toEqual({ k: "cancel", r: "failover" });
  });

  test("a malformed owner message: lost, never thrown", async () => {
    const { attempt } = await scripted([
      { s: 0, k: "ok", acct: "acct_x" },
      new TextEncoder().encode(`{"s":1,"k":"ev","e":[{"type":"boom"}]}`),
    ]);
    expect(await drain(attempt)).toEqual([{ type: "lost", reason: "malformed message from the owner: unknown event type" }]);
  });

  test("refusals: capacity is busy, draining is draining, others are lost", async () => {
    for (const [why, event] of [
      ["capacity", { type: "error", code: "busy" }],
      ["draining", { type: "error", code: "draining" }],
      ["model", { type: "lost", reason: "refused by the owner: model" }],
    ] as const) {
      const { attempt } = await scripted([{ s: 0, k: "no", why }]);
      expect(await drain(attempt)).toEqual([event]);
    }
  });

  test("a malformed request to a real owner is answered 'no malformed' and reaches no provider", async () => {
    const prefix = natsPrefix();
    const c = await replica("c", prefix);
    replicas.push(c);
    const p = await c.provider("org/m-4bit");
    const nc = await natsConnect();
    connections.push(nc);
    for (const bad of ["garbage", `{"v":1,"k":"d","id":"r1","a":0,"b":"org/m-4bit","dl":5,"i":0,"n":1}\n{"max_tokens":1}`]) {
      const answer = await nc.request(subjects.provider(prefix, p.session.id), new TextEncoder().encode(bad), { timeout: 5000 });
      expect(decodeOwner(answer.data)).toEqual({ s: 0, k: "no", why: "malformed" });
    }
    expect([p.frames.length, p.session.active, c.node.owner.open]).toEqual([0, 0, 0]);
  });
});
