/**
 * The app's rate limiter. One coordinator: the in-process RateLimiter. Cluster mode (config.cluster):
 * the limits shared by every replica through Redis (limits/global-limiter.ts), with the client library
 * --redis-client names (ioredis is loaded on first use only, so a start with Bun's client never pays for
 * it), keys under the cluster prefix, every call bounded by --redis-timeout-ms, and the mode reported to
 * metrics (umbra_rate_limit_mode). `close` closes the Redis client (the app's close calls it).
 * The Redis password (a secret setting) is put into the URL handed to the client, never logged.
 */
import type { ClusterConfig } from "../config/config.ts";
import { bunRedisScripts } from "../limits/bun-redis.ts";
import { GlobalRateLimiter } from "../limits/global-limiter.ts";
import { type Limiter, RateLimiter } from "../limits/rate-limiter.ts";
import type { RedisScripts } from "../limits/redis-client.ts";
import { RedisRateLimiter } from "../limits/redis-limiter.ts";
import type { Logger } from "../observability/logger.ts";
import type { Metrics } from "../observability/metrics.ts";

export interface AppLimiter {
  readonly limiter: Limiter;
  close(): void;
}

export interface LimiterDeps {
  readonly cluster: ClusterConfig | null;
  readonly now: () => number;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** Replicas alive now, by which each limit is divided while Redis is unreachable. */
  readonly liveReplicas: () => number;
}

export function createLimiter(deps: LimiterDeps): AppLimiter {
  const { cluster, now } = deps;
  if (cluster === null) return { limiter: new RateLimiter({ now }), close: () => {} };
  const client = redisScripts(cluster);
  const limiter = new GlobalRateLimiter({
    redis: new RedisRateLimiter({ client, prefix: cluster.prefix }),
    now,
    logger: deps.logger,
    onMode: (mode) => deps.metrics.observeRateLimitMode(mode),
    liveReplicas: deps.liveReplicas,
  });
  return { limiter, close: () => client.close() };
}

/** The Redis URL with the password setting in it (for the user the URL names, else the default user). */
export function redisUrlOf(cluster: Pick<ClusterConfig, "redisUrl" | "redisPassword">): string {
  if (cluster.redisPassword === undefined) return cluster.redisUrl;
  const url = new URL(cluster.redisUrl);
  url.password = encodeURIComponent(cluster.redisPassword);
  return url.href;
}

function redisScripts(cluster: ClusterConfig): RedisScripts {
  const url = redisUrlOf(cluster);
  const options = { timeoutMs: cluster.redisTimeoutMs };
  if (cluster.redisClient === "bun") return bunRedisScripts(url, options);
  let opened: Promise<RedisScripts> | undefined;
  let closed = false;
  const client = (): Promise<RedisScripts> => {
    opened ??= import("../limits/ioredis-client.ts").then(({ ioredisScripts }) => {
      const c = ioredisScripts(url, options);
      if (closed) c.close();
      return c;
    });
    return opened;
  };
  return {
    load: (script) => client().then((c) => c.load(script)),
    evalsha: (sha, keys, args) => client().then((c) => c.evalsha(sha, keys, args)),
    close: () => {
      closed = true;
      void opened?.then((c) => c.close());
    },
  };
}
