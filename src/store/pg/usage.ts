/** The Postgres UsageStore: one row per settled request (idempotent by request id), listing and totals. */
import { and, desc, eq, gte, lt, type SQL, sql } from "drizzle-orm";
import { JWT_USAGE_KEY, type UsageStore } from "../types.ts";
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
  };
}
