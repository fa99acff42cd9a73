import { and, eq, isNull, sql } from "drizzle-orm";
import { accounts, apiKeys, providerTokens } from "../schema.ts";
import type { ApiKeyRecord, ApiKeyStore, ProviderTokenRecord, ProviderTokenStore } from "../types.ts";
import type { EpochCache, Freshness } from "./freshness.ts";
import type { Db } from "./open.ts";

function accountExists(db: Db, id: string): boolean {
  return db.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, id)).get() !== undefined;
}

/** `byHash` caches findByHash (every authenticated request); writes here touch `freshness`. */
export function sqliteApiKeys(db: Db, freshness: Freshness, byHash: EpochCache<ApiKeyRecord>): ApiKeyStore {
  const get = (id: string): ApiKeyRecord | undefined => db.select().from(apiKeys).where(eq(apiKeys.id, id)).get();
  const findByHash = db
    .select()
    .from(apiKeys)
    .where(eq(apiKeys.keyHash, sql.placeholder("hash")))
    .prepare();
  return {
    async create(key) {
      if (!accountExists(db, key.accountId)) return undefined;
      db.insert(apiKeys)
        .values({ ...key, allowedModels: key.allowedModels === null ? null : [...key.allowedModels], spent: 0, revokedAt: null })
        .run();
      freshness.touch();
      return get(key.id);
    },
    get: async (id) => get(id),
    findByHash: async (hash) => byHash.get(hash, (h) => findByHash.get({ hash: h })),
    list: async (accountId) =>
      (accountId === undefined ? db.select().from(apiKeys) : db.select().from(apiKeys).where(eq(apiKeys.accountId, accountId)))
        .orderBy(apiKeys.createdAt, apiKeys.id)
        .all(),
    async revoke(id, at) {
      db.update(apiKeys)
        .set({ revokedAt: at })
        .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)))
        .run();
      freshness.touch();
      return get(id);
    },
  };
}

export function sqliteProviderTokens(db: Db): ProviderTokenStore {
  const get = (id: string): ProviderTokenRecord | undefined => db.select().from(providerTokens).where(eq(providerTokens.id, id)).get();
  return {
    async create(token) {
      if (!accountExists(db, token.accountId)) return undefined;
      db.insert(providerTokens)
        .values({ ...token, revokedAt: null })
        .run();
      return get(token.id);
    },
    get: async (id) => get(id),
    findByHash: async (hash) => db.select().from(providerTokens).where(eq(providerTokens.tokenHash, hash)).get(),
    list: async (accountId) =>
      (accountId === undefined
        ? db.select().from(providerTokens)
        : db.select().from(providerTokens).where(eq(providerTokens.accountId, accountId))
      )
        .orderBy(providerTokens.createdAt, providerTokens.id)
        .all(),
    async revoke(id, at) {
      db.update(providerTokens)
        .set({ revokedAt: at })
        .where(and(eq(providerTokens.id, id), isNull(providerTokens.revokedAt)))
        .run();
      return get(id);
    },
  };
}
