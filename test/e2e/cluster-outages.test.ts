/**
 * Cluster mode with Redis or NATS down, as real processes: two `serve` replicas on one Postgres
 * database reach the machine's Redis or NATS through a TCP proxy (test/support/tcp-proxy.ts) the test
 * cuts (connections closed and refused) and restores. Redis down: each replica limits alone at
 * limit / live replicas (2 of a key's 4 rpm each), /metrics says `local`, the log says so once, money is
 * unaffected; Redis back: `redis` again. NATS down: a replica's balance lease goes back, each replica
 * serves its own providers; a build served only on the other replica is 503 model_unavailable once its
 * digests are missed; NATS back: routed again. No prompt or completion text in either log. Skipped, saying so, without PostgreSQL, Redis or NATS.
 */
import { afterAll, expect, test } from "bun:test";
import postgres from "postgres";
import { NATS_URL, natsPrefix, testNats } from "../support/nats.ts";
import { testDatabase } from "../support/pg.ts";
import { readBooks } from "../support/pg-money.ts";
import { type CoordinatorProcess, startCoordinator, startProvider } from "../support/processes.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { startTcpProxy } from "../support/tcp-proxy.ts";
import { waitFor } from "../support/wait.ts";

const REDIS_DOWN = "cluster mode: Redis down, limits local";
const NATS_DOWN = "cluster mode: NATS down, each replica serves its own providers";
const db = await testDatabase([REDIS_DOWN, NATS_DOWN]);
const redis = await testRedis("test/e2e/cluster-outages.test.ts");
const nats = await testNats("test/e2e/cluster-outages.test.ts");
const skip = db === undefined || !redis || !nats;
const prefixes: string[] = [];
afterAll(() => Promise.all(prefixes.map((p) => removeKeys(p))));

const CANARY = `canary${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
const target = (url: string) => ({ hostname: new URL(url).hostname, port: Number(new URL(url).port) });

async function chat(on: CoordinatorProcess, apiKey: string, model: string): Promise<{ status: number; code?: string; content?: string }> {
  const r = await fetch(`${on.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model, max_tokens: 8, messages: [{ role: "user", content: CANARY }] }),
  });
  const body = (await r.json()) as { error?: { code: string }; choices?: { message?: { content?: string } }[] };
  return r.status === 200
    ? { status: 200, content: body.choices?.[0]?.message?.content ?? "" }
    : { status: r.status, code: body.error?.code ?? "" };
}

const mode = async (on: CoordinatorProcess) => {
  const text = await (await fetch(`${on.url}/metrics`)).text();
  return /umbra_rate_limit_mode\{mode="local"\} 1/.test(text)
    ? "local"
    : /umbra_rate_limit_mode\{mode="redis"\} 1/.test(text)
      ? "redis"
      : "?";
};

/** The balance leases a replica holds (/metrics). */
const leases = async (on: CoordinatorProcess) =>
  Number(/\numbra_money_leases (\d+)\n/.exec(await (await fetch(`${on.url}/metrics`)).text())?.[1] ?? Number.NaN);

const providers = async (on: CoordinatorProcess, apiKey: string, model: string) => {
  const r = await fetch(`${on.url}/v1/models/${model}`, { headers: { authorization: `Bearer ${apiKey}` } });
  return ((await r.json()) as { metadata?: { provider_count?: number } }).metadata?.provider_count ?? 0;
};

/** Replicas a and b with `env`, an account with credit, keys, and a provider token of another account. */
async function replicas(env: Record<string, string>, stack: AsyncDisposableStack) {
  const prefix = natsPrefix();
  prefixes.push(prefix);
  const url = db?.url ?? "";
  const all = { UMBRA_CLUSTER_PREFIX: prefix, UMBRA_LOG_LEVEL: "debug", ...env };
  const [a, b] = await Promise.all([
    startCoordinator({ ...all, UMBRA_REPLICA_ID: "a" }, { db: url }),
    startCoordinator({ ...all, UMBRA_REPLICA_ID: "b" }, { db: url }),
  ]);
  stack.use(a);
  stack.use(b);
  stack.defer(() =>
    expect([a.log().includes(CANARY), b.log().includes(CANARY), a.proc.exitCode, b.proc.exitCode]).toEqual([false, false, null, null]),
  );
  const earner = await a.admin<{ id: string }>("POST", "/accounts", { name: "provider" });
  const { token } = await a.admin<{ token: string }>("POST", "/provider-tokens", { account_id: earner.id });
  const provider = (on: CoordinatorProcess, model: string) =>
    stack.use(startProvider(["--coordinator", on.url, "--token", token, "--engine", "echo", "--model", model])).connected;
  return { a, b, provider };
}

test.skipIf(skip)(
  REDIS_DOWN,
  async () => {
    await using stack = new AsyncDisposableStack();
    const proxy = stack.use(startTcpProxy(target(REDIS_URL)));
    const { a, b, provider } = await replicas(
      { UMBRA_REDIS_URL: `redis://127.0.0.1:${proxy.port}`, UMBRA_REDIS_TIMEOUT_MS: "300", UMBRA_NATS_URL: NATS_URL },
      stack,
    );
    const build = "org/redis-down";
    // Limited (4 rpm: 2 a replica while local) and unlimited keys of one account.
    const { apiKey: limited, accountId } = await a.seed([build], { rpm: 4 }, 100_000_000);
    const unlimited = (await a.admin<{ key: string }>("POST", "/keys", { account_id: accountId })).key;
    await a.admin("PUT", `/prices/${build}`, { input_price: 1_000_000, output_price: 2_000_000 });
    await Promise.all([provider(a, build), provider(b, build)]);
    // Two live replicas: each sees the other's digests.
    await waitFor(
      async () => (await providers(a, unlimited, build)) === 2 && (await providers(b, unlimited, build)) === 2,
      "both providers listed",
    );
    expect([await mode(a), await mode(b)]).toEqual(["redis", "redis"]);

    proxy.cut();
    const statuses: Record<string, number[]> = { a: [], b: [] };
    for (let i = 0; i < 5; i++) {
      statuses.a?.push((await chat(a, limited, build)).status);
      statuses.b?.push((await chat(b, limited, build)).status);
    }
    const local = { modes: [await mode(a), await mode(b)], warned: [a, b].map((r) => r.log().split("rate limits local").length - 1) };
    const admitted = (s: number[] = []) => [s.filter((x) => x === 200).length, s.filter((x) => x === 429).length];
    expect({ a: admitted(statuses.a), b: admitted(statuses.b), ...local }).toEqual({
      a: [2, 3],
      b: [2, 3],
      modes: ["local", "local"],
      warned: [1, 1],
    });

    proxy.thaw();
    // While local, a request at most once a second also tries Redis.
    await waitFor(
      async () => {
        await Promise.all([chat(a, unlimited, build), chat(b, unlimited, build)]);
        return (await mode(a)) === "redis" && (await mode(b)) === "redis";
      },
      "both replicas back on shared limits",
      20_000,
    );
    expect([a, b].map((r) => r.log().split("rate limits shared again").length - 1)).toEqual([1, 1]);
    const sql = postgres(db?.url ?? "", { max: 1, onnotice: () => {} });
    try {
      // The probes made the key busy: a balance lease is held until a second without use gives it back.
      const books = await waitFor(async () => {
        const read = await readBooks(sql);
        return read.accounts[accountId]?.reserved === 0 && read;
      }, "every hold and lease given back");
      const usage = await sql`SELECT 1 FROM usage WHERE account_id = ${accountId} AND outcome = 'completed' AND cost_micro_usd > 0`;
      // Every answer charged: the 4 limited ones and the probes.
      expect({ violations: books.violations, reserved: books.accounts[accountId]?.reserved, charged: usage.length >= 4 }).toEqual({
        violations: [],
        reserved: 0,
        charged: true,
      });
    } finally {
      await sql.end({ timeout: 5 });
    }
  },
  60_000,
);

test.skipIf(skip)(
  NATS_DOWN,
  async () => {
    await using stack = new AsyncDisposableStack();
    const proxy = stack.use(startTcpProxy(target(NATS_URL)));
    const { a, b, provider } = await replicas({ UMBRA_REDIS_URL: REDIS_URL, UMBRA_NATS_URL: `nats://127.0.0.1:${proxy.port}` }, stack);
    const [onA, onB] = ["org/nats-down-a", "org/nats-down-b"];
    const { apiKey } = await a.seed([onA, onB], {}, 100_000_000);
    await Promise.all([provider(a, onA), provider(b, onB)]);
    await waitFor(
      async () => (await providers(a, apiKey, onB)) === 1 && (await providers(b, apiKey, onA)) === 1,
      "each lists the other's provider",
    );
    expect(await chat(a, apiKey, onB)).toEqual({ status: 200, content: CANARY });
    // A busy key gets a balance lease on A while NATS is up...
    for (let i = 0; i < 10; i++) expect((await chat(a, apiKey, onA)).status).toBe(200);
    await waitFor(async () => (await leases(a)) === 1, "A's balance lease");

    proxy.cut();
    // ... and gives it back once NATS drops (no other replica could recall it).
    await waitFor(async () => (await leases(a)) === 0, "A's lease given back without NATS");
    // Three missed digests (3 s): the other replica's provider is no longer listed.
    await waitFor(async () => (await providers(a, apiKey, onB)) === 0 && (await providers(b, apiKey, onA)) === 0, "digests missed", 15_000);
    const down = {
      ownA: await chat(a, apiKey, onA),
      ownB: await chat(b, apiKey, onB),
      acrossA: await chat(a, apiKey, onB),
      acrossB: await chat(b, apiKey, onA),
    };
    expect(down).toEqual({
      ownA: { status: 200, content: CANARY },
      ownB: { status: 200, content: CANARY },
      acrossA: { status: 503, code: "model_unavailable" },
      acrossB: { status: 503, code: "model_unavailable" },
    });

    proxy.thaw();
    // The clients reconnect by themselves; the digests flow again.
    await waitFor(
      async () => (await providers(a, apiKey, onB)) === 1 && (await providers(b, apiKey, onA)) === 1,
      "routing restored",
      20_000,
    );
    expect([await chat(a, apiKey, onB), await chat(b, apiKey, onA)]).toEqual([
      { status: 200, content: CANARY },
      { status: 200, content: CANARY },
    ]);
  },
  60_000,
);
