/**
 * One attempt: a chat request dispatched to one provider session. The session pushes events as frames
 * arrive; the consumer (dispatcher, then the response writer) pulls them with `next()`.
 *
 * Invariants: events arrive in protocol order (the session rejects out-of-order frames before they get
 * here); after a terminal event (complete, error, lost) nothing more is pushed; `cancel()` is
 * idempotent, tells the provider once, frees the session slot once, and ends a pending `next()` with
 * a `lost` event so no waiter hangs.
 *
 * Bounded memory: the protocol has no per-attempt flow control and a provider connection carries many
 * attempts, so a consumer that stops reading cannot slow its provider down without stalling the others.
 * Instead the text queued and not yet consumed is bounded (MAX_BACKLOG_CHARS): past it the backlog is
 * dropped, the provider told to cancel (client_gone), `lost` (SLOW_CONSUMER) queued and
 * `onBacklogDropped` called (the response writer settles and ends the answer at once).
 */
import type { UsageLimits } from "../billing/usage-bounds.ts";
import type { ChunkOpener } from "../crypto/chunks.ts";
import type { ResponseDigest } from "../crypto/receipts.ts";
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
export const MAX_BACKLOG_CHARS = 1024 * 1024;
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
export function deltaChars(delta: Delta): number {
  return (delta.content?.length ?? 0) + (delta.reasoning_content?.length ?? 0);
}

/** Characters of a tool-call fragment (id, name and arguments). */
export function toolCallChars(call: ToolCallDelta): number {
  return (call.id?.length ?? 0) + (call.name?.length ?? 0) + (call.arguments?.length ?? 0);
}

/** Characters an event holds for the backlog bound (chunks and tool calls; 0 for the others). */
function eventChars(event: AttemptEvent): number {
  return event.type === "chunk" ? deltaChars(event.delta) : event.type === "tool_call" ? toolCallChars(event.call) : 0;
}

export interface AttemptOwner {
  /** Frees the slot and tells the provider (when `notify`); called once per attempt. */
  release(attempt: Attempt, cancel: CancelReason | undefined): void;
}

export class Attempt {
  private readonly queue: AttemptEvent[] = [];
  private head = 0;
  private waiter: ((e: AttemptEvent) => void) | undefined;
  private ended = false;
  private released = false;
  private cancelReason: CancelReason | undefined;
  /** Text of the queued chunks not yet consumed. */
  private backlogChars = 0;
  /** Chunk and tool-call frames received so far; the expected `seq` of the next one. */
  chunks = 0;
  /** Tool calls opened so far: the index a call's first fragment must carry next. */
  toolCalls = 0;
  /** Output text received so far, and the most the budget allows (outputCharLimit; set at dispatch). */
  outputChars = 0;
  maxOutputChars = Number.POSITIVE_INFINITY;
  /**
   * UTF-8 bytes of the content, reasoning and tool calls (names and arguments) relayed so far, and the
   * bounds of the usage reported (set at dispatch).
   */
  contentBytes = 0;
  reasoningBytes = 0;
  toolCallBytes = 0;
  limits: UsageLimits | undefined;
  /** Called once if the backlog was dropped (see MAX_BACKLOG_CHARS). */
  onBacklogDropped: (() => void) | undefined;
  acceptedAt: number | undefined;
  firstContentAt: number | undefined;
  /** Sealed sessions: opens this attempt's response frames (set before the inference is sent). */
  opener: ChunkOpener | undefined;
  /** Sealed sessions: SHA-256 of the request plaintext, and the response's digest so far (receipts). */
  requestSha256: Uint8Array | undefined;
  responseDigest: ResponseDigest | undefined;
  /** The build the request was sent for (receipts name it). */
  model: string | undefined;

  constructor(
    readonly requestId: string,
    readonly attempt: number,
    readonly providerId: string,
    /** The provider machine's account: it earns what this attempt is charged. */
    readonly providerAccountId: string,
    readonly startedAt: number,
    private readonly owner: AttemptOwner,
  ) {}

  get key(): string {
    return attemptKey(this.requestId, this.attempt);
  }

  /** True once a terminal event was pushed or the attempt was cancelled. */
  get done(): boolean {
    return this.ended;
  }

  /** Called by the session. */
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
    this.onBacklogDropped?.();
  }

  /** Number of events received but not yet consumed (for backpressure accounting). */
  get backlog(): number {
    return this.queue.length - this.head;
  }

  /** The next event; waits until one arrives. */
  next(): Promise<AttemptEvent> {
    if (this.head < this.queue.length) {
      const e = this.queue[this.head] as AttemptEvent;
      this.head++;
      this.backlogChars -= eventChars(e);
      if (this.head > 64 && this.head * 2 > this.queue.length) {
        this.queue.splice(0, this.head);
        this.head = 0;
      }
      return Promise.resolve(e);
    }
    if (this.ended)
      return Promise.resolve({ type: "lost", reason: this.cancelReason ? `cancelled: ${this.cancelReason}` : "attempt ended" });
    return new Promise((resolve) => {
      this.waiter = resolve;
    });
  }

  /** Stops the attempt: the provider is told, the slot freed, a pending next() ends with `lost`. */
  cancel(reason: CancelReason): void {
    if (this.ended) return;
    this.ended = true;
    this.cancelReason = reason;
    this.release(reason);
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.({ type: "lost", reason: `cancelled: ${reason}` });
  }

  private release(cancel: CancelReason | undefined): void {
    if (this.released) return;
    this.released = true;
    this.owner.release(this, cancel);
  }
}

export function attemptKey(requestId: string, attempt: number): string {
  return `${requestId}#${attempt}`;
}
