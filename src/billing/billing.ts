/**
 * The billing lifecycle of one chat request (DESIGN.md section 9):
 *   reserve  - before dispatch, hold an upper bound of the cost: prompt tokens bounded by the UTF-8
 *              length of the messages plus a per-message overhead (a token is at least one byte), plus
 *              the output budget, at the model's rates (or the fallback rates);
 *   settle   - after the answer, charge uncached prompt x input + cached x cache-read + completion x
 *              output, rounded up once to 1 micro-USD and never more than the hold; release the rest;
 *              credit the provider's account with the charge less the platform fee;
 *   partial  - on a failure or cancellation after content, charge what was generated (estimated from
 *              the relayed text when the provider could not report usage, at most the output budget);
 *              before content, nothing. A provider's report beyond usage-bounds.ts fails the answer
 *              first (invalid output), so it is never charged; the estimate is.
 * Self-routed requests hold nothing and are charged nothing; their usage is still recorded.
 */
import type { Usage } from "../protocol/messages.ts";
import type { Settlement } from "../store/money-types.ts";
import { ceilMillionths, costOf } from "./money.ts";
import type { Rates } from "./pricing.ts";
import type { Hold, HoldRequest, Wallets } from "./wallets.ts";

/** Chat-template tokens per message and per request, on top of the text itself. */
export const MESSAGE_OVERHEAD_TOKENS = 8;
export const REQUEST_OVERHEAD_TOKENS = 16;
/** Characters per token when a count must be estimated (prompt for limits, unreported output). */
const CHARS_PER_TOKEN = 4;

/** An upper bound of the prompt's tokens: UTF-8 bytes of every role and content, plus overheads. */
export function promptTokenBound(messages: readonly { role: string; content: string }[]): number {
  let bytes = REQUEST_OVERHEAD_TOKENS;
  for (const m of messages) bytes += utf8Length(m.role) + utf8Length(m.content) + MESSAGE_OVERHEAD_TOKENS;
  return bytes;
}

/** A typical-case estimate of the prompt's tokens (rate limits count this, then true up). */
export function promptTokenEstimate(messages: readonly { role: string; content: string }[]): number {
  let chars = 0;
  for (const m of messages) chars += m.content.length + MESSAGE_OVERHEAD_TOKENS * CHARS_PER_TOKEN;
  return Math.ceil(chars / CHARS_PER_TOKEN);
}

function utf8Length(text: string): number {
  return Buffer.byteLength(text, "utf8");
}

/** The reservation for a prompt bound and an output budget. */
export function reservationFor(promptBound: number, maxTokens: number, rates: Rates): number {
  const prompt = ceilMillionths(promptBound * rates.input) ?? Number(costOf(promptBound, rates.input));
  const output = ceilMillionths(maxTokens * rates.output) ?? Number(costOf(maxTokens, rates.output));
  return prompt + output;
}

/** The exact charge for reported usage: one rounding up, on the total. */
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
  return Number((BigInt(charge) * BigInt(percent) + 99n) / 100n);
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

export class Billing {
  constructor(
    private readonly wallets: Wallets,
    private readonly settings: BillingSettings,
  ) {}

  /** Holds the money, or throws 402. The common case (account loaded, money there) is synchronous. */
  reserve(request: HoldRequest): Hold | Promise<Hold> {
    return this.wallets.tryReserve(request) ?? this.wallets.reserve(request);
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
