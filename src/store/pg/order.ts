/**
 * Text ordering as SQLite orders it: by code unit, whatever the database's collation (the conformance
 * suite pins "ascending by key (code-unit order)"). `byCode(column)` goes into ORDER BY.
 */
import { type SQL, type SQLWrapper, sql } from "drizzle-orm";

export const byCode = (column: SQLWrapper): SQL => sql`${column} collate "C"`;

/** PostgreSQL's unique_violation. */
export function isUniqueViolation(e: unknown, constraint: string): boolean {
  const cause = e instanceof Error && "cause" in e && e.cause instanceof Error ? e.cause : e;
  return (
    typeof cause === "object" &&
    cause !== null &&
    (cause as { code?: unknown }).code === "23505" &&
    (cause as { constraint_name?: unknown }).constraint_name === constraint
  );
}
