/**
 * The SQLite store caches the per-request lookups (key by hash, alias, build, price) and the catalog
 * lists of GET /v1/models. A cached answer
 * must never outlive a change: one made through the store is seen at once, one made by another
 * connection (another process) within a millisecond (PRAGMA data_version).
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { createSqliteStore } from "../../../src/store/sqlite/index.ts";
import { EpochCache, type Freshness } from "../../../src/store/sqlite/read-cache.ts";
import type { Settlement } from "../../../src/store/types.ts";
import { newBuild } from "../../store/conformance.ts";
import { tempDir } from "../../support/harness.ts";
import { settlementOf } from "../../support/settlements.ts";
import { waitFor } from "../../support/wait.ts";

async function seeded(path: string) {
  const store = createSqliteStore(path);
  await store.accounts.create({ id: "acct-1", name: "a", at: 1 });
  await store.accounts.credit({ accountId: "acct-1", amount: 1_000, at: 1 });
  await store.keys.create(keyRecord("key-1", "hash-1"));
  await store.catalog.upsertBuild(newBuild({ id: "org/build", created: 1 }), 1);
  await store.prices.set({ model: "org/build", inputPrice: 10, outputPrice: 20, cacheReadPrice: null }, 1);
  return store;
}

describe("cached lookups stay exact", () => {
  test("changes made through the store are seen at once", async () => {
    using dir = tempDir();
    const store = await seeded(join(dir.path, "u.db"));
    expect((await store.keys.findByHash("hash-1"))?.revokedAt).toBeNull();
    await store.keys.revoke("key-1", 5);
    expect((await store.keys.findByHash("hash-1"))?.revokedAt).toBe(5);
    expect((await store.prices.get("org/build"))?.inputPrice).toBe(10);
    await store.prices.set({ model: "org/build", inputPrice: 11, outputPrice: 20, cacheReadPrice: null }, 2);
    expect((await store.prices.get("org/build"))?.inputPrice).toBe(11);
    expect(await store.catalog.getAlias("org/alias")).toBeUndefined();
    expect(await store.catalog.listAliases()).toEqual([]);
    await store.catalog.setAlias("org/alias", "org/build", 3);
    expect(await store.catalog.getAlias("org/alias")).toEqual({ alias: "org/alias", buildId: "org/build" });
    expect(await store.catalog.listAliases()).toEqual([{ alias: "org/alias", buildId: "org/build" }]);
    expect((await store.catalog.listBuilds()).map((b) => b.id)).toEqual(["org/build"]);
    await store.catalog.upsertBuild({ ...(await store.catalog.getBuild("org/build"))!, id: "org/another" }, 4);
    expect((await store.catalog.listBuilds()).map((b) => b.id)).toEqual(["org/another", "org/build"]);
    // A list handed out is a copy: changing it changes nothing cached.
    (await store.catalog.listBuilds()).pop();
    expect((await store.catalog.listBuilds()).length).toBe(2);
    expect(await store.catalog.deleteAlias("org/alias")).toBe(true);
    expect(await store.catalog.listAliases()).toEqual([]);
    store.close();
  });

  test("changes committed by another connection (another process) are seen within a millisecond", async () => {
    using dir = tempDir();
    const path = join(dir.path, "u.db");
    const store = await seeded(path);
    // Warm the caches.
    expect((await store.keys.findByHash("hash-1"))?.revokedAt).toBeNull();
    expect((await store.prices.get("org/build"))?.inputPrice).toBe(10);
    expect((await store.catalog.getBuild("org/build"))?.name).toBeNull();
    expect(await store.catalog.listAliases()).toEqual([]);
    expect((await store.catalog.listBuilds()).map((b) => b.name)).toEqual([null]);

    const other = new Database(path);
    other.exec("INSERT INTO model_aliases (alias, build_id, updated_at) VALUES ('org/alias', 'org/build', 9)");
    other.exec("UPDATE api_keys SET revoked_at = 9 WHERE id = 'key-1'");
    other.exec("UPDATE model_prices SET input_price = 99 WHERE model = 'org/build'");
    other.exec("UPDATE model_builds SET name = 'renamed' WHERE id = 'org/build'");
    other.close();

    await waitFor(async () => (await store.keys.findByHash("hash-1"))?.revokedAt === 9, "the revocation");
    expect((await store.prices.get("org/build"))?.inputPrice).toBe(99);
    expect((await store.catalog.getBuild("org/build"))?.name).toBe("renamed");
    expect((await store.catalog.listBuilds()).map((b) => b.name)).toEqual(["renamed"]);
    expect(await store.catalog.listAliases()).toEqual([{ alias: "org/alias", buildId: "org/build" }]);
    store.close();
  });

  test("a settlement's new key total is visible through findByHash", async () => {
    using dir = tempDir();
    const store = await seeded(join(dir.path, "u.db"));
    expect((await store.keys.findByHash("hash-1"))?.spent).toBe(0);
    await store.money.settle([settlementBy("req-1", "key-1", 7)]);
    expect((await store.keys.findByHash("hash-1"))?.spent).toBe(7);
    store.close();
  });

  test("settlements patch cached key records in place; keys not yet cached are read fresh", async () => {
    using dir = tempDir();
    const store = await seeded(join(dir.path, "u.db"));
    await store.keys.create(keyRecord("key-2", "hash-2"));
    const cached = await store.keys.findByHash("hash-1");
    for (let i = 0; i < 5; i++) await store.money.settle([settlementBy(`req-a${i}`, "key-1", 3), settlementBy(`req-b${i}`, "key-2", 4)]);
    // key-1 was cached before the settlements (patched); key-2 is read for the first time now.
    expect((await store.keys.findByHash("hash-1"))?.spent).toBe(15);
    expect((await store.keys.findByHash("hash-2"))?.spent).toBe(20);
    expect(cached?.spent).toBe(0); // a record handed out earlier is not mutated
    await store.money.settle([settlementBy("req-c", "key-2", 1)]);
    expect((await store.keys.findByHash("hash-2"))?.spent).toBe(21);
    expect((await store.keys.get("key-2"))?.spent).toBe(21);
    store.close();
  });
});

describe("EpochCache.patch", () => {
  test("replaces a cached value and leaves misses and unknown keys alone", () => {
    const freshness = { current: () => 0 } as unknown as Freshness;
    const cache = new EpochCache<{ n: number }>(freshness);
    let loads = 0;
    const load = (k: string) => {
      loads++;
      return k === "missing" ? undefined : { n: 1 };
    };
    cache.get("a", load);
    cache.get("missing", load);
    cache.patch("a", (v) => ({ n: v.n + 1 }));
    cache.patch("missing", () => ({ n: 99 }));
    cache.patch("never-loaded", () => ({ n: 99 }));
    expect(cache.get("a", load)).toEqual({ n: 2 });
    expect(cache.get("missing", load)).toBeUndefined();
    expect(loads).toBe(2);
    expect(cache.get("never-loaded", load)).toEqual({ n: 1 });
  });
});

function keyRecord(id: string, keyHash: string) {
  return {
    id,
    accountId: "acct-1",
    keyHash,
    hint: "abcd",
    name: null,
    allowedModels: null,
    spendCap: null,
    rpm: null,
    tpm: null,
    selfRouteOnly: false,
    createdAt: 1,
  };
}

/** A settlement of `charge` by acct-1 with key `keyId`, without a provider (the whole charge is the fee). */
function settlementBy(requestId: string, keyId: string, charge: number): Settlement {
  return settlementOf({ requestId, accountId: "acct-1", keyId, charge });
}
