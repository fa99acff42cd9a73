/**
 * The SQLite UsageStore: one row per settled request (idempotent by request id), listing, paging and
 * totals. Reads only: last use and provider figures are derived from the rows, nothing is written on use.
 */
import { and, desc, eq, gte, inArray, isNotNull, lt, or, type SQL, sql } from "drizzle-orm";
import { usage } from "../schema.ts";
import { JWT_USAGE_KEY, type UsageFilter, type UsageStore } from "../types.ts";
import type { Db } from "./open.ts";

/** The three groupings of UsageStore.totals; literals are inlined so GROUP BY repeats the selected text. */
const USAGE_GROUPS = {
  byModel: sql<string>`${usage.model}`,
  byKey: sql<string>`coalesce(${usage.keyId}, ${sql.raw(`'${JWT_USAGE_KEY}'`)})`,
  byDay: sql<string>`strftime('%Y-%m-%d', ${usage.startedAt} / 1000, 'unixepoch')`,
} as const;

function usageSums(key: SQL<string>) {
  return {
    key,
    requests: sql<number>`count(*)`.mapWith(Number),
    promptTokens: sql<number>`sum(${usage.promptTokens})`.mapWith(Number),
    cachedTokens: sql<number>`sum(${usage.cachedTokens})`.mapWith(Number),
    completionTokens: sql<number>`sum(${usage.completionTokens})`.mapWith(Number),
    cost: sql<number>`sum(${usage.cost})`.mapWith(Number),
  };
}

/** The account's rows matching `filter` (usage_account_idx serves the account and time bounds). */
export function usageWhere(accountId: string, filter: UsageFilter): SQL | undefined {
  return and(
    eq(usage.accountId, accountId),
    filter.since === undefined ? undefined : gte(usage.startedAt, filter.since),
    filter.until === undefined ? undefined : lt(usage.startedAt, filter.until),
    filter.keyId === undefined ? undefined : eq(usage.keyId, filter.keyId),
    filter.model === undefined ? undefined : eq(usage.model, filter.model),
    filter.outcome === undefined ? undefined : eq(usage.outcome, filter.outcome),
  );
}

const DAY = USAGE_GROUPS.byDay;

export function sqliteUsage(db: Db): UsageStore {
  return {
    record: async (row) => db.insert(usage).values(row).onConflictDoNothing().returning({ id: usage.requestId }).all().length > 0,
    list: async (accountId, limit) =>
      db
        .select()
        .from(usage)
        .where(eq(usage.accountId, accountId))
        .orderBy(desc(usage.startedAt), desc(usage.requestId))
        .limit(limit)
        .all(),
    async totals(accountId, { since, until }) {
      const where = and(
        eq(usage.accountId, accountId),
        since === undefined ? undefined : gte(usage.startedAt, since),
        until === undefined ? undefined : lt(usage.startedAt, until),
      );
      // One read transaction: a writer in another process cannot land between the three queries.
      return db.transaction((tx) => {
        const by = (key: SQL<string>) => tx.select(usageSums(key)).from(usage).where(where).groupBy(key).orderBy(key).all();
        return { byModel: by(USAGE_GROUPS.byModel), byKey: by(USAGE_GROUPS.byKey), byDay: by(USAGE_GROUPS.byDay) };
      });
    },
    page: async (accountId, filter, { limit, after }) =>
      db
        .select()
        .from(usage)
        .where(
          and(
            usageWhere(accountId, filter),
            after === undefined
              ? undefined
              : or(lt(usage.startedAt, after.startedAt), and(eq(usage.startedAt, after.startedAt), lt(usage.requestId, after.requestId))),
          ),
        )
        .orderBy(desc(usage.startedAt), desc(usage.requestId))
        .limit(limit)
        .all(),
    dayModelTotals: async (accountId, bounds) =>
      db
        .select({
          day: DAY,
          model: usage.model,
          requests: sql<number>`count(*)`.mapWith(Number),
          promptTokens: sql<number>`sum(${usage.promptTokens})`.mapWith(Number),
          completionTokens: sql<number>`sum(${usage.completionTokens})`.mapWith(Number),
          cost: sql<number>`sum(${usage.cost})`.mapWith(Number),
        })
        .from(usage)
        .where(usageWhere(accountId, bounds))
        .groupBy(DAY, usage.model)
        .orderBy(DAY, usage.model)
        .all(),
    async lastUsed(accountId) {
      const rows = db
        .select({ keyId: sql<string>`${usage.keyId}`, at: sql<number>`max(${usage.startedAt})`.mapWith(Number) })
        .from(usage)
        .where(and(eq(usage.accountId, accountId), isNotNull(usage.keyId)))
        .groupBy(usage.keyId)
        .all();
      return new Map(rows.map((r) => [r.keyId, r.at]));
    },
    async served(providerIds, feePercent) {
      if (providerIds.length === 0) return [];
      return db
        .select({
          providerId: sql<string>`${usage.providerId}`,
          requests: sql<number>`count(*)`.mapWith(Number),
          earnings: sql<number>`sum(${usage.cost} - (${usage.cost} * ${feePercent} + 99) / 100)`.mapWith(Number),
        })
        .from(usage)
        .where(inArray(usage.providerId, [...providerIds]))
        .groupBy(usage.providerId)
        .orderBy(usage.providerId)
        .all();
    },
  };
}
