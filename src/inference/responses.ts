/**
 * Turning a committed attempt into the consumer's answer: one ChatCompletion (collectCompletion), and the
 * event stream's framing as pure functions (the pump that writes it: stream-pump.ts), shaped as docs/api.md
 * "Answer (stream false)" and "Event stream" show.
 *
 * A JSON answer's failure before `complete` is still an HTTP error (nothing was sent); a stream's failure
 * after commit is one `data: {"error": ...}` event and no [DONE]; no keepalive comments. Before each
 * event is used, `held` (cluster mode) is asked whether the request's hold is still kept: once it is
 * not, nothing more is relayed (a replica resumed after a stall relays nothing it received meanwhile).
 */
import { randomBytes } from "node:crypto";
import { RECEIPT_VERSION } from "../crypto/receipts.ts";
import { type ApiError, Errors } from "../errors/api-error.ts";
import { type Attempt, type AttemptEvent, type AttemptListener, SLOW_CONSUMER, type VerifiedReceipt } from "../fleet/attempt.ts";
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
export const UNHELD = "cancelled: hold lost";

/** How an answer whose hold was lost ends: a stream's in-band error (a JSON answer's is the deadline's 504). */
export const unheldError = () =>
  Errors.serviceUnavailable("this request's reservation could not be kept: the answer was stopped; retry the request");

/** The event to use next: `event`, or, once the hold is lost, the attempt cancelled as by the deadline. */
export function unlessUnheld(ctx: ResponseContext, attempt: Attempt, event: AttemptEvent): AttemptEvent {
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
export const notRead = () => Errors.timeout("the stream was not read in time: the answer was stopped");

/** The error a post-commit failure turns into. */
export function failureOf(event: AttemptEvent): ApiError {
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

/** Collects the whole answer. Rejects with an ApiError when the attempt fails before `complete`. */
export function collectCompletion(committed: Committed, ctx: ResponseContext, onEnd: OnEnd): Promise<CompletionJson> {
  const answer = Promise.withResolvers<CompletionJson>();
  new Collector(committed, ctx, onEnd, answer).attemptEvent(committed.first);
  return answer.promise;
}

type CompletionJson = Awaited<ReturnType<Collector["completed"]>>;
type Complete = Extract<AttemptEvent, { type: "complete" }>;

/** One JSON answer's text so far; it takes the attempt's events as they come (a listener, no promise per token). */
class Collector implements AttemptListener {
  private readonly attempt: Attempt;
  private pending: AttemptEvent | undefined;
  private content = "";
  private reasoning = "";
  private readonly toolCalls: ToolCallJson[] = [];
  private toolChars = 0;

  constructor(
    committed: Committed,
    private readonly ctx: ResponseContext,
    private readonly onEnd: OnEnd,
    private readonly answer: { resolve(body: CompletionJson): void; reject(e: unknown): void },
  ) {
    this.attempt = committed.attempt;
  }

  /** The next event came (with the others of the same provider message queued behind it). */
  attemptEvent(event: AttemptEvent): void {
    this.pending = event;
    try {
      this.drain();
    } catch (e) {
      this.answer.reject(e);
    }
  }

  /** Takes every event already here; at the end, settles and answers; else waits for the next one. */
  private drain(): void {
    for (;;) {
      const received = this.pending ?? this.attempt.poll();
      this.pending = undefined;
      if (received === undefined) {
        this.attempt.wait(this);
        return;
      }
      const event = unlessUnheld(this.ctx, this.attempt, received);
      if (event.type === "chunk") {
        if (event.delta.content) this.content += event.delta.content;
        if (event.delta.reasoning_content) this.reasoning += event.delta.reasoning_content;
      } else if (event.type === "tool_call") {
        this.toolChars += addToolCall(this.toolCalls, event.call);
      } else if (event.type === "complete") {
        this.completed(event).then(this.answer.resolve, this.answer.reject);
        return;
      } else if (event.type !== "accepted") {
        this.failed(event).catch(this.answer.reject);
        return;
      }
    }
  }

  async completed(event: Complete) {
    const { ctx, content, reasoning, toolCalls } = this;
    const reason = finishReason(event.finishReason, event.usage, ctx.maxTokens);
    await this.onEnd({ status: "completed", usage: event.usage, completionChars: content.length + this.toolChars, finishReason: reason });
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
  }

  private async failed(event: AttemptEvent): Promise<never> {
    await this.onEnd({
      status: event.type === "lost" && event.reason === "cancelled: client_gone" ? "cancelled" : "failed",
      usage: undefined,
      completionChars: this.content.length + this.toolChars,
      finishReason: undefined,
    });
    throw failureOf(event);
  }
}

// ---- stream framing: pure functions from events to SSE text ----

/** The opening of every chunk of one answer: id, object, created, model. */
export function chunkHead(ctx: ResponseContext): string {
  return `{"id":"${ctx.id}","object":"chat.completion.chunk","created":${ctx.created},"model":${JSON.stringify(ctx.model)},`;
}

/** One chunk event: `head`, then the chunk's other fields. */
function chunkEvent(head: string, rest: string): string {
  return `data: ${head}${rest}}\n\n`;
}

/** What every delta event of one answer starts with: `data: `, `head`, the choice up to its delta. */
export function deltaPrefix(head: string): string {
  return `data: ${head}"choices":[{"index":0,"delta":`;
}

const DELTA_TAIL = ',"finish_reason":null}]}\n\n';

/**
 * A content or reasoning delta after its answer's deltaPrefix; `role` is the role field on an answer's
 * first delta, else empty (then the event is three strings joined: one per token in the stream's path).
 */
export function deltaEvent(prefix: string, role: string, delta: Delta): string {
  const json = JSON.stringify(delta);
  return role === "" ? prefix + json + DELTA_TAIL : `${prefix}{${role}${json.slice(1)}${DELTA_TAIL}`;
}

/** The `delta.tool_calls` entry of a stream chunk: id, type and name on a call's first fragment only. */
function toolCallDeltaJson(call: ToolCallDelta) {
  if (call.id !== undefined && call.name !== undefined) {
    return { index: call.index, id: call.id, type: "function", function: { name: call.name, arguments: call.arguments ?? "" } };
  }
  return { index: call.index, function: { arguments: call.arguments ?? "" } };
}

/** A tool-call fragment; `role` as for deltaEvent. */
export function toolCallEvent(head: string, role: string, call: ToolCallDelta): string {
  const entry = JSON.stringify(toolCallDeltaJson(call));
  return chunkEvent(head, `"choices":[{"index":0,"delta":{${role}"tool_calls":[${entry}]},"finish_reason":null}]`);
}

/** The end of a completed answer: the usage chunk, the finish chunk (with the receipt) and [DONE]. */
export function endEvents(head: string, usage: Usage, reason: string, receipt: VerifiedReceipt | undefined): string {
  const signed = receipt ? `,${JSON.stringify(receiptJson(receipt)).slice(1, -1)}` : "";
  return (
    chunkEvent(head, `"choices":[],"usage":${JSON.stringify(usageJson(usage))}`) +
    chunkEvent(head, `"choices":[{"index":0,"delta":{},"finish_reason":${JSON.stringify(reason)}}]${signed}`) +
    "data: [DONE]\n\n"
  );
}

/** The in-band error event that ends a failed answer (no [DONE] follows). */
export function errorEvent(error: ApiError): string {
  return `data: ${JSON.stringify(error.toEnvelope())}\n\n`;
}
