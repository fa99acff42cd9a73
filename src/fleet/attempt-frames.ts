/**
 * The frames of one attempt, checked and relayed to it: the per-attempt half of the session's state
 * machine (session.ts routes each frame to its attempt).
 *
 * Order: `accepted` once, first; chunk and tool_call frames numbered by `seq` from 0 with no gap;
 * `complete` carries the count; tool calls one after another. A violation throws ProtocolError (the
 * session ends, its attempts fail over). Invalid output is returned, not thrown, and fails the attempt
 * without failover: a sealed frame that does not open or verify (sealed-channel.ts), a plaintext frame
 * in a sealed attempt, text far beyond the budget (outputCharLimit in attempt.ts), usage beyond what the
 * coordinator can believe (billing/usage-bounds.ts). A signed sealed `complete` is verified before the
 * attempt completes: on the event loop while the coordinator is quiet (`inlineReceipts`: a hand-off to
 * the pool would only add its latency), else on the thread pool, the one promise here: the attempt
 * ends with the verdict (session.ts holds it).
 */
import { type UsageBound, usageViolation } from "../billing/usage-bounds.ts";
import type { Delta, Hello, ProviderFrame, ToolCallDelta, Usage } from "../protocol/frames.ts";
import { ProtocolError } from "../protocol/parse.ts";
import type { Attempt, AttemptSeal, VerifiedReceipt } from "./attempt.ts";
import {
  type Final,
  openSealed,
  type ReceiptSigner,
  type SealedFrame,
  sealedFailure,
  verifyReceipt,
  verifyReceiptThen,
} from "./sealed-channel.ts";

type SealedComplete = { type: "sealed_complete" };
export type AttemptFrame = Exclude<ProviderFrame, Hello | { type: "heartbeat" } | { type: "challenge_response" }>;

/** What the session gives: its clock, the receipt signer (itself), and the usage-rejection metric. */
export interface FrameContext {
  readonly now: () => number;
  readonly signer: ReceiptSigner;
  readonly onUsageRejected?: (bound: UsageBound) => void;
  /**
   * True when a receipt should be verified on the event loop, at once (the coordinator is quiet:
   * FleetLoad.quiet); absent or false: on the thread pool.
   */
  readonly inlineReceipts?: () => boolean;
}

/** A frame's outcome: invalid output (the session ends), or a first-content latency sample (ms). */
export interface FrameOutcome {
  readonly invalid?: string;
  readonly firstContentMs?: number;
}

const RELAYED: FrameOutcome = Object.freeze({});
const OVER_BUDGET: FrameOutcome = Object.freeze({ invalid: "output far beyond the output budget" });

/**
 * Checks one frame and relays it to its attempt; a promise only for a receipt being verified (above).
 * @throws ProtocolError for a frame out of order.
 */
export function applyAttemptFrame(attempt: Attempt, frame: Exclude<AttemptFrame, SealedComplete>, ctx: FrameContext): FrameOutcome;
export function applyAttemptFrame(attempt: Attempt, frame: AttemptFrame, ctx: FrameContext): FrameOutcome | Promise<FrameOutcome>;
export function applyAttemptFrame(attempt: Attempt, frame: AttemptFrame, ctx: FrameContext): FrameOutcome | Promise<FrameOutcome> {
  const seal = attempt.sealed;
  const sealed = frame.type === "sealed_chunk" || frame.type === "sealed_tool_call" || frame.type === "sealed_complete";
  if (attempt.sealedSession && (frame.type === "chunk" || frame.type === "tool_call" || frame.type === "complete")) {
    return { invalid: "plaintext frame in a sealed session" };
  }
  if (sealed && seal === undefined) {
    throw new ProtocolError(attempt.sealedSession ? "sealed frame before its request was sent" : "sealed frame in a plaintext session");
  }
  if (frame.type === "error") {
    attempt.push({ type: "error", code: frame.code });
    return RELAYED;
  }
  if (frame.type === "accepted") {
    if (attempt.acceptedAt !== undefined) throw new ProtocolError("duplicate accepted");
    attempt.accepted(ctx.now());
    return RELAYED;
  }
  if (attempt.acceptedAt === undefined) throw new ProtocolError(`${frame.type} before accepted`);
  const { chunks } = attempt.relayed;
  switch (frame.type) {
    case "chunk":
      if (frame.seq !== chunks) throw new ProtocolError(`chunk seq ${frame.seq}, expected ${chunks}`);
      return relayDelta(attempt, frame.delta, ctx);
    case "tool_call":
      if (frame.seq !== chunks) throw new ProtocolError(`tool_call seq ${frame.seq}, expected ${chunks}`);
      return relayToolCall(attempt, frame.tool_call, ctx);
    case "complete":
      if (frame.seq !== chunks) throw new ProtocolError(`complete after ${frame.seq} frames, received ${chunks}`);
      return completePlain(attempt, frame, ctx);
    default:
      return applySealed(attempt, frame, seal as AttemptSeal, ctx);
  }
}

/**
 * A sealed frame, opened and read (sealed-channel.ts), then checked like a plaintext one; any failure,
 * a tool call out of order included, is invalid output. A signed `complete` waits for its receipt's
 * verdict (a promise when the check runs on the thread pool); an unsigned one (a provider without an
 * identity key) completes at once.
 */
function applySealed(attempt: Attempt, frame: SealedFrame, seal: AttemptSeal, ctx: FrameContext): FrameOutcome | Promise<FrameOutcome> {
  try {
    const opened = openSealed(seal.opener, frame);
    if (opened.type === "chunk") return relayDelta(attempt, opened.delta, ctx);
    if (opened.type === "tool_call") return relayToolCall(attempt, opened.call, ctx);
    return completeSealed(attempt, opened.end, seal, ctx);
  } catch (e) {
    return { invalid: sealedFailure(e) };
  }
}

// The two completions keep their closures in functions of their own: a function that makes a closure
// allocates its scope on every call, and applyAttemptFrame and applySealed run for every frame (every
// token of a streamed answer).

function completePlain(attempt: Attempt, frame: Extract<AttemptFrame, { type: "complete" }>, ctx: FrameContext): FrameOutcome {
  return complete(attempt, frame.usage, ctx, () => {
    attempt.push({ type: "complete", finishReason: frame.finish_reason, usage: frame.usage });
  });
}

/** A sealed final frame: its usage checked, then its receipt (inline or on the thread pool); throws as applySealed catches. */
function completeSealed(attempt: Attempt, end: Final, seal: AttemptSeal, ctx: FrameContext): FrameOutcome | Promise<FrameOutcome> {
  const finish = (receipt: VerifiedReceipt | undefined): FrameOutcome => {
    attempt.push({ type: "complete", finishReason: end.finish_reason, usage: end.usage, ...(receipt ? { receipt } : {}) });
    return RELAYED;
  };
  let verdict: Promise<FrameOutcome> | undefined;
  let inline: FrameOutcome | undefined;
  const outcome = complete(attempt, end.usage, ctx, () => {
    const answer = { requestId: attempt.requestId, seal, responseSha256: attempt.responseSha256() as Uint8Array };
    // A bad signature throws AttestationError here (inline), or is the promise's verdict (thread pool).
    if (ctx.inlineReceipts?.() === true) inline = finish(verifyReceipt(ctx.signer, answer, end));
    // One promise from the signature's verdict to the frame's outcome.
    else
      verdict = verifyReceiptThen(ctx.signer, answer, end, (receipt, refused) =>
        refused ? { invalid: sealedFailure(refused) } : finish(receipt),
      );
  });
  if (outcome !== RELAYED) return outcome;
  return inline ?? verdict ?? finish(undefined);
}

/** A delta within the output budget is relayed (a provider ignoring max_tokens would grow it unbounded). */
function relayDelta(attempt: Attempt, delta: Delta, ctx: FrameContext): FrameOutcome {
  if (!attempt.countDelta(delta)) return OVER_BUDGET;
  return firstContent(attempt.relay({ type: "chunk", delta }, ctx.now()));
}

/**
 * A tool-call fragment: one call after another (the next index with id and name opens a call; the last
 * index without them continues it), within the output bound; then relayed and digested for the receipt.
 * @throws ProtocolError for a fragment out of order.
 */
function relayToolCall(attempt: Attempt, call: ToolCallDelta, ctx: FrameContext): FrameOutcome {
  const { toolCalls } = attempt.relayed;
  if (call.id !== undefined) {
    if (call.index !== toolCalls) throw new ProtocolError(`tool_call index ${call.index} opens a call, expected ${toolCalls}`);
  } else if (call.index !== toolCalls - 1) {
    throw new ProtocolError(`tool_call index ${call.index} continues no open call (last is ${toolCalls - 1})`);
  }
  if (!attempt.countToolCall(call)) return OVER_BUDGET;
  return firstContent(attempt.relay({ type: "tool_call", call }, ctx.now()));
}

/**
 * Usage beyond the attempt's bounds (usageViolation: prompt bytes, budget, bytes relayed) is invalid
 * output: no charge may rest on it, and a receipt signed over it is not shown. Else `end` runs.
 */
function complete(attempt: Attempt, usage: Usage, ctx: FrameContext, end: () => void): FrameOutcome {
  const bound = attempt.limits && usageViolation(usage, attempt.limits, attempt.relayed);
  if (bound !== undefined) {
    ctx.onUsageRejected?.(bound);
    return { invalid: `usage beyond its bound: ${bound}` };
  }
  end();
  return RELAYED;
}

function firstContent(sample: number | undefined): FrameOutcome {
  return sample === undefined ? RELAYED : { firstContentMs: sample };
}
