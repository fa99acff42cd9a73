/**
 * The three Redis calls the shared rate limits need, behind one interface so that the client library is
 * a choice (limits/bun-redis.ts: Bun.RedisClient; limits/ioredis-client.ts: ioredis), both run by the same
 * tests. Every call is bounded by a timeout; a call that times out drops its connection (the next call
 * dials again). Errors are two kinds only: `NoScriptError` (the server lost the script: load it again)
 * and `RedisUnavailableError` (anything else: timeout, refused, closed, a server error), whose `reason`
 * is a fixed word fit for logs.
 */

export interface RedisScripts {
  /** SCRIPT LOAD: the script's SHA-1 (hex). */
  load(script: string): Promise<string>;
  /** EVALSHA with `keys` then `args`; NoScriptError when the server does not hold that script. */
  evalsha(sha: string, keys: readonly string[], args: readonly string[]): Promise<unknown>;
  /** Closes the connection; later calls fail. */
  close(): void;
}

/** The client libraries (--redis-client): Bun.RedisClient, or ioredis. */
export const REDIS_CLIENTS = ["bun", "ioredis"] as const;
export type RedisClientKind = (typeof REDIS_CLIENTS)[number];

/** Default bound on one call, connecting included (ms). */
export const REDIS_TIMEOUT_MS = 500;

export type UnavailableReason = "timeout" | "error";

export class RedisUnavailableError extends Error {
  override readonly name = "RedisUnavailableError";
  constructor(readonly reason: UnavailableReason) {
    super(reason === "timeout" ? "Redis did not answer in time" : "Redis call failed");
  }
}

export class NoScriptError extends Error {
  override readonly name = "NoScriptError";
  constructor() {
    super("Redis does not hold the script");
  }
}

/** A client library's error as one of the two kinds. */
export function redisError(e: unknown): NoScriptError | RedisUnavailableError {
  if (e instanceof NoScriptError || e instanceof RedisUnavailableError) return e;
  if (e instanceof Error && e.message.startsWith("NOSCRIPT")) return new NoScriptError();
  return new RedisUnavailableError("error");
}

/**
 * `work`, or RedisUnavailableError("timeout") after `ms` (then `onTimeout` runs, to drop the connection).
 * Whatever `work` does after the deadline is ignored, a late rejection included.
 */
export function withTimeout<T>(work: Promise<T>, ms: number, onTimeout: () => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      onTimeout();
      reject(new RedisUnavailableError("timeout"));
    }, ms);
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(redisError(e));
      },
    );
  });
}
