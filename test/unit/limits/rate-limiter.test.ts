import { describe, expect, test } from "bun:test";
import { type Decision, formatResetDuration, type RateHandle, RateLimiter, type RateLimits } from "../../../src/limits/rate-limiter.ts";

const T0 = 1_760_000_000_000;

/** A limiter on a fake clock; `advance(ms)` moves time, `at(ms)` sets it relative to T0. */
function setup(options: { maxSubjects?: number; sweepPerCall?: number } = {}) {
  let t = T0;
  const limiter = new RateLimiter({ now: () => t, ...options });
  return {
    limiter,
    advance: (ms: number) => {
      t += ms;
    },
    at: (ms: number) => {
      t = T0 + ms;
    },
  };
}

function admitted(decision: Decision): RateHandle {
  if (!decision.ok) throw new Error(`expected admission, got retry after ${decision.retryAfterSeconds}s on ${decision.dimension}`);
  return decision.handle;
}

function rejection(decision: Decision) {
  if (decision.ok) throw new Error("expected a rejection");
  return { retryAfterSeconds: decision.retryAfterSeconds, dimension: decision.dimension };
}

const REQUEST_HEADERS = ["x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"];
const TOKEN_HEADERS = ["x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"];

describe.each([
  // rpm, tpm, token cost, admitted in a burst at t0, then: Retry-After, binding dimension, exact wait (ms)
  { rpm: 60, tpm: null, cost: 10, burst: 60, retryAfter: 1, dimension: "requests", waitMs: 1000 },
  { rpm: 1, tpm: null, cost: 10, burst: 1, retryAfter: 60, dimension: "requests", waitMs: 60_000 },
  { rpm: null, tpm: 1000, cost: 600, burst: 1, retryAfter: 12, dimension: "tokens", waitMs: 12_000 },
  { rpm: 600, tpm: 1000, cost: 100, burst: 10, retryAfter: 6, dimension: "tokens", waitMs: 6000 },
  { rpm: 5, tpm: 100_000, cost: 100, burst: 5, retryAfter: 12, dimension: "requests", waitMs: 12_000 },
  { rpm: 7, tpm: 1001, cost: 3, burst: 7, retryAfter: 9, dimension: "requests", waitMs: 60_000 / 7 },
  { rpm: 3, tpm: 100, cost: 40, burst: 2, retryAfter: 12, dimension: "tokens", waitMs: 12_000 },
  { rpm: null, tpm: null, cost: 1_000_000, burst: 1000, retryAfter: null, dimension: null, waitMs: null },
] as const)("rpm $rpm, tpm $tpm, cost $cost", ({ rpm, tpm, cost, burst, retryAfter, dimension, waitMs }) => {
  const limits: RateLimits = { rpm, tpm };

  test(`1,000 synchronous calls at one instant admit exactly ${burst}`, () => {
    const { limiter } = setup();
    let admittedCount = 0;
    for (let i = 0; i < 1000; i++) if (limiter.check("key_a", limits, { tokens: cost }).ok) admittedCount++;
    expect(admittedCount).toBe(burst);
  });

  test("the first rejection says when the request passes", () => {
    const { limiter } = setup();
    for (let i = 0; i < burst; i++) admitted(limiter.check("key_a", limits, { tokens: cost }));
    const next = limiter.check("key_a", limits, { tokens: cost });
    if (retryAfter === null) {
      expect(next.ok).toBe(true);
      return;
    }
    expect(rejection(next)).toEqual({ retryAfterSeconds: retryAfter, dimension });
  });

  if (waitMs !== null)
    test("rejected one millisecond before the exact wait, admitted at it", () => {
      const { limiter, at } = setup();
      for (let i = 0; i < burst; i++) admitted(limiter.check("key_a", limits, { tokens: cost }));
      at(Math.ceil(waitMs) - 1);
      expect(limiter.check("key_a", limits, { tokens: cost }).ok).toBe(false);
      at(Math.ceil(waitMs));
      expect(limiter.check("key_a", limits, { tokens: cost }).ok).toBe(true);
    });

  test("headers cover exactly the limited dimensions", () => {
    const { limiter } = setup();
    const decision = limiter.check("key_a", limits, { tokens: cost });
    const expected = [...(rpm === null ? [] : REQUEST_HEADERS), ...(tpm === null ? [] : TOKEN_HEADERS)];
    expect(Object.keys(decision.headers).sort()).toEqual(expected.sort());
    for (const value of Object.values(decision.headers)) expect(typeof value).toBe("string");
  });

  test("subjects are independent", () => {
    const { limiter } = setup();
    for (let i = 0; i < burst; i++) admitted(limiter.check("key_a", limits, { tokens: cost }));
    expect(limiter.check("key_b", limits, { tokens: cost }).ok).toBe(true);
  });
});

describe("headers", () => {
  test("after an admission: limits, remaining after the debit, time until full", () => {
    const { limiter } = setup();
    const decision = limiter.check("key_a", { rpm: 60, tpm: 1000 }, { tokens: 600 });
    expect(decision).toEqual({
      ok: true,
      handle: expect.anything(),
      headers: {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "400",
        "x-ratelimit-reset-tokens": "36s",
      },
    });
  });

  test("on a rejection: the state as it stands, nothing debited", () => {
    const { limiter, advance } = setup();
    admitted(limiter.check("key_a", { rpm: 60, tpm: 1000 }, { tokens: 600 }));
    advance(350);
    expect(limiter.check("key_a", { rpm: 60, tpm: 1000 }, { tokens: 600 })).toEqual({
      ok: false,
      retryAfterSeconds: 12, // 194.1666 tokens short at 16.666/s: 11.65 s
      dimension: "tokens",
      headers: {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59", // 59.35
        "x-ratelimit-reset-requests": "650ms",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "405", // 405.833
        "x-ratelimit-reset-tokens": "35.65s",
      },
    });
  });

  test("remaining is never negative, and the reset counts the debt", () => {
    const { limiter } = setup();
    expect(limiter.check("key_a", { rpm: null, tpm: 1000 }, { tokens: 5000 }).headers).toEqual({
      "x-ratelimit-limit-tokens": "1000",
      "x-ratelimit-remaining-tokens": "0",
      "x-ratelimit-reset-tokens": "5m0s",
    });
  });

  test.each([
    [0, "0s"],
    [-5, "0s"],
    [Number.NaN, "0s"],
    [0.2, "1ms"],
    [350, "350ms"],
    [999, "999ms"],
    [999.01, "1s"],
    [1000, "1s"],
    [1001, "1.001s"],
    [1010, "1.01s"],
    [1500, "1.5s"],
    [35_650, "35.65s"],
    [59_999, "59.999s"],
    [60_000, "1m0s"],
    [90_500, "1m30.5s"],
    [360_000, "6m0s"],
    [3_600_000, "1h0m0s"],
    [3_723_004, "1h2m3.004s"],
    [90_000_000, "25h0m0s"],
  ])("reset duration %p ms is %p", (ms, text) => {
    expect(formatResetDuration(ms)).toBe(text);
  });
});

describe("atomicity", () => {
  test("a request rejected on tokens does not consume a request slot", () => {
    const { limiter } = setup();
    const limits = { rpm: 2, tpm: 100 };
    admitted(limiter.check("key_a", limits, { tokens: 100 }));
    for (let i = 0; i < 50; i++) expect(rejection(limiter.check("key_a", limits, { tokens: 100 })).dimension).toBe("tokens");
    // A request within the tokens left still finds its request slot.
    expect(admitted(limiter.check("key_a", limits, { tokens: 0 }))).toBeDefined();
    expect(rejection(limiter.check("key_a", limits, { tokens: 0 }))).toEqual({ retryAfterSeconds: 30, dimension: "requests" });
  });

  test("a request rejected on requests does not consume tokens", () => {
    const { limiter } = setup();
    const limits = { rpm: 1, tpm: 1000 };
    admitted(limiter.check("key_a", limits, { tokens: 100 }));
    for (let i = 0; i < 50; i++) expect(rejection(limiter.check("key_a", limits, { tokens: 100 })).dimension).toBe("requests");
    expect(limiter.check("key_a", limits, { tokens: 100 }).headers["x-ratelimit-remaining-tokens"]).toBe("900");
  });

  test("when both dimensions are short, the longer wait decides", () => {
    const { limiter } = setup();
    const limits = { rpm: 1, tpm: 600 };
    admitted(limiter.check("key_a", limits, { tokens: 600 }));
    // requests: 60 s; tokens: 600 short at 10/s = 60 s (tie -> requests)
    expect(rejection(limiter.check("key_a", limits, { tokens: 600 }))).toEqual({ retryAfterSeconds: 60, dimension: "requests" });
    // rpm 2: requests 30 s; tokens: 360 short at 10/s = 36 s
    expect(rejection(limiter.check("key_a", { rpm: 2, tpm: 600 }, { tokens: 360 }))).toEqual({
      retryAfterSeconds: 36,
      dimension: "tokens",
    });
  });
});

describe("debt", () => {
  test("a cost above the whole capacity passes on a full bucket and pays for itself", () => {
    const { limiter, at } = setup();
    const limits = { rpm: null, tpm: 1000 };
    admitted(limiter.check("key_a", limits, { tokens: 5000 }));
    // level -4000: one more token needs 4001 at 1000/60 per s = 240.06 s
    expect(rejection(limiter.check("key_a", limits, { tokens: 1 }))).toEqual({ retryAfterSeconds: 241, dimension: "tokens" });
    at(240_059);
    expect(limiter.check("key_a", limits, { tokens: 1 }).ok).toBe(false);
    at(240_060);
    expect(limiter.check("key_a", limits, { tokens: 1 }).ok).toBe(true);
  });

  test("a cost above capacity on a partly used bucket waits until it is full, never forever", () => {
    const { limiter, at } = setup();
    const limits = { rpm: null, tpm: 1000 };
    admitted(limiter.check("key_a", limits, { tokens: 500 }));
    expect(rejection(limiter.check("key_a", limits, { tokens: 1_000_000 }))).toEqual({ retryAfterSeconds: 30, dimension: "tokens" });
    at(29_999);
    expect(limiter.check("key_a", limits, { tokens: 1_000_000 }).ok).toBe(false);
    at(30_000);
    expect(limiter.check("key_a", limits, { tokens: 1_000_000 }).ok).toBe(true);
  });

  test("a request limit below one per minute still lets one request through on a full bucket", () => {
    const { limiter } = setup();
    expect(limiter.check("key_a", { rpm: 0.5, tpm: null }, { tokens: 0 }).ok).toBe(true);
    expect(rejection(limiter.check("key_a", { rpm: 0.5, tpm: null }, { tokens: 0 }))).toEqual({
      retryAfterSeconds: 120,
      dimension: "requests",
    });
  });
});

describe("trueUp", () => {
  const limits = { rpm: null, tpm: 1000 };
  const remaining = (limiter: RateLimiter) => limiter.check("key_a", limits, { tokens: 0 }).headers["x-ratelimit-remaining-tokens"];

  test("refunds an overestimate", () => {
    const { limiter } = setup();
    const handle = admitted(limiter.check("key_a", limits, { tokens: 600 }));
    limiter.trueUp(handle, 100);
    expect(remaining(limiter)).toBe("900");
  });

  test("charges an underestimate, into debt", () => {
    const { limiter } = setup();
    const handle = admitted(limiter.check("key_a", limits, { tokens: 600 }));
    limiter.trueUp(handle, 1500); // level 400 - 900 = -500
    expect(remaining(limiter)).toBe("0");
    // 501 tokens short at 1000/60 per s = 30.06 s
    expect(rejection(limiter.check("key_a", limits, { tokens: 1 }))).toEqual({ retryAfterSeconds: 31, dimension: "tokens" });
  });

  test("is idempotent per handle", () => {
    const { limiter } = setup();
    const handle = admitted(limiter.check("key_a", limits, { tokens: 600 }));
    limiter.trueUp(handle, 100);
    limiter.trueUp(handle, 100);
    limiter.trueUp(handle, 1000);
    expect(remaining(limiter)).toBe("900");
  });

  test("a refund never fills past capacity", () => {
    const { limiter, advance } = setup({ sweepPerCall: 0 }); // no sweep: it would forget the full bucket anyway
    const handle = admitted(limiter.check("key_a", limits, { tokens: 600 }));
    advance(60_000);
    limiter.trueUp(handle, 0);
    expect(limiter.check("key_a", limits, { tokens: 0 }).headers).toEqual({
      "x-ratelimit-limit-tokens": "1000",
      "x-ratelimit-remaining-tokens": "1000",
      "x-ratelimit-reset-tokens": "0s",
    });
  });

  test("applies to a subject forgotten since the check", () => {
    const { limiter, advance } = setup({ sweepPerCall: 4 });
    const handle = admitted(limiter.check("key_a", limits, { tokens: 600 }));
    advance(60_000);
    limiter.check("key_other", { rpm: 1000, tpm: null }, { tokens: 0 });
    expect(limiter.size).toBe(1); // key_a was full, so it was swept
    limiter.trueUp(handle, 1600); // a fresh full bucket, charged 1000 more
    expect(remaining(limiter)).toBe("0");
    expect(limiter.check("key_a", limits, { tokens: 1 }).ok).toBe(false);
  });

  test("a handle from a check without a tpm limit changes nothing", () => {
    const { limiter } = setup();
    const handle = admitted(limiter.check("key_a", { rpm: 10, tpm: null }, { tokens: 600 }));
    limiter.trueUp(handle, 1_000_000);
    expect(limiter.check("key_a", limits, { tokens: 0 }).headers["x-ratelimit-remaining-tokens"]).toBe("1000");
  });

  test("refuses a handle from another limiter and a bad token count", () => {
    const a = setup().limiter;
    const b = setup().limiter;
    const handle = admitted(a.check("key_a", limits, { tokens: 600 }));
    expect(() => b.trueUp(handle, 1)).toThrow(TypeError);
    expect(() => b.trueUp({ subject: "key_a", estimatedTokens: 600 }, 1)).toThrow(TypeError);
    expect(() => a.trueUp(handle, -1)).toThrow(RangeError);
    expect(() => a.trueUp(handle, Number.NaN)).toThrow(RangeError);
  });
});

describe("memory", () => {
  test("the map never holds more than maxSubjects, least recently used evicted first", () => {
    const { limiter } = setup({ maxSubjects: 100 });
    const limits = { rpm: 10, tpm: null };
    limiter.check("key_hot", limits, { tokens: 0 });
    for (let i = 0; i < 10_000; i++) {
      limiter.check(`key_${i}`, limits, { tokens: 0 });
      if (i % 50 === 0) limiter.check("key_hot", limits, { tokens: 0 });
      expect(limiter.size).toBeLessThanOrEqual(100);
    }
    expect(limiter.size).toBe(100);
    // key_hot, used often, kept its state (10 of its 201 checks admitted); key_0 was evicted: a fresh bucket.
    expect(limiter.check("key_hot", limits, { tokens: 0 }).ok).toBe(false);
    expect(limiter.check("key_0", limits, { tokens: 0 }).headers["x-ratelimit-remaining-requests"]).toBe("9");
  });

  test("full, idle subjects are forgotten; subjects still refilling are kept", () => {
    const { limiter, advance } = setup();
    const limits = { rpm: 60, tpm: null };
    for (let i = 0; i < 1000; i++) limiter.check(`key_${i}`, limits, { tokens: 0 });
    expect(limiter.size).toBe(1000);
    advance(500); // each has 59.5 of 60: not full
    for (let i = 0; i < 1000; i++) limiter.check("key_busy", { rpm: 1_000_000, tpm: null }, { tokens: 0 });
    expect(limiter.size).toBe(1001);
    advance(500); // now full
    for (let i = 0; i < 600; i++) limiter.check("key_busy", { rpm: 1_000_000, tpm: null }, { tokens: 0 });
    expect(limiter.size).toBe(1);
  });

  test("unlimited subjects keep no state", () => {
    const { limiter } = setup();
    limiter.check("key_a", { rpm: 10, tpm: null }, { tokens: 0 });
    expect(limiter.size).toBe(1);
    const decision = limiter.check("key_a", { rpm: null, tpm: null }, { tokens: 5 });
    expect(decision.ok && decision.headers).toEqual({});
    expect(limiter.size).toBe(0);
  });
});

describe("limits changed between calls", () => {
  test("a lower limit clamps the level; a higher one refills from there", () => {
    const { limiter, advance } = setup();
    for (let i = 0; i < 5; i++) admitted(limiter.check("key_a", { rpm: 10, tpm: null }, { tokens: 0 }));
    // level 5 of 10 -> rpm 3: clamped to 3, this request leaves 2
    expect(limiter.check("key_a", { rpm: 3, tpm: null }, { tokens: 0 }).headers).toEqual({
      "x-ratelimit-limit-requests": "3",
      "x-ratelimit-remaining-requests": "2",
      "x-ratelimit-reset-requests": "20s",
    });
    // rpm 60: level 2 stays, this request leaves 1, full in 59 s at 1/s
    expect(limiter.check("key_a", { rpm: 60, tpm: null }, { tokens: 0 }).headers).toEqual({
      "x-ratelimit-limit-requests": "60",
      "x-ratelimit-remaining-requests": "1",
      "x-ratelimit-reset-requests": "59s",
    });
    advance(1000);
    expect(limiter.check("key_a", { rpm: 60, tpm: null }, { tokens: 0 }).headers["x-ratelimit-remaining-requests"]).toBe("1");
  });

  test("a limit that appears starts full; one removed stops limiting", () => {
    const { limiter } = setup();
    admitted(limiter.check("key_a", { rpm: 1, tpm: null }, { tokens: 0 }));
    expect(limiter.check("key_a", { rpm: 1, tpm: null }, { tokens: 0 }).ok).toBe(false);
    expect(limiter.check("key_a", { rpm: null, tpm: 1000 }, { tokens: 600 }).headers).toEqual({
      "x-ratelimit-limit-tokens": "1000",
      "x-ratelimit-remaining-tokens": "400",
      "x-ratelimit-reset-tokens": "36s",
    });
    // rpm back: a new, full bucket
    expect(limiter.check("key_a", { rpm: 1, tpm: 1000 }, { tokens: 0 }).ok).toBe(true);
  });

  test("a lower tpm clamps the token level", () => {
    const { limiter } = setup();
    admitted(limiter.check("key_a", { rpm: null, tpm: 1000 }, { tokens: 100 }));
    expect(limiter.check("key_a", { rpm: null, tpm: 300 }, { tokens: 0 }).headers).toEqual({
      "x-ratelimit-limit-tokens": "300",
      "x-ratelimit-remaining-tokens": "300",
      "x-ratelimit-reset-tokens": "0s",
    });
  });
});

describe("clock and input", () => {
  test("a clock that goes back does not refill twice", () => {
    const { limiter, at } = setup();
    const limits = { rpm: 60, tpm: null };
    for (let i = 0; i < 60; i++) admitted(limiter.check("key_a", limits, { tokens: 0 }));
    at(-10_000);
    expect(rejection(limiter.check("key_a", limits, { tokens: 0 }))).toEqual({ retryAfterSeconds: 1, dimension: "requests" });
    at(999);
    expect(limiter.check("key_a", limits, { tokens: 0 }).ok).toBe(false);
    at(1000);
    expect(limiter.check("key_a", limits, { tokens: 0 }).ok).toBe(true);
  });

  test.each([
    { rpm: 0, tpm: null, tokens: 1 },
    { rpm: -1, tpm: null, tokens: 1 },
    { rpm: null, tpm: Number.POSITIVE_INFINITY, tokens: 1 },
    { rpm: null, tpm: Number.NaN, tokens: 1 },
    { rpm: 10, tpm: 10, tokens: -1 },
    { rpm: 10, tpm: 10, tokens: Number.NaN },
  ])("refuses rpm $rpm, tpm $tpm, cost $tokens", ({ rpm, tpm, tokens }) => {
    const limits = { rpm, tpm };
    const { limiter } = setup();
    expect(() => limiter.check("key_a", limits, { tokens })).toThrow(RangeError);
    expect(limiter.size).toBe(0);
  });
});
