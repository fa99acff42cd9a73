/**
 * Echo engine: deterministic replies for demos, tests and benchmarks (never routable under the
 * production trust policy). Identical input gives identical output.
 *
 * The reply follows the first of four rules that applies (`plan`): a tool result, tool calls, a
 * structured answer, else the words of the last message. Each word or fragment is one token; at most
 * `max_tokens` are emitted, and a cut reply (finish_reason "length") is a prefix of the full one.
 * Usage: prompt_tokens = words over all messages (text, tool-call names and arguments) + 4 per message;
 * completion_tokens = tokens emitted.
 * Timing: an optional delay before the first token, then an optional rate; both end at once on abort.
 */
import { createHash } from "node:crypto";
import type { ServedModel, ToolCallDelta } from "../../protocol/frames.ts";
import { AbortableDelays, type Engine, EngineError, type EngineEvent, type EngineRequest } from "./engine.ts";
import { sampleValue } from "./schema-sample.ts";

export interface EchoOptions {
  /** Build ids served. */
  readonly models: readonly string[];
  /** Tokens per second after the first; 0 = as fast as possible. */
  readonly tokensPerSecond?: number;
  /** Delay before the first token, in ms. */
  readonly firstTokenDelayMs?: number;
}

/** Per-message overhead in the echo engine's prompt token count. */
const ECHO_MESSAGE_OVERHEAD = 4;
/** With no rate, the engine still yields to the event loop this often so a cancel gets through. */
const YIELD_EVERY = 64;
/** Most fragments a tool call's arguments or a structured answer is streamed in. */
const FRAGMENTS = 3;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const words = (text: string): string[] => text.split(/\s+/).filter((w) => w.length > 0);

/** A message's role ("" when it has none). Tolerant of any message shape. */
function roleOf(message: unknown): string {
  return isObj(message) && typeof message.role === "string" ? message.role : "";
}

/** A message's text: its string content, or its text parts joined with "". */
export function messageText(message: unknown): string {
  if (!isObj(message)) return "";
  const content = message.content;
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part) => (isObj(part) && part.type === "text" && typeof part.text === "string" ? part.text : "")).join("");
}

/** Words of a message for the prompt count: its text and its tool calls' names and arguments. */
function promptWords(message: unknown): number {
  let count = words(messageText(message)).length;
  if (isObj(message) && Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) {
      const fn = isObj(call) && isObj(call.function) ? call.function : {};
      count += words(`${typeof fn.name === "string" ? fn.name : ""} ${typeof fn.arguments === "string" ? fn.arguments : ""}`).length;
    }
  }
  return count;
}

/** Up to FRAGMENTS pieces of about equal length whose concatenation is `text` (surrogate pairs kept whole). */
export function fragmentsOf(text: string): string[] {
  const points = [...text];
  if (points.length === 0) return [];
  const size = Math.ceil(points.length / FRAGMENTS);
  const out: string[] = [];
  for (let i = 0; i < points.length; i += size) out.push(points.slice(i, i + size).join(""));
  return out;
}

interface FunctionTool {
  readonly name: string;
  readonly parameters: unknown;
}

function functionTools(tools: unknown): FunctionTool[] {
  if (!Array.isArray(tools)) return [];
  const out: FunctionTool[] = [];
  for (const tool of tools) {
    const fn = isObj(tool) && isObj(tool.function) ? tool.function : undefined;
    if (fn && typeof fn.name === "string" && fn.name.length > 0) out.push({ name: fn.name, parameters: fn.parameters });
  }
  return out;
}

/** The tools rule 2 calls, in order. */
function chosenTools(body: Obj, text: string, tools: readonly FunctionTool[]): FunctionTool[] {
  const byName = new Map(tools.map((t) => [t.name, t]));
  const chosen: FunctionTool[] = [];
  for (const word of text.split(/[^A-Za-z0-9_-]+/)) {
    const tool = byName.get(word);
    if (tool && !chosen.includes(tool)) chosen.push(tool);
  }
  if (chosen.length === 0) {
    const choice = body.tool_choice;
    const named =
      isObj(choice) && isObj(choice.function) && typeof choice.function.name === "string" ? byName.get(choice.function.name) : undefined;
    chosen.push(named ?? (tools[0] as FunctionTool));
  }
  return body.parallel_tool_calls === false ? chosen.slice(0, 1) : chosen;
}

/** One reply step: a text delta or a tool-call fragment; each is one token. */
type Piece = { readonly content: string } | { readonly call: ToolCallDelta };

/**
 * The reply and its finish_reason when it is not cut, by the first rule that applies (a message's text
 * is its string content, or its text parts joined with ""):
 * 1. The last message is a `tool` message: content "tool result: " + the texts of the `tool` messages
 *    after the last assistant turn, joined with " "; finish_reason "stop" (a tool loop's second turn).
 * 2. The request has `tools`, `tool_choice` is not "none" and the last message is a `user` message: tool
 *    calls, one per tool whose name is a word of that message (in order of appearance; only the first
 *    with `parallel_tool_calls: false`), else the tool `tool_choice` names, else the first tool. Call n
 *    (0, 1, ...) has id `call_<n>_<first 8 hex of SHA-256 of the messages' JSON>` and arguments a JSON
 *    object that validates against the tool's `parameters` (schema-sample.ts, strings = that message's
 *    text), streamed in fragments; finish_reason "tool_calls".
 * 3. `response_format` `json_schema`: content = a JSON document valid against its schema (the same
 *    generator); `json_object`: `{"echo": <the last user message's text>}`. Streamed in fragments.
 * 4. Otherwise the words of the last message's text: one whitespace-separated word per token, with one
 *    following space, except the reply's final word.
 * Fragments (rules 1-3) are up to three pieces of about equal length, each its own event after a turn of
 * the event loop (so they leave as separate frames).
 */
function plan(body: Obj, messages: readonly unknown[]): { pieces: Piece[]; finish: string; fragmented: boolean } {
  const last = messages[messages.length - 1];
  const role = roleOf(last);
  if (role === "tool") {
    let start = 0;
    messages.forEach((m, i) => {
      if (roleOf(m) === "assistant") start = i + 1;
    });
    const results = messages
      .slice(start)
      .filter((m) => roleOf(m) === "tool")
      .map(messageText);
    return { pieces: fragmentsOf(`tool result: ${results.join(" ")}`).map((content) => ({ content })), finish: "stop", fragmented: true };
  }
  const tools = functionTools(body.tools);
  const text = messageText(last);
  if (tools.length > 0 && body.tool_choice !== "none" && role === "user") {
    const digest = createHash("sha256").update(JSON.stringify(messages)).digest("hex").slice(0, 8);
    const pieces: Piece[] = [];
    chosenTools(body, text, tools).forEach((tool, index) => {
      const args = JSON.stringify(isObj(tool.parameters) ? sampleValue(tool.parameters, text) : {});
      fragmentsOf(args).forEach((part, i) => {
        pieces.push({
          call: i === 0 ? { index, id: `call_${index}_${digest}`, name: tool.name, arguments: part } : { index, arguments: part },
        });
      });
    });
    return { pieces, finish: "tool_calls", fragmented: true };
  }
  const format = body.response_format;
  if (isObj(format) && (format.type === "json_schema" || format.type === "json_object")) {
    const userText = messageText([...messages].reverse().find((m) => roleOf(m) === "user"));
    const spec = isObj(format.json_schema) ? format.json_schema : {};
    const document = format.type === "json_object" ? { echo: userText } : sampleValue(spec.schema, userText);
    return { pieces: fragmentsOf(JSON.stringify(document)).map((content) => ({ content })), finish: "stop", fragmented: true };
  }
  const reply = words(text);
  return { pieces: reply.map((w, i) => ({ content: i < reply.length - 1 ? `${w} ` : w })), finish: "stop", fragmented: false };
}

export function createEchoEngine(options: EchoOptions): Engine {
  const models: readonly ServedModel[] = Object.freeze(options.models.map((build_id) => Object.freeze({ build_id })));
  const warm = Object.freeze([...options.models]);
  const intervalMs = options.tokensPerSecond && options.tokensPerSecond > 0 ? 1000 / options.tokensPerSecond : 0;
  const firstDelayMs = options.firstTokenDelayMs ?? 0;

  async function* generate(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EngineEvent> {
    if (!options.models.includes(request.model)) throw new EngineError("model_not_loaded", "model not served by this engine");
    const body = request.body as Obj;
    // Read as unknown shapes: string content or text parts, tool calls, tool messages.
    const messages: readonly unknown[] = request.body.messages;
    const budget = request.body.max_tokens;
    const promptTokens = messages.reduce<number>((sum, m) => sum + promptWords(m) + ECHO_MESSAGE_OVERHEAD, 0);
    const { pieces, finish, fragmented } = plan(body, messages);
    const count = Math.min(pieces.length, budget);
    using delays = new AbortableDelays(signal);
    for (let i = 0; i < count; i++) {
      if (i === 0) await delays.wait(firstDelayMs);
      else if (intervalMs > 0) await delays.wait(intervalMs);
      else if (fragmented || i % YIELD_EVERY === 0) await new Promise((resolve) => setImmediate(resolve));
      if (signal.aborted) throw new EngineError("cancelled", "cancelled");
      const piece = pieces[i] as Piece;
      yield "call" in piece ? { type: "tool_call", call: piece.call } : { type: "delta", delta: { content: piece.content } };
    }
    if (signal.aborted) throw new EngineError("cancelled", "cancelled");
    yield {
      type: "done",
      finishReason: count < pieces.length ? "length" : finish,
      usage: { prompt_tokens: promptTokens, completion_tokens: count },
    };
  }

  return {
    name: "echo",
    models: () => models,
    warmModels: () => warm,
    generate,
  };
}
