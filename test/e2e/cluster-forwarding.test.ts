/**
 * Cluster mode wired in createApp: two replicas in one process (each its own app and socket over one
 * store, the same Redis and a NATS subject prefix of the test's own), a provider connected to B only; a
 * chat request sent to A is answered by B's provider over NATS; A counts B as a live replica and its
 * /v1/models counts B's provider. A replica whose NATS does not answer logs it and serves its own providers. The machine's Redis and NATS
 * (test/support/redis.ts, nats.ts); skipped, saying so in one line, without them.
 */
import { expect, test } from "bun:test";
import type { ClusterConfig } from "../../src/config/config.ts";
import { createApp } from "../../src/coordinator/app.ts";
import { loadLinks } from "../../src/coordinator/links.ts";
import { listen } from "../../src/coordinator/server.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { chatEnv, SEEDED_BUILD } from "../support/chat-env.ts";
import { connectFakeProvider } from "../support/fake-provider.ts";
import { NATS_URL, natsPrefix, testNats } from "../support/nats.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { chatBody, postChat } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const redis = await testRedis("test/e2e/cluster-forwarding.test.ts");
const nats = await testNats("test/e2e/cluster-forwarding.test.ts");

function cluster(replicaId: string, prefix: string, natsUrl = NATS_URL): ClusterConfig {
  return {
    redisUrl: REDIS_URL,
    redisClient: "bun",
    redisTimeoutMs: 5000,
    holdTtlMs: 30_000,
    natsServers: [natsUrl],
    natsTls: false,
    prefix,
    replicaId,
  };
}

test.skipIf(!redis || !nats)("a request to replica A is answered by the provider connected to replica B", async () => {
  const prefix = natsPrefix();
  try {
    await using a = await chatEnv({ cluster: cluster("replica-a", prefix) });
    const bConfig = { ...a.t.config, cluster: cluster("replica-b", prefix) };
    const b = createApp({ config: bConfig, store: a.t.store, logger: createLogger("error"), links: await loadLinks(bConfig) });
    const server = listen(b, "127.0.0.1", 0);
    try {
      await using _provider = await connectFakeProvider({ url: server.url, token: a.token, models: [SEEDED_BUILD] });
      const app = a.t.app;
      await waitFor(() => (app.cluster?.remote.candidates(SEEDED_BUILD).length ?? 0) > 0, "B's provider in A's view");
      expect([app.fleet.list().length, app.cluster?.liveReplicas(), app.cluster?.capacity(SEEDED_BUILD)?.routableProviders]).toEqual([
        0, 2, 1,
      ]);
      const models = await fetch(`${a.server.url}/v1/models/${SEEDED_BUILD}`, { headers: { authorization: `Bearer ${a.apiKey}` } });
      const { metadata } = (await models.json()) as { metadata: Record<string, unknown> };
      expect([metadata.provider_count, metadata.routable_providers, metadata.can_accept]).toEqual([1, 1, true]);
      const r = await postChat(a.server.url, a.apiKey, chatBody("hi", { max_tokens: 4 }));
      const answer = (await r.json()) as { choices?: { message?: { content?: string } }[] };
      expect([r.status, typeof answer.choices?.[0]?.message?.content]).toEqual([200, "string"]);
    } finally {
      b.close();
      await server.stop();
    }
  } finally {
    await removeKeys(prefix);
  }
});

test("a replica whose NATS does not answer serves its own providers", async () => {
  // A closed port: the connection fails at start and is retried in the background.
  await using a = await chatEnv({ cluster: cluster("replica-a", natsPrefix(), "nats://127.0.0.1:1") });
  await a.provider();
  const r = await postChat(a.server.url, a.apiKey, chatBody("hi", { max_tokens: 4 }));
  await r.text();
  expect([r.status, a.t.app.cluster?.node, a.t.app.cluster?.liveReplicas()]).toEqual([200, undefined, 1]);
  expect(a.t.logs.filter((l) => l.includes("NATS unreachable"))).toHaveLength(1);
});
