/**
 * Turning a committed attempt into the consumer's answer.
 *
 * Non-streaming: collect every delta and tool-call fragment until `complete`, then one ChatCompletion
 * (`message.tool_calls` as OpenAI shapes them, `content` null when there is none but tool calls). A
 * failure before `complete` is still an HTTP error (nothing was sent yet).
 *
 * Streaming (the spec's phase table): the HTTP 200 and `text/event-stream` are sent by the caller only
 * after dispatch committed on first content (text or a tool call). Then: content and `delta.tool_calls`
 * chunks in the order received (the first delta also carries `role: "assistant"`, as OpenAI's does) (a call's first fragment `{index, id, type, function: {name, arguments}}`,
 * later ones `{index, function: {arguments}}`), a usage-only chunk, the terminal finish chunk, exactly
 * one `data: [DONE]`. A failure after commit is one `data: {"error": ...}` event
 * and no [DONE]. No keepalive comments. A client that goes away cancels the attempt at once.
 *
 * A consumer that stops reading is not waited for: when its backlog is dropped (fleet/attempt.ts,
 * MAX_BACKLOG_CHARS) or the request deadline passes, what was relayed is settled at once and one
 * in-band timeout event is queued behind it, so no reservation waits for a reader that never comes.
 *
 * finish_reason is `length` exactly when the provider used the whole output budget: its counts were
 * bounded by then (billing/usage-bounds.ts: never above the budget), and a `length` claimed below the
 * budget is shown as `stop`.
 */
import { randomBytes } from "node:crypto";
import { RECEIPT_VERSION } from "../crypto/receipts.ts";
import { type ApiError, Errors } from "../errors/api-error.ts";
import { type AttemptEvent, SLOW_CONSUMER, type VerifiedReceipt } from "../fleet/attempt.ts";
import type { ToolCallDelta, Usage } from "../protocol/frames.ts";
import type { Committed } from "./dispatch.ts";

export interface ResponseContext {
  /** The model id the client asked for (an alias stays an alias). */
  readonly model: string;
  readonly maxTokens: number;
  readonly created: number;
  readonly id: string;
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
export function receiptJson(receipt: VerifiedReceipt | undefined) {
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
  if (event.type === "lost" && event.reason === "cancelled: deadline") return Errors.timeout("the request timed out");
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

/** The `delta.tool_calls` entry of a stream chunk: id, type and name on a call's first fragment only. */
function toolCallDeltaJson(call: ToolCallDelta) {
  if (call.id !== undefined && call.name !== undefined) {
    return { index: call.index, id: call.id, type: "function", function: { name: call.name, arguments: call.arguments ?? "" } };
  }
  return { index: call.index, function: { arguments: call.arguments ?? "" } };
}

/** Collects the whole answer. Throws an ApiError when the attempt fails before `complete`. */
export async function collectCompletion(committed: Committed, ctx: ResponseContext, onEnd: OnEnd) {
  let content = "";
  let reasoning = "";
  const toolCalls: ToolCallJson[] = [];
  let toolChars = 0;
  let event: AttemptEvent = committed.first;
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
              // As OpenAI answers: null content beside tool calls when the model wrote none.
              content: content === "" && toolCalls.length > 0 ? null : content,
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
    event = await committed.attempt.next();
  }
}

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
  const { attempt } = committed;
  const head = `{"id":"${ctx.id}","object":"chat.completion.chunk","created":${ctx.created},"model":${JSON.stringify(ctx.model)},`;
  const chunk = (rest: string) => `data: ${head}${rest}}\n\n`;
  /** An in-band error event, after `before` (content gathered for the same write). */
  const errorEvent = (error: ApiError, before = "") => encoder.encode(`${before}data: ${JSON.stringify(error.toEnvelope())}\n\n`);
  let pending: AttemptEvent | undefined = committed.first;
  let chars = 0;
  /** OpenAI's first delta names the role; clients such as openai's stream helper require it. */
  let role = '"role":"assistant",';
  let finished = false;
  /** The answer's last bytes are written (or are `early`): close after them. */
  let closing = false;
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  /** Last bytes of an answer ended from outside before the stream existed. */
  let early: Uint8Array | undefined;
  const end = (o: Outcome): Promise<void> => {
    if (finished) return Promise.resolve();
    finished = true;
    return onEnd(o);
  };
  /** Ends the answer from outside the writer (deadline, backlog dropped): settles, then the last bytes. */
  const stop = async (o: Omit<Outcome, "completionChars">, last: Uint8Array): Promise<void> => {
    if (finished) return;
    await end({ ...o, completionChars: chars });
    closing = true;
    if (!controller) {
      early = last;
      return;
    }
    try {
      controller.enqueue(last);
      controller.close();
    } catch {
      // the consumer went away meanwhile
    }
  };
  const stopped = { usage: undefined, finishReason: undefined };
  attempt.onBacklogDropped(() => void stop({ status: "cancelled", ...stopped }, errorEvent(notRead())));
  const expire = () => void stop({ status: "failed", ...stopped }, errorEvent(Errors.timeout("the request timed out")));
  deadline?.addEventListener("abort", expire, { once: true });

  /**
   * The next write: content of every event already received in one piece, waiting for the next event
   * only when none is; at the end, that content with the tail (or error event) once the outcome is
   * settled, and `closing` set. Undefined when the answer was ended from outside meanwhile.
   */
  const produce = async (): Promise<Uint8Array | undefined> => {
    let out = "";
    for (;;) {
      if (out !== "" && pending === undefined && attempt.backlog === 0) return encoder.encode(out);
      const event = pending ?? (await attempt.next());
      pending = undefined;
      if (finished) return undefined;
      switch (event.type) {
        case "accepted":
          continue;
        case "chunk": {
          const delta = event.delta;
          if (!delta.content && !delta.reasoning_content) continue;
          chars += delta.content?.length ?? 0;
          out += chunk(`"choices":[{"index":0,"delta":{${role}${JSON.stringify(delta).slice(1)},"finish_reason":null}]`);
          role = "";
          continue;
        }
        case "tool_call": {
          const call = event.call;
          chars += (call.name?.length ?? 0) + (call.arguments?.length ?? 0);
          const entry = JSON.stringify(toolCallDeltaJson(call));
          out += chunk(`"choices":[{"index":0,"delta":{${role}"tool_calls":[${entry}]},"finish_reason":null}]`);
          role = "";
          continue;
        }
        case "complete": {
          const reason = finishReason(event.finishReason, event.usage, ctx.maxTokens);
          const receipt = event.receipt ? `,${JSON.stringify(receiptJson(event.receipt)).slice(1, -1)}` : "";
          // Content gathered so far, the usage chunk, the finish chunk and [DONE] leave together once
          // the charge is durable: one write instead of two (the settlement wait would otherwise split them).
          const tail = encoder.encode(
            out +
              chunk(`"choices":[],"usage":${JSON.stringify(usageJson(event.usage))}`) +
              chunk(`"choices":[{"index":0,"delta":{},"finish_reason":${JSON.stringify(reason)}}]${receipt}`) +
              "data: [DONE]\n\n",
          );
          await end({ status: "completed", usage: event.usage, finishReason: reason, completionChars: chars });
          closing = true;
          return tail;
        }
        default: {
          const status = event.type === "lost" && event.reason === SLOW_CONSUMER ? "cancelled" : "failed";
          const last = errorEvent(failureOf(event), out);
          await end({ status, ...stopped, completionChars: chars });
          closing = true;
          return last;
        }
      }
    }
  };

  const first = await produce();
  return new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
      const bytes = first ?? early;
      if (bytes) c.enqueue(bytes);
      if (closing) c.close();
    },
    async pull(c) {
      // A pull that resolves having enqueued nothing is not called again: produce waits for bytes, and
      // an answer ended from outside meanwhile has been written and closed by `stop`.
      if (closing) return;
      const bytes = await produce();
      if (bytes === undefined) return;
      try {
        c.enqueue(bytes);
        if (closing) c.close();
      } catch {
        // the consumer went away meanwhile
      }
    },
    cancel() {
      attempt.cancel("client_gone");
      void end({ status: "cancelled", usage: undefined, completionChars: chars, finishReason: undefined });
    },
  });
}
