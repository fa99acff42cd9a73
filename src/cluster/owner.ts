/**
 * The owner side: forwarded dispatches for this replica's provider sessions (wire.ts has the format).
 *
 * Parts of a request are assembled in order per (reply subject, request, attempt), within bounds (parts,
 * bytes in flight, PART_TIMEOUT_MS). The owner alone admits: a session that is gone, does not serve the
 * build, is draining or has no free slot refuses; else the request is dispatched on the local session at
 * once (the slot is taken before anything else runs) and answered `ok`. The attempt's events then stream
 * back numbered, batched per turn and split within max_payload, with a keepalive in every period nothing
 * else left. A cancel on the control subject, or acks silent for `missedKeepalives` periods, cancels the
 * provider's work. A malformed part is answered `no malformed` (when it names a reply subject), never thrown.
 */
import type { Subscription } from "@nats-io/transport-node";
import type { Attempt, AttemptEvent } from "../fleet/attempt.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { ProviderSession } from "../fleet/session.ts";
import type { Logger } from "../observability/logger.ts";
import type { ClusterLink } from "./forwarder.ts";
import {
  decodeControl,
  decodeRequestBody,
  decodeRequestPart,
  encodeOwner,
  type OwnerMessage,
  type Refusal,
  type RequestPart,
  subjects,
} from "./wire.ts";

/** A partly received request is dropped when its next part takes longer than this. */
const PART_TIMEOUT_MS = 10_000;
/** Bytes of partly received requests held at once, over all of them. */
const MAX_PENDING_BYTES = 128 * 1024 * 1024;

interface Pending {
  readonly parts: Uint8Array[];
  bytes: number;
  readonly timer: ReturnType<typeof setTimeout>;
}

export class Owner {
  private readonly pending = new Map<string, Pending>();
  private pendingBytes = 0;
  private readonly streams = new Set<OwnerStream>();

  constructor(
    private readonly link: ClusterLink,
    private readonly fleet: Fleet,
    private readonly logger: Logger,
  ) {}

  /** Forwarded streams open now (tests, status). */
  get open(): number {
    return this.streams.size;
  }

  /** One message on `<prefix>.prov.<session.id>`; never throws. */
  onRequest(session: ProviderSession, data: Uint8Array, reply: string | undefined): void {
    if (!reply) return; // nobody to answer
    let part: RequestPart;
    try {
      part = decodeRequestPart(data);
    } catch {
      this.refuse(reply, "malformed");
      return;
    }
    const bytes = part.parts === 1 ? part.bytes : this.assemble(reply, part);
    if (bytes === undefined) return;
    let body: ReturnType<typeof decodeRequestBody>;
    try {
      body = decodeRequestBody(bytes);
    } catch {
      this.refuse(reply, "malformed");
      return;
    }
    const refusal = this.admission(session, part.build);
    if (refusal !== undefined) {
      this.refuse(reply, refusal);
      return;
    }
    const stream = new OwnerStream(this.link, reply, part, () => this.streams.delete(stream));
    this.streams.add(stream);
    // session.dispatch takes the slot synchronously, before any other message is handled.
    const attempt = session.dispatch({
      type: "inference",
      request_id: part.id,
      attempt: part.attempt,
      model: part.build,
      first_content_deadline_ms: part.deadlineMs,
      request: body,
    });
    stream.start(session.identity.accountId, attempt).catch(() => {
      // The request could not be serialized for the provider: the forwarder fails over at once.
      this.logger.warn("forwarded dispatch failed", { provider_id: session.id, request_id: part.id });
      stream.lost("the owner could not send the request");
    });
  }

  /** Why the session cannot take this request now, or undefined. */
  private admission(session: ProviderSession, build: string): Refusal | undefined {
    if (session.closed || !session.ready) return "gone";
    if (!session.models.has(build)) return "model";
    if (session.draining) return "draining";
    return this.fleet.candidates(build, (s) => s === session).length === 0 ? "capacity" : undefined;
  }

  /** Adds a part; the whole body once the last arrived, else undefined. */
  private assemble(reply: string, part: RequestPart): Uint8Array | undefined {
    const key = `${reply} ${part.id} ${part.attempt}`;
    let p = this.pending.get(key);
    if (p === undefined) {
      if (part.index !== 0) return undefined; // the head was dropped: the forwarder's silence check ends it
      p = { parts: [], bytes: 0, timer: setTimeout(() => this.drop(key), PART_TIMEOUT_MS) };
      this.pending.set(key, p);
    }
    if (part.index !== p.parts.length || this.pendingBytes + part.bytes.length > MAX_PENDING_BYTES) {
      this.drop(key);
      this.refuse(reply, "malformed");
      return undefined;
    }
    p.parts.push(part.bytes);
    p.bytes += part.bytes.length;
    this.pendingBytes += part.bytes.length;
    if (p.parts.length < part.parts) return undefined;
    this.drop(key);
    return Buffer.concat(p.parts);
  }

  private drop(key: string): void {
    const p = this.pending.get(key);
    if (p === undefined) return;
    clearTimeout(p.timer);
    this.pendingBytes -= p.bytes;
    this.pending.delete(key);
  }

  private refuse(reply: string, why: Refusal): void {
    try {
      this.link.nc.publish(reply, encodeOwner({ s: 0, k: "no", why }));
    } catch {
      // connection closing
    }
  }

  /** Ends every forwarded stream (shutdown): their attempts are cancelled. */
  stop(): void {
    for (const s of [...this.streams]) s.cancel("shutdown");
    for (const key of [...this.pending.keys()]) this.drop(key);
  }
}

/** One forwarded attempt on the owner: its events out, the forwarder's acks and cancel in. */
class OwnerStream {
  private seq = 0;
  private attempt: Attempt | undefined;
  private control: Subscription | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;
  private acked: number;
  private sentSince = false;
  private ended = false;
  private cancelled: Parameters<Attempt["cancel"]>[0] | undefined;

  constructor(
    private readonly link: ClusterLink,
    private readonly reply: string,
    part: RequestPart,
    private readonly onEnd: () => void,
  ) {
    this.acked = link.now();
    // Subscribed before `ok` leaves, so no cancel sent after it can be missed.
    this.control = link.nc.subscribe(subjects.control(link.prefix, part.id, part.attempt), {
      callback: (err, msg) => (err ? this.cancel("client_gone") : this.onControl(msg.data)),
    });
    this.timer = setInterval(() => this.tick(), link.keepaliveMs);
  }

  /** Answers `ok`, then pumps the attempt's events until its end. */
  async start(accountId: string, pending: Promise<Attempt>): Promise<void> {
    this.send({ s: 0, k: "ok", acct: accountId });
    const attempt = await pending;
    this.attempt = attempt;
    if (this.cancelled !== undefined) {
      attempt.cancel(this.cancelled);
      this.end();
      return;
    }
    const budget = Math.floor((this.link.nc.info?.max_payload ?? 1024 * 1024) / 2);
    let batch: AttemptEvent[] = [];
    let size = 0;
    for (;;) {
      const event = await attempt.next();
      if (this.ended) return;
      for (const piece of pieces(event, budget)) {
        const n = JSON.stringify(piece).length;
        if (size + n > budget && batch.length > 0) {
          this.send({ s: 0, k: "ev", e: batch });
          batch = [];
          size = 0;
        }
        batch.push(piece);
        size += n;
      }
      const terminal = event.type !== "accepted" && event.type !== "chunk" && event.type !== "tool_call";
      if (terminal || attempt.backlog === 0) {
        this.send({ s: 0, k: "ev", e: batch });
        batch = [];
        size = 0;
      }
      if (terminal) break;
    }
    this.end();
  }

  private onControl(data: Uint8Array): void {
    try {
      const m = decodeControl(data);
      if (m.k === "ack") this.acked = this.link.now();
      else this.cancel(m.r);
    } catch {
      // a malformed control message is ignored; the ack watchdog still applies
    }
  }

  /** Cancels the provider's work (forwarder's cancel, silence, shutdown) and ends the stream. */
  cancel(reason: Parameters<Attempt["cancel"]>[0]): void {
    if (this.ended) return;
    this.cancelled = reason;
    this.attempt?.cancel(reason);
    if (this.attempt !== undefined) this.end();
  }

  private tick(): void {
    if (this.link.now() - this.acked > this.link.keepaliveMs * this.link.missedKeepalives) {
      this.cancel("client_gone");
      return;
    }
    if (!this.sentSince) this.send({ s: 0, k: "ka" });
    this.sentSince = false;
  }

  /** Numbers and sends one message (`s` is set here). */
  private send(m: OwnerMessage): void {
    if (this.ended) return;
    this.sentSince = true;
    try {
      this.link.nc.publish(this.reply, encodeOwner({ ...m, s: this.seq++ } as OwnerMessage));
    } catch {
      // connection closing: the forwarder's silence check ends its side
    }
  }

  /** Ends the stream with one `lost` event (the owner's own failure). */
  lost(reason: string): void {
    this.send({ s: 0, k: "ev", e: [{ type: "lost", reason }] });
    this.end();
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    clearInterval(this.timer);
    try {
      this.control?.unsubscribe();
    } catch {
      // already closed
    }
    this.onEnd();
  }
}

/** An event split so that each piece's JSON fits `budget` characters (long chunks, long tool arguments). */
function pieces(event: AttemptEvent, budget: number): AttemptEvent[] {
  const step = Math.max(1024, Math.floor(budget / 8));
  if (event.type === "chunk" && JSON.stringify(event).length > budget) {
    const out: AttemptEvent[] = [];
    for (const key of ["reasoning_content", "content"] as const) {
      const text = event.delta[key] ?? "";
      for (let i = 0; i < text.length; i += step) out.push({ type: "chunk", delta: { [key]: text.slice(i, i + step) } });
    }
    return out;
  }
  if (event.type === "tool_call" && JSON.stringify(event).length > budget) {
    const { arguments: args = "", ...head } = event.call;
    const out: AttemptEvent[] = [{ type: "tool_call", call: { ...head, arguments: args.slice(0, step) } }];
    for (let i = step; i < args.length; i += step)
      out.push({ type: "tool_call", call: { index: head.index, arguments: args.slice(i, i + step) } });
    return out;
  }
  return [event];
}
