/**
 * The store opener: `--db` / UMBRA_DB names either a SQLite file (a path, or ":memory:") or a Postgres
 * database (a `postgres://` or `postgresql://` URL). `databaseName` is what logs and messages may print:
 * the path, or the URL without its password.
 */
import { describeDatabase } from "./pg/database-url.ts";
import type { CheckpointerOptions } from "./sqlite/checkpointer.ts";
import { createSqliteStore } from "./sqlite/index.ts";
import type { Store } from "./types.ts";

export interface OpenStoreOptions {
  /** SQLite only: keep the settlement journal next to the file (the running coordinator). */
  readonly journal?: boolean;
  /** SQLite only: WAL checkpoints in a Worker of their own (the running coordinator; sqlite/checkpointer.ts). */
  readonly checkpoints?: CheckpointerOptions;
  /** Postgres only: the password when it is not in the URL (--db-password). */
  readonly password?: string;
}

/** True when `db` names a Postgres database rather than a SQLite file. */
export function isPostgres(db: string): boolean {
  return /^postgres(ql)?:\/\//i.test(db);
}

/** `db` as logs and messages may show it (never a password). */
export function databaseName(db: string): string {
  return isPostgres(db) ? describeDatabase(db) : db;
}

/** Opens (creating where SQLite, migrating either way) the store `db` names. Throws StoreOpenError. */
export async function openStore(db: string, options: OpenStoreOptions = {}): Promise<Store> {
  if (!isPostgres(db)) return createSqliteStore(db, options);
  // Loaded only for Postgres: postgres.js and the Postgres store stay out of a coordinator on SQLite.
  const { createPgStore } = await import("./pg/index.ts");
  return createPgStore(db, options.password === undefined ? {} : { password: options.password });
}
