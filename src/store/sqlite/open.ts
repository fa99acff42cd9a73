/**
 * Opens the SQLite database: creates its folder, sets WAL, foreign keys and a busy timeout, applies the
 * embedded migrations in one transaction, and proves the file is writable before anyone relies on it.
 * Modes: a folder it creates is 0700; the database is 0600 before SQLite opens it (SQLite gives its WAL,
 * shared-memory and rollback files the database's mode), and existing files with looser modes are
 * tightened to 0600. An existing folder is left as it is (it may be shared, such as /tmp).
 *
 * Migration bookkeeping uses drizzle's own `__drizzle_migrations` table (hash, created_at = journal
 * timestamp), so drizzle-kit sees the same state as the coordinator.
 */
import { Database } from "bun:sqlite";
import { chmodSync, closeSync, mkdirSync, openSync } from "node:fs";
import { dirname } from "node:path";
import { type BunSQLiteDatabase, drizzle } from "drizzle-orm/bun-sqlite";
import { StoreOpenError } from "../errors.ts";
import { type EmbeddedMigration, MIGRATIONS } from "../migrations/index.ts";
import * as schema from "../schema.ts";

export type Db = BunSQLiteDatabase<typeof schema>;

export interface OpenedDatabase {
  readonly client: Database;
  readonly db: Db;
}

/** Opens, migrates and write-probes `path` (":memory:" allowed). Throws StoreOpenError. */
export function openSqlite(path: string): OpenedDatabase {
  let client: Database;
  try {
    if (path !== ":memory:") {
      mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
      restrictFiles(path);
    }
    client = new Database(path, { create: true, readwrite: true, strict: true });
  } catch (e) {
    throw new StoreOpenError(`cannot open database ${path}: ${reason(e)}`);
  }
  let step = "settings";
  try {
    client.exec("PRAGMA busy_timeout = 5000");
    client.exec("PRAGMA synchronous = NORMAL");
    client.exec("PRAGMA foreign_keys = ON");
    step = "journal mode";
    const mode = client.prepare("PRAGMA journal_mode").get() as { journal_mode: string } | null;
    if (mode?.journal_mode !== "wal") client.exec("PRAGMA journal_mode = WAL");
    step = "migrations";
    applyMigrations(client);
    // The write probe: a database we can read but not write must stop the process now, not at the
    // first paid request.
    step = "write probe";
    client
      .prepare("INSERT INTO store_meta (key, value) VALUES ('opened_at', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
      .run(String(Date.now()));
  } catch (e) {
    client.close();
    throw new StoreOpenError(`database ${path} is not writable or not usable (${step}): ${reason(e)}`);
  }
  return { client, db: drizzle({ client, schema }) };
}

/** Applies the migrations of `list` newer than the last one applied, in one transaction. */
export function applyMigrations(client: Database, list: readonly EmbeddedMigration[] = MIGRATIONS): void {
  client.exec(`CREATE TABLE IF NOT EXISTS "__drizzle_migrations" (id INTEGER PRIMARY KEY, hash text NOT NULL, created_at numeric)`);
  const last = client.prepare(`SELECT created_at FROM "__drizzle_migrations" ORDER BY created_at DESC LIMIT 1`).get() as {
    created_at: number;
  } | null;
  const pending = list.filter((m) => last === null || Number(last.created_at) < m.when);
  if (pending.length === 0) return;
  client.transaction(() => {
    for (const m of pending) {
      for (const statement of m.sql.split("--> statement-breakpoint")) {
        if (statement.trim() !== "") client.exec(statement);
      }
      client
        .prepare(`INSERT INTO "__drizzle_migrations" (hash, created_at) VALUES (?, ?)`)
        .run(new Bun.CryptoHasher("sha256").update(m.sql).digest("hex"), m.when);
    }
  })();
}

/** Creates the database file 0600 if it is missing, and brings it and its companions to 0600. */
function restrictFiles(path: string): void {
  closeSync(openSync(path, "a", 0o600));
  for (const file of [path, `${path}-wal`, `${path}-shm`, `${path}-journal`]) {
    try {
      chmodSync(file, 0o600);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
  }
}

function reason(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
