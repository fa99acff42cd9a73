/**
 * One connected provider: the connection's state machine, capacity, and its in-flight attempts.
 *
 * States: awaiting_hello -> verifying (admission.ts) -> ready -> closed. A malformed or out-of-order frame (anything before
 * welcome, a second hello, a frame for an attempt never dispatched here, or one its attempt refuses: attempt-frames.ts) ends
 * the session with a logged reason, and every attempt still open on it receives `lost` so its request can fail over. Frames
 * for attempts the coordinator cancelled cross in flight and are ignored. Invalid output fails its attempt (`invalid`) and
 * ends the session. Trust after welcome: session-trust.ts. `active` counts attempts assigned and not yet released: the
 * authoritative load, whatever heartbeats report. Other files read the session through getters.
 */
import type { AttestationError } from "../../attestation/provider/errors.ts";
import type { DeviceChainVouch, ProviderAttestation, TrustLevel } from "../../attestation/provider/levels.ts";
import { type UsageBound, type UsageLimits, usageLimits } from "../billing/usage-bounds.ts";
import type { Logger } from "../observability/logger.ts";
import { parseProviderData } from "../protocol/binary.ts";
import {
  type CancelReason,
  CLOSE,
  encode,
  type Hello,
  type Inference,
  type ProviderFrame,
  type ProviderStatus,
  type ServedModel,
} from "../protocol/frames.ts";
import { ProtocolError } from "../protocol/parse.ts";
import { type AdmissionSettings, admit, checkHello, logWelcome } from "./admission.ts";
import { Attempt, type AttemptOwner, attemptKey, outputCharLimit } from "./attempt.ts";
import { applyAttemptFrame, type FrameContext, type FrameOutcome } from "./attempt-frames.ts";
import type { FleetLoad } from "./fleet-load.ts";
import { SealedChannel } from "./sealed-channel.ts";
import { SessionTrust } from "./session-trust.ts";

/** A request the coordinator could not serialize for a provider (its own failure: answered 500). */
export class RequestEncodingError extends Error {
  override readonly name = "RequestEncodingError";
}

export interface SessionTransport {
  send(text: string): void;
  close(code: number, reason: string): void;
}

export interface SessionIdentity {
  readonly accountId: string;
  readonly tokenId: string;
  /** When the device token expires (Unix ms): the fleet's sweep ends the session then. Null: never. */
  readonly tokenExpiresAt: number | null;
}

export interface SessionHooks {
  /** The session said hello and was welcomed: index it. */
  onReady(session: ProviderSession): void;
  /** The session ended: drop it from every index. */
  onClosed(session: ProviderSession): void;
  /** A slot became free on this session: a waiting request may take it. */
  onSlotFreed(session: ProviderSession): void;
  /** The session's trust level changed after welcome (withdrawn, vouched, lapsed): what the public list shows moved. */
  onTrustChanged(session: ProviderSession): void;
  /** The stored chain that vouched for the session lapsed (its acceptedUntil passed): ask for a fresh one. */
  onVouchLapsed?(session: ProviderSession): void;
}

export interface SessionSettings extends AdmissionSettings {
  /** A provider reported usage beyond a bound (its answer failed, the session ends): metrics. */
  readonly onUsageRejected?: (bound: UsageBound) => void;
  /** The attempts running over every session of the fleet (receipts are verified inline while it is quiet). */
  readonly load?: FleetLoad;
}

type State = "awaiting_hello" | "verifying" | "ready" | "closed";

/** How many cancelled attempt keys a session remembers to ignore their late frames. */
const RECENT_LIMIT = 4096;
/** Weight of the newest sample in the first-content latency average. */
const EWMA_WEIGHT = 0.2;

export class ProviderSession implements AttemptOwner {
  private state: State = "awaiting_hello";
  private readonly attempts = new Map<string, Attempt>();
  private readonly recent = new Set<string>();
  /** Attempts whose receipt is being verified (attempt-frames.ts): complete as far as the provider is concerned. */
  private readonly verifying = new Set<Attempt>();
  private readonly served = new Map<string, ServedModel>();
  private capacity = 0;
  /** The hello offered binary batches (the welcome agrees): bytes are read as one (parseProviderData). */
  private binaryFrames = false;
  private assigned = 0;
  private reported: { readonly status: ProviderStatus; readonly warm: ReadonlySet<string> } = { status: "idle", warm: new Set() };
  private key: Uint8Array | undefined;
  private channel: SealedChannel | undefined;
  private readonly earned = new SessionTrust();
  private readonly frameContext: FrameContext;
  private seen: number;
  private latency: number | undefined;
  /** When the connection opened (Unix ms). */
  readonly connectedAt: number;

  constructor(
    readonly id: string,
    readonly identity: SessionIdentity,
    private readonly transport: SessionTransport,
    private readonly hooks: SessionHooks,
    private readonly settings: SessionSettings,
    private readonly logger: Logger,
    private readonly now: () => number,
  ) {
    this.seen = now();
    this.connectedAt = this.seen;
    this.frameContext = { now, signer: this, onUsageRejected: settings.onUsageRejected, inlineReceipts: settings.load?.quiet };
  }

  get ready(): boolean {
    return this.state === "ready";
  }

  /** Its device token's id: what usage rows name as the serving provider (AttemptOwner). */
  get deviceTokenId(): string {
    return this.identity.tokenId;
  }

  get closed(): boolean {
    return this.state === "closed";
  }

  /** The models the hello offered, by build id (aliases and unknown ids included; never asked for). */
  get models(): ReadonlyMap<string, ServedModel> {
    return this.served;
  }

  get maxConcurrency(): number {
    return this.capacity;
  }

  /** Attempts assigned and not yet released. */
  get active(): number {
    return this.assigned;
  }

  get freeSlots(): number {
    return Math.max(0, this.capacity - this.assigned);
  }

  /** The last heartbeat's status. */
  get draining(): boolean {
    return this.reported.status === "draining";
  }

  /** The builds the last heartbeat reported loaded. */
  get warm(): ReadonlySet<string> {
    return this.reported.warm;
  }

  /** The provider's X25519 key for this connection; undefined for a plaintext (development) session. */
  get encryptionKey(): Uint8Array | undefined {
    return this.key;
  }

  get trust(): TrustLevel {
    return this.earned.level;
  }

  /** What the hello's evidence proved (undefined until welcomed; level `none` once withdrawn). */
  get attestation(): ProviderAttestation | undefined {
    return this.earned.attestation;
  }

  /** When the last frame arrived (Unix ms). */
  get lastSeen(): number {
    return this.seen;
  }

  /** Exponentially weighted first-content latency in ms; undefined until a sample exists. */
  get firstContentMs(): number | undefined {
    return this.latency;
  }

  /** Handles one frame from the provider; never throws. */
  onFrame(data: string | Buffer | ArrayBuffer | Uint8Array): void {
    if (this.state === "closed") return;
    this.seen = this.now();
    try {
      for (const frame of parseProviderData(data, this.binaryFrames)) {
        // A frame earlier in the batch may have ended the session (apply changes `state`).
        if (this.closed) return;
        this.apply(frame);
      }
    } catch (e) {
      const reason = e instanceof ProtocolError ? e.message : "internal error handling a frame";
      this.terminate(CLOSE.protocolError, reason);
    }
  }

  private apply(frame: ProviderFrame): void {
    if (this.state === "awaiting_hello") {
      if (frame.type !== "hello") throw new ProtocolError(`expected hello, got ${frame.type}`);
      const checked = checkHello(frame, this.settings);
      if ("code" in checked) {
        this.terminate(checked.code, checked.reason);
        return;
      }
      this.key = checked.encryptionKey;
      this.channel = this.key === undefined ? undefined : new SealedChannel(this.key);
      for (const m of frame.models) this.served.set(m.build_id, m);
      this.capacity = frame.max_concurrency;
      this.binaryFrames = frame.binary_frames === true;
      // Verifying evidence is asynchronous (certificate chains); the provider waits for `welcome`.
      this.state = "verifying";
      void this.admit(frame);
      return;
    }
    if (this.state === "verifying") throw new ProtocolError(`${frame.type} before welcome`);
    this.applyReady(frame);
  }

  /** Admission (admission.ts), then the welcome at the level the evidence earned. */
  private async admit(frame: Hello): Promise<void> {
    const welcome = await admit(frame, this.key, { id: this.id, waiting: () => this.state === "verifying" }, this.settings);
    if (welcome === undefined || this.state !== "verifying") return; // closed meanwhile
    if ("code" in welcome) {
      this.terminate(welcome.code, welcome.reason);
      return;
    }
    if (this.key !== undefined && welcome.sessionSealer !== undefined) this.channel = new SealedChannel(this.key, welcome.sessionSealer);
    this.earned.earned(welcome.attestation, welcome.challenges);
    this.state = "ready";
    this.transport.send(welcome.frame);
    logWelcome(this.logger, { id: this.id, accountId: this.identity.accountId, models: this.served.size }, welcome);
    this.hooks.onReady(this);
  }

  private applyReady(frame: ProviderFrame): void {
    switch (frame.type) {
      case "hello":
        throw new ProtocolError("second hello");
      case "heartbeat":
        this.reported = { status: frame.status, warm: new Set(frame.warm_models) };
        return;
      case "challenge_response":
        this.withdrawn(this.earned.answer(frame));
        return;
      default: {
        const key = attemptKey(frame.request_id, frame.attempt);
        const attempt = this.attempts.get(key);
        if (!attempt || this.verifying.has(attempt)) {
          if (this.recent.has(key)) return; // crossed our cancel in flight
          throw new ProtocolError(`${frame.type} for an attempt not dispatched to this provider`);
        }
        const outcome = applyAttemptFrame(attempt, frame, this.frameContext);
        if (outcome instanceof Promise) this.awaitReceipt(attempt, outcome);
        else this.applyOutcome(attempt, outcome);
      }
    }
  }

  private applyOutcome(attempt: Attempt, outcome: FrameOutcome): void {
    if (outcome.invalid !== undefined) this.untrust(attempt, outcome.invalid);
    else if (outcome.firstContentMs !== undefined) this.noteFirstContent(outcome.firstContentMs);
  }

  /**
   * A receipt on the thread pool: the attempt ends with its verdict, as if the check were synchronous.
   * Meanwhile a frame for it is one for an attempt already ended, and a close does not fail it.
   */
  private awaitReceipt(attempt: Attempt, verdict: Promise<FrameOutcome>): void {
    this.verifying.add(attempt);
    void verdict.then((outcome) => {
      this.verifying.delete(attempt);
      this.applyOutcome(attempt, outcome);
    });
  }

  /**
   * Challenge duty, called by the fleet's sweep: sends a due challenge, and withdraws trust at once when
   * an answer is overdue (the session stays connected at level `none`, below any production floor).
   */
  pollChallenges(): void {
    if (this.state !== "ready") return;
    if (this.earned.expire(this.now())) {
      this.logger.info("provider device chain lapsed", { provider_id: this.id, status: this.trust });
      this.hooks.onTrustChanged(this);
      this.hooks.onVouchLapsed?.(this);
    }
    const { due, withdrawn } = this.earned.poll();
    this.withdrawn(withdrawn);
    if (due === undefined) return;
    try {
      this.transport.send(due);
    } catch {
      // the close handler deals with a dead connection
    }
  }

  /** The stored chain now vouching for this session's identity key (the fleet's device trust), or none. */
  vouch(vouch: DeviceChainVouch | undefined): void {
    if (this.state !== "ready" || !this.earned.vouch(vouch, this.now())) return;
    this.logger.info("provider trust from its device chain", { provider_id: this.id, status: this.trust });
    this.hooks.onTrustChanged(this);
  }

  private withdrawn(error: AttestationError | undefined): void {
    if (error === undefined) return;
    this.logger.warn("provider trust withdrawn", { provider_id: this.id, reason: error.check });
    this.hooks.onTrustChanged(this);
  }

  /** A first-content latency sample (ms) joins the average. */
  private noteFirstContent(sample: number): void {
    this.latency = this.latency === undefined ? sample : this.latency * (1 - EWMA_WEIGHT) + sample * EWMA_WEIGHT;
  }

  /** Invalid output: fail the attempt with `invalid` and end the session (the provider is untrusted). */
  private untrust(attempt: Attempt, reason: string): void {
    attempt.push({ type: "invalid", reason });
    this.terminate(CLOSE.protocolError, reason);
  }

  /**
   * Sends one attempt of a request and returns it; the caller checked `freeSlots`. `limits` are the
   * request's usage bounds (computed once per request by the caller). The slot is taken at once. A
   * sealed session seals the request first (sealed-channel.ts) and opens the answer with its response key.
   * Throws RequestEncodingError, before taking the slot, when the request cannot be serialized: the
   * coordinator's own failure, never counted against the provider (no `lost`, no failover).
   */
  async dispatch(frame: Inference, limits: UsageLimits = usageLimits(frame.request)): Promise<Attempt> {
    const channel = this.channel;
    let serialized: string;
    try {
      serialized = channel === undefined ? encode(frame) : JSON.stringify(frame.request);
    } catch {
      throw new RequestEncodingError("the request could not be serialized for its provider");
    }
    const bounds = { maxOutputChars: outputCharLimit(frame.request.max_tokens), limits };
    const attempt = new Attempt(frame.request_id, frame.attempt, this.id, this.identity.accountId, this.now(), this, bounds);
    if (channel !== undefined) attempt.expectSealed(); // no plaintext answer even while the request is being sealed
    this.attempts.set(attempt.key, attempt);
    this.assigned++;
    if (this.settings.load) this.settings.load.running++;
    try {
      if (channel === undefined) {
        this.transport.send(serialized);
        return attempt;
      }
      // Under session keys sealing is synchronous from counter to send, so the provider sees n in order.
      const pending = channel.seal(frame, serialized);
      const sealed = pending instanceof Promise ? await pending : pending;
      if (attempt.done) return attempt; // cancelled or the session ended while sealing
      attempt.sealWith(sealed.seal);
      this.transport.send(sealed.text);
    } catch {
      attempt.push({ type: "lost", reason: "send failed" });
    }
    return attempt;
  }

  /** AttemptOwner: frees the slot, remembers the key, tells the provider when cancelling. */
  release(attempt: Attempt, cancel: CancelReason | undefined): void {
    if (!this.attempts.delete(attempt.key)) return;
    this.assigned--;
    if (this.settings.load) this.settings.load.running--;
    if (this.state !== "closed") this.hooks.onSlotFreed(this);
    if (cancel === undefined) return;
    this.remember(attempt.key);
    if (this.state !== "closed") {
      try {
        this.transport.send(encode({ type: "cancel", request_id: attempt.requestId, attempt: attempt.attempt, reason: cancel }));
      } catch {
        // The connection is going away; its close handler fails the rest.
      }
    }
  }

  private remember(key: string): void {
    const oldest = this.recent.size >= RECENT_LIMIT ? this.recent.values().next().value : undefined;
    if (oldest !== undefined) this.recent.delete(oldest);
    this.recent.add(key);
  }

  /** Ends the session from our side (protocol violation, liveness, shutdown). */
  terminate(code: number, reason: string): void {
    if (this.state === "closed") return;
    this.logger.warn("provider session ended", { provider_id: this.id, reason, status: code });
    try {
      this.transport.close(code, reason.slice(0, 120));
    } catch {
      // already gone
    }
    this.onTransportClosed();
  }

  /** The connection closed (either side): fail open attempts, unindex. Idempotent. */
  onTransportClosed(): void {
    if (this.state === "closed") return;
    this.state = "closed";
    for (const attempt of [...this.attempts.values()]) {
      if (!this.verifying.has(attempt)) attempt.push({ type: "lost", reason: "provider disconnected" });
    }
    this.hooks.onClosed(this);
  }
}
