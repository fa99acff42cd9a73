/**
 * The billing arithmetic (src/billing/billing.ts), with golden values: the prompt bound from UTF-8
 * bytes, reservation and charge in exact integers with one rounding up on the total, the platform fee
 * rounded up; then Billing.settle building the Settlement that Wallets commits (through a recording
 * MoneyStore, test/support/fake-money.ts): capped at the hold, nothing charged for self-route, the whole charge to the fee when
 * no provider account earns.
 */
import { describe, expect, test } from "bun:test";
import {
  Billing,
  chargeFor,
  type Ending,
  estimatedUsage,
  feeFor,
  IMAGE_PART_TOKENS,
  MESSAGE_OVERHEAD_TOKENS,
  promptTokenBound,
  promptTokenEstimate,
  REQUEST_OVERHEAD_TOKENS,
  type RequestMoney,
  reservationFor,
  TOOL_CALL_OVERHEAD_TOKENS,
} from "../../../src/billing/billing.ts";
import type { Rates } from "../../../src/billing/pricing.ts";
import { Wallets } from "../../../src/billing/wallets.ts";
import type { Logger } from "../../../src/observability/logger.ts";
import type { ChatMessage } from "../../../src/protocol/chat-messages.ts";
import type { Usage } from "../../../src/protocol/frames.ts";
import type { Settlement } from "../../../src/store/types.ts";
import { FakeMoney } from "../../support/fake-money.ts";
import { seededRandom } from "../../support/random.ts";

const T0 = 1_790_000_000_000;

function rates(input: number, output: number, cacheRead: number): Rates {
  return { input, output, cacheRead, source: "model" };
}

function utf8(text: string): number {
  return new TextEncoder().encode(text).byteLength;
}

describe("promptTokenBound", () => {
  test.each([
    ["no messages", [], REQUEST_OVERHEAD_TOKENS],
    ["ASCII", [{ role: "user", content: "hello" }], 16 + 4 + 5 + 8],
    ["empty content", [{ role: "user", content: "" }], 16 + 4 + 0 + 8],
    ["emoji: 2 UTF-16 units, 4 bytes", [{ role: "user", content: "😀" }], 16 + 4 + 4 + 8],
    ["CJK: 1 unit, 3 bytes each", [{ role: "user", content: "漢字" }], 16 + 4 + 6 + 8],
    [
      "several messages, mixed scripts",
      [
        { role: "system", content: "Be brief." },
        { role: "user", content: "😀漢字é a" },
      ],
      16 + (6 + 9 + 8) + (4 + 14 + 8),
    ],
  ] as const)("%s", (_name, messages, expected) => {
    expect(promptTokenBound(messages)).toBe(expected);
  });

  test("is the UTF-8 byte count of every role and content plus the overheads (random texts)", () => {
    const next = seededRandom(7);
    const alphabet = ["a", "Z", " ", "\n", "é", "ß", "Ж", "漢", "字", "한", "😀", "👍🏽", "𝄞", "\u0000", "\u{10ffff}"];
    for (let i = 0; i < 200; i++) {
      const messages = Array.from({ length: 1 + Math.floor(next() * 4) }, () => ({
        role: next() < 0.5 ? ("user" as const) : ("assistant" as const),
        content: Array.from({ length: Math.floor(next() * 40) }, () => alphabet[Math.floor(next() * alphabet.length)]).join(""),
      }));
      const bytes = messages.reduce((sum, m) => sum + utf8(m.role) + utf8(m.content) + MESSAGE_OVERHEAD_TOKENS, REQUEST_OVERHEAD_TOKENS);
      expect({ messages, bound: promptTokenBound(messages) }).toEqual({ messages, bound: bytes });
      // At least one token per byte: never below the typical-case estimate either.
      expect(promptTokenBound(messages)).toBeGreaterThanOrEqual(promptTokenEstimate(messages));
    }
  });
});

describe("promptTokenBound over tool calling and content parts", () => {
  const call = (id: string, name: string, args: string) => ({ id, type: "function" as const, function: { name, arguments: args } });
  test("every forwarded string counts: names, text parts, refusal, tool_call_id, tool calls (arguments twice); images a fixed count", () => {
    const messages: ChatMessage[] = [
      {
        role: "system",
        content: [
          { type: "text", text: "be" },
          { type: "text", text: "é" },
        ],
        name: "ops",
      },
      {
        role: "user",
        content: [
          { type: "text", text: "hi" },
          { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } },
        ],
      },
      { role: "assistant", content: null, refusal: "no", tool_calls: [call("c1", "f", '{"a":1}'), call("c2", "gé", "{}")] },
      { role: "tool", content: "21°", tool_call_id: "c1" },
    ];
    expect(promptTokenBound(messages)).toBe(
      REQUEST_OVERHEAD_TOKENS +
        (MESSAGE_OVERHEAD_TOKENS + 6 + 3 + 2 + 2) +
        (MESSAGE_OVERHEAD_TOKENS + 4 + 2 + IMAGE_PART_TOKENS) +
        (MESSAGE_OVERHEAD_TOKENS + 9 + 2 + (TOOL_CALL_OVERHEAD_TOKENS + 2 + 1 + 2 * 7) + (TOOL_CALL_OVERHEAD_TOKENS + 2 + 3 + 2 * 2)) +
        (MESSAGE_OVERHEAD_TOKENS + 4 + 4 + 2),
    );
  });

  /** UTF-8 bytes of every string in a message, image URLs left out (an image counts a fixed number of tokens). */
  const stringBytes = (v: unknown, key = ""): number =>
    typeof v === "string"
      ? key === "url" || key === "type"
        ? 0
        : utf8(v)
      : typeof v === "object" && v !== null
        ? Object.entries(v).reduce((sum, [k, child]) => sum + stringBytes(child, k), 0)
        : 0;

  test("is at least the UTF-8 bytes of every string the message forwards (random tool-calling histories)", () => {
    const next = seededRandom(11);
    const alphabet = ["a", " ", "{", '"', "é", "漢", "😀", "\n", "\u0000"];
    const text = () => Array.from({ length: Math.floor(next() * 30) }, () => alphabet[Math.floor(next() * alphabet.length)]).join("");
    const parts = () => Array.from({ length: 1 + Math.floor(next() * 3) }, () => ({ type: "text" as const, text: text() }));
    const content = () => (next() < 0.5 ? text() : parts());
    const one = (): ChatMessage => {
      const r = next();
      if (r < 0.25) return { role: "user", content: content(), ...(next() < 0.5 ? { name: text() } : {}) };
      if (r < 0.5) return { role: "tool", content: content(), tool_call_id: text() };
      if (r < 0.75) return { role: "system", content: content() };
      return {
        role: "assistant",
        content: next() < 0.5 ? null : content(),
        ...(next() < 0.3 ? { refusal: text() } : {}),
        tool_calls: Array.from({ length: Math.floor(next() * 3) }, () => call(text(), text(), text())),
      };
    };
    for (let i = 0; i < 200; i++) {
      const messages = Array.from({ length: 1 + Math.floor(next() * 5) }, one);
      const forwarded = messages.reduce((sum, m) => sum + stringBytes(m), 0);
      expect(promptTokenBound(messages)).toBeGreaterThanOrEqual(
        forwarded + REQUEST_OVERHEAD_TOKENS + MESSAGE_OVERHEAD_TOKENS * messages.length,
      );
      expect(promptTokenBound(messages)).toBeGreaterThanOrEqual(promptTokenEstimate(messages));
    }
  });
});

describe("promptTokenEstimate and estimatedUsage", () => {
  test("a quarter of the characters, overheads included, rounded up", () => {
    expect([
      promptTokenEstimate([]),
      promptTokenEstimate([{ role: "user", content: "hello" }]), // (5 + 32) / 4 = 9.25
      promptTokenEstimate([
        { role: "user", content: "abcd" },
        { role: "assistant", content: "efgh" },
      ]), // (4 + 32 + 4 + 32) / 4
    ]).toEqual([0, 10, 18]);
  });

  test.each([
    [10, 0, 0],
    [10, 1, 1],
    [10, 8, 2],
    [10, 9, 3],
  ])("prompt %p with %p relayed characters", (prompt, chars, completion) => {
    expect(estimatedUsage(prompt, chars)).toEqual({ prompt_tokens: prompt, completion_tokens: completion });
  });

  test.each([
    [1_000, 10, 10],
    [40, 10, 10],
    [39, 10, 10],
    [36, 10, 9],
  ])("%p relayed characters under a budget of %p: %p completion tokens", (chars, budget, completion) => {
    expect(estimatedUsage(10, chars, budget)).toEqual({ prompt_tokens: 10, completion_tokens: completion });
  });
});

describe("reservationFor", () => {
  test.each([
    [1_000, 0, rates(65_000, 260_000, 32_500), 65],
    [1_000, 500, rates(65_000, 260_000, 32_500), 65 + 130],
    [1, 1, rates(65_000, 65_000, 32_500), 2], // each part rounds up: an upper bound
    [0, 0, rates(65_000, 65_000, 32_500), 0],
    [123_456_789, 0, rates(987_654_321, 0, 0), 121_932_631_113],
  ] as const)("prompt bound %p and %p output tokens", (bound, maxTokens, r, expected) => {
    expect(reservationFor(bound, maxTokens, r)).toBe(expected);
  });

  test("covers the charge of any usage within the bounds (cache-read at or below input)", () => {
    const next = seededRandom(11);
    for (let i = 0; i < 2_000; i++) {
      const input = Math.floor(next() * 3_000_000);
      const r = rates(input, Math.floor(next() * 3_000_000), Math.floor(next() * (input + 1)));
      const bound = Math.floor(next() * 5_000);
      const maxTokens = Math.floor(next() * 5_000);
      const prompt = Math.floor(next() * (bound + 1));
      const usage: Usage = {
        prompt_tokens: prompt,
        cached_tokens: Math.floor(next() * (prompt + 1)),
        completion_tokens: Math.floor(next() * (maxTokens + 1)),
      };
      const charge = chargeFor(usage, r);
      const hold = reservationFor(bound, maxTokens, r);
      expect({ usage, r, bound, maxTokens, covered: charge <= hold }).toEqual({ usage, r, bound, maxTokens, covered: true });
    }
  });
});

describe("chargeFor", () => {
  test.each([
    ["1,000 prompt tokens at 65,000 per million", { prompt_tokens: 1_000, completion_tokens: 0 }, rates(65_000, 0, 0), 65],
    ["1 prompt token at 65,000 per million rounds up", { prompt_tokens: 1, completion_tokens: 0 }, rates(65_000, 0, 0), 1],
    ["nothing used", { prompt_tokens: 0, completion_tokens: 0 }, rates(65_000, 260_000, 32_500), 0],
    ["completion at the output rate", { prompt_tokens: 0, completion_tokens: 1_000_000 }, rates(1, 2_000_000, 1), 2_000_000],
    [
      "cached tokens at the cache-read rate",
      { prompt_tokens: 1_000_000, cached_tokens: 400_000, completion_tokens: 10 },
      rates(1_000_000, 2_000_000, 500_000),
      600_000 + 200_000 + 20,
    ],
    [
      "one rounding on the total: 0.3 + 0.5 + 0.2 is 1, where rounding each part would give 3",
      { prompt_tokens: 3, cached_tokens: 2, completion_tokens: 1 },
      rates(300_000, 200_000, 250_000),
      1,
    ],
    ["0.5 + 0.5 is 1, not 2", { prompt_tokens: 1, completion_tokens: 1 }, rates(500_000, 500_000, 250_000), 1],
    [
      "cached tokens beyond the prompt count as the prompt",
      { prompt_tokens: 10, cached_tokens: 50, completion_tokens: 0 },
      rates(1_000_000, 1_000_000, 100_000),
      1,
    ],
    ["products beyond 2^53 stay exact", { prompt_tokens: 123_456_789, completion_tokens: 0 }, rates(987_654_321, 0, 0), 121_932_631_113],
  ] as const)("%s", (_name, usage, r, expected) => {
    expect(chargeFor(usage, r)).toBe(expected);
  });
});

describe("feeFor", () => {
  test.each([
    [1, 10, 1], // 0.1 rounds up
    [0, 10, 0],
    [12_345, 0, 0],
    [12_345, 100, 12_345],
    [100, 10, 10],
    [101, 10, 11],
    [999_999_999_999, 15, 150_000_000_000], // 149,999,999,999.85
  ])("charge %p at %p%% is %p", (charge, percent, fee) => {
    expect(feeFor(charge, percent)).toBe(fee);
  });
});

const silent: Logger = { error() {}, warn() {}, info() {}, debug() {} };

function setup(platformFeePercent = 10) {
  const store = new FakeMoney({ A: 1_000_000, P: 0 });
  const wallets = new Wallets(store, silent);
  return { store, wallets, billing: new Billing(wallets, { platformFeePercent }) };
}

const RATES = rates(65_000, 260_000, 32_500);

function ending(usage: Usage, providerAccountId: string | null = "P"): Ending {
  return {
    outcome: "completed",
    usage,
    providerId: providerAccountId === null ? null : "provider-1",
    providerAccountId,
    firstContentMs: 40,
    endedAt: T0 + 1_500,
  };
}

async function money(billing: Billing, amount: number | null): Promise<RequestMoney> {
  return {
    requestId: "req-1",
    accountId: "A",
    keyId: "K",
    model: "org/model",
    buildId: "org/build-4bit",
    rates: RATES,
    startedAt: T0,
    hold: amount === null ? undefined : await billing.reserve({ accountId: "A", keyId: "K", spendCap: null, amount }),
    free: amount === null,
  };
}

function expected(charge: number, fee: number, usage: Usage, providerAccountId: string | null = "P"): Settlement {
  return {
    requestId: "req-1",
    accountId: "A",
    keyId: "K",
    charge,
    providerAccountId,
    earning: charge - fee,
    fee,
    at: T0 + 1_500,
    usage: {
      requestId: "req-1",
      accountId: "A",
      keyId: "K",
      model: "org/model",
      buildId: "org/build-4bit",
      providerId: providerAccountId === null ? null : "provider-1",
      promptTokens: usage.prompt_tokens,
      cachedTokens: Math.min(usage.cached_tokens ?? 0, usage.prompt_tokens),
      completionTokens: usage.completion_tokens,
      cost: charge,
      startedAt: T0,
      firstContentMs: 40,
      durationMs: 1_500,
      outcome: "completed",
    },
  };
}

describe("Billing.settle", () => {
  test("charges the exact cost, pays the provider the charge less the fee, records usage", async () => {
    const { store, wallets, billing } = setup();
    const hold = reservationFor(2_000, 500, RATES); // 130 + 130
    const m = await money(billing, hold);
    const usage: Usage = { prompt_tokens: 1_000, cached_tokens: 200, completion_tokens: 100 };
    await billing.settle(m, ending(usage));
    // 800 × 65,000 + 200 × 32,500 + 100 × 260,000 = 84,500,000 / 10^6 -> 85; fee 8.5 -> 9.
    expect({ settlements: store.settlements, reserved: wallets.reservedFor("A"), hold }).toEqual({
      settlements: [expected(85, 9, usage)],
      reserved: 0,
      hold: 260,
    });
  });

  test("a usage report above the bound is charged no more than the hold", async () => {
    const { store, wallets, billing } = setup();
    const m = await money(billing, 260);
    const usage: Usage = { prompt_tokens: 1_000_000, completion_tokens: 1_000_000 };
    expect(chargeFor(usage, RATES)).toBeGreaterThan(260);
    await billing.settle(m, ending(usage));
    expect({ settlements: store.settlements, balance: await store.balance("A"), reserved: wallets.reservedFor("A") }).toEqual({
      settlements: [expected(260, 26, usage)],
      balance: 1_000_000 - 260,
      reserved: 0,
    });
  });

  test("a self-routed request is charged nothing; its usage is recorded", async () => {
    const { store, billing } = setup();
    const m = await money(billing, null);
    const usage: Usage = { prompt_tokens: 500, completion_tokens: 700 };
    await billing.settle(m, ending(usage));
    expect({ settlements: store.settlements, balance: await store.balance("A") }).toEqual({
      settlements: [expected(0, 0, usage)],
      balance: 1_000_000,
    });
  });

  test("a free request is charged nothing even when something was held", async () => {
    const { store, wallets, billing } = setup();
    const m: RequestMoney = { ...(await money(billing, 260)), free: true };
    const usage: Usage = { prompt_tokens: 500, completion_tokens: 700 };
    await billing.settle(m, ending(usage));
    expect({ settlements: store.settlements, reserved: wallets.reservedFor("A") }).toEqual({
      settlements: [expected(0, 0, usage)],
      reserved: 0,
    });
  });

  test("without a provider account the whole charge is the platform's fee", async () => {
    const { store, billing } = setup();
    const m = await money(billing, 260);
    const usage: Usage = { prompt_tokens: 1_000, completion_tokens: 0 };
    await billing.settle(m, ending(usage, null));
    expect(store.settlements).toEqual([expected(65, 65, usage, null)]);
  });

  test.each([
    [0, 0],
    [100, 85],
  ])("at a %p%% platform fee the fee on 85 is %p", async (percent, fee) => {
    const { store, billing } = setup(percent);
    const m = await money(billing, 260);
    const usage: Usage = { prompt_tokens: 1_000, cached_tokens: 200, completion_tokens: 100 };
    await billing.settle(m, ending(usage));
    expect(store.settlements).toEqual([expected(85, fee, usage)]);
  });

  test("the duration is never negative", async () => {
    const { store, billing } = setup();
    const m = await money(billing, 260);
    await billing.settle(m, { ...ending({ prompt_tokens: 1, completion_tokens: 1 }), endedAt: T0 - 5 });
    expect(store.settlements.map((s) => [s.at, s.usage.durationMs])).toEqual([[T0 - 5, 0]]);
  });
});
