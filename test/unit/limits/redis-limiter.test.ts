import { afterAll, describe, expect, test } from "bun:test";
import { type Decision, RateLimiter, type RateLimits } from "../../../src/limits/rate-limiter.ts";
import type { RedisScripts } from "../../../src/limits/redis-client.ts";
import { RedisRateLimiter } from "../../../src/limits/redis-limiter.ts";
import { seededRandom } from "../../support/random.ts";
import { adapters, keysOf, REDIS_URL, removeKeys, testPrefix, testRedis } from "../../support/redis.ts";

const T0 = 1_760_000_000_000;
const suite = (await testRedis("test/unit/limits/redis-limiter.test.ts")) ? describe : describe.skip;

/** A decision without its handle, for comparing two limiters' answers. */
function answer(d: Decision) {
  return d.ok ? { ok: true, headers: d.headers } : { ok: false, retry: d.retryAfterSeconds, dimension: d.dimension, headers: d.headers };
}

suite.each(adapters)("RedisRateLimiter over $name", ({ open }) => {
  const clients: RedisScripts[] = [];
  const prefixes: string[] = [];
  afterAll(async () => {
    for (const c of clients) c.close();
    for (const p of prefixes) await removeKeys(p);
  });

  /** A Redis limiter and the in-process one, on one hand-moved clock, and a prefix of the test's own. */
  function setup() {
    const client = open(REDIS_URL);
    clients.push(client);
    const prefix = testPrefix();
    prefixes.push(prefix);
    let t = T0;
    const now = () => t;
    return {
      prefix,
      client,
      redis: new RedisRateLimiter({ client, prefix, clock: now }),
      // Sweeps every full subject before each check, as Redis expires a subject once both keys are full
      // (the in-process sweep otherwise keeps some a while longer, at their old limits).
      local: new RateLimiter({ now, sweepPerCall: 8 }),
      advance: (ms: number) => {
        t += ms;
      },
    };
  }

  test.each([21, 7, 2026])("answers as the in-process limiter does, call for call (seed %p)", async (seed) => {
    const { redis, local, advance } = setup();
    const random = seededRandom(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)] as T;
    const rpms = [null, 1, 0.5, 7, 60, 600];
    const tpms = [null, 100, 1000, 1001, 60_000];
    const subjects = ["key_a", "key_b", "account:acc_c"];
    const current = new Map<string, RateLimits>();
    const open: { subject: string; limits: RateLimits; local: Decision; redis: Decision }[] = [];
    let admitted = 0;
    for (let i = 0; i < 600; i++) {
      advance(pick([0, 0, 1, 7, 350, 1000, 6000, 61_000]));
      const subject = pick(subjects);
      if (random() < 0.25 && open.length > 0) {
        const j = Math.floor(random() * open.length);
        const h = open[j] as (typeof open)[number];
        open.splice(j, 1);
        // Only under the limits of its check: the in-process limiter brings back a forgotten subject's
        // buckets from the handle, with the limits they had then (a Redis key gone full is gone).
        if (current.get(h.subject) !== h.limits || !h.local.ok || !h.redis.ok) continue;
        const actual = pick([0, 1, 50, 700, 5000]);
        local.trueUp(h.local.handle, actual);
        await redis.trueUp(h.redis.handle, actual);
        continue;
      }
      let limits = current.get(subject) ?? { rpm: 60, tpm: 1000 };
      if (random() < 0.1) limits = { rpm: pick(rpms), tpm: pick(tpms) };
      if (limits.rpm === null && limits.tpm === null) limits = { rpm: 7, tpm: null };
      current.set(subject, limits);
      const cost = { tokens: pick([0, 1, 99, 100, 400, 1000, 2500]) };
      const expected = local.check(subject, limits, cost);
      const got = await redis.check(subject, limits, cost);
      expect({ i, ...answer(got) }).toEqual({ i, ...answer(expected) });
      if (expected.ok) {
        admitted++;
        open.push({ subject, limits, local: expected, redis: got });
      }
    }
    expect(admitted).toBeGreaterThan(100); // the sequence exercised both answers
    expect(admitted).toBeLessThan(550);
  });

  test("on the server's clock: a burst of the limit, then Retry-After and headers", async () => {
    const { client, prefix } = setup();
    const redis = new RedisRateLimiter({ client, prefix });
    const limits = { rpm: 3, tpm: 10_000 };
    const started = performance.now();
    for (let i = 0; i < 3; i++) expect((await redis.check("key_a", limits, { tokens: 10 })).ok).toBe(true);
    const refused = await redis.check("key_a", limits, { tokens: 10 });
    // The server's clock runs meanwhile: the token bucket refills 1 token per 6 ms.
    const refilled = Math.ceil((performance.now() - started) / 6);
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.dimension).toBe("requests");
    expect(refused.retryAfterSeconds).toBeGreaterThanOrEqual(19); // one request of 3 per minute: 20 s, less elapsed time
    expect(refused.retryAfterSeconds).toBeLessThanOrEqual(20);
    expect(refused.headers["x-ratelimit-remaining-requests"]).toBe("0");
    const remaining = Number(refused.headers["x-ratelimit-remaining-tokens"]);
    expect(remaining).toBeGreaterThanOrEqual(9970);
    expect(remaining).toBeLessThanOrEqual(9970 + refilled);
    expect(await keysOf(prefix)).toEqual([`{${prefix}:key_a}:req`, `{${prefix}:key_a}:tok`]);
  });

  test("a cost above the whole capacity passes on a full bucket and leaves debt", async () => {
    const { redis, local } = setup();
    const limits = { rpm: null, tpm: 1000 };
    for (const l of [redis, local]) {
      expect((await l.check("key_a", limits, { tokens: 5000 })).ok).toBe(true);
      expect(answer(await l.check("key_a", limits, { tokens: 1 }))).toMatchObject({ ok: false, retry: 241, dimension: "tokens" });
    }
  });

  test("both dimensions or neither: a refusal on tokens spends no request", async () => {
    const { redis } = setup();
    const limits = { rpm: 2, tpm: 100 };
    expect((await redis.check("key_a", limits, { tokens: 100 })).ok).toBe(true);
    for (let i = 0; i < 5; i++) expect(answer(await redis.check("key_a", limits, { tokens: 100 }))).toMatchObject({ dimension: "tokens" });
    expect((await redis.check("key_a", limits, { tokens: 0 })).ok).toBe(true);
  });

  test("a subject's keys go once it is full in every dimension; no limit at all makes no call", async () => {
    const { redis, prefix } = setup();
    const tok = `{${prefix}:key_a}:tok`;
    const refunded = await redis.check("key_a", { rpm: null, tpm: 1000 }, { tokens: 600 });
    expect(await keysOf(prefix)).toEqual([tok]);
    if (refunded.ok) await redis.trueUp(refunded.handle, 0);
    expect(await keysOf(prefix)).toEqual([]);
    await redis.check("key_a", { rpm: 60, tpm: 1000 }, { tokens: 0 }); // tokens full, kept with the request key
    expect(await keysOf(prefix)).toEqual([`{${prefix}:key_a}:req`, tok]);
    const failing: RedisScripts = {
      load: () => Promise.reject(new Error("no")),
      evalsha: () => Promise.reject(new Error("no")),
      close() {},
    };
    const unlimited = await new RedisRateLimiter({ client: failing, prefix }).check("key_b", { rpm: null, tpm: null }, { tokens: 5 });
    expect(unlimited.ok && unlimited.headers).toEqual({});
  });

  test("a script the server lost is loaded again (NOSCRIPT)", async () => {
    const { client, prefix } = setup();
    let loads = 0;
    let calls = 0;
    const forgetful: RedisScripts = {
      load: (s) => {
        loads++;
        return client.load(s);
      },
      // The first call names a script the server never held: it answers NOSCRIPT.
      evalsha: (sha, keys, args) => client.evalsha(calls++ === 0 ? "0".repeat(40) : sha, keys, args),
      close() {},
    };
    const redis = new RedisRateLimiter({ client: forgetful, prefix });
    expect((await redis.check("key_a", { rpm: 5, tpm: null }, { tokens: 0 })).headers["x-ratelimit-remaining-requests"]).toBe("4");
    expect({ loads, calls }).toEqual({ loads: 1, calls: 2 });
  });

  test("a true-up not sent yet is carried by its subject's next check, before that check decides", async () => {
    const { client, prefix } = setup();
    const counted = counting(client);
    // No timer sends it within the test: only the next check can.
    const redis = new RedisRateLimiter({ client: counted, prefix, clock: () => T0, trueUpDelayMs: 60_000 });
    const calls = () => counted.calls;
    const limits = { rpm: null, tpm: 1000 };
    const big = await redis.check("key_a", limits, { tokens: 900 });
    if (!big.ok) throw new Error("expected admission");
    // 900 estimated, 100 used: 800 back, owed to the next check.
    let given = false;
    void redis.trueUp(big.handle, 100).then(() => {
      given = true;
    });
    const after = await redis.check("key_a", limits, { tokens: 800 });
    expect({ ok: after.ok, given, calls: calls() }).toEqual({ ok: true, given: true, calls: 2 });
    if (!after.ok) return;
    // 800 estimated, 1,000 used: 200 more, so nothing is left for the next one.
    void redis.trueUp(after.handle, 1000);
    const refused = await redis.check("key_a", limits, { tokens: 1 });
    expect({ ok: refused.ok, remaining: refused.headers["x-ratelimit-remaining-tokens"], calls: calls() }).toEqual({
      ok: false,
      remaining: "0",
      calls: 3,
    });
  });

  test("true-ups no check carries are summed per subject and sent after the delay", async () => {
    const { client, prefix } = setup();
    const counted = counting(client);
    const redis = new RedisRateLimiter({ client: counted, prefix, clock: () => T0, trueUpDelayMs: 10 });
    const calls = () => counted.calls;
    const limits = { rpm: null, tpm: 1000 };
    const one = await redis.check("key_a", limits, { tokens: 300 });
    const two = await redis.check("key_a", limits, { tokens: 300 });
    if (!one.ok || !two.ok) throw new Error("expected admissions");
    await Promise.all([redis.trueUp(one.handle, 100), redis.trueUp(two.handle, 0)]);
    expect(calls()).toBe(3); // two checks and one true-up for both
    expect((await redis.check("key_a", limits, { tokens: 0 })).headers["x-ratelimit-remaining-tokens"]).toBe("900");
  });

  test("refuses bad input before any call, and foreign or repeated true-ups", async () => {
    const { redis, local } = setup();
    await expect(redis.check("key_a", { rpm: 0, tpm: null }, { tokens: 1 })).rejects.toThrow(RangeError);
    await expect(redis.check("key_a", { rpm: 1, tpm: null }, { tokens: Number.NaN })).rejects.toThrow(RangeError);
    const foreign = local.check("key_a", { rpm: 1, tpm: 10 }, { tokens: 1 });
    if (foreign.ok) expect(() => redis.trueUp(foreign.handle, 1)).toThrow(TypeError);
    const mine = await redis.check("key_a", { rpm: null, tpm: 1000 }, { tokens: 600 });
    if (!mine.ok) throw new Error("expected admission");
    await redis.trueUp(mine.handle, 100);
    await redis.trueUp(mine.handle, 5000); // ignored: once per handle
    expect((await redis.check("key_a", { rpm: null, tpm: 1000 }, { tokens: 0 })).headers["x-ratelimit-remaining-tokens"]).toBe("900");
  });
});

/** A client that counts its EVALSHA calls. */
function counting(client: RedisScripts): RedisScripts & { readonly calls: number } {
  let calls = 0;
  return {
    load: (s) => client.load(s),
    evalsha: (sha, keys, args) => {
      calls++;
      return client.evalsha(sha, keys, args);
    },
    close() {},
    get calls() {
      return calls;
    },
  };
}
