/**
 * Three replicas in one process (research/scale-out.md §5.3): three apps, each with its own Postgres pool
 * and money authority on one database, its own Redis client and NATS connection under one prefix, and
 * fake providers connected to a chosen replica. Global limits: the three together admit exactly a key's
 * rpm. A -> C: with a provider on C only, a request sent to A is answered by it (B not involved). No
 * responders: C closed abruptly while A still lists its provider (first in A's order), A's attempt on
 * it finds no responders and fails over to B's provider before first content; with no other provider,
 * A answers a clean 502. No prompt or completion text reaches any replica's log. Skipped, saying so,
 * without PostgreSQL, Redis or NATS.
 */
import { afterAll, expect, test } from "bun:test";
import { loadConfig } from "../../src/config/config.ts";
import { type App, createApp } from "../../src/coordinator/app.ts";
import { loadLinks } from "../../src/coordinator/links.ts";
import { listen } from "../../src/coordinator/server.ts";
import { createLogger } from "../../src/observability/logger.ts";
import type { PgStore } from "../../src/store/pg/index.ts";
import { connectFakeProvider, type FakeProvider } from "../support/fake-provider.ts";
import { NATS_URL, natsConnect, natsPrefix, testNats } from "../support/nats.ts";
import { testDatabase } from "../support/pg.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { chatBody, errorOf, postChat } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const SUITE = "cluster mode: three replicas in one process";
const db = await testDatabase([SUITE]);
const redis = await testRedis("test/e2e/cluster-three.test.ts");
const nats = await testNats("test/e2e/cluster-three.test.ts");
const prefixes: string[] = [];
afterAll(() => Promise.all(prefixes.map((p) => removeKeys(p))));
const skip = db === undefined || !redis || !nats;

/** A word no log line may contain: every prompt carries it, and the echo providers answer with it. */
const CANARY = `canary${crypto.randomUUID().replaceAll("-", "")}`;

interface Replica {
  readonly id: string;
  readonly app: App;
  readonly url: string;
  readonly logs: string[];
  /** Closes the app (its NATS connection and subscriptions go), the socket and the pool. Idempotent. */
  close(): Promise<void>;
}

async function replica(id: string, prefix: string): Promise<Replica> {
  const env = {
    UMBRA_DB: db?.url ?? "",
    UMBRA_ADMIN_TOKEN: "t".repeat(40),
    UMBRA_REDIS_URL: REDIS_URL,
    UMBRA_REDIS_TIMEOUT_MS: "5000",
    UMBRA_NATS_URL: NATS_URL,
    UMBRA_CLUSTER_PREFIX: prefix,
    UMBRA_REPLICA_ID: id,
  };
  const config = loadConfig({}, env, "development");
  const store: PgStore = await (db as NonNullable<typeof db>).store();
  const logs: string[] = [];
  const app = createApp({
    config,
    store,
    moneyAuthority: store.moneyAuthority({ replica: id }),
    logger: createLogger("debug", (line) => logs.push(line)),
    links: await loadLinks(config),
  });
  const server = listen(app, "127.0.0.1", 0);
  let closed: Promise<void> | undefined;
  return {
    id,
    app,
    url: server.url,
    logs,
    close: () => {
      closed ??= (async () => {
        app.close();
        await server.stop();
        await store.end();
      })();
      return closed;
    },
  };
}

interface Cluster extends AsyncDisposable {
  readonly a: Replica;
  readonly b: Replica;
  readonly c: Replica;
  readonly apiKey: string;
  readonly token: string;
  readonly prefix: string;
  provider(on: Replica, build: string, options?: { warm?: boolean }): Promise<FakeProvider>;
}

/** Three replicas, an account with credit, a key (with `key`'s settings), a device token, `builds` priced. */
async function cluster(builds: readonly string[], key: Record<string, unknown> = {}): Promise<Cluster> {
  const prefix = natsPrefix();
  prefixes.push(prefix);
  const [a, b, c] = await Promise.all([replica("a", prefix), replica("b", prefix), replica("c", prefix)]);
  const admin = a.app.admin;
  const account = await admin.createAccount({ name: "three" });
  await admin.creditAccount(account.id, { amount_micro_usd: 100_000_000 });
  for (const build of builds) {
    await admin.upsertModel(build, {});
    await admin.setPrice(build, { input_price: 1_000_000, output_price: 2_000_000 });
  }
  const { key: apiKey } = await admin.createKey({ account_id: account.id, ...key });
  const { token } = await admin.createProviderToken({ account_id: account.id });
  const providers: FakeProvider[] = [];
  return {
    a,
    b,
    c,
    apiKey,
    token,
    prefix,
    async provider(on, build, options = {}) {
      // Heartbeats off: only a provider told `warm` reports its build warm (first in others' order).
      const p = await connectFakeProvider({ url: on.url, token, models: [build], heartbeat: false });
      if (options.warm) p.send(JSON.stringify({ type: "heartbeat", status: "idle", warm_models: [build], active: 0, queued: 0 }));
      providers.push(p);
      return p;
    },
    async [Symbol.asyncDispose]() {
      for (const p of providers) await p[Symbol.asyncDispose]();
      await Promise.all([a.close(), b.close(), c.close()]);
      // Every scenario: no prompt or completion text in any replica's log.
      expect([...a.logs, ...b.logs, ...c.logs].filter((l) => l.includes(CANARY))).toEqual([]);
    },
  };
}

const ask = (url: string, apiKey: string, build: string) => postChat(url, apiKey, { ...chatBody(`hello ${CANARY}`), model: build });

/** Waits until `on` lists `build`'s remote candidates as `ids`, in that order. */
const listed = (on: Replica, build: string, ids: readonly string[]) =>
  waitFor(
    () => JSON.stringify(on.app.cluster?.remote.candidates(build).map((c) => c.providerId)) === JSON.stringify(ids),
    `${on.id} lists ${ids.length} remote providers of ${build} in order`,
  );

test.skipIf(skip)(
  "limits are global: three replicas together admit exactly the key's rpm",
  async () => {
    const build = "org/three-limits";
    // One request refills every 20 s: the burst ends long before.
    const RPM = 3;
    await using k = await cluster([build], { rpm: RPM });
    for (const r of [k.a, k.b, k.c]) await k.provider(r, build);
    const targets = [k.a, k.b, k.c];
    const statuses = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const r = await ask((targets[i % 3] as Replica).url, k.apiKey, build);
        await r.text();
        return r.status;
      }),
    );
    expect({
      admitted: statuses.filter((s) => s === 200).length,
      limited: statuses.filter((s) => s === 429).length,
      modes: [k.a, k.b, k.c].map((r) => r.logs.some((l) => l.includes("rate limits local"))),
    }).toEqual({ admitted: RPM, limited: 12 - RPM, modes: [false, false, false] });
  },
  60_000,
);

test.skipIf(skip)(
  "A -> C: a request to A is answered by the provider connected to C",
  async () => {
    const build = "org/three-routed";
    await using k = await cluster([build]);
    const pc = await k.provider(k.c, build);
    await listed(k.a, build, [pc.providerId]);
    const r = await ask(k.a.url, k.apiKey, build);
    const answer = (await r.json()) as { choices?: { message?: { content?: string } }[] };
    expect({
      status: r.status,
      content: answer.choices?.[0]?.message?.content,
      servedByC: pc.received.filter((f) => f.type === "inference").length,
      localOnA: k.a.app.fleet.list().length,
      forwardedThroughB: k.b.app.cluster?.node?.owner.open ?? 0,
    }).toEqual({ status: 200, content: `hello ${CANARY}`, servedByC: 1, localOnA: 0, forwardedThroughB: 0 });
  },
  60_000,
);

/** Resolves once NATS answers "no responders" for the provider's subject (its owner's subscription is gone). */
async function noResponders(prefix: string, providerId: string): Promise<void> {
  const nc = await natsConnect();
  try {
    await waitFor(
      () =>
        nc.request(`${prefix}.prov.${providerId}`, new Uint8Array(), { timeout: 1000 }).then(
          () => false,
          (e: unknown) => e instanceof Error && /no responders/i.test(`${e.message} ${String((e as { code?: unknown }).code)}`),
        ),
      "no responders on C's provider subject",
    );
  } finally {
    await nc.close();
  }
}

test.skipIf(skip)(
  "no responders: C gone, A fails over to B's provider before first content",
  async () => {
    const build = "org/three-failover";
    await using k = await cluster([build]);
    const pb = await k.provider(k.b, build);
    const pc = await k.provider(k.c, build, { warm: true });
    // C's provider first in A's order (warm), B's second.
    await listed(k.a, build, [pc.providerId, pb.providerId]);
    await k.c.close();
    await noResponders(k.prefix, pc.providerId);
    // A still lists C's provider until three digests are missed: its attempt there finds no responders.
    const before = k.a.app.cluster?.remote.candidates(build).map((c) => c.providerId);
    const r = await ask(k.a.url, k.apiKey, build);
    const answer = (await r.json()) as { choices?: { message?: { content?: string } }[] };
    const inference = pb.received.filter((f) => f.type === "inference");
    expect({
      before,
      status: r.status,
      content: answer.choices?.[0]?.message?.content,
      onB: inference.map((f) => (f.type === "inference" ? f.attempt : -1)),
      onC: pc.received.filter((f) => f.type === "inference").length,
    }).toEqual({ before: [pc.providerId, pb.providerId], status: 200, content: `hello ${CANARY}`, onB: [1], onC: 0 });
  },
  60_000,
);

test.skipIf(skip)(
  "no responders and no other provider: A answers a clean 502",
  async () => {
    const build = "org/three-none";
    await using k = await cluster([build]);
    const pc = await k.provider(k.c, build);
    await listed(k.a, build, [pc.providerId]);
    await k.c.close();
    await noResponders(k.prefix, pc.providerId);
    const listedThen = k.a.app.cluster?.remote.candidates(build).length;
    const r = await ask(k.a.url, k.apiKey, build);
    expect({ listedThen, error: (await errorOf(r)).body.error, status: r.status }).toEqual({
      listedThen: 1,
      error: { message: "the provider failed before producing content", type: "provider_error", code: "provider_error" },
      status: 502,
    });
  },
  60_000,
);
