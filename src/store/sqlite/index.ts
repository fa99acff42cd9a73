/** The SQLite implementation of Store (the embedded default). */
import { sql } from "drizzle-orm";
import { journalPath, openJournal } from "../journal.ts";
import type { ApiKeyRecord, SettlementJournal, Store } from "../types.ts";
import { sqliteAccounts } from "./accounts.ts";
import { sqliteCatalog, sqlitePrices } from "./catalog.ts";
import { type Checkpointer, type CheckpointerOptions, startCheckpointer } from "./checkpointer.ts";
import { sqliteConsoleSessions, sqliteSignInLinks } from "./console.ts";
import { sqliteApiKeys, sqliteProviderTokens } from "./keys.ts";
import { sqliteMdm } from "./mdm.ts";
import { sqliteMoney } from "./money.ts";
import { openSqlite } from "./open.ts";
import { EpochCache, Freshness } from "./read-cache.ts";
import { sqliteUsage } from "./usage.ts";

export interface SqliteStoreOptions {
  /**
   * Keep a settlement journal next to the database file (src/store/journal.ts): the running coordinator
   * only. Other processes (the admin CLI) leave it to the coordinator.
   */
  readonly journal?: boolean;
  /**
   * WAL checkpoints in a Worker of their own (checkpointer.ts) instead of on this connection's commits:
   * the running coordinator (`--sqlite-checkpoints worker`, the default). Ignored for ":memory:".
   */
  readonly checkpoints?: CheckpointerOptions;
}

/** Opens (creating and migrating) the database at `path`. Throws StoreOpenError. */
export function createSqliteStore(path: string, options: SqliteStoreOptions = {}): Store {
  const { client, db } = openSqlite(path);
  let journal: SettlementJournal | undefined;
  try {
    if (options.journal && path !== ":memory:") journal = openJournal(journalPath(path));
  } catch (e) {
    client.close();
    throw e;
  }
  let checkpointer: Checkpointer | undefined;
  if (options.checkpoints && path !== ":memory:") checkpointer = startCheckpointer(client, path, options.checkpoints);
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
    money: sqliteMoney(db, client, (spent) => keys.spentChanged(spent), journal),
    consoleSessions: sqliteConsoleSessions(db),
    signInLinks: sqliteSignInLinks(db),
    mdm: sqliteMdm(db),
    async ping() {
      db.run(sql`SELECT 1`);
    },
    close() {
      if (closed) return;
      closed = true;
      journal?.close();
      // The worker closes its own connection; this one's close then checkpoints once more (shutdown).
      void checkpointer?.stop();
      client.close();
    },
  };
}
