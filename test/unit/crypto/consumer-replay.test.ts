/**
 * The sealed-envelope replay cache (src/crypto/consumer-replay.ts) on a clock the test moves: the window,
 * single use, expiry with the window, and the bound (refusal with the wait, never early forgetting).
 */
import { describe, expect, test } from "bun:test";
import { SEALED_REPLAY_MAX_ENTRIES, SEALED_WINDOW_SECONDS, SealedReplayCache } from "../../../src/crypto/consumer-replay.ts";

const T0 = 1_767_225_600;

function cache(maxEntries = 4, windowSeconds = 120) {
  let nowMs = T0 * 1000;
  const c = new SealedReplayCache({ now: () => nowMs, windowSeconds, maxEntries });
  return {
    c,
    /** Moves the clock to T0 + seconds. */
    at: (seconds: number) => {
      nowMs = (T0 + seconds) * 1000;
    },
  };
}

describe("sealed replay cache", () => {
  test("the defaults are the documented ones (docs/security.md)", () => {
    expect([SEALED_WINDOW_SECONDS, SEALED_REPLAY_MAX_ENTRIES]).toEqual([120, 262_144]);
  });

  test("timestamps within the window either way are admitted; one second beyond is stale or future", () => {
    const { c } = cache();
    expect([T0 - 120, T0, T0 + 120, T0 - 121, T0 + 121].map((t) => c.check("e", t))).toEqual([
      { ok: true },
      { ok: true },
      { ok: true },
      { ok: false, reason: "stale", nowSeconds: T0 },
      { ok: false, reason: "future", nowSeconds: T0 },
    ]);
  });

  test("check records nothing; record admits an enc once, and check then refuses it", () => {
    const { c } = cache();
    expect([c.check("e", T0), c.check("e", T0), c.size]).toEqual([{ ok: true }, { ok: true }, 0]);
    expect([c.record("e", T0), c.record("e", T0), c.check("e", T0), c.check("other", T0)]).toEqual([
      { ok: true },
      { ok: false, reason: "replayed" },
      { ok: false, reason: "replayed" },
      { ok: true },
    ]);
  });

  test("an entry lives until its envelope goes stale (timestamp + window), then is dropped", () => {
    const { c, at } = cache();
    c.record("future", T0 + 120);
    c.record("now", T0);
    at(120);
    expect([c.check("now", T0), c.size]).toEqual([{ ok: false, reason: "replayed" }, 2]);
    at(121);
    // Stale now, and forgotten: the window refuses it, not the cache.
    expect([c.check("now", T0), c.check("future", T0 + 120), c.size]).toEqual([
      { ok: false, reason: "stale", nowSeconds: T0 + 121 },
      { ok: false, reason: "replayed" },
      1,
    ]);
    at(241);
    expect(c.size).toBe(0);
  });

  test("a full cache refuses new envelopes with the wait until its first entry expires; it forgets nothing early", () => {
    const { c, at } = cache(3);
    c.record("a", T0 - 100);
    c.record("b", T0);
    c.record("c", T0 + 50);
    expect([c.check("d", T0), c.record("d", T0), c.check("a", T0 - 100)]).toEqual([
      { ok: false, reason: "full", retryAfterSeconds: 21 },
      { ok: false, reason: "full", retryAfterSeconds: 21 },
      { ok: false, reason: "replayed" },
    ]);
    at(21);
    expect([c.record("d", T0 + 21), c.size]).toEqual([{ ok: true }, 3]);
  });

  test("memory stays bounded under a long run of fresh envelopes: entries expire with the window", () => {
    const { c, at } = cache(1_000, 10);
    let refused = 0;
    for (let second = 0; second < 600; second++) {
      at(second);
      for (let i = 0; i < 20; i++) if (!c.record(`${second}-${i}`, T0 + second).ok) refused++;
    }
    // 20 a second, each kept for 10 s: 220 at most (the current second and the 10 before it).
    expect([refused, c.size]).toEqual([0, 220]);
  });
});
