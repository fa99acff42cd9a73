/**
 * The Postgres implementation of Store (several coordinators on one database). No settlement journal:
 * every settlement waits for its commit. No read caches yet: each lookup reads the database, so writes
 * made by other replicas are seen at once.
 */
import { sql } from "drizzle-orm";
import type { Store } from "../types.ts";
import { pgAccounts } from "./accounts.ts";
import { pgCatalog, pgPrices } from "./catalog.ts";
import { pgApiKeys, pgProviderTokens } from "./keys.ts";
import { pgMoney } from "./money.ts";
import { type MoneyAuthority, type MoneyAuthorityOptions, pgMoneyAuthority } from "./money-authority.ts";
import { openPostgres, type PgOpenOptions } from "./open.ts";
import { pgUsage } from "./usage.ts";

export interface PgStore extends Store {
  /** Closes the pool and resolves once every connection is closed (`close` does the same without waiting). */
  end(): Promise<void>;
  /** The money authority (cluster mode) over this store's pool, holding as `options.replica`. */
  moneyAuthority(options: MoneyAuthorityOptions): MoneyAuthority;
}

/** Connects to `url`, applies the migrations (under the advisory lock) and probes a write. Throws StoreOpenError. */
export async function createPgStore(url: string, options: PgOpenOptions = {}): Promise<PgStore> {
  const { client, db } = await openPostgres(url, options);
  let ended: Promise<void> | undefined;
  const end = () => {
    ended ??= client.end({ timeout: 5 });
    return ended;
  };
  return {
    accounts: pgAccounts(db),
    keys: pgApiKeys(db),
    providerTokens: pgProviderTokens(db),
    catalog: pgCatalog(db),
    prices: pgPrices(db),
    usage: pgUsage(db),
    money: pgMoney(client),
    async ping() {
      await db.execute(sql`SELECT 1`);
    },
    close() {
      void end();
    },
    end,
    moneyAuthority: (options) => pgMoneyAuthority(client, options),
  };
}
