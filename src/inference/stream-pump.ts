/**
 * The event stream of a committed attempt (streamCompletion): the pump writes the SSE text (responses.ts's
 * framing) of every event already received in one piece, a short answer with the response's head in one
 * write, and with nothing to write has the attempt hand it the next event (a listener, Attempt.wait: no
 * promise per token). It ends an answer whose consumer left, fell MAX_BACKLOG_CHARS behind
 * (fleet/attempt.ts) or outlived the request deadline, settling it at once: no reservation waits for a
 * reader that never comes. The pump is itself the stream's source and the listener of the attempt and
 * the deadline: an open stream holds no closure.
 */
import { ApiError, Errors } from "../errors/api-error.ts";
import { type Attempt, type AttemptEvent, type AttemptListener, type BacklogListener, SLOW_CONSUMER } from "../fleet/attempt.ts";
import type { Committed } from "./dispatch.ts";
import {
  chunkHead,
  deltaEvent,
  deltaPrefix,
  endEvents,
  errorEvent,
  failureOf,
  finishReason,
  notRead,
  type OnEnd,
  type Outcome,
  type ResponseContext,
  toolCallEvent,
  UNHELD,
  unheldError,
  unlessUnheld,
} from "./responses.ts";

const encoder = new TextEncoder();

/**
 * The event stream of a committed attempt; the caller sends it with status 200. `deadline` (the request
 * timeout) ends an answer still open then, even one whose consumer stopped reading.
 *
 * Resolves once the first write is ready: the content already received, or, when the answer's end came
 * with it (a short answer in one provider batch), the whole answer once its charge is durable. The
 * response's head then leaves in the same write as its first bytes, and a short answer in one write.
 */
export async function streamCompletion(
  committed: Committed,
  ctx: ResponseContext,
  onEnd: OnEnd,
  deadline?: AbortSignal,
): Promise<ReadableStream<Uint8Array>> {
  // The pump is the attempt's listener, the deadline's and the stream's source: no closure per answer.
  const pump = new StreamPump(committed, ctx, onEnd, deadline);
  committed.attempt.onBacklogDropped(pump);
  deadline?.addEventListener("abort", pump, { once: true });
  pump.opening = await pump.first();
  return new ReadableStream<Uint8Array>(pump);
}

/** One answer's writer state: the event held back, characters relayed, whether it has ended. */
class StreamPump implements AttemptListener, BacklogListener, EventListenerObject {
  private readonly attempt: Attempt;
  private readonly head: string;
  private readonly deltaPrefix: string;
  private pending: AttemptEvent | undefined;
  private chars = 0;
  /** OpenAI's first delta names the role; clients such as openai's stream helper require it. */
  private role = '"role":"assistant",';
  private finished = false;
  /** The answer's last bytes are written (or are `early`): close after them. */
  private closing = false;
  private controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  /** Last bytes of an answer ended from outside before the stream existed. */
  private early: Uint8Array | undefined;
  /** The answer's last bytes, once its end is gathered: they wait for its settlement. */
  private last: Promise<Uint8Array> | undefined;
  /** The attempt will hand over its next event (Attempt.wait). */
  private waiting = false;
  /** The first write (first()), the stream's first bytes. */
  opening: Uint8Array | undefined;

  constructor(
    committed: Committed,
    private readonly ctx: ResponseContext,
    private readonly onEnd: OnEnd,
    private readonly deadline: AbortSignal | undefined,
  ) {
    this.attempt = committed.attempt;
    this.pending = committed.first;
    this.head = chunkHead(ctx);
    this.deltaPrefix = deltaPrefix(this.head);
  }

  /** The deadline's abort: its reason, when an ApiError, is the error to end with (a lost hold); else the timeout. */
  handleEvent(): void {
    const reason = this.deadline?.reason;
    void this.stop("failed", reason instanceof ApiError ? reason : Errors.timeout("the request timed out"));
  }

  /** The attempt dropped a backlog its consumer did not read. */
  backlogDropped(): void {
    void this.stop("cancelled", notRead());
  }

  /** Ends the answer from outside the writer (deadline, backlog dropped): settles, then the last bytes. */
  async stop(status: Outcome["status"], error: ApiError): Promise<void> {
    if (this.finished) return;
    const o = { status, usage: undefined, finishReason: undefined, completionChars: this.chars };
    const last = await this.settled(errorEvent(error), o);
    if (this.controller) this.write(last);
    else this.early = last;
  }

  /**
   * The SSE text of every event already here, in one piece (nothing waits). At the answer's end, `last`
   * is set (that text with the tail or error event, once the outcome is settled) and "" returned.
   */
  private gather(): string {
    const { attempt, head } = this;
    let out = "";
    while (!this.finished) {
      const received = this.pending ?? attempt.poll();
      this.pending = undefined;
      if (received === undefined) break;
      const event = unlessUnheld(this.ctx, attempt, received);
      switch (event.type) {
        case "accepted":
          continue;
        case "chunk": {
          const delta = event.delta;
          if (!delta.content && !delta.reasoning_content) continue;
          this.chars += delta.content?.length ?? 0;
          out += deltaEvent(this.deltaPrefix, this.role, delta);
          this.role = "";
          continue;
        }
        case "tool_call": {
          const call = event.call;
          this.chars += (call.name?.length ?? 0) + (call.arguments?.length ?? 0);
          out += toolCallEvent(head, this.role, call);
          this.role = "";
          continue;
        }
        case "complete": {
          const reason = finishReason(event.finishReason, event.usage, this.ctx.maxTokens);
          // Content gathered so far, the usage chunk, the finish chunk and [DONE] leave together once
          // the charge is durable: one write instead of two (the settlement wait would otherwise split them).
          const o = { status: "completed" as const, usage: event.usage, finishReason: reason, completionChars: this.chars };
          this.last = this.settled(out + endEvents(head, event.usage, reason, event.receipt), o);
          return "";
        }
        default: {
          const status = event.type === "lost" && event.reason === SLOW_CONSUMER ? "cancelled" : "failed";
          const error = event.type === "lost" && event.reason === UNHELD ? unheldError() : failureOf(event);
          this.last = this.settled(out + errorEvent(error), {
            status,
            usage: undefined,
            finishReason: undefined,
            completionChars: this.chars,
          });
          return "";
        }
      }
    }
    return out;
  }

  /** `text`'s bytes once `o` is settled (the charge durable first), with `closing` set. */
  private async settled(text: string, o: Outcome): Promise<Uint8Array> {
    const bytes = encoder.encode(text);
    await this.end(o);
    this.closing = true;
    return bytes;
  }

  /** The first write (see streamCompletion); undefined when the answer was ended from outside meanwhile. */
  async first(): Promise<Uint8Array | undefined> {
    for (;;) {
      const out = this.gather();
      if (this.last) return this.last;
      if (out !== "") return encoder.encode(out);
      if (this.finished) return undefined;
      this.pending = await this.attempt.next();
    }
  }

  /**
   * The stream's pull: writes what is here, or has the attempt hand over its next event when it comes
   * (attemptEvent; no promise per token). A pull that returns having written nothing is not called again
   * until something is written; an answer ended from outside meanwhile is written and closed by `stop`.
   */
  pull(): void {
    // While waiting, the event handed over is on its way (a microtask): polling now would overtake it.
    if (this.closing || this.finished || this.waiting) return;
    const out = this.gather();
    if (this.last) void this.writeLast(this.last);
    else if (out !== "") this.write(encoder.encode(out));
    else {
      this.waiting = true;
      this.attempt.wait(this);
    }
  }

  /** The next event came (with the others of the same provider message queued behind it). */
  attemptEvent(event: AttemptEvent): void {
    this.waiting = false;
    this.pending = event;
    try {
      this.pull();
    } catch (e) {
      this.controller?.error(e);
    }
  }

  private write(bytes: Uint8Array): void {
    try {
      this.controller?.enqueue(bytes);
      if (this.closing) this.controller?.close();
    } catch {
      // the consumer went away meanwhile
    }
  }

  /** The last bytes once settled; a failed settlement ends the stream in error (no [DONE]), as a failed pull would. */
  private async writeLast(last: Promise<Uint8Array>): Promise<void> {
    try {
      this.write(await last);
    } catch (e) {
      this.controller?.error(e);
    }
  }

  /** The stream's start: the first write (or the last bytes of an answer ended from outside) in it. */
  start(controller: ReadableStreamDefaultController<Uint8Array>): void {
    this.controller = controller;
    const bytes = this.opening ?? this.early;
    if (bytes) this.write(bytes);
  }

  /** The consumer went away: the provider is told, the answer settles for what it relayed. */
  cancel(): void {
    this.attempt.cancel("client_gone");
    void this.end({ status: "cancelled", usage: undefined, completionChars: this.chars, finishReason: undefined });
  }

  private end(o: Outcome): Promise<void> {
    if (this.finished) return Promise.resolve();
    this.finished = true;
    return this.onEnd(o);
  }
}
