/**
 * The Postgres UsageStore: one row per settled request (idempotent by request id), listing, paging and
 * totals. Reads only: last use and provider figures are derived from the rows, nothing is written on use.
 * Request ids and model ids order by code unit (order.ts), as in SQLite, cursors included.
 */
import { and, desc, eq, gte, inArray, isNotNull, lt, or, type SQL, sql } from "drizzle-orm";
import { JWT_USAGE_KEY, type UsageFilter, type UsageStore } from "../types.ts";
import type { PgDb } from "./open.ts";
import { byCode } from "./order.ts";
import { usage } from "./schema.ts";

/** The three groupings of UsageStore.totals; literals are inlined so GROUP BY repeats the selected text. */
const USAGE_GROUPS = {
  byModel: sql<string>`${usage.model}`,
  byKey: sql<string>`coalesce(${usage.keyId}, ${sql.raw(`'${JWT_USAGE_KEY}'`)})`,
  byDay: sql<string>`to_char(to_timestamp(${usage.startedAt} / 1000.0) at time zone 'UTC', 'YYYY-MM-DD')`,
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
function usageWhere(accountId: string, filter: UsageFilter): SQL | undefined {
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

export function pgUsage(db: PgDb): UsageStore {
  return {
    record: async (row) => (await db.insert(usage).values(row).onConflictDoNothing().returning({ id: usage.requestId })).length > 0,
    list: async (accountId, limit) =>
      db
        .select()
        .from(usage)
        .where(eq(usage.accountId, accountId))
        .orderBy(desc(usage.startedAt), desc(byCode(usage.requestId)))
        .limit(limit),
    async totals(accountId, { since, until }) {
      const where = and(
        eq(usage.accountId, accountId),
        since === undefined ? undefined : gte(usage.startedAt, since),
        until === undefined ? undefined : lt(usage.startedAt, until),
      );
      // One repeatable-read snapshot: a writer cannot land between the three queries.
      return db.transaction(
        async (tx) => {
          const by = (key: SQL<string>) => tx.select(usageSums(key)).from(usage).where(where).groupBy(key).orderBy(byCode(key));
          return { byModel: await by(USAGE_GROUPS.byModel), byKey: await by(USAGE_GROUPS.byKey), byDay: await by(USAGE_GROUPS.byDay) };
        },
        { isolationLevel: "repeatable read", accessMode: "read only" },
      );
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
              : or(
                  lt(usage.startedAt, after.startedAt),
                  and(eq(usage.startedAt, after.startedAt), sql`${byCode(usage.requestId)} < ${after.requestId}`),
                ),
          ),
        )
        .orderBy(desc(usage.startedAt), desc(byCode(usage.requestId)))
        .limit(limit),
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
        .orderBy(byCode(DAY), byCode(usage.model)),
    async lastUsed(accountId) {
      const rows = await db
        .select({ keyId: sql<string>`${usage.keyId}`, at: sql<number>`max(${usage.startedAt})`.mapWith(Number) })
        .from(usage)
        .where(and(eq(usage.accountId, accountId), isNotNull(usage.keyId)))
        .groupBy(usage.keyId);
      return new Map(rows.map((r) => [r.keyId, r.at]));
    },
    async served(providerIds, feePercent) {
      if (providerIds.length === 0) return [];
      const fee = Math.trunc(feePercent);
      return db
        .select({
          providerId: sql<string>`${usage.providerId}`,
          requests: sql<number>`count(*)`.mapWith(Number),
          earnings: sql<number>`sum(${usage.cost} - (${usage.cost} * ${fee}::bigint + 99) / 100)`.mapWith(Number),
        })
        .from(usage)
        .where(inArray(usage.providerId, [...providerIds]))
        .groupBy(usage.providerId)
        .orderBy(byCode(usage.providerId));
    },
  };
}
