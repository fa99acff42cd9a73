/**
 * An Engine the test drives by hand: every `generate` call is recorded with controls to emit a delta,
 * finish or fail, and flags telling whether the agent aborted it and whether the generator ended.
 */
import type { ProviderErrorCode, Usage } from "../../src/protocol/frames.ts";
import { type Engine, EngineError, type EngineEvent, type EngineRequest } from "../../src/provider/engines/engine.ts";

type Command =
  | { readonly kind: "delta"; readonly text: string }
  | { readonly kind: "done"; readonly finishReason: string; readonly usage: Usage }
  | { readonly kind: "fail"; readonly code: ProviderErrorCode };

export interface ManualCall {
  readonly request: EngineRequest;
  readonly signal: AbortSignal;
  /** True once the generator has returned or thrown. */
  readonly ended: boolean;
  emit(text: string): void;
  finish(usage?: Usage, finishReason?: string): void;
  fail(code: ProviderErrorCode): void;
}

export interface ManualEngine extends Engine {
  readonly calls: ManualCall[];
}

export function manualEngine(models: readonly string[] = ["org/manual"]): ManualEngine {
  const calls: ManualCall[] = [];

  async function* generate(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EngineEvent> {
    const queue: Command[] = [];
    let wake: (() => void) | undefined;
    const push = (c: Command) => {
      queue.push(c);
      wake?.();
    };
    const call = {
      request,
      signal,
      ended: false,
      emit: (text: string) => push({ kind: "delta", text }),
      finish: (usage: Usage = { prompt_tokens: 1, completion_tokens: 1 }, finishReason = "stop") =>
        push({ kind: "done", finishReason, usage }),
      fail: (code: ProviderErrorCode) => push({ kind: "fail", code }),
    };
    calls.push(call);
    const onAbort = () => wake?.();
    signal.addEventListener("abort", onAbort);
    try {
      for (;;) {
        while (queue.length === 0 && !signal.aborted) {
          await new Promise<void>((resolve) => {
            wake = resolve;
          });
        }
        if (signal.aborted) throw new EngineError("cancelled", "cancelled");
        const command = queue.shift() as Command;
        if (command.kind === "fail") throw new EngineError(command.code, "manual failure");
        if (command.kind === "done") {
          yield { type: "done", finishReason: command.finishReason, usage: command.usage };
          return;
        }
        yield { type: "delta", delta: { content: command.text } };
      }
    } finally {
      call.ended = true;
      signal.removeEventListener("abort", onAbort);
    }
  }

  return {
    name: "manual",
    calls,
    models: () => models.map((build_id) => ({ build_id })),
    warmModels: () => models,
    generate,
  };
}
