/**
 * Rate limits across replicas: RedisRateLimiter while Redis answers; when it does not (timeout, refused,
 * an error), each replica limits alone with the in-process RateLimiter at each limit / live replicas, so
 * that the fleet stays near the limit. It says so once per transition (warn when it falls back, info
 * when Redis is back) and in the `mode` it reports (umbra_rate_limit_mode). While local, a check at most
 * every `probeIntervalMs` also loads the scripts in the background; success returns to Redis. Local
 * answers are synchronous. Money is not decided here (billing/ is), so nothing is lost but precision.
 */
import type { Logger } from "../observability/logger.ts";
import { type Decision, type Limiter, type RateCost, type RateHandle, RateLimiter, type RateLimits } from "./rate-limiter.ts";
import { RedisUnavailableError } from "./redis-client.ts";
import type { RedisRateLimiter } from "./redis-limiter.ts";

export type RateLimitMode = "redis" | "local";

export interface GlobalLimiterOptions {
  readonly redis: RedisRateLimiter;
  /** Unix ms (probe spacing and the local limiter's clock). */
  readonly now: () => number;
  readonly logger: Logger;
  /** Called with the mode at start and at each transition (metrics.observeRateLimitMode). */
  readonly onMode?: (mode: RateLimitMode) => void;
  /** Replicas alive now (the fleet digest); default 1. Below 1 or not finite counts as 1. */
  readonly liveReplicas?: () => number;
  /** Least time between two probes of Redis while local. Default 1,000 ms. */
  readonly probeIntervalMs?: number;
}

export class GlobalRateLimiter implements Limiter {
  private readonly redis: RedisRateLimiter;
  private readonly local: RateLimiter;
  private readonly options: GlobalLimiterOptions;
  private current: RateLimitMode = "redis";
  private lastProbe = Number.NEGATIVE_INFINITY;
  private probing = false;

  constructor(options: GlobalLimiterOptions) {
    this.options = options;
    this.redis = options.redis;
    this.local = new RateLimiter({ now: options.now });
    options.onMode?.("redis");
  }

  get mode(): RateLimitMode {
    return this.current;
  }

  check(subject: string, limits: RateLimits, cost: RateCost): Decision | Promise<Decision> {
    if (this.current === "local") {
      this.probe();
      return this.checkLocally(subject, limits, cost);
    }
    return this.redis.check(subject, limits, cost).catch((e: unknown) => {
      if (!(e instanceof RedisUnavailableError)) throw e;
      this.fallBack(e);
      return this.checkLocally(subject, limits, cost);
    });
  }

  /** Settles on the limiter that admitted the handle; a Redis failure counts as one (the promise never rejects). */
  trueUp(handle: RateHandle, actualTokens: number): Promise<void> | undefined {
    if (!this.redis.owns(handle)) {
      this.local.trueUp(handle, actualTokens);
      return undefined;
    }
    return this.redis.trueUp(handle, actualTokens).catch((e: unknown) => {
      if (e instanceof RedisUnavailableError) this.fallBack(e);
    });
  }

  private checkLocally(subject: string, limits: RateLimits, cost: RateCost): Decision {
    const n = this.replicas();
    const share = (limit: number | null) => (limit === null ? null : limit / n);
    return this.local.check(subject, { rpm: share(limits.rpm), tpm: share(limits.tpm) }, cost);
  }

  private replicas(): number {
    const n = this.options.liveReplicas?.() ?? 1;
    return Number.isFinite(n) && n >= 1 ? n : 1;
  }

  private fallBack(e: RedisUnavailableError): void {
    if (this.current === "local") return;
    this.current = "local";
    this.lastProbe = this.options.now();
    this.options.logger.warn("rate limits local: Redis unreachable, each replica limits alone at limit / live replicas", {
      mode: "local",
      reason: e.reason,
      count: this.replicas(),
    });
    this.options.onMode?.("local");
  }

  private probe(): void {
    const now = this.options.now();
    if (this.probing || now - this.lastProbe < (this.options.probeIntervalMs ?? 1000)) return;
    this.lastProbe = now;
    this.probing = true;
    this.redis.ready().then(
      () => {
        this.probing = false;
        if (this.current === "redis") return;
        this.current = "redis";
        this.options.logger.info("rate limits shared again: Redis answers", { mode: "redis" });
        this.options.onMode?.("redis");
      },
      () => {
        this.probing = false;
      },
    );
  }
}
