/** The SQLite UsageStore: one row per settled request (idempotent by request id), listing and totals. */
import { and, desc, eq, gte, lt, type SQL, sql } from "drizzle-orm";
import { usage } from "../schema.ts";
import { JWT_USAGE_KEY, type UsageStore } from "../types.ts";
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
  };
}
