/**
 * The app's limiter wiring (src/coordinator/rate-limits.ts): the Redis password put into the client's URL
 * percent-encoded (both client libraries decode it; any character survives), the URL unchanged without
 * one; in process without cluster mode.
 */
import { describe, expect, test } from "bun:test";
import { createLimiter, redisUrlOf } from "../../../src/coordinator/rate-limits.ts";
import { RateLimiter } from "../../../src/limits/rate-limiter.ts";
import { createLogger } from "../../../src/observability/logger.ts";
import { createMetrics } from "../../../src/observability/metrics.ts";

describe("redisUrlOf", () => {
  test.each([
    ["redis://127.0.0.1:6379", undefined, "redis://127.0.0.1:6379"],
    ["redis://127.0.0.1:6379/2", "p@ss:w/rd%x é", "redis://:p%40ss%3Aw%2Frd%25x%20%C3%A9@127.0.0.1:6379/2"],
    ["rediss://umbra@cache.internal:6380", "s3cret", "rediss://umbra:s3cret@cache.internal:6380"],
  ])("%s with password %p", (redisUrl, redisPassword, expected) => {
    const url = redisUrlOf({ redisUrl, ...(redisPassword !== undefined ? { redisPassword } : {}) });
    expect([url, redisPassword === undefined ? undefined : decodeURIComponent(new URL(url).password)]).toEqual([expected, redisPassword]);
  });
});

test("without cluster mode the limiter is the in-process one", () => {
  const { limiter } = createLimiter({
    cluster: null,
    now: () => 0,
    logger: createLogger("error"),
    metrics: createMetrics(),
    liveReplicas: () => 1,
  });
  expect(limiter).toBeInstanceOf(RateLimiter);
});
