/**
 * RedisScripts over ioredis (Cluster and Sentinel when needed). It reconnects on its own with a short
 * capped backoff; a command fails at once while disconnected (maxRetriesPerRequest 0) instead of waiting
 * in its queue, and a call that times out drops the connection, which ioredis then dials again. Its
 * connection errors are not logged here: each failed call reaches the limiter, which logs transitions.
 */
import { Redis } from "ioredis";
import { REDIS_TIMEOUT_MS, type RedisScripts, withTimeout } from "./redis-client.ts";

export function ioredisScripts(url: string, options: { readonly timeoutMs?: number } = {}): RedisScripts {
  const timeoutMs = options.timeoutMs ?? REDIS_TIMEOUT_MS;
  const client = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: timeoutMs,
    retryStrategy: (times) => Math.min(50 * times, 1000),
  });
  client.on("error", () => {});
  const call = <T>(work: Promise<T>): Promise<T> => withTimeout(work, timeoutMs, () => client.disconnect(true));
  return {
    load: (script) => call(client.script("LOAD", script).then(String)),
    evalsha: (sha, keys, args) => call(client.evalsha(sha, keys.length, ...keys, ...args)),
    close: () => client.disconnect(),
  };
}
