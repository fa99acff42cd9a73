/**
 * The attempts a provider is running (docs/protocol.md, "One attempt"): each one drives one engine call and
 * turns its events into frames. Text and tool-call fragments of one event-loop turn share a frame; one
 * too large for a frame is split (MAX_CHUNK_CHARS UTF-16 units each, surrogate pairs kept whole). Tool
 * calls must come one after another (index 0, 1, ...; id and name on the first fragment only): an engine
 * breaking that order fails the attempt with `engine_error`. Sealed attempts: sealed-attempt.ts.
 */
import type { ChunkSealer } from "../crypto/chunks.ts";
import type { Logger } from "../observability/logger.ts";
import {
  type Delta,
  type Inference,
  MAX_TOOL_CALLS,
  type ProviderErrorCode,
  type ProviderFrame,
  type SealedInference,
  type ToolCallDelta,
  type Usage,
} from "../protocol/frames.ts";
import { deltaWith } from "../protocol/parse.ts";
import { type Engine, EngineError } from "./engines/engine.ts";
import {
  type OpenedAttempt,
  openSealedAttempt,
  type PendingReceipt,
  type ReceiptSigner,
  type SealKeys,
  signReceipt,
} from "./sealed-attempt.ts";
import { atTurnEnd } from "./turn-end.ts";

const NOT_OPENED = "sealed request could not be opened";

/** Largest delta text per chunk frame, in UTF-16 units: JSON escaping stays far below MAX_FRAME_BYTES. */
export const MAX_CHUNK_CHARS = 32_768;

/** Sends a frame on the connection the attempt arrived on; a no-op once that connection is gone. */
export type SendFrame = (frame: ProviderFrame) => void;

export interface AttemptsHooks {
  /** The set of running attempts changed (for heartbeats and the status line). */
  readonly changed: () => void;
  /** An attempt completed with this usage. */
  readonly completed: (usage: Usage) => void;
}

interface Running {
  readonly key: string;
  readonly requestId: string;
  readonly attempt: number;
  readonly send: SendFrame;
  readonly controller: AbortController;
  seq: number;
  /** Once set, nothing more is sent for this attempt. */
  silenced: boolean;
  deadline?: ReturnType<typeof setTimeout>;
  /** Sealed attempts: seals every chunk and the final frame with the request's response key. */
  readonly sealer: ChunkSealer | undefined;
  /** Sealed attempts of a provider with an identity: what its receipt covers. */
  readonly receipt: PendingReceipt | undefined;
  /** Text waiting to be sent as one chunk (see `buffer`). */
  pendingContent: string;
  pendingReasoning: string;
  /** A tool-call fragment waiting to be sent (never at the same time as pending text). */
  pendingTool: ToolCallDelta | undefined;
  /** Tool calls opened so far (the next call's index). */
  toolCalls: number;
  flushScheduled: boolean;
}

const keyOf = (requestId: string, attempt: number) => `${attempt}:${requestId}`;
const encoder = new TextEncoder();

export class Attempts {
  private readonly running = new Map<string, Running>();
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly engine: Engine,
    private readonly logger: Logger,
    private readonly hooks: AttemptsHooks,
  ) {}

  get size(): number {
    return this.running.size;
  }

  has(requestId: string, attempt: number): boolean {
    return this.running.has(keyOf(requestId, attempt));
  }

  /**
   * Opens a sealed request (sealed-attempt.ts: at once under session keys set up, else in arrival order once
   * they are), runs it like `start`, sealing the answer; one that does not open is refused (invalid_request).
   */
  startSealed(frame: SealedInference, keys: SealKeys, send: SendFrame, signer?: ReceiptSigner): void {
    let opening: OpenedAttempt | Promise<OpenedAttempt>;
    try {
      opening = openSealedAttempt(frame, keys, signer);
    } catch {
      this.refuseSealed(frame, send);
      return;
    }
    if (opening instanceof Promise) this.startSealedLater(frame, opening, send);
    else this.startOpened(frame, opening, send);
  }

  private startSealedLater(frame: SealedInference, opening: Promise<OpenedAttempt>, send: SendFrame): void {
    opening.then(
      (opened) => this.startOpened(frame, opened, send),
      () => this.refuseSealed(frame, send),
    );
  }

  private refuseSealed(frame: SealedInference, send: SendFrame): void {
    this.logger.warn("sealed request refused", { request_id: frame.request_id, attempt: frame.attempt });
    send({ type: "error", request_id: frame.request_id, attempt: frame.attempt, code: "invalid_request", message: NOT_OPENED });
  }

  private startOpened(frame: SealedInference, opened: OpenedAttempt, send: SendFrame): void {
    const inference: Inference = {
      type: "inference",
      request_id: frame.request_id,
      attempt: frame.attempt,
      model: frame.model,
      first_content_deadline_ms: frame.first_content_deadline_ms,
      request: opened.request,
    };
    this.start(inference, send, opened.sealer, opened.receipt);
  }

  /** Sends `accepted` and runs the engine; the caller decided to accept (capacity, model, not draining). */
  start(frame: Inference, send: SendFrame, sealer?: ChunkSealer, receipt?: PendingReceipt): void {
    const run: Running = {
      key: keyOf(frame.request_id, frame.attempt),
      requestId: frame.request_id,
      attempt: frame.attempt,
      send,
      controller: new AbortController(),
      seq: 0,
      silenced: false,
      sealer,
      receipt,
      pendingContent: "",
      pendingReasoning: "",
      pendingTool: undefined,
      toolCalls: 0,
      flushScheduled: false,
    };
    this.running.set(run.key, run);
    send({ type: "accepted", request_id: run.requestId, attempt: run.attempt });
    run.deadline = setTimeout(() => {
      this.logger.info("first content deadline passed", { request_id: run.requestId, attempt: run.attempt });
      this.terminate(run, "timeout", "no first content before the deadline");
    }, frame.first_content_deadline_ms);
    this.hooks.changed();
    void this.run(run, frame);
  }

  /** Ends one attempt without another frame (the coordinator cancelled it). Returns false if unknown. */
  cancel(requestId: string, attempt: number): boolean {
    const run = this.running.get(keyOf(requestId, attempt));
    if (!run) return false;
    this.terminate(run);
    return true;
  }

  /** Ends every attempt: with one `error` frame each when `code` is given, silently otherwise. */
  endAll(code?: ProviderErrorCode, message?: string): void {
    for (const run of [...this.running.values()]) this.terminate(run, code, message);
  }

  /** Resolves when no attempt runs. */
  whenIdle(): Promise<void> {
    if (this.running.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private async run(run: Running, frame: Inference): Promise<void> {
    const started = performance.now();
    let completed = false;
    try {
      const events = this.engine.generate({ model: frame.model, body: frame.request }, run.controller.signal);
      for await (const event of events) {
        if (run.silenced) break;
        if (event.type === "delta") {
          clearTimeout(run.deadline);
          this.buffer(run, event.delta);
          continue;
        }
        if (event.type === "tool_call") {
          clearTimeout(run.deadline);
          this.bufferTool(run, event.call);
          continue;
        }
        this.flush(run);
        if (run.sealer) {
          const end = {
            finish_reason: event.finishReason,
            usage: event.usage,
            ...(await signReceipt(run.receipt, run.requestId, event.usage)),
          };
          const final = run.sealer.seal(encoder.encode(JSON.stringify(end)), true);
          run.send({
            type: "sealed_complete",
            request_id: run.requestId,
            attempt: run.attempt,
            seq: final.seq,
            sealed: final.ciphertext,
          });
        } else {
          run.send({
            type: "complete",
            request_id: run.requestId,
            attempt: run.attempt,
            seq: run.seq,
            finish_reason: event.finishReason,
            usage: event.usage,
          });
        }
        completed = true;
        this.hooks.completed(event.usage);
        if (this.logger.enabled?.("debug") !== false) {
          this.logger.debug("attempt complete", {
            request_id: run.requestId,
            attempt: run.attempt,
            count: event.usage.completion_tokens,
            duration_ms: Math.round(performance.now() - started),
          });
        }
        break;
      }
      if (!completed) this.terminate(run, "engine_error", "engine ended without a result");
    } catch (e) {
      const code: ProviderErrorCode = e instanceof EngineError ? e.code : "engine_error";
      // Only an EngineError's message is a fixed phrase; anything else could carry content.
      const message = e instanceof EngineError ? e.message : "engine failed";
      if (!run.silenced) this.logger.warn("attempt failed", { request_id: run.requestId, attempt: run.attempt, error_code: code });
      this.terminate(run, code, message);
    } finally {
      this.release(run);
    }
  }

  /**
   * Coalesces deltas: text produced in the same event-loop turn goes out as one chunk frame (flushed
   * on the next turn, before `complete`, or when it would exceed the frame budget). A model emitting
   * tokens one at a time still sends them one at a time; a burst shares a frame.
   */
  private buffer(run: Running, delta: Delta): void {
    if (run.pendingTool) this.flush(run);
    if (delta.reasoning_content && run.pendingContent) this.flush(run);
    if (delta.reasoning_content) run.pendingReasoning += delta.reasoning_content;
    if (delta.content) run.pendingContent += delta.content;
    if (run.pendingContent.length + run.pendingReasoning.length >= MAX_CHUNK_CHARS) this.flush(run);
    else this.flushNextTurn(run);
  }

  /**
   * Coalesces tool-call fragments like text: argument fragments of the same call produced in the same
   * turn go out as one frame. Checks the order (throws EngineError engine_error when it is broken).
   */
  private bufferTool(run: Running, call: ToolCallDelta): void {
    const opens = call.id !== undefined || call.name !== undefined;
    const inOrder = opens
      ? call.index === run.toolCalls && call.id !== undefined && call.name !== undefined && call.index < MAX_TOOL_CALLS
      : call.index === run.toolCalls - 1;
    if (!inOrder) throw new EngineError("engine_error", "engine produced tool calls out of order");
    if (!opens && !call.arguments) return;
    if (opens) run.toolCalls++;
    if (run.pendingContent || run.pendingReasoning) this.flush(run);
    const pending = run.pendingTool;
    if (pending && !opens && pending.index === call.index) {
      run.pendingTool = { ...pending, arguments: (pending.arguments ?? "") + (call.arguments ?? "") };
    } else {
      if (pending) this.flush(run);
      run.pendingTool = call;
    }
    if ((run.pendingTool?.arguments?.length ?? 0) >= MAX_CHUNK_CHARS) this.flush(run);
    else this.flushNextTurn(run);
  }

  /**
   * Flushes `run` at the end of this turn, once (turn-end.ts: the connection's batch follows in the same
   * pass). A static function and its arguments: no closure, nor its scope, per delta (per token).
   */
  private flushNextTurn(run: Running): void {
    if (run.flushScheduled) return;
    run.flushScheduled = true;
    atTurnEnd(Attempts.flushLater, this, run);
  }

  private static flushLater(self: Attempts, run: Running): void {
    self.flush(run);
  }

  private flush(run: Running): void {
    run.flushScheduled = false;
    if (run.silenced) return;
    this.flushText(run);
    const tool = run.pendingTool;
    run.pendingTool = undefined;
    if (!tool) return;
    for (const fragment of splitToolCall(tool)) {
      run.receipt?.response.addToolCall(fragment);
      if (run.sealer) {
        const frame = run.sealer.seal(encoder.encode(JSON.stringify(fragment)), false);
        run.send({
          type: "sealed_tool_call",
          request_id: run.requestId,
          attempt: run.attempt,
          seq: frame.seq,
          sealed: frame.ciphertext,
        });
      } else {
        run.send({ type: "tool_call", request_id: run.requestId, attempt: run.attempt, seq: run.seq++, tool_call: fragment });
      }
    }
  }

  private flushText(run: Running): void {
    const { pendingContent, pendingReasoning } = run;
    const pending = deltaWith(pendingContent || undefined, pendingReasoning || undefined);
    if (pending === undefined) return;
    run.pendingContent = "";
    run.pendingReasoning = "";
    // Most flushes fit one frame: no list for them.
    if (pendingContent.length + pendingReasoning.length <= MAX_CHUNK_CHARS) this.sendDelta(run, pending);
    else for (const delta of splitDelta(pendingContent, pendingReasoning)) this.sendDelta(run, delta);
  }

  /** One chunk frame (sealed when the attempt is). */
  private sendDelta(run: Running, delta: Delta): void {
    if (!run.sealer) {
      run.send({ type: "chunk", request_id: run.requestId, attempt: run.attempt, seq: run.seq++, delta });
      return;
    }
    if (delta.content) run.receipt?.response.addContent(delta.content);
    const frame = run.sealer.seal(encoder.encode(JSON.stringify(delta)), false);
    run.send({ type: "sealed_chunk", request_id: run.requestId, attempt: run.attempt, seq: frame.seq, sealed: frame.ciphertext });
  }

  /** Optionally one error frame, then silence, abort the engine call and free the slot. */
  private terminate(run: Running, code?: ProviderErrorCode, message?: string): void {
    if (!run.silenced && code !== undefined) {
      this.flush(run);
      run.send({
        type: "error",
        request_id: run.requestId,
        attempt: run.attempt,
        code,
        ...(message ? { message: message.slice(0, 200) } : {}),
      });
    }
    run.silenced = true;
    run.controller.abort();
    this.release(run);
  }

  private release(run: Running): void {
    clearTimeout(run.deadline);
    run.silenced = true;
    if (this.running.get(run.key) !== run) return;
    this.running.delete(run.key);
    this.hooks.changed();
    if (this.running.size === 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}

/** The deltas of text too large for one frame: the reasoning's pieces, then the content's. */
function splitDelta(content: string, reasoning: string): Delta[] {
  return [
    ...splitText(reasoning).map((reasoning_content): Delta => ({ reasoning_content })),
    ...splitText(content).map((c): Delta => ({ content: c })),
  ];
}

/** Splits a tool-call fragment whose arguments would make an oversized frame (id and name stay on the first). */
function splitToolCall(call: ToolCallDelta): ToolCallDelta[] {
  const args = call.arguments ?? "";
  if (args.length <= MAX_CHUNK_CHARS) return [call];
  return splitText(args).map((part, i): ToolCallDelta => (i === 0 ? { ...call, arguments: part } : { index: call.index, arguments: part }));
}

function splitText(text: string): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < text.length) {
    let end = Math.min(text.length, i + MAX_CHUNK_CHARS);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
    out.push(text.slice(i, end));
    i = end;
  }
  return out;
}
