/**
 * Echo engine: deterministic replies for demos, tests and benchmarks (never routable under the
 * production trust policy).
 *
 * Reply: the words of the last message's text (its string content, or its text parts joined). A token is one whitespace-separated word, emitted
 * with one following space, except the reply's final word. At most `max_tokens` tokens are emitted:
 * finish_reason "length" when the budget cut the reply (a cut reply is a prefix of the full reply),
 * "stop" otherwise.
 * Usage: prompt_tokens = words over all messages' texts + 4 per message; completion_tokens = tokens emitted.
 * Timing: an optional delay before the first token, then an optional rate; both end at once on abort.
 * Identical input gives identical output.
 */
import { messageText, type ServedModel } from "../../protocol/messages.ts";
import { abortableDelay, type Engine, EngineError, type EngineEvent, type EngineRequest } from "./engine.ts";

export interface EchoOptions {
  /** Build ids served. */
  readonly models: readonly string[];
  /** Tokens per second after the first; 0 = as fast as possible. */
  readonly tokensPerSecond?: number;
  /** Delay before the first token, in ms. */
  readonly firstTokenDelayMs?: number;
}

/** Per-message overhead in the echo engine's prompt token count. */
export const ECHO_MESSAGE_OVERHEAD = 4;
/** With no rate, the engine still yields to the event loop this often so a cancel gets through. */
const YIELD_EVERY = 64;

const words = (text: string): string[] => text.split(/\s+/).filter((w) => w.length > 0);

export function createEchoEngine(options: EchoOptions): Engine {
  const models: readonly ServedModel[] = Object.freeze(options.models.map((build_id) => Object.freeze({ build_id })));
  const warm = Object.freeze([...options.models]);
  const intervalMs = options.tokensPerSecond && options.tokensPerSecond > 0 ? 1000 / options.tokensPerSecond : 0;
  const firstDelayMs = options.firstTokenDelayMs ?? 0;

  async function* generate(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EngineEvent> {
    if (!options.models.includes(request.model)) throw new EngineError("model_not_loaded", "model not served by this engine");
    const { messages, max_tokens: budget } = request.body;
    const promptTokens = messages.reduce((sum, m) => sum + words(messageText(m)).length + ECHO_MESSAGE_OVERHEAD, 0);
    const last = messages[messages.length - 1];
    const reply = words(last ? messageText(last) : "");
    const count = Math.min(reply.length, budget);
    for (let i = 0; i < count; i++) {
      if (i === 0) await abortableDelay(firstDelayMs, signal);
      else if (intervalMs > 0) await abortableDelay(intervalMs, signal);
      else if (i % YIELD_EVERY === 0) await new Promise((resolve) => setImmediate(resolve));
      if (signal.aborted) throw new EngineError("cancelled", "cancelled");
      const word = reply[i] as string;
      yield { type: "delta", delta: { content: i < reply.length - 1 ? `${word} ` : word } };
    }
    if (signal.aborted) throw new EngineError("cancelled", "cancelled");
    yield {
      type: "done",
      finishReason: count < reply.length ? "length" : "stop",
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
