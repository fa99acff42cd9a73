/**
 * The Postgres implementation of Store (several coordinators on one database). No settlement journal:
 * every settlement waits for its commit. The lookups every request makes (key, alias, build, price) are
 * cached while the change feed delivers (change-feed.ts), so a write by any replica reaches every
 * replica's caches when its notification arrives, and a changed provider token reaches `onProviderTokenChange`.
 */
import { sql } from "drizzle-orm";
import type { Store } from "../types.ts";
import { pgAccounts } from "./accounts.ts";
import { pgCatalog, pgPrices } from "./catalog.ts";
import { ChangeFeed, type ChangeFeedOptions } from "./change-feed.ts";
import { pgConsoleSessions, pgSignInLinks } from "./console.ts";
import { pgApiKeys, pgProviderTokens } from "./keys.ts";
import { pgMdm } from "./mdm.ts";
import { pgMoney } from "./money.ts";
import { type MoneyAuthority, type MoneyAuthorityOptions, pgMoneyAuthority } from "./money-authority.ts";
import { openListener, openPostgres, type PgOpenOptions } from "./open.ts";
import { claimReplica, type ReplicaClaim } from "./replica-claim.ts";
import { pgUsage } from "./usage.ts";

export interface PgStore extends Store {
  /** Closes the pool and resolves once every connection is closed (`close` does the same without waiting). */
  end(): Promise<void>;
  /** The money authority (cluster mode) over this store's pool, holding as `options.replica`. */
  moneyAuthority(options: MoneyAuthorityOptions): MoneyAuthority;
  /** The change feed behind the read caches. */
  readonly changes: ChangeFeed;
  /** Claims a replica id for this process (replica-claim.ts); `lost` hears of a claim lost after a reconnect. */
  claimReplica(replicaId: string, lost?: (replicaId: string) => void): Promise<ReplicaClaim>;
}

export interface PgStoreOptions extends PgOpenOptions {
  readonly changeFeed?: ChangeFeedOptions;
}

/** Connects to `url`, applies the migrations (under the advisory lock) and probes a write. Throws StoreOpenError. */
export async function createPgStore(url: string, options: PgStoreOptions = {}): Promise<PgStore> {
  const { client, db } = await openPostgres(url, options);
  const changes = new ChangeFeed(client, (handlers) => openListener(url, options, handlers), options.changeFeed);
  const claims: ReplicaClaim[] = [];
  let ended: Promise<void> | undefined;
  const end = () => {
    ended ??= Promise.all([changes.close(), client.end({ timeout: 5 }), ...claims.map((c) => c.release())]).then(() => {});
    return ended;
  };
  return {
    accounts: pgAccounts(db),
    keys: pgApiKeys(db, changes),
    providerTokens: pgProviderTokens(db),
    catalog: pgCatalog(db, changes),
    prices: pgPrices(db, changes),
    usage: pgUsage(db),
    money: pgMoney(client),
    consoleSessions: pgConsoleSessions(db),
    signInLinks: pgSignInLinks(db),
    mdm: pgMdm(db),
    async ping() {
      await db.execute(sql`SELECT 1`);
    },
    close() {
      void end();
    },
    end,
    moneyAuthority: (options) => pgMoneyAuthority(client, options),
    changes,
    async claimReplica(replicaId, lost) {
      const claim = await claimReplica(
        replicaId,
        (onclose) => openListener(url, options, { onnotify: () => {}, onclose }, "umbra-replica-claim"),
        lost,
      );
      claims.push(claim);
      return claim;
    },
    onProviderTokenChange: (listener) => changes.subscribe((table, id) => table === "provider_tokens" && listener(id)),
  };
}
