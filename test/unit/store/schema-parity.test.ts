/**
 * The two schemas (src/store/schema.ts for SQLite, src/store/pg/schema.ts for Postgres) stay equal: the
 * selected row type of each table pair is the same type, checked by `tsc` (a drift fails the type check,
 * not only this test), and at run time each pair has the same table name and column names.
 * Postgres alone has the money authority's parts (src/store/pg/money-authority.ts; SQLite holds money in
 * memory): the `holds` table and `api_keys.held`. They are named below, once, and taken out of the
 * comparison by name only; the last test checks that they are exactly the difference.
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
/** Everything only the Postgres schema has: whole tables, and columns of shared tables. */
const POSTGRES_ONLY = { tables: ["holds"], columns: { apiKeys: ["held"] } } as const;
type PgOnlyTable = (typeof POSTGRES_ONLY.tables)[number];
type PgOnlyColumns = typeof POSTGRES_ONLY.columns;

type SqliteRows = Rows<typeof sqlite>;
type PgAllRows = Rows<typeof pg>;
// readonly as a module's exports are (Rows keeps that modifier).
type PgRows = {
  readonly [K in Exclude<keyof PgAllRows, PgOnlyTable>]: K extends keyof PgOnlyColumns
    ? Omit<PgAllRows[K], PgOnlyColumns[K][number]>
    : PgAllRows[K];
};

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
  consoleSessions: true as Equal<SqliteRows["consoleSessions"], PgRows["consoleSessions"]>,
  signInLinks: true as Equal<SqliteRows["signInLinks"], PgRows["signInLinks"]>,
  mdmEnrolments: true as Equal<SqliteRows["mdmEnrolments"], PgRows["mdmEnrolments"]>,
  mdmCommands: true as Equal<SqliteRows["mdmCommands"], PgRows["mdmCommands"]>,
  mdmChains: true as Equal<SqliteRows["mdmChains"], PgRows["mdmChains"]>,
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
  const onlyColumns: Readonly<Record<string, readonly string[]>> = POSTGRES_ONLY.columns;
  const pgTables = Object.entries(pg)
    .filter(([key]) => !(POSTGRES_ONLY.tables as readonly string[]).includes(key))
    .map(([key, t]) => {
      const c = pgConfig(t);
      return shape(
        c.name,
        c.columns.filter((col) => !(onlyColumns[key] ?? []).includes(Object.entries(t).find(([, v]) => v === col)?.[0] ?? "")),
      );
    });
  expect(pgTables).toEqual(sqliteTables);
});

test("the Postgres-only parts exist, and are the only difference", () => {
  const keys = Object.keys(pg);
  expect(keys.filter((k) => !(k in sqlite))).toEqual([...POSTGRES_ONLY.tables]);
  expect(Object.keys(pg.apiKeys).filter((k) => !(k in sqlite.apiKeys) && k !== "enableRLS")).toEqual([...POSTGRES_ONLY.columns.apiKeys]);
});
