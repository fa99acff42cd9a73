/**
 * Shared rate limits (cluster mode, --redis-url) through the HTTP API: two replicas in one process, each
 * its own app and socket on the same Redis and the same store (the key's record), admit together no more
 * requests than the key's rpm, with either client library; the mode is reported in /metrics; a replica
 * whose Redis does not answer limits alone (local mode). The machine's Redis (test/support/redis.ts),
 * under a key prefix of the test's own; skipped, saying so in one line, without one.
 */
import { afterAll, describe, expect, test } from "bun:test";
import type { ClusterConfig } from "../../src/config/config.ts";
import { createApp } from "../../src/coordinator/app.ts";
import { loadLinks } from "../../src/coordinator/links.ts";
import { listen } from "../../src/coordinator/server.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { chatEnv } from "../support/chat-env.ts";
import { connectFakeProvider } from "../support/fake-provider.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { chatBody, postChat } from "../support/server.ts";

const redis = await testRedis("test/e2e/shared-rate-limits.test.ts");
const prefixes: string[] = [];
afterAll(async () => {
  for (const prefix of prefixes) await removeKeys(prefix);
});

function cluster(client: ClusterConfig["redisClient"], replicaId: string, prefix: string, redisUrl = REDIS_URL): ClusterConfig {
  return {
    redisUrl,
    redisClient: client,
    redisTimeoutMs: 5000,
    holdTtlMs: 30_000,
    natsServers: ["nats://127.0.0.1:4222"],
    natsTls: false,
    prefix,
    replicaId,
  };
}

/** Refills one request every 20 s: the burst below ends long before. */
const RPM = 3;

describe.each(["bun", "ioredis"] as const)("shared rate limits, %s client", (client) => {
  test.skipIf(!redis)("two replicas on one Redis admit no more than the key's rpm between them", async () => {
    const prefix = `umbra-test-${crypto.randomUUID()}`;
    prefixes.push(prefix);
    await using a = await chatEnv({ cluster: cluster(client, "replica-a", prefix), key: { rpm: RPM } });
    // Replica B: its own app and socket over A's store (one key record), the same Redis and prefix.
    const bConfig = { ...a.t.config, cluster: cluster(client, "replica-b", prefix) };
    const b = createApp({ config: bConfig, store: a.t.store, logger: createLogger("error"), links: await loadLinks(bConfig) });
    const server = listen(b, "127.0.0.1", 0);
    await using _provider = await connectFakeProvider({ url: server.url, token: a.token, models: ["org/base-build-4bit"] });
    await a.provider();
    try {
      const urls = Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? a.server.url : server.url));
      const answers = await Promise.all(urls.map((url) => postChat(url, a.apiKey, chatBody("hi", { max_tokens: 4 }))));
      const statuses = answers.map((r) => r.status);
      await Promise.all(answers.map((r) => r.text()));
      expect([statuses.filter((s) => s === 200).length, statuses.filter((s) => s === 429).length]).toEqual([RPM, 12 - RPM]);
      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      expect(metrics).toContain('umbra_rate_limit_mode{mode="redis"} 1');
    } finally {
      b.close();
      await server.stop();
    }
  });
});

test("a replica whose Redis does not answer limits alone, at the key's rpm / live replicas (1 here)", async () => {
  // A closed port: every call fails at once, so the first check falls back to the local limiter.
  await using a = await chatEnv({ cluster: cluster("bun", "replica-a", "umbra-test-down", "redis://127.0.0.1:1"), key: { rpm: RPM } });
  await a.provider();
  const statuses: number[] = [];
  for (let i = 0; i < RPM + 2; i++) {
    const r = await postChat(a.server.url, a.apiKey, chatBody("hi", { max_tokens: 4 }));
    await r.text();
    statuses.push(r.status);
  }
  const metrics = await (await fetch(`${a.server.url}/metrics`)).text();
  expect([statuses, metrics.includes('umbra_rate_limit_mode{mode="local"} 1')]).toEqual([[200, 200, 200, 429, 429], true]);
});
