/**
 * Cluster mode as real processes: two `serve` replicas on one Postgres database, one Redis, the machine's
 * NATS and one cluster prefix (a third under the second's replica id is refused). Each with a real provider, they admit between them no more chat requests
 * than the key's rpm; each logs its replica id at start. With a provider on B only, A lists it in
 * /v1/models and a chat request sent to A is answered by it. Skipped, saying so, without PostgreSQL,
 * Redis or (the second) NATS. A lists B's provider in /v1/providers/attestation and counts it in the
 * attestation figures of /v1/models as B does; a self-routed request to A reaches the account's machine
 * on B. Changes made through A's admin API (a price, an API key's and a device
 * token's revocation) reach B's cached lookups and B's provider sessions within seconds, not at B's
 * 30-second token re-check.
 */
import { afterAll, expect, test } from "bun:test";
import { NATS_URL, testNats } from "../support/nats.ts";
import { testDatabase } from "../support/pg.ts";
import { runCoordinator, startCoordinator, startProvider } from "../support/processes.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { waitFor } from "../support/wait.ts";

const SUITE = "cluster mode: two serve processes share rate limits";
const ROUTED = "cluster mode: a request to replica A is answered by B's provider";
const CHANGES = "cluster mode: revocations and price changes made on A reach B at once";
const db = await testDatabase([SUITE, ROUTED, CHANGES]);
const nats = await testNats("test/e2e/cluster-processes.test.ts");
const redis = await testRedis("test/e2e/cluster-processes.test.ts");
const prefix = `umbra-test-${crypto.randomUUID()}`;
const routedPrefix = `umbra-test-${crypto.randomUUID()}`;
const changesPrefix = `umbra-test-${crypto.randomUUID()}`;
afterAll(() => Promise.all([removeKeys(prefix), removeKeys(routedPrefix), removeKeys(changesPrefix)]));

const BUILD = "org/cluster-build";
/** Refills one request every 20 s: the burst below ends long before. */
const RPM = 3;

test.skipIf(db === undefined || !redis)(
  SUITE,
  async () => {
    const env = { UMBRA_REDIS_URL: REDIS_URL, UMBRA_NATS_URL: NATS_URL, UMBRA_CLUSTER_PREFIX: prefix };
    await using a = await startCoordinator(env, { db: db?.url ?? "" });
    await using b = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "b" }, { db: db?.url ?? "" });
    // Each names itself in its start line: A with the id generated for its process.
    expect([/^r-[0-9a-f]{12}$/.test(String(a.started.replica_id)), b.started.replica_id]).toEqual([true, "b"]);
    // A third process under B's id is refused before it serves anything: holds are rows under the id.
    const twin = await runCoordinator(["serve", "--listen", "127.0.0.1:0", "--db", db?.url ?? ""], {
      env: { ...env, UMBRA_MODE: "development", UMBRA_ADMIN_TOKEN: "t".repeat(40), UMBRA_REPLICA_ID: "b" },
    });
    expect([twin.code, twin.stderr.includes("another running replica uses --replica-id b on this database")]).toEqual([1, true]);
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

test.skipIf(db === undefined || !redis || !nats)(
  ROUTED,
  async () => {
    const env = { UMBRA_REDIS_URL: REDIS_URL, UMBRA_NATS_URL: NATS_URL, UMBRA_CLUSTER_PREFIX: routedPrefix };
    await using a = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "a" }, { db: db?.url ?? "" });
    await using b = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "b" }, { db: db?.url ?? "" });
    const build = "org/routed-build";
    const { apiKey, providerToken, accountId } = await a.seed([build], {}, 100_000_000);
    const args = ["--coordinator", b.url, "--token", providerToken, "--engine", "echo", "--model", build, "--dev-attestation", "on"];
    await using pb = startProvider(args);
    await pb.connected;
    const headers = { authorization: `Bearer ${apiKey}`, "content-type": "application/json" };
    const listed = await waitFor(async () => {
      const r = await fetch(`${a.url}/v1/models/${build}`, { headers });
      const { metadata } = (await r.json()) as { metadata?: { provider_count?: number } };
      return metadata?.provider_count === 1 && metadata;
    }, "B's provider in A's /v1/models");
    const r = await fetch(`${a.url}/v1/chat/completions`, {
      method: "POST",
      headers,
      body: JSON.stringify({ model: build, max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
    });
    const answer = (await r.json()) as { choices?: { message?: { content?: string } }[] };
    expect([listed.provider_count, r.status, typeof answer.choices?.[0]?.message?.content]).toEqual([1, 200, "string"]);
    // A shows B's provider as B verified it: the public attestation list and the attestation figures.
    const publicList = async (url: string) => (await (await fetch(`${url}/v1/providers/attestation`)).json()) as { data: unknown[] };
    const metadata = async (url: string) =>
      ((await (await fetch(`${url}/v1/models/${build}`, { headers })).json()) as { metadata: Record<string, unknown> }).metadata;
    const fromB = await publicList(b.url);
    await waitFor(async () => (await publicList(a.url)).data.length === 1, "B's provider in A's public list");
    const [onA, metaA, metaB] = await Promise.all([publicList(a.url), metadata(a.url), metadata(b.url)]);
    const attestationOf = (m: Record<string, unknown>) => [m.attested_providers, m.trust_level, m.attestation];
    expect([fromB.data.length, onA, attestationOf(metaA)]).toEqual([1, fromB, attestationOf(metaB)]);
    expect(attestationOf(metaB).slice(0, 2)).toEqual([1, "hardware"]);
    // Self-routing (the key's account owns B's machine): served from A too, and listed for a self-route-only key.
    const own = await fetch(`${a.url}/v1/chat/completions`, {
      method: "POST",
      headers,
      body: JSON.stringify({ model: build, max_tokens: 8, self_route: true, messages: [{ role: "user", content: "hi" }] }),
    });
    const selfOnly = await a.admin<{ key: string }>("POST", "/keys", { account_id: accountId, self_route_only: true });
    const models = (await (await fetch(`${a.url}/v1/models`, { headers: { authorization: `Bearer ${selfOnly.key}` } })).json()) as {
      data: { id: string }[];
    };
    expect([own.status, ((await own.json()) as { object?: string }).object, models.data.map((m) => m.id)]).toEqual([
      200,
      "chat.completion",
      [build],
    ]);
  },
  60_000,
);

test.skipIf(db === undefined || !redis || !nats)(
  CHANGES,
  async () => {
    const env = { UMBRA_REDIS_URL: REDIS_URL, UMBRA_NATS_URL: NATS_URL, UMBRA_CLUSTER_PREFIX: changesPrefix };
    await using a = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "a" }, { db: db?.url ?? "" });
    await using b = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "b" }, { db: db?.url ?? "" });
    const build = "org/changes-build";
    const { apiKey, providerToken, accountId } = await a.seed([build], {}, 100_000_000);
    await using pb = startProvider(["--coordinator", b.url, "--token", providerToken, "--engine", "echo", "--model", build]);
    await pb.connected;
    const headers = { authorization: `Bearer ${apiKey}`, "content-type": "application/json" };
    const chat = async () => {
      const r = await fetch(`${b.url}/v1/chat/completions`, {
        method: "POST",
        headers,
        body: JSON.stringify({ model: build, max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
      });
      await r.text();
      return r.status;
    };
    const pricesOnB = async () =>
      ((await (await fetch(`${b.url}/v1/pricing`)).json()) as { prices: { model: string; input_price: number }[] }).prices;
    // B has read (and cached) the key, the build and the empty price list.
    expect([await chat(), await chat(), await pricesOnB()]).toEqual([200, 200, []]);
    // A's /metrics: two replicas, B's provider, the read caches in use.
    const gauges = async (url: string) => {
      const text = await (await fetch(`${url}/metrics`)).text();
      return ["umbra_cluster_replicas", "umbra_cluster_remote_providers", "umbra_store_caches_live"].map((name) =>
        Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]),
      );
    };
    await waitFor(async () => (await gauges(a.url)).join() === "2,1,1", "A's cluster gauges", 10_000);
    const within = 5_000; // far below the 30 s re-check: only the change feed can be this quick
    await a.admin("PUT", `/prices/${build}`, { input_price: 1_000_000, output_price: 2_000_000 });
    const priced = await waitFor(async () => (await pricesOnB())[0]?.input_price === 1_000_000, "the price on B", within);
    const { data: tokens } = await a.admin<{ data: { id: string }[] }>("GET", `/provider-tokens?account_id=${accountId}`);
    await a.admin("DELETE", `/provider-tokens/${tokens[0]?.id}`);
    const gone = await waitFor(
      async () => {
        const r = await fetch(`${b.url}/v1/models/${build}`, { headers });
        const { metadata } = (await r.json()) as { metadata?: { provider_count?: number } };
        return metadata?.provider_count === 0;
      },
      "the revoked device token's session on B ended",
      within,
    );
    const { data: keys } = await a.admin<{ data: { id: string }[] }>("GET", `/keys?account_id=${accountId}`);
    await a.admin("DELETE", `/keys/${keys[0]?.id}`);
    const refused = await waitFor(async () => (await chat()) === 401, "the revoked key refused by B", within);
    expect([priced, gone, refused]).toEqual([true, true, true]);
  },
  60_000,
);
