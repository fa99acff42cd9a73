/**
 * Turning a committed attempt into the consumer's answer: one ChatCompletion (collectCompletion) or an
 * event stream (streamCompletion), shaped as docs/api.md "Answer (stream false)" and "Event stream" show.
 *
 * A JSON answer's failure before `complete` is still an HTTP error (nothing was sent); a stream's failure
 * after commit is one `data: {"error": ...}` event and no [DONE]; no keepalive comments.
 * Framing is pure functions; the pump writes what was received in one piece and ends an answer whose
 * consumer left, fell MAX_BACKLOG_CHARS behind (fleet/attempt.ts) or outlived the request deadline,
 * settling it at once: no reservation waits for a reader that never comes. Before each event is used,
 * `held` (cluster mode) is asked whether the request's hold is still kept: once it is not, nothing more
 * is relayed (a replica resumed after a stall relays nothing it received meanwhile).
 */
import { randomBytes } from "node:crypto";
import { RECEIPT_VERSION } from "../crypto/receipts.ts";
import { ApiError, Errors } from "../errors/api-error.ts";
import { type Attempt, type AttemptEvent, SLOW_CONSUMER, type VerifiedReceipt } from "../fleet/attempt.ts";
import type { Delta, ToolCallDelta, Usage } from "../protocol/frames.ts";
import type { Committed } from "./dispatch.ts";

export interface ResponseContext {
  /** The model id the client asked for (an alias stays an alias). */
  readonly model: string;
  readonly maxTokens: number;
  readonly created: number;
  readonly id: string;
  /** False once the request's money hold is lost (store/pg/hold-deadlines.ts): the answer stops there. */
  readonly held?: () => boolean;
}

/** The reason an attempt ends with once its hold is lost. */
const UNHELD = "cancelled: hold lost";

/** How an answer whose hold was lost ends: a stream's in-band error (a JSON answer's is the deadline's 504). */
export const unheldError = () =>
  Errors.serviceUnavailable("this request's reservation could not be kept: the answer was stopped; retry the request");

/** The event to use next: `event`, or, once the hold is lost, the attempt cancelled as by the deadline. */
function unlessUnheld(ctx: ResponseContext, attempt: Attempt, event: AttemptEvent): AttemptEvent {
  if (ctx.held === undefined || ctx.held()) return event;
  attempt.cancel("deadline");
  return { type: "lost", reason: UNHELD };
}

export interface Outcome {
  readonly status: "completed" | "failed" | "cancelled";
  readonly usage: Usage | undefined;
  readonly completionChars: number;
  readonly finishReason: string | undefined;
}

/** Called once per answer; the answer's last bytes wait for it (the charge is durable first). */
export type OnEnd = (outcome: Outcome) => Promise<void>;

export function completionId(): string {
  return `chatcmpl-${randomBytes(12).toString("base64url")}`;
}

/**
 * `length` exactly when the whole output budget was used (the counts are bounded by it,
 * billing/usage-bounds.ts); a `length` claimed below the budget is shown as `stop`.
 */
export function finishReason(reported: string, usage: Usage, maxTokens: number): string {
  if (usage.completion_tokens >= maxTokens) return "length";
  return reported === "length" ? "stop" : reported;
}

export function usageJson(u: Usage) {
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    ...(u.cached_tokens !== undefined ? { prompt_tokens_details: { cached_tokens: u.cached_tokens } } : {}),
    ...(u.reasoning_tokens !== undefined ? { completion_tokens_details: { reasoning_tokens: u.reasoning_tokens } } : {}),
  };
}

/** A verified provider receipt as the consumer sees it (docs/security.md shows how to check it). */
function receiptJson(receipt: VerifiedReceipt | undefined) {
  if (!receipt) return {};
  return {
    se_signature: receipt.signature,
    response_hash: receipt.responseHash,
    metadata: {
      receipt_version: RECEIPT_VERSION,
      provider_key_id: receipt.providerKeyId,
      trust_level: receipt.trustLevel,
      request_hash: receipt.requestHash,
      model_build: receipt.modelBuild,
    },
  };
}

/** The error of a consumer that fell too far behind its stream (or had not read it by the deadline). */
const notRead = () => Errors.timeout("the stream was not read in time: the answer was stopped");

/** The error a post-commit failure turns into. */
function failureOf(event: AttemptEvent): ApiError {
  if (event.type === "invalid") return Errors.invalidProviderOutput("the provider's output failed verification");
  if (event.type === "lost" && event.reason === SLOW_CONSUMER) return notRead();
  if (event.type === "lost" && (event.reason === "cancelled: deadline" || event.reason === UNHELD)) {
    return Errors.timeout("the request timed out");
  }
  if (event.type === "error" && event.code === "timeout") return Errors.timeout("the provider timed out");
  return Errors.providerError("the provider failed while generating the response");
}

/** A tool call of a JSON answer, as OpenAI shapes it. */
export interface ToolCallJson {
  readonly id: string;
  readonly type: "function";
  readonly function: { readonly name: string; arguments: string };
}

/** Adds a fragment (in order, as the session checked) to the calls of a JSON answer; returns the characters added. */
function addToolCall(calls: ToolCallJson[], call: ToolCallDelta): number {
  if (call.id !== undefined && call.name !== undefined) {
    calls.push({ id: call.id, type: "function", function: { name: call.name, arguments: call.arguments ?? "" } });
    return call.name.length + (call.arguments?.length ?? 0);
  }
  const open = calls[call.index];
  if (open && call.arguments) open.function.arguments += call.arguments;
  return call.arguments?.length ?? 0;
}

/** Collects the whole answer. Throws an ApiError when the attempt fails before `complete`. */
export async function collectCompletion(committed: Committed, ctx: ResponseContext, onEnd: OnEnd) {
  let content = "";
  let reasoning = "";
  const toolCalls: ToolCallJson[] = [];
  let toolChars = 0;
  let event: AttemptEvent = unlessUnheld(ctx, committed.attempt, committed.first);
  for (;;) {
    if (event.type === "chunk") {
      if (event.delta.content) content += event.delta.content;
      if (event.delta.reasoning_content) reasoning += event.delta.reasoning_content;
    } else if (event.type === "tool_call") {
      toolChars += addToolCall(toolCalls, event.call);
    } else if (event.type === "complete") {
      const reason = finishReason(event.finishReason, event.usage, ctx.maxTokens);
      await onEnd({ status: "completed", usage: event.usage, completionChars: content.length + toolChars, finishReason: reason });
      return {
        id: ctx.id,
        object: "chat.completion" as const,
        created: ctx.created,
        model: ctx.model,
        choices: [
          {
            index: 0,
            message: {
              role: "assistant" as const,
              // Always a string (the spec's AssistantMessage): "" beside tool calls when the model wrote no text.
              content,
              ...(reasoning ? { reasoning_content: reasoning } : {}),
              ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
            },
            finish_reason: reason,
          },
        ],
        usage: usageJson(event.usage),
        ...receiptJson(event.receipt),
      };
    } else if (event.type !== "accepted") {
      await onEnd({
        status: event.type === "lost" && event.reason === "cancelled: client_gone" ? "cancelled" : "failed",
        usage: undefined,
        completionChars: content.length + toolChars,
        finishReason: undefined,
      });
      throw failureOf(event);
    }
    event = unlessUnheld(ctx, committed.attempt, await committed.attempt.next());
  }
}

// ---- stream framing: pure functions from events to SSE text ----

/** The opening of every chunk of one answer: id, object, created, model. */
function chunkHead(ctx: ResponseContext): string {
  return `{"id":"${ctx.id}","object":"chat.completion.chunk","created":${ctx.created},"model":${JSON.stringify(ctx.model)},`;
}

/** One chunk event: `head`, then the chunk's other fields. */
function chunkEvent(head: string, rest: string): string {
  return `data: ${head}${rest}}\n\n`;
}

/** A content or reasoning delta; `role` is the role field on an answer's first delta, else empty. */
function deltaEvent(head: string, role: string, delta: Delta): string {
  return chunkEvent(head, `"choices":[{"index":0,"delta":{${role}${JSON.stringify(delta).slice(1)},"finish_reason":null}]`);
}

/** The `delta.tool_calls` entry of a stream chunk: id, type and name on a call's first fragment only. */
function toolCallDeltaJson(call: ToolCallDelta) {
  if (call.id !== undefined && call.name !== undefined) {
    return { index: call.index, id: call.id, type: "function", function: { name: call.name, arguments: call.arguments ?? "" } };
  }
  return { index: call.index, function: { arguments: call.arguments ?? "" } };
}

/** A tool-call fragment; `role` as for deltaEvent. */
function toolCallEvent(head: string, role: string, call: ToolCallDelta): string {
  const entry = JSON.stringify(toolCallDeltaJson(call));
  return chunkEvent(head, `"choices":[{"index":0,"delta":{${role}"tool_calls":[${entry}]},"finish_reason":null}]`);
}

/** The end of a completed answer: the usage chunk, the finish chunk (with the receipt) and [DONE]. */
function endEvents(head: string, usage: Usage, reason: string, receipt: VerifiedReceipt | undefined): string {
  const signed = receipt ? `,${JSON.stringify(receiptJson(receipt)).slice(1, -1)}` : "";
  return (
    chunkEvent(head, `"choices":[],"usage":${JSON.stringify(usageJson(usage))}`) +
    chunkEvent(head, `"choices":[{"index":0,"delta":{},"finish_reason":${JSON.stringify(reason)}}]${signed}`) +
    "data: [DONE]\n\n"
  );
}

/** The in-band error event that ends a failed answer (no [DONE] follows). */
function errorEvent(error: ApiError): string {
  return `data: ${JSON.stringify(error.toEnvelope())}\n\n`;
}

// ---- the pump: one write per batch, the deadline, a dropped backlog ----

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
  const pump = new StreamPump(committed, ctx, onEnd);
  committed.attempt.onBacklogDropped(() => void pump.stop("cancelled", notRead()));
  // The abort's reason, when an ApiError, is the error to end with (a lost hold); else the timeout.
  const ended = () => (deadline?.reason instanceof ApiError ? deadline.reason : Errors.timeout("the request timed out"));
  deadline?.addEventListener("abort", () => void pump.stop("failed", ended()), { once: true });
  return pump.stream(await pump.produce());
}

/** One answer's writer state: the event held back, characters relayed, whether it has ended. */
class StreamPump {
  private readonly attempt: Attempt;
  private readonly head: string;
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

  constructor(
    committed: Committed,
    private readonly ctx: ResponseContext,
    private readonly onEnd: OnEnd,
  ) {
    this.attempt = committed.attempt;
    this.pending = committed.first;
    this.head = chunkHead(ctx);
  }

  /** Ends the answer from outside the writer (deadline, backlog dropped): settles, then the last bytes. */
  async stop(status: Outcome["status"], error: ApiError): Promise<void> {
    if (this.finished) return;
    const last = encoder.encode(errorEvent(error));
    await this.end({ status, usage: undefined, finishReason: undefined, completionChars: this.chars });
    this.closing = true;
    if (!this.controller) {
      this.early = last;
      return;
    }
    try {
      this.controller.enqueue(last);
      this.controller.close();
    } catch {
      // the consumer went away meanwhile
    }
  }

  /**
   * The next write: content of every event already received in one piece, waiting for the next event
   * only when none is; at the end, that content with the tail (or error event) once the outcome is
   * settled, and `closing` set. Undefined when the answer was ended from outside meanwhile.
   */
  async produce(): Promise<Uint8Array | undefined> {
    const { attempt, head } = this;
    let out = "";
    for (;;) {
      if (out !== "" && this.pending === undefined && attempt.backlog === 0) return encoder.encode(out);
      const received = this.pending ?? (await attempt.next());
      this.pending = undefined;
      if (this.finished) return undefined;
      const event = unlessUnheld(this.ctx, attempt, received);
      switch (event.type) {
        case "accepted":
          continue;
        case "chunk": {
          const delta = event.delta;
          if (!delta.content && !delta.reasoning_content) continue;
          this.chars += delta.content?.length ?? 0;
          out += deltaEvent(head, this.role, delta);
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
          const tail = encoder.encode(out + endEvents(head, event.usage, reason, event.receipt));
          await this.end({ status: "completed", usage: event.usage, finishReason: reason, completionChars: this.chars });
          this.closing = true;
          return tail;
        }
        default: {
          const status = event.type === "lost" && event.reason === SLOW_CONSUMER ? "cancelled" : "failed";
          const error = event.type === "lost" && event.reason === UNHELD ? unheldError() : failureOf(event);
          const last = encoder.encode(out + errorEvent(error));
          await this.end({ status, usage: undefined, finishReason: undefined, completionChars: this.chars });
          this.closing = true;
          return last;
        }
      }
    }
  }

  /** The stream around the writer, `first` (the first write) already in it. */
  stream(first: Uint8Array | undefined): ReadableStream<Uint8Array> {
    return new ReadableStream<Uint8Array>({
      start: (c) => {
        this.controller = c;
        const bytes = first ?? this.early;
        if (bytes) c.enqueue(bytes);
        if (this.closing) c.close();
      },
      pull: async (c) => {
        // A pull that resolves having enqueued nothing is not called again: produce waits for bytes, and
        // an answer ended from outside meanwhile has been written and closed by `stop`.
        if (this.closing) return;
        const bytes = await this.produce();
        if (bytes === undefined) return;
        try {
          c.enqueue(bytes);
          if (this.closing) c.close();
        } catch {
          // the consumer went away meanwhile
        }
      },
      cancel: () => {
        this.attempt.cancel("client_gone");
        void this.end({ status: "cancelled", usage: undefined, completionChars: this.chars, finishReason: undefined });
      },
    });
  }

  private end(o: Outcome): Promise<void> {
    if (this.finished) return Promise.resolve();
    this.finished = true;
    return this.onEnd(o);
  }
}
