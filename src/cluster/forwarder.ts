/**
 * The forwarder side: a dispatch to a provider connected to another replica, returned as an Attempt the
 * dispatcher and the response writer consume as they consume a local one (same events, same `cancel`).
 *
 * The request goes to `<prefix>.prov.<providerId>` (wire.ts) with this attempt's inbox as reply subject;
 * the owner's messages are checked in order: a "no responders" status, a malformed message, a gap in
 * `s`, or silence for `missedKeepalives` periods ends the attempt with `lost` (before first content the
 * dispatcher fails over; after it the writer sends its one in-band error) and tells the owner to cancel.
 * An owner's refusal is `error` busy/draining (capacity) or `lost`. While open, the forwarder acks every
 * keepalive period on the control subject (the owner cancels the provider when acks stop);
 * `attempt.cancel(reason)` sends the cancel there.
 */
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { Attempt, type AttemptOwner, outputCharLimit } from "../fleet/attempt.ts";
import type { CancelReason, Inference } from "../protocol/frames.ts";
import { ProtocolError } from "../protocol/parse.ts";
import { chunkRequest, decodeOwner, encodeControl, type OwnerMessage, subjects } from "./wire.ts";

export interface ClusterLink {
  readonly nc: NatsConnection;
  /** Subject prefix of this cluster (tests: one per test). */
  readonly prefix: string;
  /** Keepalive and ack period (ms) of forwarded streams. */
  readonly keepaliveMs: number;
  /** Periods without a message after which the other side is taken for dead. */
  readonly missedKeepalives: number;
  readonly now: () => number;
  /** The forwarded streams open now, told at once when the connection drops (ClusterNode). */
  readonly open?: Set<{ disconnected(): void }>;
}

/** The provider a forwarded attempt is for (from another replica's digest). */
export interface RemoteTarget {
  readonly providerId: string;
  readonly accountId: string;
  /** The provider's device token id, when its replica's digest names it (usage rows name it). */
  readonly deviceTokenId?: string;
}

/** Sends one attempt to the replica that owns `target`; never throws (failures are events). */
export function forward(link: ClusterLink, target: RemoteTarget, frame: Inference): Attempt {
  const stream = new ForwardedStream(link, target, frame);
  if (!stream.closed) link.open?.add(stream);
  return stream.attempt;
}

class ForwardedStream implements AttemptOwner {
  readonly attempt: Attempt;
  private readonly sub: Subscription;
  private readonly control: string;
  private next = 0;
  private heard: number;
  private timer: ReturnType<typeof setInterval> | undefined;
  /** Released: its attempt ended (at once, when the request could not be sent). */
  closed = false;

  /** The serving machine's device token id, as its replica's digest told it (AttemptOwner). */
  get deviceTokenId(): string | undefined {
    return this.target.deviceTokenId;
  }

  constructor(
    private readonly link: ClusterLink,
    private readonly target: RemoteTarget,
    frame: Inference,
  ) {
    const bounds = { maxOutputChars: outputCharLimit(frame.request.max_tokens) };
    this.attempt = new Attempt(frame.request_id, frame.attempt, target.providerId, target.accountId, link.now(), this, bounds);
    this.control = subjects.control(link.prefix, frame.request_id, frame.attempt);
    this.heard = link.now();
    const inbox = `_INBOX.${link.prefix}.${crypto.randomUUID().replaceAll("-", "")}`;
    this.sub = link.nc.subscribe(inbox, { callback: (err, msg) => (err ? this.fail("inbox closed") : this.onMessage(msg)) });
    this.timer = setInterval(() => this.tick(), link.keepaliveMs);
    try {
      const parts = chunkRequest(
        {
          id: frame.request_id,
          attempt: frame.attempt,
          build: frame.model,
          deadlineMs: frame.first_content_deadline_ms,
          body: frame.request,
        },
        link.nc.info?.max_payload ?? 1024 * 1024,
      );
      const subject = subjects.provider(link.prefix, target.providerId);
      for (const part of parts) link.nc.publish(subject, part, { reply: inbox });
    } catch {
      this.fail("request not sent");
    }
  }

  private onMessage(msg: { readonly data: Uint8Array; readonly headers?: { readonly code: number } }): void {
    if (this.closed) return;
    this.heard = this.link.now();
    if (msg.headers !== undefined && msg.headers.code === 503) {
      this.fail("no responders: the provider's replica is gone");
      return;
    }
    let m: OwnerMessage;
    try {
      m = decodeOwner(msg.data);
    } catch (e) {
      this.fail(e instanceof ProtocolError ? `malformed message from the owner: ${e.message}` : "malformed message from the owner");
      return;
    }
    if (m.s !== this.next) {
      this.fail(`stream gap: message ${m.s}, expected ${this.next}`);
      return;
    }
    this.next++;
    if (m.k === "no") {
      if (m.why === "capacity" || m.why === "draining")
        this.attempt.push({ type: "error", code: m.why === "capacity" ? "busy" : "draining" });
      else this.attempt.push({ type: "lost", reason: `refused by the owner: ${m.why}` });
      return;
    }
    if (m.k === "ok") {
      // Earnings and self-routing follow the digest's account: a provider of another account is not it.
      if (m.acct !== this.target.accountId) this.fail("the owner's provider belongs to another account");
      return;
    }
    if (m.k !== "ev") return;
    const now = this.link.now();
    for (const event of m.e) {
      if (event.type === "accepted") this.attempt.accepted(now);
      else if (event.type === "chunk") {
        this.attempt.countDelta(event.delta); // the owner enforced the budget; counted for `relayed`
        this.attempt.relay(event, now);
      } else if (event.type === "tool_call") {
        this.attempt.countToolCall(event.call);
        this.attempt.relay(event, now);
      } else this.attempt.push(event);
    }
  }

  /** Every keepalive period: ack what arrived, or give up on a silent owner. */
  private tick(): void {
    if (this.closed) return;
    if (this.link.now() - this.heard > this.link.keepaliveMs * this.link.missedKeepalives) {
      this.fail("the owner replica stopped answering");
      return;
    }
    this.send({ k: "ack", s: this.next - 1 });
  }

  /** The NATS connection dropped: nothing more can arrive (failover before first content, else one error). */
  disconnected(): void {
    this.fail("the NATS connection dropped");
  }

  /** The stream broke: the owner is told to cancel, the attempt ends with `lost`. */
  private fail(reason: string): void {
    if (this.closed) return;
    this.send({ k: "cancel", r: "failover" });
    this.attempt.push({ type: "lost", reason });
  }

  private send(m: Parameters<typeof encodeControl>[0]): void {
    try {
      this.link.nc.publish(this.control, encodeControl(m));
    } catch {
      // connection closed: the owner's ack watchdog cancels
    }
  }

  /** AttemptOwner: the attempt ended (terminal event) or was cancelled (`cancel` given). */
  release(_attempt: Attempt, cancel: CancelReason | undefined): void {
    if (this.closed) return;
    if (cancel !== undefined) this.send({ k: "cancel", r: cancel });
    this.closed = true;
    this.link.open?.delete(this);
    clearInterval(this.timer);
    this.timer = undefined;
    try {
      this.sub.unsubscribe();
    } catch {
      // already closed
    }
  }
}
