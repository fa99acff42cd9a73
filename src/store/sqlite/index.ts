/** The SQLite implementation of Store (the embedded default). */
import { sql } from "drizzle-orm";
import type { ApiKeyRecord, Store } from "../types.ts";
import { sqliteAccounts } from "./accounts.ts";
import { sqliteCatalog, sqlitePrices, sqliteUsage } from "./catalog.ts";
import { EpochCache, Freshness } from "./freshness.ts";
import { sqliteApiKeys, sqliteProviderTokens } from "./keys.ts";
import { sqliteMoney } from "./money.ts";
import { openSqlite } from "./open.ts";

/** Opens (creating and migrating) the database at `path`. Throws StoreOpenError. */
export function createSqliteStore(path: string): Store {
  const { client, db } = openSqlite(path);
  const freshness = new Freshness(client);
  const keysByHash = new EpochCache<ApiKeyRecord>(freshness);
  const keys = sqliteApiKeys(db, freshness, keysByHash);
  let closed = false;
  return {
    accounts: sqliteAccounts(db),
    keys,
    providerTokens: sqliteProviderTokens(db),
    catalog: sqliteCatalog(db, freshness),
    prices: sqlitePrices(db, freshness),
    usage: sqliteUsage(db),
    money: sqliteMoney(db, client, (spent) => keys.spentChanged(spent)),
    async ping() {
      db.run(sql`SELECT 1`);
    },
    close() {
      if (closed) return;
      closed = true;
      client.close();
    },
  };
}
