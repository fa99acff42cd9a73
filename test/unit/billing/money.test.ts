import { describe, expect, test } from "bun:test";
import {
  ceilHundredths,
  ceilMillionths,
  costOf,
  discountedCacheRead,
  usd,
  usdPerMillion,
  usdPerToken,
} from "../../../src/billing/money.ts";
import golden from "../../fixtures/price-format.json" with { type: "json" };

describe("price formatting (golden vectors)", () => {
  test.each(golden.vectors.map((v) => [v.micro_per_million, v.usd_per_million, v.usd_per_token] as const))(
    "%p micro-USD per million",
    (micro, perMillion, perToken) => {
      expect({ perMillion: usdPerMillion(micro), perToken: usdPerToken(micro) }).toEqual({ perMillion, perToken });
    },
  );

  test("the per-token string parses back to the exact rate (no float drift)", () => {
    for (const v of golden.vectors) {
      const [whole, fraction = ""] = v.usd_per_token.split(".");
      const picoUsd = BigInt(whole as string) * 10n ** 12n + BigInt(fraction.padEnd(12, "0") || "0");
      expect(picoUsd).toBe(BigInt(v.micro_per_million));
    }
  });

  test("usd formats an amount", () => {
    expect([usd(0), usd(1), usd(10_000_000), usd(1_234_567)]).toEqual(["$0.00", "$0.000001", "$10.00", "$1.234567"]);
  });
});

describe("cache-read discount", () => {
  test.each([
    [65_000, 50, 32_500],
    [1, 50, 1], // rounds up: never below the true rate
    [3, 50, 2],
    [500_000, 0, 500_000],
    [500_000, 100, 0],
    [333, 10, 300], // 299.7 -> 300
  ])("input %p less %p%% is %p", (input, percent, expected) => {
    expect(discountedCacheRead(input, percent)).toBe(expected);
  });
});

describe("costOf", () => {
  test.each([
    [0, 65_000, 0n],
    [1, 65_000, 1n], // 0.065 micro-USD rounds up to 1
    [1_000_000, 65_000, 65_000n],
    [15, 1_000_000, 15n],
    [1_000_001, 1_000_000, 1_000_001n],
    [123_456_789, 1_000_000_000_000, 123_456_789_000_000n],
  ])("%p tokens at %p per million cost %p", (tokens, rate, expected) => {
    expect(costOf(tokens, rate)).toBe(expected);
  });
});

/** A deterministic pseudo-random sequence (a linear congruential generator) from `seed`. */
function lcg(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    return state;
  };
}

describe("ceilMillionths (the Number fast path of costOf)", () => {
  test.each([
    [0, 0],
    [1, 1],
    [999_999, 1],
    [1_000_000, 1],
    [1_000_001, 2],
    [Number.MAX_SAFE_INTEGER, 9_007_199_255],
  ])("ceil(%p / 10^6) = %p", (numerator, expected) => {
    expect(ceilMillionths(numerator)).toBe(expected);
  });

  test("beyond safe integers it declines, so the caller takes the exact bigint path", () => {
    expect(ceilMillionths(2 ** 53)).toBeUndefined();
    expect(ceilMillionths(1.5)).toBeUndefined();
  });

  test("agrees with the bigint computation on many products", () => {
    const next = lcg(42);
    for (let i = 0; i < 10_000; i++) {
      const tokens = next() % 100_000_000;
      const rate = next() % 90_000_000;
      const fast = ceilMillionths(tokens * rate);
      if (fast !== undefined) expect(fast).toBe(Number(costOf(tokens, rate)));
    }
  });
});

describe("ceilHundredths (fees and cache-read discounts)", () => {
  const exact = (a: number, b: number) => Number((BigInt(a) * BigInt(b) + 99n) / 100n);

  test.each([
    [0, 0, 0],
    [1, 1, 1],
    [100, 1, 1],
    [101, 1, 2],
    [199, 50, 100],
    [1_000_000, 10, 100_000],
  ])("ceil(%p x %p / 100) = %p", (a, b, expected) => {
    expect(ceilHundredths(a, b)).toBe(expected);
  });

  test("exact up to the largest safe integer", () => {
    for (const a of [Number.MAX_SAFE_INTEGER - 99, Number.MAX_SAFE_INTEGER - 100, Number.MAX_SAFE_INTEGER - 199]) {
      expect(ceilHundredths(a, 1)).toBe(exact(a, 1));
    }
  });

  test("beyond safe integers it takes the bigint path", () => {
    expect(ceilHundredths(2 ** 60, 100)).toBe(exact(2 ** 60, 100));
    expect(ceilHundredths(Number.MAX_SAFE_INTEGER, 3)).toBe(exact(Number.MAX_SAFE_INTEGER, 3));
  });

  test("agrees with the bigint computation on many products, small and near 2^53", () => {
    const next = lcg(7);
    for (let i = 0; i < 10_000; i++) {
      const a = i % 2 === 0 ? next() % 10_000_000 : Number.MAX_SAFE_INTEGER - 200 - (next() % 1_000_000);
      const b = i % 2 === 0 ? next() % 101 : 1;
      expect(ceilHundredths(a, b)).toBe(exact(a, b));
    }
  });
});
