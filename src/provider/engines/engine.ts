/**
 * The engine interface: what the provider agent calls to turn one chat request into a stream of deltas.
 * Contract:
 * - `generate` yields zero or more `delta` and `tool_call` events, then exactly one `done` event, then ends.
 * - `tool_call` events come one call after another: index 0, 1, 2, ...; the first event of an index
 *   carries `id` and `name`, later ones of it only `arguments` (protocol version 2, docs/protocol.md).
 * - A failure throws EngineError with a code from the protocol's closed vocabulary; its message is a
 *   fixed phrase (status codes allowed), never prompt or completion text.
 * - When `signal` aborts, the engine stops at once (pending waits and upstream requests included) and
 *   throws EngineError("cancelled") or simply ends; the agent sends nothing more for that attempt.
 * - Core code calls engines only through this interface; it never branches on `name`.
 */
import type { Delta, EngineRequestBody, ProviderErrorCode, ServedModel, ToolCallDelta, Usage } from "../../protocol/frames.ts";

export interface EngineRequest {
  /** The build id the coordinator routed (one of `models()`). */
  readonly model: string;
  readonly body: EngineRequestBody;
}

export type EngineEvent =
  | { readonly type: "delta"; readonly delta: Delta }
  | { readonly type: "tool_call"; readonly call: ToolCallDelta }
  | { readonly type: "done"; readonly finishReason: string; readonly usage: Usage };

export interface Engine {
  /** Reported in `hello` (e.g. "echo", "openai"). */
  readonly name: string;
  /** The builds this engine serves, as announced in `hello`. */
  models(): readonly ServedModel[];
  /** Build ids ready to answer without a load delay, as reported in heartbeats. */
  warmModels(): readonly string[];
  /** Streams one completion. Throws EngineError. */
  generate(request: EngineRequest, signal: AbortSignal): AsyncIterable<EngineEvent>;
}

export class EngineError extends Error {
  override readonly name = "EngineError";
  constructor(
    readonly code: ProviderErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The delays of one engine call (an echo engine's pacing), each cut short when `signal` aborts: one abort
 * listener for the call, not one per delay (adding and removing a listener cost more than the timer).
 * `wait` resolves after `ms`, or rejects with EngineError("cancelled") as soon as the signal aborts; one
 * delay at a time. Dispose when the call ends.
 */
export class AbortableDelays implements Disposable {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private reject: ((error: EngineError) => void) | undefined;
  private readonly onAbort = (): void => {
    clearTimeout(this.timer);
    this.reject?.(new EngineError("cancelled", "cancelled"));
    this.reject = undefined;
  };

  constructor(private readonly signal: AbortSignal) {
    signal.addEventListener("abort", this.onAbort, { once: true });
  }

  wait(ms: number): Promise<void> {
    if (this.signal.aborted) return Promise.reject(new EngineError("cancelled", "cancelled"));
    if (ms <= 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.reject = reject;
      this.timer = setTimeout(() => {
        this.reject = undefined;
        resolve();
      }, ms);
    });
  }

  [Symbol.dispose](): void {
    clearTimeout(this.timer);
    this.signal.removeEventListener("abort", this.onAbort);
  }
}
