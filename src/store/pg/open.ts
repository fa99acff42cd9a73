/**
 * Opens the Postgres database: a postgres.js pool behind drizzle, the embedded migrations applied under a
 * session advisory lock, and a write probe. The lock is taken on one dedicated connection held around
 * the whole migration (drizzle's `migrate()` takes none and reads the last migration outside its
 * transaction), so replicas booting together, or `umbra-coordinator migrate` run beside them, apply
 * each migration exactly once; the others wait, then find nothing left to do.
 *
 * Bookkeeping is drizzle's own `drizzle.__drizzle_migrations` (hash, created_at = journal timestamp).
 * Messages name the database by its URL without the password (`describeDatabase`), and any text a
 * driver error carries has the password removed.
 */
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import postgres, { type Sql } from "postgres";
import { StoreOpenError } from "../errors.ts";
import type { EmbeddedMigration } from "../migrations/index.ts";
import type { OpenListener } from "./change-feed.ts";
import { describeDatabase, withoutSecret } from "./database-url.ts";
import { PG_MIGRATIONS } from "./migrations/index.ts";
import * as schema from "./schema.ts";

export { describeDatabase, withoutSecret } from "./database-url.ts";

export type PgDb = PostgresJsDatabase<typeof schema>;

/** The advisory lock key the migrations run under ("umbra" in ASCII). */
export const MIGRATION_LOCK = 0x756d627261;

export interface OpenedPostgres {
  readonly client: Sql;
  readonly db: PgDb;
}

export interface PgOpenOptions {
  /** Most pooled connections (postgres.js `max`); 10 unless given. */
  readonly max?: number;
  /** The password, when it is not in the URL (--db-password). */
  readonly password?: string;
}

/**
 * A client of one connection for the change feed (change-feed.ts) or a replica's claim (replica-claim.ts):
 * never idle-closed, named `name` in pg_stat_activity, its notifications and its loss handed to `handlers`.
 * `onnotify` is an option postgres.js reads (src/index.js parseOptions) but does not declare; `sql.listen`
 * is not used because it re-listens after a lost connection without saying so, hiding missed changes.
 * test/unit/store/pg-change-feed.test.ts fails if either handler stops being called.
 */
export function openListener(url: string, options: PgOpenOptions, handlers: Parameters<OpenListener>[0], name = "umbra-change-feed"): Sql {
  const withNotify: postgres.Options<Record<string, never>> & { onnotify: (channel: string, payload: string) => void } = {
    max: 1,
    idle_timeout: 0,
    max_lifetime: 0,
    connect_timeout: 10,
    fetch_types: false,
    onnotice: () => {},
    connection: { application_name: name },
    onnotify: handlers.onnotify,
    onclose: handlers.onclose,
    ...(options.password === undefined ? {} : { password: options.password }),
  };
  return postgres(url, withNotify);
}

/** Connects, migrates and write-probes the database at `url`. Throws StoreOpenError. */
export async function openPostgres(url: string, options: PgOpenOptions = {}): Promise<OpenedPostgres> {
  let client: Sql;
  try {
    const password = options.password === undefined ? {} : { password: options.password };
    client = postgres(url, { max: options.max ?? 10, connect_timeout: 10, onnotice: () => {}, ...password });
  } catch (e) {
    throw new StoreOpenError(`cannot open database ${describeDatabase(url)}: ${withoutSecret(url, reason(e))}`);
  }
  let step = "connection";
  try {
    await client`SELECT 1`;
    step = "migrations";
    await applyPgMigrations(client);
    step = "write probe";
    await client`INSERT INTO store_meta (key, value) VALUES ('opened_at', ${String(Date.now())})
      ON CONFLICT (key) DO UPDATE SET value = excluded.value`;
  } catch (e) {
    await client.end({ timeout: 1 }).catch(() => {});
    throw new StoreOpenError(`database ${describeDatabase(url)} is not usable (${step}): ${withoutSecret(url, reason(e))}`);
  }
  return { client, db: drizzle({ client, schema }) };
}

/**
 * Applies the migrations of `list` newer than the last one applied, in one transaction, while holding the
 * session advisory lock on a connection of its own. Returns the tags it applied.
 */
export async function applyPgMigrations(client: Sql, list: readonly EmbeddedMigration[] = PG_MIGRATIONS): Promise<string[]> {
  const conn = await client.reserve();
  try {
    await conn`SELECT pg_advisory_lock(${MIGRATION_LOCK})`;
    try {
      // A reserved connection has no `begin`: the transaction is spelled out on it.
      await conn`BEGIN`;
      try {
        await conn.unsafe(`CREATE SCHEMA IF NOT EXISTS drizzle`);
        await conn.unsafe(
          `CREATE TABLE IF NOT EXISTS drizzle.__drizzle_migrations (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)`,
        );
        const [last] = await conn<{ created_at: string }[]>`
          SELECT created_at FROM drizzle.__drizzle_migrations ORDER BY created_at DESC LIMIT 1`;
        const pending = list.filter((m) => last === undefined || Number(last.created_at) < m.when);
        for (const m of pending) {
          for (const statement of m.sql.split("--> statement-breakpoint")) {
            if (statement.trim() !== "") await conn.unsafe(statement);
          }
          const hash = new Bun.CryptoHasher("sha256").update(m.sql).digest("hex");
          await conn`INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES (${hash}, ${m.when})`;
        }
        await conn`COMMIT`;
        return pending.map((m) => m.tag);
      } catch (e) {
        await conn`ROLLBACK`.catch(() => {});
        throw e;
      }
    } finally {
      await conn`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`;
    }
  } finally {
    conn.release();
  }
}

function reason(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
