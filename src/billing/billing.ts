/**
 * The billing lifecycle of one chat request (DESIGN.md section 9; docs/api.md "Money and limits"):
 *   reserve - before dispatch, hold an upper bound of the cost: the prompt tokens a provider may report
 *             (promptTokenBound and usage-bounds.ts's allowances) plus the output budget, at the model's
 *             rates (or the fallback rates), so an honest report is never capped;
 *   settle  - after the answer, charge the usage (chargeFor), never more than the hold; release the rest;
 *             credit the provider's account with the charge less the platform fee;
 *   partial - after content, a failure or cancellation pays for what was generated (the report, or an
 *             estimate from the relayed text, at most the output budget); before content, nothing. A report
 *             beyond usage-bounds.ts fails the answer first, so it is never charged; the estimate is.
 * Self-routed requests hold nothing and are charged nothing; their usage is still recorded.
 */
import { type ChatMessage, messageText } from "../protocol/chat-messages.ts";
import type { Usage } from "../protocol/frames.ts";
import type { Settlement } from "../store/types.ts";
import { ceilHundredths, ceilMillionths, costOf } from "./money.ts";
import type { Rates } from "./pricing.ts";
import type { Hold, HoldRequest } from "./wallets.ts";

/** Chat-template tokens per message and per request, on top of the text itself. */
export const MESSAGE_OVERHEAD_TOKENS = 8;
export const REQUEST_OVERHEAD_TOKENS = 16;
/** Chat-template tokens around one tool call of an assistant message (its tags and JSON keys). */
export const TOOL_CALL_OVERHEAD_TOKENS = 16;
/**
 * Prompt tokens one image part may cost, whatever its URL's length: the ceiling of common vision runtimes
 * (Qwen2.5-VL's default 16,384 image tokens; OpenAI's high detail stays below 2,000).
 */
export const IMAGE_PART_TOKENS = 16_384;
/** An image part in a typical-case estimate (rate limits). */
const IMAGE_PART_ESTIMATE_TOKENS = 1024;
/** Characters per token when a count must be estimated (prompt for limits, unreported output). */
const CHARS_PER_TOKEN = 4;

/**
 * An upper bound of the prompt's tokens (a token is at least one byte): UTF-8 bytes of every forwarded
 * string of every message (role, name, text content and text parts, refusal, tool_call_id, and each tool
 * call's id and name, and its arguments twice: a template may re-serialize them as JSON with spaces), plus
 * IMAGE_PART_TOKENS per image part, TOOL_CALL_OVERHEAD_TOKENS per tool call and the overheads.
 */
export function promptTokenBound(messages: readonly ChatMessage[]): number {
  let tokens = REQUEST_OVERHEAD_TOKENS;
  for (const m of messages) {
    tokens += MESSAGE_OVERHEAD_TOKENS + utf8Bytes(m.role);
    if ("name" in m && m.name !== undefined) tokens += utf8Bytes(m.name);
    if (m.role === "tool") tokens += utf8Bytes(m.tool_call_id);
    const content = m.content;
    if (typeof content === "string") tokens += utf8Bytes(content);
    else if (content) for (const part of content) tokens += part.type === "text" ? utf8Bytes(part.text) : IMAGE_PART_TOKENS;
    if (m.role !== "assistant") continue;
    if (m.refusal) tokens += utf8Bytes(m.refusal);
    for (const call of m.tool_calls ?? []) {
      tokens += TOOL_CALL_OVERHEAD_TOKENS + utf8Bytes(call.id) + utf8Bytes(call.function.name) + 2 * utf8Bytes(call.function.arguments);
    }
  }
  return tokens;
}

/** A typical-case estimate of the prompt's tokens (rate limits count this, then true up). */
export function promptTokenEstimate(messages: readonly ChatMessage[]): number {
  let chars = 0;
  for (const m of messages) {
    chars += messageText(m).length + MESSAGE_OVERHEAD_TOKENS * CHARS_PER_TOKEN;
    if (Array.isArray(m.content))
      for (const part of m.content) if (part.type !== "text") chars += IMAGE_PART_ESTIMATE_TOKENS * CHARS_PER_TOKEN;
    if (m.role === "tool") chars += m.tool_call_id.length;
    if (m.role === "assistant") for (const call of m.tool_calls ?? []) chars += call.function.name.length + call.function.arguments.length;
  }
  return Math.ceil(chars / CHARS_PER_TOKEN);
}

/** UTF-8 bytes of a text (0 for none): the unit of every byte bound (reservation, usage bounds). */
export function utf8Bytes(text: string | undefined): number {
  return text ? Buffer.byteLength(text, "utf8") : 0;
}

/** The reservation for a prompt bound and an output budget. */
export function reservationFor(promptBound: number, maxTokens: number, rates: Rates): number {
  const prompt = ceilMillionths(promptBound * rates.input) ?? Number(costOf(promptBound, rates.input));
  const output = ceilMillionths(maxTokens * rates.output) ?? Number(costOf(maxTokens, rates.output));
  return prompt + output;
}

/** The exact charge for reported usage: uncached prompt x input + cached x cache-read + completion x output, one rounding up. */
export function chargeFor(usage: Usage, rates: Rates): number {
  const cached = Math.min(usage.cached_tokens ?? 0, usage.prompt_tokens);
  const fast = (usage.prompt_tokens - cached) * rates.input + cached * rates.cacheRead + usage.completion_tokens * rates.output;
  const exact = ceilMillionths(fast);
  if (exact !== undefined) return exact;
  const numerator =
    BigInt(usage.prompt_tokens - cached) * BigInt(rates.input) +
    BigInt(cached) * BigInt(rates.cacheRead) +
    BigInt(usage.completion_tokens) * BigInt(rates.output);
  return Number((numerator + 999_999n) / 1_000_000n);
}

/** The platform's share of a charge, rounded up; the provider earns the rest. */
export function feeFor(charge: number, percent: number): number {
  return ceilHundredths(charge, percent);
}

/** Usage for a request that ended without a provider report: what was relayed, estimated, at most the budget. */
export function estimatedUsage(promptEstimate: number, completionChars: number, budget = Number.POSITIVE_INFINITY): Usage {
  return { prompt_tokens: promptEstimate, completion_tokens: Math.min(budget, Math.ceil(completionChars / CHARS_PER_TOKEN)) };
}

export interface BillingSettings {
  readonly platformFeePercent: number;
}

export interface RequestMoney {
  readonly requestId: string;
  readonly accountId: string;
  readonly keyId: string | null;
  readonly model: string;
  readonly buildId: string;
  readonly rates: Rates;
  readonly startedAt: number;
  /** Undefined when nothing was reserved (self-route, metering off). */
  readonly hold: Hold | undefined;
  /** Self-routed: usage recorded, nothing charged. */
  readonly free: boolean;
}

export interface Ending {
  readonly outcome: "completed" | "failed" | "cancelled";
  readonly usage: Usage;
  readonly providerId: string | null;
  readonly providerAccountId: string | null;
  readonly firstContentMs: number | null;
  readonly endedAt: number;
}

/**
 * Where Billing holds and settles money: Wallets (memory, one coordinator per database) or the Postgres
 * money authority across replicas (authority-reservations.ts).
 */
export interface Reservations {
  /** A synchronous hold when one can be had without I/O; undefined sends the caller to `reserve`. */
  tryReserve?(request: HoldRequest): Hold | undefined;
  /** Holds the money, or throws 402 insufficient_funds / insufficient_quota. */
  reserve(request: HoldRequest): Promise<Hold>;
  /** Charges at most the hold and records usage; resolves when durable. */
  settle(hold: Hold | undefined, settlement: Settlement): Promise<void>;
}

export class Billing {
  constructor(
    private readonly wallets: Reservations,
    private readonly settings: BillingSettings,
  ) {}

  /** Holds the money, or throws 402. The common case (account loaded, money there) is synchronous. */
  reserve(request: HoldRequest): Hold | Promise<Hold> {
    return this.wallets.tryReserve?.(request) ?? this.wallets.reserve(request);
  }

  /** Charges for the ending (capped at the hold), pays the provider, records usage; resolves when durable. */
  settle(money: RequestMoney, ending: Ending): Promise<void> {
    const full = money.free ? 0 : chargeFor(ending.usage, money.rates);
    const charge = money.hold ? Math.min(full, money.hold.amount) : 0;
    const fee = ending.providerAccountId === null ? charge : feeFor(charge, this.settings.platformFeePercent);
    const settlement: Settlement = {
      requestId: money.requestId,
      accountId: money.accountId,
      keyId: money.keyId,
      charge,
      providerAccountId: ending.providerAccountId,
      earning: charge - fee,
      fee,
      at: ending.endedAt,
      usage: {
        requestId: money.requestId,
        accountId: money.accountId,
        keyId: money.keyId,
        model: money.model,
        buildId: money.buildId,
        providerId: ending.providerId,
        promptTokens: ending.usage.prompt_tokens,
        cachedTokens: Math.min(ending.usage.cached_tokens ?? 0, ending.usage.prompt_tokens),
        completionTokens: ending.usage.completion_tokens,
        cost: charge,
        startedAt: money.startedAt,
        firstContentMs: ending.firstContentMs,
        durationMs: Math.max(0, ending.endedAt - money.startedAt),
        outcome: ending.outcome,
      },
    };
    return this.wallets.settle(money.hold, settlement);
  }
}
