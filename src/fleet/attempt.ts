/**
 * One attempt: a chat request dispatched to one provider session. The session relays its frames as
 * events (attempt-frames.ts checks them first); the consumer (dispatcher, then the response writer)
 * takes them with `next()`, or `poll()` and a listener (`wait`). State changes only through the methods.
 *
 * Invariants: after a terminal event (complete, error, lost, invalid) nothing more is pushed; `cancel()`
 * is idempotent, tells the provider once, frees the session slot once, and ends a pending `next()` with
 * `lost` so no waiter hangs. Bounded memory: a provider connection carries many attempts and has no
 * per-attempt flow control, so the text queued and not yet consumed is bounded (MAX_BACKLOG_CHARS): past
 * it the backlog is dropped, the provider told to cancel (client_gone), `lost` (SLOW_CONSUMER) queued and
 * the `onBacklogDropped` callback run (the response writer settles and ends the answer at once).
 */
import { utf8Bytes } from "../billing/billing.ts";
import type { RelayedOutput, UsageLimits } from "../billing/usage-bounds.ts";
import type { ChunkOpener } from "../crypto/chunks.ts";
import { ResponseDigest } from "../crypto/receipts.ts";
import type { CancelReason, Delta, ProviderErrorCode, ToolCallDelta, Usage } from "../protocol/frames.ts";

export type AttemptEvent =
  | { readonly type: "accepted" }
  | { readonly type: "chunk"; readonly delta: Delta }
  /** A tool-call fragment, in order (the session checked it: a call's first fragment has id and name). */
  | { readonly type: "tool_call"; readonly call: ToolCallDelta }
  | { readonly type: "complete"; readonly finishReason: string; readonly usage: Usage; readonly receipt?: VerifiedReceipt }
  | { readonly type: "error"; readonly code: ProviderErrorCode }
  | { readonly type: "lost"; readonly reason: string }
  /** The provider's output failed verification (sealed frame reordered, replayed, tampered ...). */
  | { readonly type: "invalid"; readonly reason: string };

/** A provider receipt the coordinator verified, as consumers receive it. */
export interface VerifiedReceipt {
  /** base64url DER ECDSA P-256 signature by the provider's identity key over the receipt bytes. */
  readonly signature: string;
  /** Lowercase hex SHA-256 of the canonical response: content and tool calls (src/crypto/receipts.ts). */
  readonly responseHash: string;
  /** Lowercase hex SHA-256 of the request plaintext the coordinator sealed. */
  readonly requestHash: string;
  /** The build the provider served (an alias's build), as the receipt names it. */
  readonly modelBuild: string;
  /** SHA-256 (hex) of the provider's identity key, as in GET /v1/providers/attestation. */
  readonly providerKeyId: string;
  readonly trustLevel: string;
}

/**
 * Chunk text (UTF-16 code units) an attempt may hold for a consumer that has not read it yet. A reading
 * consumer never comes near it (the response is pulled as fast as its socket drains); 1 Mi characters is
 * minutes of any model's output on top of what the socket buffers already hold.
 */
const MAX_BACKLOG_CHARS = 1024 * 1024;
/** The `lost` reason of an attempt whose consumer fell MAX_BACKLOG_CHARS behind. */
export const SLOW_CONSUMER = "consumer not reading";

/**
 * Output text a provider may send per token of the budget before its output counts as oversized
 * (invalid output): far beyond any tokenizer's longest token, so only a provider ignoring the budget
 * gets there. A floor for tiny budgets, and a ceiling that bounds one answer's text whatever the budget.
 */
export function outputCharLimit(maxTokens: number): number {
  return Math.min(64 * 1024 * 1024, Math.max(64 * 1024, maxTokens * 256));
}

/** Characters of text in a delta. */
function deltaChars(delta: Delta): number {
  return (delta.content?.length ?? 0) + (delta.reasoning_content?.length ?? 0);
}

/** Characters of a tool-call fragment (id, name and arguments). */
function toolCallChars(call: ToolCallDelta): number {
  return (call.id?.length ?? 0) + (call.name?.length ?? 0) + (call.arguments?.length ?? 0);
}

/** Characters an event holds for the backlog bound (chunks and tool calls; 0 for the others). */
function eventChars(event: AttemptEvent): number {
  return event.type === "chunk" ? deltaChars(event.delta) : event.type === "tool_call" ? toolCallChars(event.call) : 0;
}

export interface AttemptOwner {
  /** Frees the slot and, when `cancel` is given, tells the provider; called once per attempt. */
  release(attempt: Attempt, cancel: CancelReason | undefined): void;
  /** The serving machine's device token id, when this process holds its session (not a forwarded attempt). */
  readonly deviceTokenId?: string;
}

/** What a sealed attempt keeps to open its answer and check the receipt (set once, before sending). */
export interface AttemptSeal {
  /** Opens this attempt's response frames. */
  readonly opener: ChunkOpener;
  /** SHA-256 of the request plaintext the coordinator sealed. */
  readonly requestSha256: Uint8Array;
  /** The build the request was sent for (receipts name it). */
  readonly model: string;
}

/** The output bounds of an attempt, from its request (set at dispatch). */
export interface AttemptBounds {
  /** The most output text the budget allows (outputCharLimit). */
  readonly maxOutputChars: number;
  readonly limits?: UsageLimits;
}

/** What an attempt relayed so far (the usage bounds check it). */
export interface Relayed extends RelayedOutput {
  /** Chunk and tool-call frames received; the expected `seq` of the next one. */
  readonly chunks: number;
  /** Output text (UTF-16 code units, tool calls included), bounded by the output budget. */
  readonly outputChars: number;
}

export class Attempt {
  private readonly queue: AttemptEvent[] = [];
  private head = 0;
  private waiter: ((e: AttemptEvent) => void) | undefined;
  private listener: AttemptListener | undefined;
  /** next()'s promise executor, made once per attempt instead of once (with its scope) per wait. */
  private readonly awaitEvent = (resolve: (e: AttemptEvent) => void): void => {
    this.waiter = resolve;
  };
  private ended = false;
  private released = false;
  private cancelReason: CancelReason | undefined;
  /** Text of the queued chunks not yet consumed. */
  private backlogChars = 0;
  private dropped: BacklogListener | undefined;
  private readonly counts = { chunks: 0, toolCalls: 0, outputChars: 0, contentBytes: 0, reasoningBytes: 0, toolCallBytes: 0 };
  private acceptedTime: number | undefined;
  private firstContentTime: number | undefined;
  private seal: AttemptSeal | undefined;
  private sealedOnly = false;
  private digest: ResponseDigest | undefined;
  /** `requestId#attempt`: the session's key for it (attemptKey), made once. */
  readonly key: string;

  constructor(
    readonly requestId: string,
    readonly attempt: number,
    readonly providerId: string,
    /** The provider machine's account: it earns what this attempt is charged. */
    readonly providerAccountId: string,
    readonly startedAt: number,
    private readonly owner: AttemptOwner,
    private readonly bounds: AttemptBounds = { maxOutputChars: Number.POSITIVE_INFINITY },
  ) {
    this.key = attemptKey(requestId, attempt);
  }

  /** The serving machine's device token id; undefined when another replica holds its session. */
  get deviceTokenId(): string | undefined {
    return this.owner.deviceTokenId;
  }

  /** True once a terminal event was pushed or the attempt was cancelled. */
  get done(): boolean {
    return this.ended;
  }

  /** Frames, tool calls, text and bytes relayed so far (tool calls opened: the next call's index). */
  get relayed(): Readonly<Relayed> {
    return this.counts;
  }

  /** The bounds of the usage the provider may report (undefined: not checked). */
  get limits(): UsageLimits | undefined {
    return this.bounds.limits;
  }

  get acceptedAt(): number | undefined {
    return this.acceptedTime;
  }

  get firstContentAt(): number | undefined {
    return this.firstContentTime;
  }

  /** Sealed sessions: the opener and request hash (undefined for plaintext, or until sealed). */
  get sealed(): AttemptSeal | undefined {
    return this.seal;
  }

  /** Sealed sessions: the request was sealed (before it is sent); its answer opens with `seal.opener`. */
  sealWith(seal: AttemptSeal): void {
    this.seal = seal;
    this.digest = new ResponseDigest();
  }

  /** Sealed sessions, from the attempt's start: only sealed frames may answer it, even before `sealWith`. */
  expectSealed(): void {
    this.sealedOnly = true;
  }

  /** True once `expectSealed` or `sealWith` was called. */
  get sealedSession(): boolean {
    return this.sealedOnly || this.seal !== undefined;
  }

  /** Sealed sessions: the digest of the content and tool calls relayed so far (receipts). */
  responseSha256(): Uint8Array | undefined {
    return this.digest?.digest();
  }

  /** `listener` is told once if the backlog is dropped (see MAX_BACKLOG_CHARS). */
  onBacklogDropped(listener: BacklogListener): void {
    this.dropped = listener;
  }

  /** The provider accepted the attempt. */
  accepted(at: number): void {
    this.acceptedTime = at;
    this.push({ type: "accepted" });
  }

  /** Counts a delta's output; false when the text is now beyond the output budget. */
  countDelta(delta: Delta): boolean {
    const c = this.counts;
    c.outputChars += deltaChars(delta);
    c.contentBytes += utf8Bytes(delta.content);
    c.reasoningBytes += utf8Bytes(delta.reasoning_content);
    return c.outputChars <= this.bounds.maxOutputChars;
  }

  /** Counts a tool-call fragment (one with an id opens a call); false when beyond the output budget. */
  countToolCall(call: ToolCallDelta): boolean {
    const c = this.counts;
    if (call.id !== undefined) c.toolCalls++;
    c.outputChars += toolCallChars(call);
    c.toolCallBytes += utf8Bytes(call.name) + utf8Bytes(call.arguments);
    return c.outputChars <= this.bounds.maxOutputChars;
  }

  /**
   * Relays a counted chunk or tool-call fragment (digested for the receipt when sealed) received at `at`.
   * Returns the first-content latency (ms) when it is the attempt's first content, else undefined.
   * @throws InvalidInputError (sealed) for a tool-call fragment the digest cannot take.
   */
  relay(
    event: { readonly type: "chunk"; readonly delta: Delta } | { readonly type: "tool_call"; readonly call: ToolCallDelta },
    at: number,
  ): number | undefined {
    if (event.type === "chunk") {
      if (event.delta.content) this.digest?.addContent(event.delta.content);
    } else {
      this.digest?.addToolCall(event.call);
    }
    this.counts.chunks++;
    const first = this.firstContentTime === undefined;
    if (first) this.firstContentTime = at;
    this.push(event);
    return first ? at - this.startedAt : undefined;
  }

  /** Queues an event from the session (a terminal one releases the slot); ignored once done. */
  push(event: AttemptEvent): void {
    if (this.ended) return;
    const terminal = event.type === "complete" || event.type === "error" || event.type === "lost" || event.type === "invalid";
    if (terminal) {
      this.ended = true;
      this.release(undefined);
    }
    const waiter = this.waiter;
    if (waiter) {
      this.waiter = undefined;
      waiter(event);
      return;
    }
    const listener = this.listener;
    if (listener) {
      this.listener = undefined;
      handOff(listener, event);
      return;
    }
    this.queue.push(event);
    if (event.type !== "chunk" && event.type !== "tool_call") return;
    this.backlogChars += eventChars(event);
    if (this.backlogChars > MAX_BACKLOG_CHARS) this.dropBacklog();
  }

  /** The consumer fell too far behind: drop what it has not read, stop the provider, end with `lost`. */
  private dropBacklog(): void {
    this.queue.length = 0;
    this.head = 0;
    this.backlogChars = 0;
    this.ended = true;
    this.cancelReason = "client_gone";
    this.release("client_gone");
    this.queue.push({ type: "lost", reason: SLOW_CONSUMER });
    this.dropped?.backlogDropped();
  }

  /** Number of events received but not yet consumed (for backpressure accounting). */
  get backlog(): number {
    return this.queue.length - this.head;
  }

  /** The next event if one is here (queued, or `lost` once the attempt ended), else undefined. */
  poll(): AttemptEvent | undefined {
    if (this.head < this.queue.length) {
      const e = this.queue[this.head] as AttemptEvent;
      this.head++;
      this.backlogChars -= eventChars(e);
      if (this.head > 64 && this.head * 2 > this.queue.length) {
        this.queue.splice(0, this.head);
        this.head = 0;
      }
      return e;
    }
    if (this.ended) return { type: "lost", reason: this.cancelReason ? `cancelled: ${this.cancelReason}` : "attempt ended" };
    return undefined;
  }

  /** The next event; waits until one arrives. */
  next(): Promise<AttemptEvent> {
    const e = this.poll();
    return e === undefined ? new Promise(this.awaitEvent) : Promise.resolve(e);
  }

  /**
   * `listener` gets the next event (no promise): only after poll() found none, one wait at a time. It is
   * called a microtask after the push, once the rest of the provider's message is queued (handOff).
   */
  wait(listener: AttemptListener): void {
    this.listener = listener;
  }

  /** Withdraws a wait() of `listener` that has not been answered (its own timer ran out). */
  unwait(listener: AttemptListener): void {
    if (this.listener === listener) this.listener = undefined;
  }

  /** Stops the attempt: the provider is told, the slot freed, a pending next() ends with `lost`. */
  cancel(reason: CancelReason): void {
    if (this.ended) return;
    this.ended = true;
    this.cancelReason = reason;
    this.release(reason);
    const waiter = this.waiter;
    const listener = this.listener;
    this.waiter = undefined;
    this.listener = undefined;
    waiter?.({ type: "lost", reason: `cancelled: ${reason}` });
    if (listener) handOff(listener, { type: "lost", reason: `cancelled: ${reason}` });
  }

  private release(cancel: CancelReason | undefined): void {
    if (this.released) return;
    this.released = true;
    this.owner.release(this, cancel);
  }
}

/** The answer writer told when its unread backlog is dropped (Attempt.onBacklogDropped). */
export interface BacklogListener {
  backlogDropped(): void;
}

/** An answer writer waiting for an attempt's next event (Attempt.wait): an object, no closure per wait. */
export interface AttemptListener {
  attemptEvent(event: AttemptEvent): void;
}

// Listeners and their events, handed over together in one microtask: a provider message's events are all
// queued by then, so a writer woken by its first takes the rest in the same write.
const handed: (AttemptListener | AttemptEvent)[] = [];

function handOff(listener: AttemptListener, event: AttemptEvent): void {
  if (handed.length === 0) queueMicrotask(runHandOffs);
  handed.push(listener, event);
}

/** Calls each listener (what they queue meanwhile runs in this pass); a throw is rethrown at the end. */
function runHandOffs(): void {
  let failure: { error: unknown } | undefined;
  for (let i = 0; i < handed.length; i += 2) {
    try {
      (handed[i] as AttemptListener).attemptEvent(handed[i + 1] as AttemptEvent);
    } catch (error) {
      failure ??= { error };
    }
  }
  handed.length = 0;
  if (failure) throw failure.error;
}

export function attemptKey(requestId: string, attempt: number): string {
  return `${requestId}#${attempt}`;
}
