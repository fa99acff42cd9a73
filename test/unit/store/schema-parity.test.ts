/**
 * The two schemas (src/store/schema.ts for SQLite, src/store/pg/schema.ts for Postgres) stay equal: the
 * selected row type of each table pair is the same type, checked by `tsc` (a drift fails the type check,
 * not only this test), and at run time each pair has the same table name and column names.
 */
import { expect, test } from "bun:test";
import type { getTableName, InferSelectModel } from "drizzle-orm";
import { getTableConfig as pgConfig } from "drizzle-orm/pg-core";
import { getTableConfig as sqliteConfig } from "drizzle-orm/sqlite-core";
import * as pg from "../../../src/store/pg/schema.ts";
import * as sqlite from "../../../src/store/schema.ts";

/** True exactly when A and B are the same type (not merely assignable either way). */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;

/** The selected row types of every table, per dialect; a table missing from either side fails too. */
type Rows<S> = { [K in keyof S]: S[K] extends Parameters<typeof getTableName>[0] ? InferSelectModel<S[K]> : never };
type SqliteRows = Rows<typeof sqlite>;
type PgRows = Rows<typeof pg>;

const sameRows: Equal<SqliteRows, PgRows> = true;
// Each pair on its own line too, so a drift names its table in the compiler's message.
const pairs = {
  accounts: true as Equal<SqliteRows["accounts"], PgRows["accounts"]>,
  balances: true as Equal<SqliteRows["balances"], PgRows["balances"]>,
  ledgerEntries: true as Equal<SqliteRows["ledgerEntries"], PgRows["ledgerEntries"]>,
  apiKeys: true as Equal<SqliteRows["apiKeys"], PgRows["apiKeys"]>,
  providerTokens: true as Equal<SqliteRows["providerTokens"], PgRows["providerTokens"]>,
  modelBuilds: true as Equal<SqliteRows["modelBuilds"], PgRows["modelBuilds"]>,
  modelAliases: true as Equal<SqliteRows["modelAliases"], PgRows["modelAliases"]>,
  modelPrices: true as Equal<SqliteRows["modelPrices"], PgRows["modelPrices"]>,
  usage: true as Equal<SqliteRows["usage"], PgRows["usage"]>,
  storeMeta: true as Equal<SqliteRows["storeMeta"], PgRows["storeMeta"]>,
} satisfies { [K in keyof SqliteRows]: true };

test("the type-level checks are in force", () => {
  expect(sameRows).toBe(true);
  expect(Object.values(pairs).every((v) => v === true)).toBe(true);
});

test("each table pair has the same table name and the same column names, in order", () => {
  const shape = (name: string, columns: readonly { name: string }[]) => ({ name, columns: columns.map((c) => c.name) });
  const sqliteTables = Object.values(sqlite).map((t) => {
    const c = sqliteConfig(t);
    return shape(c.name, c.columns);
  });
  const pgTables = Object.values(pg).map((t) => {
    const c = pgConfig(t);
    return shape(c.name, c.columns);
  });
  expect(pgTables).toEqual(sqliteTables);
});
