/**
 * The machine's Redis for the shared rate-limit tests: UMBRA_TEST_REDIS_URL (default
 * redis://127.0.0.1:6379). `testRedis()` says once, in one line, when no Redis answers (the suites then
 * skip); `adapters` runs a suite over both client libraries; `testPrefix()` is a key prefix of the test's
 * own, and `removeKeys` deletes its keys afterwards.
 */
import { RedisClient } from "bun";
import { bunRedisScripts } from "../../src/limits/bun-redis.ts";
import { ioredisScripts } from "../../src/limits/ioredis-client.ts";
import type { RedisScripts } from "../../src/limits/redis-client.ts";

export const REDIS_URL = process.env.UMBRA_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

/** Tests' bound on one call: generous, so that a busy machine is not taken for a Redis that stopped answering. */
const TEST_TIMEOUT_MS = 5000;

export const adapters: readonly { readonly name: string; readonly open: (url: string, timeoutMs?: number) => RedisScripts }[] = [
  { name: "Bun.RedisClient", open: (url, timeoutMs = TEST_TIMEOUT_MS) => bunRedisScripts(url, { timeoutMs }) },
  { name: "ioredis", open: (url, timeoutMs = TEST_TIMEOUT_MS) => ioredisScripts(url, { timeoutMs }) },
];

let answer: Promise<boolean> | undefined;

/** Whether Redis answers PING within 2 s; when it does not, prints why the suite in `file` skips. */
export function testRedis(file: string): Promise<boolean> {
  answer ??= (async () => {
    const client = new RedisClient(REDIS_URL, { autoReconnect: false, enableOfflineQueue: false, connectionTimeout: 2000 });
    try {
      await client.connect();
      return (await client.send("PING", [])) === "PONG";
    } catch {
      return false;
    } finally {
      client.close();
    }
  })();
  return answer.then((ok) => {
    if (!ok) console.warn(`SKIPPED ${file}: no Redis answers at ${REDIS_URL} (set UMBRA_TEST_REDIS_URL)`);
    return ok;
  });
}

export function testPrefix(): string {
  return `umbra-test:${crypto.randomUUID()}`;
}

/** Deletes every key of `prefix` (both dimensions of every subject) on the Redis at `url`. */
export async function removeKeys(prefix: string, url = REDIS_URL): Promise<void> {
  const client = new RedisClient(url, { autoReconnect: false });
  try {
    let cursor = "0";
    do {
      const [next, keys] = (await client.send("SCAN", [cursor, "MATCH", `{${prefix}:*`, "COUNT", "1000"])) as [string, string[]];
      if (keys.length > 0) await client.send("DEL", keys);
      cursor = next;
    } while (cursor !== "0");
  } finally {
    client.close();
  }
}

/** Keys left under `prefix`. */
export async function keysOf(prefix: string): Promise<string[]> {
  const client = new RedisClient(REDIS_URL, { autoReconnect: false });
  try {
    return ((await client.send("KEYS", [`{${prefix}:*`])) as string[]).sort();
  } finally {
    client.close();
  }
}
