/**
 * OpenAI-compatible engine: serves models from any runtime speaking `POST /v1/chat/completions` with
 * server-sent events (llama.cpp server, Ollama, vLLM, mlx-lm). Sampling and pass-through fields go
 * upstream as-is (`upstreamBody`).
 *
 * Stream: `data: <chat.completion.chunk JSON>` events until `data: [DONE]` (or the end of the body after
 * a finish_reason). Content and reasoning deltas become deltas, tool-call fragments tool_call events
 * (`ToolCalls`), the last finish_reason and the usage chunk `done` (a `stop` after tool calls becomes
 * `tool_calls`: some runtimes, e.g. older Ollama, say `stop`); without a usage chunk, usage is estimated.
 * Failures map onto the closed vocabulary (docs/protocol.md, "Error vocabulary"; `statusError`) with
 * fixed messages, never content; an abort is `cancelled` and aborts the upstream request too.
 */

import { randomBytes } from "node:crypto";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import {
  type Delta,
  type EngineRequestBody,
  MAX_TOOL_CALL_ID,
  MAX_TOOL_CALLS,
  MAX_TOOL_NAME,
  type ServedModel,
  type ToolCallDelta,
  type Usage,
} from "../../protocol/frames.ts";
import { deltaWith } from "../../protocol/parse.ts";
import { type Engine, EngineError, type EngineEvent, type EngineRequest } from "./engine.ts";

export interface OpenAIEngineOptions {
  /** Base URL including `/v1`, without a trailing slash. */
  readonly upstream: string;
  readonly models: readonly { readonly buildId: string; readonly upstreamName: string }[];
  /** Injected for tests; defaults to the global fetch. */
  readonly fetch?: (input: string, init: RequestInit) => Promise<Response>;
}

/** Fields the engine sets itself; the rest of the body is forwarded untouched. */
const OWN_FIELDS = new Set(["model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options"]);
/** The upstream request's headers and stream options: the same for every request. */
const UPSTREAM_HEADERS = Object.freeze({ "content-type": "application/json", accept: "text/event-stream" });
const STREAM_OPTIONS = Object.freeze({ include_usage: true });
/** Bytes of an error body read to classify a 400 (never echoed). */
const MAX_ERROR_BODY = 16 * 1024;
const CONTEXT_PATTERN = /context[ _-]?(length|window|size)|maximum context|too many tokens|prompt is too long|exceeds? the (model|max)/i;
/** Codes that mean the runtime cannot be used right now; the model is reported cold until a success. */
const COLD_CODES = new Set(["engine_unavailable", "model_not_loaded"]);

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const count = (v: unknown): number | undefined => (typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : undefined);

/**
 * `{...body without messages/max_tokens/max_completion_tokens, model: <upstream name>, messages,
 * max_tokens, stream: true, stream_options: {include_usage: true}}`: every sampling and pass-through
 * field (temperature, top_p, stop, seed, penalties, ...) is forwarded as-is.
 */
function upstreamBody(name: string, body: EngineRequestBody): Obj {
  // One object, built in place (no entry pairs, no spread copy): the pass-through fields first, as sent.
  const out: Obj = {};
  for (const k in body) if (Object.hasOwn(body, k) && !OWN_FIELDS.has(k)) out[k] = (body as Obj)[k];
  out.model = name;
  out.messages = body.messages;
  out.max_tokens = body.max_tokens;
  out.stream = true;
  out.stream_options = STREAM_OPTIONS;
  return out;
}

async function readBounded(response: Response): Promise<string> {
  if (!response.body) return "";
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  try {
    while (text.length < MAX_ERROR_BODY) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
  } catch {
    // a broken error body classifies as a plain status
  } finally {
    reader.cancel().catch(() => {});
  }
  return text;
}

/**
 * An upstream status as a protocol error code: 404 -> model_not_loaded; 400/422 naming the context
 * length -> context_length_exceeded, other 400/422 -> invalid_request; 429, 503 -> busy; 401, 403 ->
 * engine_unavailable; any other -> engine_error. (Unreachable -> engine_unavailable, and an in-stream
 * error or a malformed stream -> engine_error, are decided elsewhere.) Messages are fixed phrases with
 * the status code, never the body.
 */
async function statusError(response: Response): Promise<EngineError> {
  const s = response.status;
  if (s === 404) return new EngineError("model_not_loaded", "upstream answered 404");
  if (s === 400 || s === 422) {
    const text = await readBounded(response);
    return CONTEXT_PATTERN.test(text)
      ? new EngineError("context_length_exceeded", `upstream answered ${s}: context length exceeded`)
      : new EngineError("invalid_request", `upstream answered ${s}: request refused`);
  }
  response.body?.cancel().catch(() => {});
  if (s === 429 || s === 503) return new EngineError("busy", `upstream answered ${s}: busy`);
  if (s === 401 || s === 403) return new EngineError("engine_unavailable", `upstream answered ${s}: not authorized`);
  return new EngineError("engine_error", `upstream answered ${s}`);
}

function streamError(value: unknown): EngineError {
  const text = JSON.stringify(value) ?? "";
  return CONTEXT_PATTERN.test(text)
    ? new EngineError("context_length_exceeded", "upstream stream error: context length exceeded")
    : new EngineError("engine_error", "upstream stream error");
}

function usageOf(v: unknown): Usage | undefined {
  if (!isObj(v)) return undefined;
  const prompt = count(v.prompt_tokens);
  const completion = count(v.completion_tokens);
  if (prompt === undefined || completion === undefined) return undefined;
  const cached = isObj(v.prompt_tokens_details) ? count(v.prompt_tokens_details.cached_tokens) : undefined;
  const reasoning = isObj(v.completion_tokens_details) ? count(v.completion_tokens_details.reasoning_tokens) : undefined;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    ...(cached !== undefined ? { cached_tokens: Math.min(cached, prompt) } : {}),
    ...(reasoning !== undefined ? { reasoning_tokens: reasoning } : {}),
  };
}

/**
 * Prompt tokens when the runtime sends no usage chunk: 4 characters per token + 4 per message (the
 * completion then counts one token per delta or tool-call fragment).
 */
function estimatePromptTokens(body: EngineRequestBody): number {
  // Any message shape: string content as it is, other content (text parts, null) and tool calls as JSON.
  const chars = (m: unknown): number => {
    if (!isObj(m)) return 0;
    const content = typeof m.content === "string" ? m.content.length : JSON.stringify(m.content ?? "").length - 2;
    return content + (m.tool_calls === undefined ? 0 : JSON.stringify(m.tool_calls).length);
  };
  return (body.messages as readonly unknown[]).reduce<number>((sum, m) => sum + Math.ceil(chars(m) / 4) + 4, 0);
}

export function createOpenAIEngine(options: OpenAIEngineOptions): Engine {
  const doFetch = options.fetch ?? ((input: string, init: RequestInit) => fetch(input, init));
  const names = new Map(options.models.map((m) => [m.buildId, m.upstreamName]));
  const served: readonly ServedModel[] = Object.freeze(options.models.map((m) => Object.freeze({ build_id: m.buildId })));
  const cold = new Set<string>();
  const url = `${options.upstream}/chat/completions`;

  // One generator per request, not one delegating to another: every event would pass through both.
  async function* generate(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EngineEvent> {
    const name = names.get(request.model);
    if (name === undefined) throw new EngineError("model_not_loaded", "model not served by this engine");
    try {
      let response: Response;
      try {
        response = await doFetch(url, {
          method: "POST",
          headers: UPSTREAM_HEADERS,
          body: JSON.stringify(upstreamBody(name, request.body)),
          signal,
        });
      } catch {
        if (signal.aborted) throw new EngineError("cancelled", "cancelled");
        throw new EngineError("engine_unavailable", "upstream unreachable");
      }
      if (!response.ok) throw await statusError(response);
      if (!response.body || !(response.headers.get("content-type") ?? "").includes("text/event-stream")) {
        response.body?.cancel().catch(() => {});
        throw new EngineError("engine_error", "upstream did not answer with an event stream");
      }

      const pending: EventSourceMessage[] = [];
      const parser = createParser({ onEvent: (event) => pending.push(event) });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let finishReason: string | undefined;
      let usage: Usage | undefined;
      let deltas = 0;
      const tools = new ToolCalls();
      let finished = false;
      try {
        while (!finished) {
          let chunk: Awaited<ReturnType<typeof reader.read>>;
          try {
            chunk = await reader.read();
          } catch {
            if (signal.aborted) throw new EngineError("cancelled", "cancelled");
            throw new EngineError("engine_error", "upstream stream broke");
          }
          if (chunk.done) {
            parser.feed(decoder.decode());
            parser.reset({ consume: true });
          } else {
            parser.feed(decoder.decode(chunk.value, { stream: true }));
          }
          // The events this read completed, in order (the array is reused: no copy per read).
          for (let i = 0; i < pending.length && !finished; i++) {
            const event = pending[i] as EventSourceMessage;
            if (event.data === "[DONE]") {
              finished = true;
              break;
            }
            let data: unknown;
            try {
              data = JSON.parse(event.data);
            } catch {
              throw new EngineError("engine_error", "malformed upstream stream");
            }
            if (!isObj(data)) throw new EngineError("engine_error", "malformed upstream stream");
            if (data.error !== undefined && data.error !== null) throw streamError(data.error);
            usage = usageOf(data.usage) ?? usage;
            const choices = data.choices;
            if (choices === undefined || choices === null) continue;
            if (!Array.isArray(choices)) throw new EngineError("engine_error", "malformed upstream stream");
            const choice: unknown = choices[0];
            if (choice === undefined) continue;
            if (!isObj(choice)) throw new EngineError("engine_error", "malformed upstream stream");
            const delta = deltaOf(choice.delta);
            if (delta) {
              deltas++;
              yield { type: "delta", delta };
            }
            // Most events carry no tool call: no generator for them.
            if (hasToolCalls(choice.delta)) {
              for (const call of tools.fragments(choice.delta)) {
                deltas++;
                yield { type: "tool_call", call };
              }
            }
            const reason = choice.finish_reason;
            if (typeof reason === "string" && reason.length > 0 && reason.length <= 64) finishReason = reason;
          }
          pending.length = 0;
          if (chunk.done) break;
        }
      } finally {
        reader.cancel().catch(() => {});
      }
      if (signal.aborted) throw new EngineError("cancelled", "cancelled");
      if (!finished && finishReason === undefined) throw new EngineError("engine_error", "upstream stream ended early");
      const reported = finishReason ?? "stop";
      yield {
        type: "done",
        finishReason: reported === "stop" && tools.count > 0 ? "tool_calls" : reported,
        usage: usage ?? { prompt_tokens: estimatePromptTokens(request.body), completion_tokens: deltas },
      };
      cold.delete(request.model);
    } catch (e) {
      const error = toEngineError(e, signal);
      if (COLD_CODES.has(error.code)) cold.add(request.model);
      throw error;
    }
  }

  return {
    name: "openai",
    models: () => served,
    warmModels: () => options.models.map((m) => m.buildId).filter((id) => !cold.has(id)),
    generate,
  };
}

/** A delta with a `tool_calls` field (ToolCalls.fragments reads and checks it). */
function hasToolCalls(delta: unknown): boolean {
  return isObj(delta) && delta.tool_calls !== undefined && delta.tool_calls !== null;
}

function deltaOf(v: unknown): Delta | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObj(v)) throw new EngineError("engine_error", "malformed upstream stream");
  const content = typeof v.content === "string" && v.content.length > 0 ? v.content : undefined;
  const reasoningRaw = typeof v.reasoning_content === "string" ? v.reasoning_content : v.reasoning;
  const reasoning = typeof reasoningRaw === "string" && reasoningRaw.length > 0 ? reasoningRaw : undefined;
  return deltaWith(content, reasoning);
}

/**
 * The runtime's tool-call fragments, renumbered into the protocol's order. A fragment `{index, id?, type?,
 * function: {name?, arguments?}}` continues the current call when it has the same `index` (or none) and
 * no new `id`, else opens the next call; calls are renumbered 0, 1, 2, ... in order of appearance (some
 * runtimes send index 0 for every call, others whole calls in one fragment). A call's first fragment
 * must name its function; a missing id is made up (`call_` + 24 random hex). A fragment going back to an
 * earlier call (interleaved calls) is a malformed stream.
 */
class ToolCalls {
  /** Calls opened so far. */
  count = 0;
  private current: { readonly runtimeIndex: number | undefined; readonly runtimeId: string | undefined } | undefined;
  private readonly closed = new Set<number>();

  *fragments(delta: unknown): Generator<ToolCallDelta> {
    if (!isObj(delta) || delta.tool_calls === undefined || delta.tool_calls === null) return;
    if (!Array.isArray(delta.tool_calls)) throw malformed();
    for (const raw of delta.tool_calls) {
      if (!isObj(raw)) throw malformed();
      const fn = raw.function === undefined || raw.function === null ? {} : raw.function;
      if (!isObj(fn)) throw malformed();
      const runtimeIndex = typeof raw.index === "number" && Number.isInteger(raw.index) ? raw.index : undefined;
      const id = typeof raw.id === "string" && raw.id.length > 0 ? raw.id : undefined;
      const name = typeof fn.name === "string" && fn.name.length > 0 ? fn.name : undefined;
      // Arguments are a JSON text; a runtime that sends the object itself gets it serialized.
      const args = typeof fn.arguments === "string" ? fn.arguments : isObj(fn.arguments) ? JSON.stringify(fn.arguments) : undefined;
      const current = this.current;
      const continues =
        current !== undefined &&
        (runtimeIndex === undefined || runtimeIndex === current.runtimeIndex) &&
        (id === undefined || id === current.runtimeId);
      if (continues) {
        if (args) yield { index: this.count - 1, arguments: args };
        continue;
      }
      if (runtimeIndex !== undefined && this.closed.has(runtimeIndex) && id === undefined) throw malformed();
      if (name === undefined || name.length > MAX_TOOL_NAME || this.count >= MAX_TOOL_CALLS) throw malformed();
      if (current?.runtimeIndex !== undefined) this.closed.add(current.runtimeIndex);
      const callId = id !== undefined && id.length <= MAX_TOOL_CALL_ID ? id : `call_${randomBytes(12).toString("hex")}`;
      this.current = { runtimeIndex, runtimeId: id };
      yield { index: this.count++, id: callId, name, ...(args ? { arguments: args } : {}) };
    }
  }
}

const malformed = () => new EngineError("engine_error", "malformed upstream stream");

function toEngineError(e: unknown, signal: AbortSignal): EngineError {
  if (signal.aborted) return new EngineError("cancelled", "cancelled");
  if (e instanceof EngineError) return e;
  return new EngineError("engine_error", "engine failed");
}
