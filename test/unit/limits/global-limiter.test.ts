import { afterAll, describe, expect, test } from "bun:test";
import { GlobalRateLimiter } from "../../../src/limits/global-limiter.ts";
import type { Decision } from "../../../src/limits/rate-limiter.ts";
import { type RedisScripts, RedisUnavailableError } from "../../../src/limits/redis-client.ts";
import { RedisRateLimiter } from "../../../src/limits/redis-limiter.ts";
import { createMetrics } from "../../../src/observability/metrics.ts";
import { type LogLine, recordingLogger } from "../../support/logs.ts";
import { adapters, REDIS_URL, removeKeys, testPrefix, testRedis } from "../../support/redis.ts";
import { startTcpProxy } from "../../support/tcp-proxy.ts";
import { waitFor } from "../../support/wait.ts";

const T0 = 1_760_000_000_000;
const suite = (await testRedis("test/unit/limits/global-limiter.test.ts")) ? describe : describe.skip;

/** A port nothing listens on (bound, then released). */
function closedPort(): number {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  return port;
}

function modeSamples(text: string): string[] {
  return text.split("\n").filter((line) => line.startsWith("umbra_rate_limit_mode{"));
}

suite.each(adapters)("replicas sharing limits over $name", ({ open }) => {
  const clients: RedisScripts[] = [];
  const prefixes: string[] = [];
  afterAll(async () => {
    for (const c of clients) c.close();
    for (const p of prefixes) await removeKeys(p);
  });
  const client = (url = REDIS_URL, timeoutMs?: number) => {
    const c = open(url, timeoutMs);
    clients.push(c);
    return c;
  };
  const prefix = () => {
    const p = testPrefix();
    prefixes.push(p);
    return p;
  };

  /** `replicas` limiters, each on its own connection, as that many coordinators would be. */
  function replicas(n: number, p: string, clock?: () => number): GlobalRateLimiter[] {
    return Array.from({ length: n }, () => {
      const redis = new RedisRateLimiter({ client: client(), prefix: p, ...(clock ? { clock } : {}) });
      return new GlobalRateLimiter({ redis, now: () => Date.now(), logger: recordingLogger([]) });
    });
  }

  /** `perReplica` concurrent checks on every replica at once; the decisions. */
  async function burst(
    limiters: GlobalRateLimiter[],
    perReplica: number,
    limits: { rpm: number | null; tpm: number | null },
    tokens: number,
  ) {
    const calls = limiters.flatMap((l) => Array.from({ length: perReplica }, () => l.check("key_shared", limits, { tokens })));
    return Promise.all(calls);
  }

  test("three replicas admit exactly the limit between them, on both dimensions (one instant)", async () => {
    const limiters = replicas(3, prefix(), () => T0);
    // rpm 50 alone would admit 50; tpm 1000 at 30 tokens each admits 33.
    const decisions = await burst(limiters, 100, { rpm: 50, tpm: 1000 }, 30);
    expect(decisions.filter((d) => d.ok).length).toBe(33);
    const refused = decisions.filter((d): d is Extract<Decision, { ok: false }> => !d.ok);
    expect(new Set(refused.map((d) => `${d.dimension} ${d.retryAfterSeconds}`))).toEqual(new Set(["tokens 2"]));
    expect(limiters.map((l) => l.mode)).toEqual(["redis", "redis", "redis"]);
  });

  test("on the server's clock, never more than the limit plus what refilled meanwhile", async () => {
    const limiters = replicas(3, prefix());
    const started = Date.now();
    const decisions = await burst(limiters, 100, { rpm: 60, tpm: null }, 0);
    const refilled = Math.ceil((Date.now() - started) / 1000) + 1; // 1 request per second, with a ms of rounding
    const admitted = decisions.filter((d) => d.ok).length;
    expect(admitted).toBeGreaterThanOrEqual(60);
    expect(admitted).toBeLessThanOrEqual(60 + refilled);
  });

  test("Redis on a wrong port: local at limit / live replicas, said once in the log and in /metrics", async () => {
    const lines: LogLine[] = [];
    const metrics = createMetrics();
    const redis = new RedisRateLimiter({ client: client(`redis://127.0.0.1:${closedPort()}`), prefix: prefix() });
    const limiter = new GlobalRateLimiter({
      redis,
      now: () => T0,
      logger: recordingLogger(lines),
      onMode: (mode) => metrics.observeRateLimitMode(mode),
      liveReplicas: () => 3,
    });
    expect(modeSamples(await metrics.render())).toEqual(['umbra_rate_limit_mode{mode="redis"} 1', 'umbra_rate_limit_mode{mode="local"} 0']);
    const first = await limiter.check("key_a", { rpm: 30, tpm: null }, { tokens: 0 });
    expect(first.headers["x-ratelimit-limit-requests"]).toBe("10");
    expect(limiter.mode).toBe("local");
    const later: Decision[] = [];
    for (let i = 0; i < 12; i++) {
      const d = limiter.check("key_a", { rpm: 30, tpm: null }, { tokens: 0 });
      expect(d instanceof Promise).toBe(false); // local answers take no await
      later.push(d as Decision);
    }
    expect(later.filter((d) => d.ok).length).toBe(9); // 10 per replica, the first one included
    expect(lines).toEqual([
      {
        level: "warn",
        msg: "rate limits local: Redis unreachable, each replica limits alone at limit / live replicas",
        fields: { mode: "local", reason: "error", count: 3 },
      },
    ]);
    expect(modeSamples(await metrics.render())).toEqual(['umbra_rate_limit_mode{mode="redis"} 0', 'umbra_rate_limit_mode{mode="local"} 1']);
  });

  test("Redis that stops answering: local after the timeout; shared again once it answers", async () => {
    const [host, port] = new URL(REDIS_URL).host.split(":");
    await using proxy = startTcpProxy({ hostname: host ?? "127.0.0.1", port: Number(port ?? 6379) });
    const lines: LogLine[] = [];
    const metrics = createMetrics();
    const p = prefix();
    let t = T0;
    const proxied = new RedisRateLimiter({ client: client(`redis://127.0.0.1:${proxy.port}`, 1000), prefix: p });
    const limiter = new GlobalRateLimiter({
      redis: proxied,
      now: () => t,
      logger: recordingLogger(lines),
      onMode: (mode) => metrics.observeRateLimitMode(mode),
    });
    const direct = new RedisRateLimiter({ client: client(), prefix: p });
    const limits = { rpm: 100, tpm: null };
    const remaining = async () => (await direct.check("key_b", limits, { tokens: 0 })).headers["x-ratelimit-remaining-requests"];

    expect((await limiter.check("key_a", limits, { tokens: 0 })).ok).toBe(true);
    expect(limiter.mode).toBe("redis");
    proxy.freeze();
    expect((await limiter.check("key_a", limits, { tokens: 0 })).ok).toBe(true); // answered locally
    expect(limiter.mode).toBe("local");
    t += 500;
    limiter.check("key_a", limits, { tokens: 0 }); // too soon to probe
    proxy.thaw();
    await waitFor(() => {
      t += 1000;
      limiter.check("key_b", limits, { tokens: 0 }); // may start a probe: one at a time, 1 s apart
      return limiter.mode === "redis";
    }, "the limiter back on Redis");
    const before = await remaining();
    const shared = limiter.check("key_b", limits, { tokens: 0 });
    expect(shared instanceof Promise).toBe(true);
    expect((await shared).ok).toBe(true);
    expect(Number(await remaining())).toBe(Number(before) - 2); // the limiter's request, then direct's own
    expect(lines.map((l) => [l.level, l.fields?.mode, l.fields?.reason])).toEqual([
      ["warn", "local", "timeout"],
      ["info", "redis", undefined],
    ]);
    expect(modeSamples(await metrics.render())).toEqual(['umbra_rate_limit_mode{mode="redis"} 1', 'umbra_rate_limit_mode{mode="local"} 0']);
  });

  test("a true-up that Redis does not take falls back too, and never rejects", async () => {
    const lines: LogLine[] = [];
    const real = client();
    let down = false;
    const flaky: RedisScripts = {
      load: (script) => real.load(script),
      evalsha: (sha, keys, args) => (down ? Promise.reject(new RedisUnavailableError("timeout")) : real.evalsha(sha, keys, args)),
      close() {},
    };
    const limiter = new GlobalRateLimiter({
      redis: new RedisRateLimiter({ client: flaky, prefix: prefix() }),
      now: () => T0,
      logger: recordingLogger(lines),
    });
    const d = await limiter.check("key_a", { rpm: null, tpm: 1000 }, { tokens: 600 });
    if (!d.ok) throw new Error("expected admission");
    down = true;
    await limiter.trueUp(d.handle, 100);
    expect(limiter.mode).toBe("local");
    expect(lines.map((l) => [l.level, l.fields?.reason])).toEqual([["warn", "timeout"]]);
  });
});
