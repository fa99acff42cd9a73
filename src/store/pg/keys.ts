/**
 * The Postgres ApiKeyStore and ProviderTokenStore. `findByHash` of keys (every authenticated request) is
 * cached per change-feed epoch (change-feed.ts); writes here move the epoch. A cached record's `spent` is
 * as of its last change: settlements move it in the database (the money authority holds the live total).
 */
import { and, eq, getTableColumns, isNull } from "drizzle-orm";
import type { ApiKeyRecord, ApiKeyStore, ProviderTokenStore } from "../types.ts";
import { type ChangeFeed, FeedCache } from "./change-feed.ts";
import type { PgDb } from "./open.ts";
import { byCode } from "./order.ts";
import { accounts, apiKeys, providerTokens } from "./schema.ts";

async function accountExists(db: PgDb, id: string): Promise<boolean> {
  return (await db.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, id))).length > 0;
}

/** The key's columns but `held` (the money authority's, Postgres only): what an ApiKeyRecord is. */
const { held: _held, ...keyColumns } = getTableColumns(apiKeys);

export function pgApiKeys(db: PgDb, feed: Pick<ChangeFeed, "epoch" | "touch">): ApiKeyStore {
  const get = async (id: string) => (await db.select(keyColumns).from(apiKeys).where(eq(apiKeys.id, id)))[0];
  const byHash = new FeedCache<ApiKeyRecord>(feed);
  const loadByHash = async (hash: string) => (await db.select(keyColumns).from(apiKeys).where(eq(apiKeys.keyHash, hash)))[0];
  return {
    async create(key) {
      if (!(await accountExists(db, key.accountId))) return undefined;
      await db.insert(apiKeys).values({
        ...key,
        allowedModels: key.allowedModels === null ? null : [...key.allowedModels],
        linkMachines: key.linkMachines ?? false,
        spent: 0,
        revokedAt: null,
      });
      feed.touch();
      return get(key.id);
    },
    get,
    findByHash: (hash) => byHash.get(hash, loadByHash),
    list: async (accountId) =>
      db
        .select(keyColumns)
        .from(apiKeys)
        .where(accountId === undefined ? undefined : eq(apiKeys.accountId, accountId))
        .orderBy(apiKeys.createdAt, byCode(apiKeys.id)),
    async revoke(id, at) {
      await db
        .update(apiKeys)
        .set({ revokedAt: at })
        .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)));
      feed.touch();
      return get(id);
    },
  };
}

export function pgProviderTokens(db: PgDb): ProviderTokenStore {
  const get = async (id: string) => (await db.select().from(providerTokens).where(eq(providerTokens.id, id)))[0];
  return {
    async create(token) {
      if (!(await accountExists(db, token.accountId))) return undefined;
      await db.insert(providerTokens).values({ ...token, name: token.name ?? null, expiresAt: token.expiresAt ?? null, revokedAt: null });
      return get(token.id);
    },
    get,
    findByHash: async (hash) => (await db.select().from(providerTokens).where(eq(providerTokens.tokenHash, hash)))[0],
    list: async (accountId) =>
      db
        .select()
        .from(providerTokens)
        .where(accountId === undefined ? undefined : eq(providerTokens.accountId, accountId))
        .orderBy(providerTokens.createdAt, byCode(providerTokens.id)),
    async revoke(id, at) {
      await db
        .update(providerTokens)
        .set({ revokedAt: at })
        .where(and(eq(providerTokens.id, id), isNull(providerTokens.revokedAt)));
      return get(id);
    },
  };
}
