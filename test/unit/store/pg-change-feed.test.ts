/**
 * The Postgres store's change feed and read caches (src/store/pg/change-feed.ts) on real PostgreSQL, two
 * stores standing for two replicas: lookups are cached (a change made with the triggers off is not
 * seen), a change made through one store reaches the other's caches and listeners, the money columns
 * send nothing, and a feed that lost its connection (terminated, or a network that went silent) serves
 * nothing from its caches until it is live again. Skipped, saying so, without PostgreSQL.
 */
import { afterAll, describe, expect, test } from "bun:test";
import postgres from "postgres";
import { createPgStore, type PgStore } from "../../../src/store/pg/index.ts";
import type { Store } from "../../../src/store/types.ts";
import { newBuild } from "../../store/conformance.ts";
import { testDatabase } from "../../support/pg.ts";
import { startTcpProxy } from "../../support/tcp-proxy.ts";
import { waitFor } from "../../support/wait.ts";

const SUITE = "Postgres change feed and read caches";
const db = await testDatabase([SUITE]);
const raw = db && postgres(db.url, { max: 1, onnotice: () => {} });
afterAll(() => raw?.end({ timeout: 5 }));

const FAST = { changeFeed: { pingMs: 50 } };
/**
 * For the tests of what the caches serve while the feed is live: fast pings, but not taken for a silent
 * network after 150 ms (3 pings), which a loaded host's scheduling alone can exceed.
 */
const STEADY = { changeFeed: { pingMs: 50, staleAfterMs: 5_000 } };
const T0 = 1_790_000_000_000;

async function seed(s: Store, n: string) {
  await s.accounts.create({ id: `acct-${n}`, name: "feed", at: T0 });
  const key = {
    id: `key-${n}`,
    accountId: `acct-${n}`,
    keyHash: `hash-${n}`,
    hint: "…abcd",
    name: null,
    allowedModels: null,
    spendCap: null,
    rpm: 10,
    tpm: null,
    selfRouteOnly: false,
    createdAt: T0,
  };
  await s.keys.create(key);
  await s.catalog.upsertBuild(newBuild({ id: `org/m-${n}`, created: 1 }), T0);
}

/** An update B's feed does not hear of (its trigger off for the statement's transaction). */
async function quietly(statement: string) {
  await raw?.begin(async (tx) => {
    await tx.unsafe("ALTER TABLE api_keys DISABLE TRIGGER api_keys_changed");
    await tx.unsafe(statement);
    await tx.unsafe("ALTER TABLE api_keys ENABLE TRIGGER api_keys_changed");
  });
}

const rpmSeenBy = async (s: PgStore, n: string) => (await s.keys.findByHash(`hash-${n}`))?.rpm;

/**
 * Waits until the feed has heard what was committed before (the seed's notifications can arrive after
 * `ready()` on a loaded host, and each moves the epoch, emptying the caches): its epoch steady across a
 * window of several pings, whose echoes come after every earlier commit's notification.
 */
async function quietFeed(s: PgStore) {
  for (let i = 0; i < 40; i++) {
    const before = s.changes.epoch();
    await Bun.sleep(250);
    if (before !== null && s.changes.epoch() === before) return;
  }
  throw new Error("the change feed never went quiet");
}

describe.skipIf(db === undefined)(SUITE, () => {
  test("lookups are cached; a change made through A reaches B's caches and listeners", async () => {
    await using a = await (db as NonNullable<typeof db>).open();
    const b = await (db as NonNullable<typeof db>).store(STEADY);
    try {
      await seed(a.store, "1");
      expect(await b.changes.ready()).toBe(true);
      await quietFeed(b);
      expect(await rpmSeenBy(b, "1")).toBe(10);
      await quietly("UPDATE api_keys SET rpm = 11 WHERE id = 'key-1'");
      // Cached: B does not see a change nobody announced.
      expect(await rpmSeenBy(b, "1")).toBe(10);
      const heard: string[] = [];
      b.onProviderTokenChange?.((id) => heard.push(id));
      expect(await b.prices.get("org/m-1")).toBeUndefined();
      await a.store.keys.revoke("key-1", T0 + 1);
      await a.store.prices.set({ model: "org/m-1", inputPrice: 5, outputPrice: 6, cacheReadPrice: null }, T0 + 1);
      await a.store.providerTokens.create({ id: "tok-1", accountId: "acct-1", tokenHash: "th-1", hint: "…1", createdAt: T0 });
      await a.store.providerTokens.revoke("tok-1", T0 + 2);
      await waitFor(async () => (await b.keys.findByHash("hash-1"))?.revokedAt === T0 + 1, "the revocation on B", 5_000);
      expect([await rpmSeenBy(b, "1"), (await b.prices.get("org/m-1"))?.inputPrice, (await b.prices.list()).length]).toEqual([11, 5, 1]);
      await waitFor(() => heard.length === 2, "both token changes heard", 5_000);
      expect(heard).toEqual(["tok-1", "tok-1"]);
    } finally {
      await b.end();
    }
  });

  test("the money columns of a key send nothing; other key columns do", async () => {
    await using a = await (db as NonNullable<typeof db>).open();
    await seed(a.store, "2");
    const b = await (db as NonNullable<typeof db>).store(FAST);
    try {
      expect(await b.changes.ready()).toBe(true);
      const tables: string[] = [];
      b.changes.subscribe((table, id) => tables.push(`${table}:${id}`));
      await raw?.unsafe(
        "UPDATE api_keys SET spent_micro_usd = spent_micro_usd + 1, held_micro_usd = held_micro_usd + 1 WHERE id = 'key-2'",
      );
      await raw?.unsafe("UPDATE api_keys SET name = 'renamed' WHERE id = 'key-2'");
      await waitFor(() => tables.length > 0, "a change heard", 5_000);
      expect(tables).toEqual(["api_keys:key-2"]);
      expect((await b.keys.findByHash("hash-2"))?.name).toBe("renamed");
    } finally {
      await b.end();
    }
  });

  test("a terminated feed connection: caches bypassed at once, used again once it is back", async () => {
    await using a = await (db as NonNullable<typeof db>).open();
    await seed(a.store, "3");
    const b = await (db as NonNullable<typeof db>).store(FAST);
    try {
      expect(await b.changes.ready()).toBe(true);
      expect(await rpmSeenBy(b, "3")).toBe(10);
      await raw?.unsafe(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'umbra-change-feed' AND datname = current_database()",
      );
      await waitFor(() => b.changes.epoch() === null, "the feed noticed its loss", 5_000);
      await quietly("UPDATE api_keys SET rpm = 12 WHERE id = 'key-3'");
      // Changes made while the feed may have missed them are read from the database.
      expect(await rpmSeenBy(b, "3")).toBe(12);
      expect(await b.changes.ready()).toBe(true);
      expect(await rpmSeenBy(b, "3")).toBe(12);
      await quietly("UPDATE api_keys SET rpm = 13 WHERE id = 'key-3'");
      expect(await rpmSeenBy(b, "3")).toBe(12);
    } finally {
      await b.end();
    }
  });

  test("a silent network: the feed is not live once its pings stop coming back, live again after", async () => {
    const url = new URL((db as NonNullable<typeof db>).url);
    await using proxy = startTcpProxy({ hostname: url.hostname, port: Number(url.port || 5432) });
    url.port = String(proxy.port);
    const c = await createPgStore(url.toString(), FAST);
    try {
      expect(await c.changes.ready()).toBe(true);
      const before = c.changes.epoch();
      proxy.freeze();
      await waitFor(() => c.changes.epoch() === null, "the silent feed not live", 5_000);
      proxy.thaw();
      expect(await c.changes.ready(10_000)).toBe(true);
      expect(c.changes.epoch()).toBeGreaterThan(before ?? 0);
    } finally {
      await c.end();
    }
  });
});
