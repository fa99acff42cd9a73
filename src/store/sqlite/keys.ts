import { and, eq, isNull, sql } from "drizzle-orm";
import { accounts, apiKeys, providerTokens } from "../schema.ts";
import type { ApiKeyRecord, ApiKeyStore, ProviderTokenRecord, ProviderTokenStore } from "../types.ts";
import type { Db } from "./open.ts";
import type { EpochCache, Freshness } from "./read-cache.ts";

function accountExists(db: Db, id: string): boolean {
  return db.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, id)).get() !== undefined;
}

/** Most key ids remembered for patching cached records (see `spentChanged`). */
const HASH_INDEX_LIMIT = 10_000;

/**
 * `byHash` caches findByHash (every authenticated request); writes here touch `freshness`. Settlements
 * move spent totals many times a second: `spentChanged` patches the cached records instead of dropping
 * them all, so authentication does not re-read every key after each group commit.
 */
export function sqliteApiKeys(
  db: Db,
  freshness: Freshness,
  byHash: EpochCache<ApiKeyRecord>,
): ApiKeyStore & { spentChanged(spent: ReadonlyMap<string, number>): void } {
  const get = (id: string): ApiKeyRecord | undefined => db.select().from(apiKeys).where(eq(apiKeys.id, id)).get();
  const findByHash = db
    .select()
    .from(apiKeys)
    .where(eq(apiKeys.keyHash, sql.placeholder("hash")))
    .prepare();
  const hashById = new Map<string, string>();
  return {
    async create(key) {
      if (!accountExists(db, key.accountId)) return undefined;
      db.insert(apiKeys)
        .values({
          ...key,
          allowedModels: key.allowedModels === null ? null : [...key.allowedModels],
          linkMachines: key.linkMachines ?? false,
          spent: 0,
          revokedAt: null,
        })
        .run();
      freshness.touch();
      return get(key.id);
    },
    get: async (id) => get(id),
    findByHash: (hash) =>
      byHash.get(hash, (h) => {
        const record = findByHash.get({ hash: h });
        if (record) {
          // Every cached record must be findable by id, or a settlement could leave its spent total stale.
          if (hashById.size >= HASH_INDEX_LIMIT) {
            hashById.clear();
            byHash.clear();
          }
          hashById.set(record.id, h);
        }
        return record;
      }),
    spentChanged(spent) {
      for (const [id, total] of spent) {
        const hash = hashById.get(id);
        if (hash !== undefined) byHash.patch(hash, (record) => ({ ...record, spent: total }));
      }
    },
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
        .values({ ...token, name: token.name ?? null, expiresAt: token.expiresAt ?? null, revokedAt: null })
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
