/**
 * One connected provider: protocol state machine, capacity, and its in-flight attempts.
 *
 * States: awaiting_hello -> ready -> (draining) -> closed. The first frame must be `hello` offering
 * protocol version 2 (one offering only version 1 is refused with 4002, RETIRED_V1_REASON); then
 * heartbeats and attempt frames. Any malformed or out-of-order frame (second hello, a frame for an
 * attempt never dispatched here, chunk or tool_call before accepted, a seq gap over chunk and tool_call
 * frames, a tool call out of order, a frame after the attempt's terminal frame) ends the session with a
 * logged reason, and every attempt
 * still open on it receives `lost` so its request can fail over. Frames for attempts the coordinator
 * cancelled are expected (they cross in flight) and ignored. Hello models that are not catalog builds
 * (an alias, an unknown id) get no requests: the welcome names them (`model_warnings`).
 *
 * `active` counts attempts the coordinator assigned and not yet released: it is the authoritative load,
 * independent of what heartbeats report. Output text (tool calls included) far beyond an attempt's
 * budget (outputCharLimit in attempt.ts) is invalid output, like a frame that fails verification, and so is a `complete` whose usage
 * is beyond what the coordinator can believe (billing/usage-bounds.ts).
 */

import { type ChallengeSession, challengeFields } from "../../attestation/provider/challenge.ts";
import { AttestationError } from "../../attestation/provider/errors.ts";
import { verifyIdentitySignature } from "../../attestation/provider/identity-key.ts";
import { type ProviderAttestation, type TrustLevel, withdrawTrust } from "../../attestation/provider/levels.ts";
import { utf8Bytes } from "../billing/billing.ts";
import { type UsageBound, type UsageLimits, usageLimits, usageViolation } from "../billing/usage-bounds.ts";
import { ChunkOpener } from "../crypto/chunks.ts";
import { fromBase64url, toBase64url, toHex } from "../crypto/encoding.ts";
import { CryptoError } from "../crypto/errors.ts";
import { ResponseDigest, receiptBytes, sha256 } from "../crypto/receipts.ts";
import { sealRequest } from "../crypto/seal.ts";
import { openSenderSession, type SessionSealer } from "../crypto/session.ts";
import type { Logger } from "../observability/logger.ts";
import {
  type CancelReason,
  CLOSE,
  type Delta,
  encode,
  type Hello,
  type Inference,
  type ModelWarning,
  PROTOCOL_VERSION,
  type ProviderFrame,
  type ProviderStatus,
  RETIRED_V1_REASON,
  type ServedModel,
  type ToolCallDelta,
  type Usage,
} from "../protocol/frames.ts";
import { ProtocolError, parseDelta, parseFinal, parseProviderMessage, parseToolCall } from "../protocol/parse.ts";
import { Attempt, type AttemptOwner, attemptKey, deltaChars, outputCharLimit, toolCallChars, type VerifiedReceipt } from "./attempt.ts";

const encoder = new TextEncoder();

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
  /** The session's trust level changed after welcome (withdrawn): what the public list shows moved. */
  onTrustChanged(session: ProviderSession): void;
}

export interface SessionSettings {
  readonly heartbeatIntervalMs: number;
  readonly livenessTimeoutMs: number;
  /** Refuse plaintext sessions (production): every request must be sealed to the provider's key. */
  readonly requireSealed: boolean;
  /**
   * Refuse sessions whose evidence earned trust level `none` (production): closed with 4003 before
   * `welcome`, never admitted (self-route applies the routing floor too, so no path would use them).
   */
  readonly refuseUntrusted: boolean;
  /** The hello's model ids that are not catalog builds (welcome.model_warnings); never throws. */
  readonly modelWarnings: (buildIds: readonly string[]) => Promise<readonly ModelWarning[]>;
  /** Verifies a hello's evidence against its encryption key; never throws (failures earn `none`). */
  readonly assess: (evidence: unknown, encryptionKey: Uint8Array | undefined) => Promise<ProviderAttestation>;
  /** Starts the challenge schedule of an attested provider (the trust policy's interval and timeout). */
  readonly challenge: (attestation: ProviderAttestation) => Promise<ChallengeSession | undefined>;
  /** A provider reported usage beyond a bound (its answer failed, the session ends): metrics. */
  readonly onUsageRejected?: (bound: UsageBound) => void;
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
  hello: Hello | undefined;
  readonly models = new Map<string, ServedModel>();
  maxConcurrency = 0;
  active = 0;
  reportedQueued = 0;
  status: ProviderStatus = "idle";
  warm = new Set<string>();
  /** The provider's X25519 key for this connection; undefined for a plaintext (development) session. */
  encryptionKey: Uint8Array | undefined;
  /** Sealed sessions whose hello offered `session_keys`: seals each request under the session's keys. */
  private sessionSealer: SessionSealer | undefined;
  trust: TrustLevel = "none";
  /** What the hello's evidence proved (trust level `none` until verified, or without evidence). */
  attestation: ProviderAttestation | undefined;
  /** Periodic challenges of an attested provider; a wrong, late or missing answer withdraws its trust. */
  private challenges: ChallengeSession | undefined;
  lastSeen: number;
  /** When the connection opened (Unix ms). */
  readonly connectedAt: number;
  /** Exponentially weighted first-content latency in ms; undefined until a sample exists. */
  firstContentMs: number | undefined;
  served = 0;

  constructor(
    readonly id: string,
    readonly identity: SessionIdentity,
    private readonly transport: SessionTransport,
    private readonly hooks: SessionHooks,
    private readonly settings: SessionSettings,
    private readonly logger: Logger,
    private readonly now: () => number,
  ) {
    this.lastSeen = now();
    this.connectedAt = this.lastSeen;
  }

  get ready(): boolean {
    return this.state === "ready";
  }

  get closed(): boolean {
    return this.state === "closed";
  }

  get draining(): boolean {
    return this.status === "draining";
  }

  get freeSlots(): number {
    return Math.max(0, this.maxConcurrency - this.active);
  }

  serves(buildId: string): boolean {
    return this.models.has(buildId);
  }

  /** Handles one frame from the provider; never throws. */
  onFrame(data: string | Buffer | ArrayBuffer | Uint8Array): void {
    if (this.state === "closed") return;
    this.lastSeen = this.now();
    try {
      for (const frame of parseProviderMessage(data)) {
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
      if (!frame.protocol_versions.includes(PROTOCOL_VERSION)) {
        const reason = frame.protocol_versions.includes(1)
          ? RETIRED_V1_REASON
          : `no supported protocol version (coordinator speaks ${PROTOCOL_VERSION})`;
        this.terminate(CLOSE.version, reason);
        return;
      }
      if (frame.encryption_key === undefined && this.settings.requireSealed) {
        throw new ProtocolError("this coordinator requires sealed sessions: hello needs an encryption_key");
      }
      this.encryptionKey = frame.encryption_key === undefined ? undefined : fromBase64url(frame.encryption_key, "encryption_key");
      this.hello = frame;
      for (const m of frame.models) this.models.set(m.build_id, m);
      this.maxConcurrency = frame.max_concurrency;
      // Verifying evidence is asynchronous (certificate chains); the provider waits for `welcome`.
      this.state = "verifying";
      void this.admit(frame);
      return;
    }
    if (this.state === "verifying") throw new ProtocolError(`${frame.type} before welcome`);
    this.applyReady(frame);
  }

  /** Verifies the hello's evidence, then welcomes the provider at the level it earned. */
  private async admit(frame: Hello): Promise<void> {
    const attestation = await this.settings.assess(frame.evidence, this.encryptionKey);
    if (this.state !== "verifying") return; // closed meanwhile
    if (attestation.level === "none" && this.settings.refuseUntrusted) {
      const why = attestation.failure ? `evidence refused (${attestation.failure.check})` : "no attestation evidence";
      this.terminate(CLOSE.untrusted, `this coordinator admits attested providers only: ${why}`);
      return;
    }
    let sessionEnc: Uint8Array | undefined;
    if (this.encryptionKey !== undefined && frame.session_keys === true) {
      try {
        const session = await openSenderSession(this.encryptionKey, { protocolVersion: PROTOCOL_VERSION, providerId: this.id });
        sessionEnc = session.enc;
        this.sessionSealer = session.sealer;
      } catch {
        this.terminate(CLOSE.protocolError, "encryption_key rejected");
        return;
      }
      if (this.state !== "verifying") return;
    }
    this.attestation = attestation;
    this.trust = attestation.level;
    this.challenges = attestation.level === "none" ? undefined : await this.settings.challenge(attestation);
    if (this.state !== "verifying") return;
    // Aliases and unknown ids stay in `models` but are never asked for (routing is by build): say so.
    const modelWarnings = await this.settings.modelWarnings(frame.models.map((m) => m.build_id));
    if (this.state !== "verifying") return;
    this.state = "ready";
    this.transport.send(
      encode({
        type: "welcome",
        protocol_version: PROTOCOL_VERSION,
        provider_id: this.id,
        trust_level: this.trust,
        heartbeat_interval_ms: this.settings.heartbeatIntervalMs,
        liveness_timeout_ms: this.settings.livenessTimeoutMs,
        batch_frames: true,
        ...(sessionEnc !== undefined ? { session_enc: toBase64url(sessionEnc) } : {}),
        ...(modelWarnings.length > 0 ? { model_warnings: modelWarnings } : {}),
      }),
    );
    for (const w of modelWarnings) {
      this.logger.warn("provider serves a model that is not a catalog build", {
        provider_id: this.id,
        model: w.model,
        reason: w.reason,
        ...(w.build_id !== undefined ? { build_id: w.build_id } : {}),
      });
    }
    this.logger.info("provider connected", {
      provider_id: this.id,
      account_id: this.identity.accountId,
      count: this.models.size,
      status: this.trust,
    });
    this.hooks.onReady(this);
  }

  private applyReady(frame: ProviderFrame): void {
    switch (frame.type) {
      case "hello":
        throw new ProtocolError("second hello");
      case "heartbeat":
        this.status = frame.status;
        this.warm = new Set(frame.warm_models);
        this.reportedQueued = frame.queued;
        return;
      case "challenge_response":
        if (!this.challenges) throw new ProtocolError("challenge_response without a challenge");
        try {
          this.challenges.answer(frame);
        } catch (e) {
          this.withdraw(e instanceof AttestationError ? e : new AttestationError("challenge_format", "the answer could not be checked"));
        }
        return;
      default: {
        const key = attemptKey(frame.request_id, frame.attempt);
        const attempt = this.attempts.get(key);
        if (!attempt) {
          if (this.recent.has(key)) return; // crossed our cancel in flight
          throw new ProtocolError(`${frame.type} for an attempt not dispatched to this provider`);
        }
        this.applyAttemptFrame(attempt, frame);
      }
    }
  }

  private applyAttemptFrame(attempt: Attempt, frame: Exclude<ProviderFrame, Hello | { type: "heartbeat" }>): void {
    const sealed = frame.type === "sealed_chunk" || frame.type === "sealed_tool_call" || frame.type === "sealed_complete";
    if (attempt.opener !== undefined && (frame.type === "chunk" || frame.type === "tool_call" || frame.type === "complete")) {
      this.untrust(attempt, "plaintext frame in a sealed session");
      return;
    }
    if (sealed && attempt.opener === undefined) throw new ProtocolError("sealed frame in a plaintext session");
    switch (frame.type) {
      case "accepted":
        if (attempt.acceptedAt !== undefined) throw new ProtocolError("duplicate accepted");
        attempt.acceptedAt = this.now();
        attempt.push({ type: "accepted" });
        return;
      case "chunk":
        if (attempt.acceptedAt === undefined) throw new ProtocolError("chunk before accepted");
        if (frame.seq !== attempt.chunks) throw new ProtocolError(`chunk seq ${frame.seq}, expected ${attempt.chunks}`);
        if (this.overBudget(attempt, frame.delta)) return;
        attempt.chunks++;
        this.noteFirstContent(attempt);
        attempt.push({ type: "chunk", delta: frame.delta });
        return;
      case "tool_call":
        if (attempt.acceptedAt === undefined) throw new ProtocolError("tool_call before accepted");
        if (frame.seq !== attempt.chunks) throw new ProtocolError(`tool_call seq ${frame.seq}, expected ${attempt.chunks}`);
        this.relayToolCall(attempt, frame.tool_call);
        return;
      case "complete":
        if (attempt.acceptedAt === undefined) throw new ProtocolError("complete before accepted");
        if (frame.seq !== attempt.chunks) throw new ProtocolError(`complete after ${frame.seq} frames, received ${attempt.chunks}`);
        if (this.overReported(attempt, frame.usage)) return;
        this.served++;
        attempt.push({ type: "complete", finishReason: frame.finish_reason, usage: frame.usage });
        return;
      case "sealed_chunk":
      case "sealed_tool_call":
      case "sealed_complete":
        this.openSealed(attempt, frame);
        return;
      case "error":
        attempt.push({ type: "error", code: frame.code });
        return;
    }
  }

  /**
   * Opens a sealed frame: ChunkOpener enforces order (seq from 0, no replay, nothing after final) and
   * authenticity; the payload is then validated like a plaintext frame. Any failure is invalid output:
   * the attempt fails (no failover: the provider misbehaved) and the provider is cut off.
   */
  private openSealed(
    attempt: Attempt,
    frame: Extract<ProviderFrame, { type: "sealed_chunk" | "sealed_tool_call" | "sealed_complete" }>,
  ): void {
    if (attempt.acceptedAt === undefined) throw new ProtocolError(`${frame.type} before accepted`);
    const opener = attempt.opener as ChunkOpener;
    const final = frame.type === "sealed_complete";
    let payload: unknown;
    try {
      const plaintext = opener.open({ seq: frame.seq, final, ciphertext: fromBase64url(frame.sealed, "sealed") });
      if (final) opener.finish();
      payload = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(plaintext));
      if (final) {
        const end = parseFinal(payload);
        if (this.overReported(attempt, end.usage)) return;
        const receipt = this.verifyReceipt(attempt, end);
        this.served++;
        attempt.push({ type: "complete", finishReason: end.finish_reason, usage: end.usage, ...(receipt ? { receipt } : {}) });
        return;
      }
      if (frame.type === "sealed_tool_call") {
        this.relayToolCall(attempt, parseToolCall(payload));
        return;
      }
      const delta = parseDelta(payload);
      if (this.overBudget(attempt, delta)) return;
      if (delta.content) attempt.responseDigest?.addContent(delta.content);
      attempt.chunks++;
      this.noteFirstContent(attempt);
      attempt.push({ type: "chunk", delta });
    } catch (e) {
      const reason =
        e instanceof CryptoError
          ? `sealed frame rejected: ${e.code}`
          : e instanceof ProtocolError
            ? `sealed payload: ${e.message}`
            : e instanceof AttestationError
              ? `receipt rejected: ${e.check}`
              : "sealed frame is not JSON";
      this.untrust(attempt, reason);
    }
  }

  /**
   * An attested provider must sign a receipt for every answer: its identity key over the canonical
   * receipt bytes (src/crypto/receipts.ts) of the request id, model build, SHA-256 of the request
   * plaintext the coordinator sealed, the digest of the content and tool calls it relayed, and the usage. Throws
   * AttestationError (missing or bad signature); a provider without verified identity signs nothing.
   */
  private verifyReceipt(attempt: Attempt, end: ReturnType<typeof parseFinal>): VerifiedReceipt | undefined {
    const identityKey = this.attestation?.identityKey;
    if (!identityKey || !attempt.requestSha256 || !attempt.responseDigest || attempt.model === undefined) return undefined;
    if (!end.receipt) throw new AttestationError("signature", "an attested provider must sign a receipt");
    const responseSha256 = attempt.responseDigest.digest();
    const bytes = receiptBytes({
      requestId: attempt.requestId,
      modelBuild: attempt.model,
      requestSha256: attempt.requestSha256,
      responseSha256,
      usage: {
        promptTokens: end.usage.prompt_tokens,
        cachedTokens: end.usage.cached_tokens ?? 0,
        completionTokens: end.usage.completion_tokens,
      },
    });
    verifyIdentitySignature(identityKey, bytes, fromBase64url(end.receipt.signature, "receipt.signature"), "receipt");
    return {
      signature: end.receipt.signature,
      responseHash: toHex(responseSha256),
      requestHash: toHex(attempt.requestSha256),
      modelBuild: attempt.model,
      providerKeyId: identityKey.id,
      trustLevel: this.trust,
    };
  }

  /**
   * Challenge duty, called by the fleet's sweep: sends a due challenge, and withdraws trust at once when
   * an answer is overdue (the session stays connected at level `none`, below any production floor).
   */
  pollChallenges(): void {
    const c = this.challenges;
    if (!c || this.state !== "ready") return;
    const due = c.poll();
    if (!c.trusted && c.failure) {
      this.withdraw(c.failure);
      return;
    }
    if (due) {
      try {
        this.transport.send(encode({ type: "challenge", ...challengeFields(due) }));
      } catch {
        // the close handler deals with a dead connection
      }
    }
  }

  private withdraw(error: AttestationError): void {
    if (!this.attestation || this.trust === "none") return;
    this.attestation = withdrawTrust(this.attestation, error);
    this.trust = "none";
    this.challenges = undefined;
    this.logger.warn("provider trust withdrawn", { provider_id: this.id, reason: error.check });
    this.hooks.onTrustChanged(this);
  }

  /**
   * Output far beyond the attempt's budget (outputCharLimit) is invalid output: a provider that ignores
   * max_tokens would otherwise make the coordinator hold an unbounded answer. True when it ended the session.
   */
  private overBudget(attempt: Attempt, delta: Delta): boolean {
    attempt.outputChars += deltaChars(delta);
    attempt.contentBytes += utf8Bytes(delta.content);
    attempt.reasoningBytes += utf8Bytes(delta.reasoning_content);
    if (attempt.outputChars <= attempt.maxOutputChars) return false;
    this.untrust(attempt, "output far beyond the output budget");
    return true;
  }

  /**
   * A tool-call fragment (plaintext or opened), after its frame's seq was checked: one call after
   * another (the next index with id and name opens a call; the last index without them continues it),
   * within the output bound; then relayed, counted as first content and digested for the receipt.
   * Throws ProtocolError for a fragment out of order.
   */
  private relayToolCall(attempt: Attempt, call: ToolCallDelta): void {
    if (call.id !== undefined) {
      if (call.index !== attempt.toolCalls)
        throw new ProtocolError(`tool_call index ${call.index} opens a call, expected ${attempt.toolCalls}`);
      attempt.toolCalls++;
    } else if (call.index !== attempt.toolCalls - 1) {
      throw new ProtocolError(`tool_call index ${call.index} continues no open call (last is ${attempt.toolCalls - 1})`);
    }
    attempt.outputChars += toolCallChars(call);
    attempt.toolCallBytes += utf8Bytes(call.name) + utf8Bytes(call.arguments);
    if (attempt.outputChars > attempt.maxOutputChars) {
      this.untrust(attempt, "output far beyond the output budget");
      return;
    }
    attempt.responseDigest?.addToolCall(call);
    attempt.chunks++;
    this.noteFirstContent(attempt);
    attempt.push({ type: "tool_call", call });
  }

  /**
   * Usage beyond the attempt's bounds (usageViolation: prompt bytes, budget, bytes relayed) is invalid
   * output: no charge may rest on it, and a receipt signed over it is not shown. True when it ended the session.
   */
  private overReported(attempt: Attempt, usage: Usage): boolean {
    const bound = attempt.limits && usageViolation(usage, attempt.limits, attempt);
    if (bound === undefined) return false;
    this.settings.onUsageRejected?.(bound);
    this.untrust(attempt, `usage beyond its bound: ${bound}`);
    return true;
  }

  /** Invalid output: fail the attempt with `invalid` and end the session (the provider is untrusted). */
  private untrust(attempt: Attempt, reason: string): void {
    attempt.push({ type: "invalid", reason });
    this.terminate(CLOSE.protocolError, reason);
  }

  private noteFirstContent(attempt: Attempt): void {
    if (attempt.firstContentAt !== undefined) return;
    attempt.firstContentAt = this.now();
    const sample = attempt.firstContentAt - attempt.startedAt;
    this.firstContentMs = this.firstContentMs === undefined ? sample : this.firstContentMs * (1 - EWMA_WEIGHT) + sample * EWMA_WEIGHT;
  }

  /**
   * Sends one attempt of a request and returns it; the caller checked `freeSlots`. `limits` are the
   * request's usage bounds (computed once per request by the caller). The slot is taken
   * at once. A sealed session seals the request to the provider's key first (HPKE, binding protocol
   * version, request id and attempt) and opens the answer with the exported response key.
   * Throws RequestEncodingError, before taking the slot, when the request cannot be serialized: the
   * coordinator's own failure, never counted against the provider (no `lost`, no failover).
   */
  async dispatch(frame: Inference, limits: UsageLimits = usageLimits(frame.request)): Promise<Attempt> {
    const key = this.encryptionKey;
    let serialized: string;
    try {
      serialized = key === undefined ? encode(frame) : JSON.stringify(frame.request);
    } catch {
      throw new RequestEncodingError("the request could not be serialized for its provider");
    }
    const attempt = new Attempt(frame.request_id, frame.attempt, this.id, this.identity.accountId, this.now(), this);
    attempt.maxOutputChars = outputCharLimit(frame.request.max_tokens);
    attempt.limits = limits;
    this.attempts.set(attempt.key, attempt);
    this.active++;
    try {
      if (key === undefined) {
        this.transport.send(serialized);
        return attempt;
      }
      const binding = { protocolVersion: PROTOCOL_VERSION, requestId: frame.request_id, attempt: frame.attempt };
      const plaintext = encoder.encode(serialized);
      attempt.requestSha256 = sha256(plaintext);
      attempt.responseDigest = new ResponseDigest();
      attempt.model = frame.model;
      const head = {
        type: "sealed_inference",
        request_id: frame.request_id,
        attempt: frame.attempt,
        model: frame.model,
        first_content_deadline_ms: frame.first_content_deadline_ms,
      } as const;
      if (this.sessionSealer !== undefined) {
        // Synchronous from counter to send, so the provider sees n in increasing order.
        const sealed = this.sessionSealer.seal(plaintext, binding);
        attempt.opener = new ChunkOpener({ responseKey: sealed.responseKey, requestId: frame.request_id, attempt: frame.attempt });
        this.transport.send(encode({ ...head, n: sealed.n, ciphertext: toBase64url(sealed.ciphertext) }));
        return attempt;
      }
      const sealed = await sealRequest(key, plaintext, binding);
      if (attempt.done) return attempt; // cancelled or the session ended while sealing
      attempt.opener = new ChunkOpener({ responseKey: sealed.responseKey, requestId: frame.request_id, attempt: frame.attempt });
      this.transport.send(encode({ ...head, enc: toBase64url(sealed.enc), ciphertext: toBase64url(sealed.ciphertext) }));
    } catch {
      attempt.push({ type: "lost", reason: "send failed" });
    }
    return attempt;
  }

  /** AttemptOwner: frees the slot, remembers the key, tells the provider when cancelling. */
  release(attempt: Attempt, cancel: CancelReason | undefined): void {
    if (!this.attempts.delete(attempt.key)) return;
    this.active--;
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
    if (this.recent.size >= RECENT_LIMIT) {
      const oldest = this.recent.values().next().value;
      if (oldest !== undefined) this.recent.delete(oldest);
    }
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
    for (const attempt of [...this.attempts.values()]) attempt.push({ type: "lost", reason: "provider disconnected" });
    this.hooks.onClosed(this);
  }
}
