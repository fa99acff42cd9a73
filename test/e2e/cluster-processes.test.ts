/**
 * Cluster mode as real processes: two `serve` replicas on one Postgres database, one Redis and one
 * cluster prefix (and NATS, which routing uses; its rpm holds either way), each with a real provider, admit between them no
 * more chat requests than the key's rpm; each logs its replica id at start. Skipped, saying so, without PostgreSQL or Redis.
 */
import { afterAll, expect, test } from "bun:test";
import { testDatabase } from "../support/pg.ts";
import { startCoordinator, startProvider } from "../support/processes.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";

const SUITE = "cluster mode: two serve processes share rate limits";
const db = await testDatabase([SUITE]);
const redis = await testRedis("test/e2e/cluster-processes.test.ts");
const prefix = `umbra-test-${crypto.randomUUID()}`;
afterAll(() => removeKeys(prefix));

const BUILD = "org/cluster-build";
/** Refills one request every 20 s: the burst below ends long before. */
const RPM = 3;

test.skipIf(db === undefined || !redis)(
  SUITE,
  async () => {
    const env = { UMBRA_REDIS_URL: REDIS_URL, UMBRA_NATS_URL: "nats://127.0.0.1:4222", UMBRA_CLUSTER_PREFIX: prefix };
    await using a = await startCoordinator(env, { db: db?.url ?? "" });
    await using b = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "b" }, { db: db?.url ?? "" });
    // Each names itself in its start line: A with the id generated for its process.
    expect([/^r-[0-9a-f]{12}$/.test(String(a.started.replica_id)), b.started.replica_id]).toEqual([true, "b"]);
    const { apiKey, providerToken } = await a.seed([BUILD], { rpm: RPM }, 100_000_000);
    const provider = (url: string) => startProvider(["--coordinator", url, "--token", providerToken, "--engine", "echo", "--model", BUILD]);
    await using pa = provider(a.url);
    await using pb = provider(b.url);
    await Promise.all([pa.connected, pb.connected]);
    const chat = (url: string) =>
      fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({ model: BUILD, max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
      }).then(async (r) => {
        await r.text();
        return r.status;
      });
    const statuses = await Promise.all(Array.from({ length: 10 }, (_, i) => chat(i % 2 === 0 ? a.url : b.url)));
    expect([statuses.filter((s) => s === 200).length, statuses.filter((s) => s === 429).length]).toEqual([RPM, 10 - RPM]);
  },
  60_000,
);
