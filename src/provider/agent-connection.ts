/**
 * The agent's link to the coordinator (agent.ts): one WebSocket at a time, dialled again after every loss
 * until the agent stops. Before each dial `pin()` (--coordinator-image) checks the coordinator's
 * attestation; a refusal is logged as an error and retried after the longest backoff, and nothing is sent
 * to that coordinator. Backoff, refusals and the closes that end the agent: docs/protocol.md, "Close codes".
 * Frames sent on a connection whose welcome says `batch_frames` leave one event-loop turn at a time as one
 * message (a JSON array, in order): each message has a fixed cost on both sides (bench/HISTORY.md). When
 * it also says `binary_frames`, that message is a binary batch (src/protocol/binary.ts): sealed frames as
 * their bytes, without base64url or JSON around them.
 */
import type { Logger } from "../observability/logger.ts";
import { BinaryBatch, frameJson } from "../protocol/binary.ts";
import { CLOSE, encodeBatch, MAX_BATCH_CHARS, MAX_BATCH_FRAMES, PROTOCOL_VERSION, type ProviderFrame } from "../protocol/frames.ts";
import type { AgentExit } from "./agent-state.ts";
import { CoordinatorRefused, type PinnedCoordinator, type PinnedTls } from "./coordinator-pin.ts";
import { atTurnEnd } from "./turn-end.ts";

export interface ConnectionOptions {
  /** `ws(s)://.../v1/provider/connect`. */
  readonly url: string;
  readonly token: string;
  /** Reconnect backoff: first delay and ceiling, in ms (default 250 and 30000). */
  readonly backoff?: { readonly initialMs?: number; readonly maxMs?: number };
  /** Jitter source in [0, 1); the delay is scaled by 0.5 + 0.5 * random(). */
  readonly random?: () => number;
  /** Close and retry when no welcome arrives within this many ms of dialing; default 15 s. */
  readonly welcomeTimeoutMs?: number;
  /**
   * Called before each dial: verifies the coordinator's attestation and returns the TLS options that pin
   * its attested key (coordinator-pin.ts). A CoordinatorRefused is logged as an error and retried after
   * the longest backoff; nothing is sent to a coordinator that failed it.
   */
  readonly pin?: () => Promise<PinnedCoordinator>;
}

/** What the connection tells the agent that owns it. */
export interface ConnectionEvents {
  /** The current socket opened: send the hello. */
  readonly opened: (ws: WebSocket) => void;
  /** A message arrived on `ws` (possibly no longer the current socket). */
  readonly message: (ws: WebSocket, data: unknown) => void;
  /** The current socket is gone. False when the agent is stopping (it then finishes itself): no redial. */
  readonly lost: (code: number, reason: string) => boolean;
  /** After a pin, before the dial: false when the agent is draining (it then finishes itself). */
  readonly mayDial: () => boolean;
  /** The coordinator ended the agent for good (device token refused, protocol version). */
  readonly fatal: (exit: AgentExit) => void;
  readonly changed: () => void;
}

/**
 * How a frame leaves: alone (before the welcome, or to a coordinator that takes no batches), in this turn's
 * JSON batch (`batch_frames`), or in this turn's binary batch (`binary_frames`).
 */
export type SendMode = "one" | "batch" | "binary";

/**
 * A binary batch takes no more frames once it holds this many bytes: one more frame (a sealed chunk is at
 * most 256 KiB and 16 bytes; a JSON frame that is not a hello far less) keeps it under MAX_FRAME_BYTES.
 */
const MAX_BINARY_BATCH_BYTES = 512 * 1024;

/** How long a graceful close waits for the coordinator to acknowledge it before giving up on it. */
const CLOSE_GRACE_MS = 2_000;

export class AgentConnection {
  private readonly initialBackoff: number;
  private readonly maxBackoff: number;
  private readonly random: () => number;
  private ws: WebSocket | undefined;
  private stopped = false;
  private upgradeStatus: number | undefined;
  private welcomeTimer: ReturnType<typeof setTimeout> | undefined;
  private reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  private closeWaiter: (() => void) | undefined;
  private failedDials = 0;
  /** Why the coordinator is refused (its attestation failed a check); cleared by a welcome. */
  private refusedBecause: string | undefined;
  /** The attested TLS key of the last verified attestation (logged when it changes). */
  private pinnedKey: string | undefined;
  /** A TLS failure is explained once per run of failed dials (reset by a welcome). */
  private tlsWarned = false;
  /** Frames of this event-loop turn waiting to leave as one message (JSON or binary), and the connection they are for. */
  private outbox: string[] = [];
  private outboxChars = 0;
  private readonly binaryOutbox = new BinaryBatch();
  private outboxWs: WebSocket | undefined;
  private flushScheduled = false;

  constructor(
    private readonly options: ConnectionOptions,
    private readonly logger: Logger,
    private readonly events: ConnectionEvents,
  ) {
    this.initialBackoff = options.backoff?.initialMs ?? 250;
    this.maxBackoff = options.backoff?.maxMs ?? 30_000;
    this.random = options.random ?? Math.random;
  }

  /** The socket of the current connection, if any. */
  get current(): WebSocket | undefined {
    return this.ws;
  }

  /** Dials since the last welcome. */
  get failures(): number {
    return this.failedDials;
  }

  get refusal(): string | undefined {
    return this.refusedBecause;
  }

  /** Pins (when configured), then dials. */
  connect(): void {
    if (this.stopped) return;
    this.reconnectTimer = undefined;
    this.upgradeStatus = undefined;
    const pin = this.options.pin;
    if (pin === undefined) {
      this.dial(undefined);
      return;
    }
    pin().then(
      (pinned) => {
        if (this.stopped || !this.events.mayDial()) return;
        if (this.pinnedKey !== pinned.keySha256) {
          this.pinnedKey = pinned.keySha256;
          this.logger.info("coordinator attestation verified; TLS key pinned", {
            shape: pinned.shape ?? undefined,
            tls_spki_sha256: pinned.keySha256,
            mode: pinned.development ? "development evidence" : undefined,
          });
        }
        this.dial(pinned.tls);
      },
      (error: unknown) => {
        if (this.stopped || !this.events.mayDial()) return;
        if (error instanceof CoordinatorRefused) {
          this.refusedBecause = error.message;
          this.logger.error("refusing the coordinator: its attestation failed a check; retrying later", {
            check: error.check,
            reason: error.message,
          });
          this.retry(this.maxBackoff);
        } else {
          this.logger.debug("cannot fetch the coordinator's attestation", { reason: String((error as Error)?.message ?? error) });
          this.retry(this.nextBackoff());
        }
      },
    );
  }

  /** The welcome arrived: no welcome timeout any more, and the backoff and refusal start over. */
  welcomed(): void {
    clearTimeout(this.welcomeTimer);
    this.failedDials = 0;
    this.refusedBecause = undefined;
    this.tlsWarned = false;
  }

  /**
   * Sends a frame on `ws` if it is still the current, open socket: alone, or queued (SendMode) to leave
   * with the rest of this event-loop turn's frames, in order. Returns false when not sent.
   */
  send(ws: WebSocket, frame: ProviderFrame, mode: SendMode): boolean {
    if (this.ws !== ws || ws.readyState !== WebSocket.OPEN) return false;
    if (mode === "one") {
      ws.send(frameJson(frame));
      return true;
    }
    if (this.outboxWs !== ws) {
      this.outbox = [];
      this.outboxChars = 0;
      this.binaryOutbox.clear();
      this.outboxWs = ws;
    }
    if (mode === "binary") {
      const full = this.binaryOutbox.size >= MAX_BINARY_BATCH_BYTES || this.binaryOutbox.count >= MAX_BATCH_FRAMES;
      if (this.outbox.length > 0 || full) this.flush(ws);
      this.binaryOutbox.add(frame);
    } else {
      const text = frameJson(frame);
      const full = this.outboxChars + text.length > MAX_BATCH_CHARS || this.outbox.length >= MAX_BATCH_FRAMES;
      if (this.binaryOutbox.count > 0 || full) this.flush(ws);
      this.outbox.push(text);
      this.outboxChars += text.length;
    }
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      // After the turn's attempt flushes, in their pass (turn-end.ts); no closure per frame sent.
      atTurnEnd(AgentConnection.flushTurn, this, undefined);
    }
    return true;
  }

  /** The end of a turn: what the outbox holds leaves as one message. */
  private static flushTurn(self: AgentConnection): void {
    self.flushScheduled = false;
    if (self.outboxWs) self.flush(self.outboxWs);
  }

  /** Closes `ws` from our side and handles the loss at once (without waiting for the close handshake). */
  drop(ws: WebSocket, code: number, reason: string): void {
    this.flush(ws);
    try {
      ws.close(code, reason.slice(0, 120));
    } catch {
      // already closing
    }
    this.closed(ws, code, reason);
  }

  /** Closes `ws` with 1000 after its queued frames; resolves when the coordinator acknowledged or after a grace. */
  async closeGracefully(ws: WebSocket): Promise<void> {
    if (this.ws !== ws || ws.readyState !== WebSocket.OPEN) return;
    const closed = new Promise<void>((resolve) => {
      this.closeWaiter = resolve;
    });
    this.flush(ws);
    ws.close(CLOSE.normal, "drained");
    const grace = setTimeout(() => this.closeWaiter?.(), CLOSE_GRACE_MS);
    await closed;
    clearTimeout(grace);
  }

  /** For good: no redial; the current socket (if any) gets its queued frames, then a close with `code`. */
  stop(code: number, reason: string): void {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.welcomeTimer);
    const ws = this.ws;
    if (ws) this.flush(ws);
    this.ws = undefined;
    if (ws && (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING)) {
      try {
        ws.close(code, reason);
      } catch {
        // already closing
      }
    }
  }

  private dial(tls: PinnedTls | undefined): void {
    const ws = new WebSocket(this.options.url, {
      headers: { authorization: `Bearer ${this.options.token}` },
      ...(tls !== undefined ? { tls } : {}),
    });
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    // Cleared by the welcome (welcomed()).
    this.welcomeTimer = setTimeout(() => {
      if (this.ws === ws) this.drop(ws, CLOSE.timeout, "no welcome in time");
    }, this.options.welcomeTimeoutMs ?? 15_000);
    ws.onopen = () => {
      if (this.ws === ws) this.events.opened(ws);
    };
    ws.onmessage = (event: MessageEvent) => {
      const data: unknown = event.data;
      this.events.message(ws, data);
    };
    ws.onerror = (event: Event) => {
      // A refused upgrade surfaces only as an error message ("Expected 101 status code: 401").
      const message = event instanceof ErrorEvent ? event.message : "";
      const status = /\b101 status code:? (\d{3})/.exec(message)?.[1];
      if (status !== undefined) this.upgradeStatus = Number(status);
      if (/TLS handshake failed|certificate/i.test(message) && !this.tlsWarned) {
        this.tlsWarned = true;
        const hint = this.options.pin
          ? "the coordinator's key is not the one its attestation bound (restarted?); the next dial verifies again"
          : "a coordinator with a self-signed certificate is trusted through its attestation: give --coordinator-image with the image's measurements.json";
        this.logger.warn(`TLS with the coordinator failed: ${hint}`, { reason: message });
      }
    };
    ws.onclose = (event: CloseEvent) => this.closed(ws, event.code, event.reason);
  }

  private closed(ws: WebSocket, code: number, reason: string): void {
    if (this.closeWaiter && this.ws === ws) {
      const resolve = this.closeWaiter;
      this.closeWaiter = undefined;
      resolve();
    }
    if (this.ws !== ws) return;
    this.ws = undefined;
    clearTimeout(this.welcomeTimer);
    if (!this.events.lost(code, reason)) return;
    if (code === CLOSE.unauthorized || this.upgradeStatus === 401 || this.upgradeStatus === 403) {
      this.events.fatal({
        reason: "unauthorized",
        message: `the coordinator refused the device token (${code === CLOSE.unauthorized ? `close ${code}` : `HTTP ${this.upgradeStatus}`}); check --token`,
      });
      return;
    }
    if (code === CLOSE.version) {
      this.events.fatal({
        reason: "version",
        message: `the coordinator does not speak protocol version ${PROTOCOL_VERSION} (close ${code}); upgrade umbra-provider`,
      });
      return;
    }
    // A refusal will not change within a few hundred milliseconds: wait the longest backoff at once.
    const refusal =
      code === CLOSE.tooManySessions || this.upgradeStatus === 429
        ? "the coordinator refused another session for this device token (too many open); retrying later"
        : code === CLOSE.untrusted
          ? "the coordinator admits attested providers only and refused this machine's evidence; retrying later"
          : undefined;
    const delay = this.retry(refusal ? this.maxBackoff : this.nextBackoff());
    if (refusal) this.logger.warn(refusal, { status: this.upgradeStatus ?? code, reason: reason.slice(0, 120), duration_ms: delay });
  }

  /** Sends what the outbox holds for `ws` as one message; drops it when `ws` is no longer ours. */
  private flush(ws: WebSocket): void {
    if (this.outboxWs !== ws) return;
    const open = this.ws === ws && ws.readyState === WebSocket.OPEN;
    if (this.outbox.length > 0) {
      const frames = this.outbox;
      this.outbox = [];
      this.outboxChars = 0;
      if (open) ws.send(encodeBatch(frames));
    }
    if (this.binaryOutbox.count > 0) {
      const message = this.binaryOutbox.take();
      if (open) ws.send(message);
    }
  }

  /** The next dial's backoff before jitter: doubling from the first, up to the ceiling. */
  private nextBackoff(): number {
    return Math.min(this.maxBackoff, this.initialBackoff * 2 ** Math.min(this.failedDials, 30));
  }

  /** Schedules the next dial after `base` ms (jittered); returns the delay. */
  private retry(base: number): number {
    const delay = Math.round(base * (0.5 + 0.5 * this.random()));
    this.failedDials++;
    if (this.failedDials === 1) this.logger.info("reconnecting", { duration_ms: delay, count: this.failedDials });
    else this.logger.debug("reconnecting", { duration_ms: delay, count: this.failedDials });
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
    this.events.changed();
    return delay;
  }
}
