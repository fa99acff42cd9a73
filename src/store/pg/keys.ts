/** The Postgres ApiKeyStore and ProviderTokenStore (no read cache yet: every lookup reads the table). */
import { and, eq, getTableColumns, isNull } from "drizzle-orm";
import type { ApiKeyStore, ProviderTokenStore } from "../types.ts";
import type { PgDb } from "./open.ts";
import { byCode } from "./order.ts";
import { accounts, apiKeys, providerTokens } from "./schema.ts";

async function accountExists(db: PgDb, id: string): Promise<boolean> {
  return (await db.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, id))).length > 0;
}

/** The key's columns but `held` (the money authority's, Postgres only): what an ApiKeyRecord is. */
const { held: _held, ...keyColumns } = getTableColumns(apiKeys);

export function pgApiKeys(db: PgDb): ApiKeyStore {
  const get = async (id: string) => (await db.select(keyColumns).from(apiKeys).where(eq(apiKeys.id, id)))[0];
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
      return get(key.id);
    },
    get,
    findByHash: async (hash) => (await db.select(keyColumns).from(apiKeys).where(eq(apiKeys.keyHash, hash)))[0],
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
      return get(id);
    },
  };
}

export function pgProviderTokens(db: PgDb): ProviderTokenStore {
  const get = async (id: string) => (await db.select().from(providerTokens).where(eq(providerTokens.id, id)))[0];
  return {
    async create(token) {
      if (!(await accountExists(db, token.accountId))) return undefined;
      await db.insert(providerTokens).values({ ...token, expiresAt: token.expiresAt ?? null, revokedAt: null });
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
