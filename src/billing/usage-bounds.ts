/**
 * Bounds on the token usage a provider reports. The provider counts its own tokens and the coordinator
 * bills them, so every count is bounded by what the coordinator knows itself (docs/security.md "Usage a
 * provider reports" gives the reasons; every token decodes to at least one byte):
 *   prompt     <= promptTokenBound(messages) + UTF-8 bytes of the other forwarded fields + PROMPT_TEMPLATE_ALLOWANCE;
 *   cached     <= prompt;
 *   completion <= the output budget, and <= UTF-8 bytes of the content, reasoning and tool calls relayed
 *                 + OUTPUT_ALLOWANCE_TOKENS + TOOL_CALL_ALLOWANCE_TOKENS per call + bytes of the stop strings;
 *   reasoning  <= completion, and <= reasoning bytes relayed + OUTPUT_ALLOWANCE_TOKENS.
 * The byte bounds hold only when every forwarded field is in VISIBLE_OUTPUT_FIELDS; else the budget alone.
 * Pure functions; a report beyond a bound is invalid provider output (fleet/attempt-frames.ts).
 */
import type { EngineRequestBody, Usage } from "../protocol/frames.ts";
import { promptTokenBound, utf8Bytes } from "./billing.ts";

/**
 * Prompt tokens a chat template may add beyond the per-message and per-request overheads of
 * promptTokenBound: default system prompts, date headers, a reasoning format's preamble, tool-use
 * instructions (tens of tokens for most templates, a few hundred for the longest tool-use ones).
 */
export const PROMPT_TEMPLATE_ALLOWANCE = 512;
/**
 * Generated tokens that decode to no relayed text: end of turn, a reasoning format's channel markers and
 * think tags, whitespace the runtime trims, an incomplete UTF-8 sequence at the end (a handful per answer
 * in common formats).
 */
export const OUTPUT_ALLOWANCE_TOKENS = 32;
/**
 * Generated tokens per relayed tool call beyond its name and argument bytes: the call's markup in the
 * model's format (tool-call tags, the JSON keys and quotes around name and arguments, whitespace the
 * runtime's parser drops when it re-serializes the arguments).
 */
export const TOOL_CALL_ALLOWANCE_TOKENS = 32;
/** Forwarded fields that never make the runtime generate text it does not return. */
const VISIBLE_OUTPUT_FIELDS: ReadonlySet<string> = new Set([
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "seed",
  "stop",
  "frequency_penalty",
  "presence_penalty",
  "repetition_penalty",
  "logit_bias",
  "logprobs",
  "top_logprobs",
  "response_format",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
]);

/** The bounds of one request, from what the coordinator sends the provider. */
export interface UsageLimits {
  readonly promptTokens: number;
  /** The output budget (max_tokens as sent). */
  readonly budget: number;
  /** Tokens allowed beyond the relayed bytes; undefined when output may be hidden (budget only). */
  readonly outputAllowance: number | undefined;
}

/** UTF-8 bytes of the text relayed for an attempt, and its tool calls. */
export interface RelayedOutput {
  readonly contentBytes: number;
  readonly reasoningBytes: number;
  /** Function names and arguments of the tool calls relayed. */
  readonly toolCallBytes: number;
  /** Tool calls relayed. */
  readonly toolCalls: number;
}

/** The bound a report broke (the label of umbra_provider_usage_rejected_total). */
export type UsageBound = "prompt_tokens" | "cached_tokens" | "completion_budget" | "completion_output" | "reasoning_tokens";

export function usageLimits(body: EngineRequestBody): UsageLimits {
  const { messages, max_tokens, ...forwarded } = body;
  let visible = true;
  let stopBytes = 0;
  for (const [field, value] of Object.entries(forwarded)) {
    if (!VISIBLE_OUTPUT_FIELDS.has(field)) visible = false;
    if (field === "stop") stopBytes = typeof value === "string" ? utf8Bytes(value) : Array.isArray(value) ? utf8Bytes(value.join("")) : 0;
  }
  const forwardedBytes = Object.keys(forwarded).length === 0 ? 0 : utf8Bytes(JSON.stringify(forwarded));
  return {
    promptTokens: promptTokenBound(messages) + forwardedBytes + PROMPT_TEMPLATE_ALLOWANCE,
    budget: max_tokens,
    outputAllowance: visible ? OUTPUT_ALLOWANCE_TOKENS + stopBytes : undefined,
  };
}

/** The first bound the report breaks, or undefined when it is within every bound. */
export function usageViolation(usage: Usage, limits: UsageLimits, relayed: RelayedOutput): UsageBound | undefined {
  if (usage.prompt_tokens > limits.promptTokens) return "prompt_tokens";
  if ((usage.cached_tokens ?? 0) > usage.prompt_tokens) return "cached_tokens";
  if (usage.completion_tokens > limits.budget) return "completion_budget";
  const allowance = limits.outputAllowance;
  const relayedTokens =
    relayed.contentBytes + relayed.reasoningBytes + relayed.toolCallBytes + relayed.toolCalls * TOOL_CALL_ALLOWANCE_TOKENS;
  if (allowance !== undefined && usage.completion_tokens > relayedTokens + allowance) {
    return "completion_output";
  }
  const reasoning = usage.reasoning_tokens ?? 0;
  if (reasoning > usage.completion_tokens) return "reasoning_tokens";
  if (allowance !== undefined && reasoning > relayed.reasoningBytes + OUTPUT_ALLOWANCE_TOKENS) return "reasoning_tokens";
  return undefined;
}
