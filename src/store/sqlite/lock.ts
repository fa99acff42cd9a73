/**
 * The coordinator's lock on its database: one running coordinator (`serve`, `dev`) or `migrate` per
 * database file (docs/operations.md "Database" says why). The database itself is not locked: the admin CLI
 * and backups keep working beside a coordinator through SQLite's WAL locking.
 *
 * Mechanism: SQLite's own locking, on a small lock database next to it (`<db>-lock`). The holder opens it
 * in `locking_mode = EXCLUSIVE` and writes a row naming itself in a transaction; that POSIX advisory lock
 * lasts until the connection closes, and the kernel releases it when the process dies, however it dies.
 * A second holder gets SQLITE_BUSY at once (busy timeout 0) and refuses, naming the holder it reads with
 * `immutable=1`. Keep the returned lock referenced: a collected connection closes and releases the lock.
 */
import { constants, Database } from "bun:sqlite";
import { closeSync, mkdirSync, openSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { StoreOpenError } from "../errors.ts";

export interface LockHolder {
  readonly pid: number;
  /** What holds it, e.g. `umbra-coordinator dev`. */
  readonly command: string;
  /** ISO 8601 time the holder took the lock. */
  readonly startedAt: string;
}

export interface DatabaseLock {
  /** The lock database's path. */
  readonly path: string;
  release(): void;
}

/** Another process holds the lock; the message names the database and, when known, that process. */
export class DatabaseInUseError extends StoreOpenError {
  constructor(
    readonly database: string,
    readonly holder: LockHolder | undefined,
  ) {
    const who = holder
      ? `another process (pid ${holder.pid}: ${holder.command}, started ${holder.startedAt})`
      : `another process (it holds ${lockPath(database)})`;
    super(`database ${database} is in use by ${who}; stop it first, or give this one another --db`);
  }
}

/** The lock database's path for a database file. */
export function lockPath(databasePath: string): string {
  return `${databasePath}-lock`;
}

/**
 * Takes the lock of the database at `databasePath` for `command`, or throws DatabaseInUseError (held by
 * another process) or StoreOpenError (the lock file cannot be created or used). Creates the folder (0700).
 */
export function lockDatabase(databasePath: string, command: string): DatabaseLock {
  const database = resolve(databasePath);
  const path = lockPath(database);
  let client: Database;
  try {
    // The lock comes first at start, so it makes the database's folder: owner-only, like the files.
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    // Created here with owner-only permissions; SQLite then opens the existing file.
    closeSync(openSync(path, "a", 0o600));
    client = new Database(path, { create: true, readwrite: true, strict: true });
  } catch (e) {
    throw new StoreOpenError(`cannot create the lock file ${path}: ${reason(e)}`);
  }
  const holder: LockHolder = { pid: process.pid, command, startedAt: new Date().toISOString() };
  try {
    client.exec("PRAGMA busy_timeout = 0");
    client.exec("PRAGMA locking_mode = EXCLUSIVE");
    // The first write takes the exclusive lock; in exclusive locking mode it stays after COMMIT.
    client.exec("BEGIN EXCLUSIVE");
    client.exec("CREATE TABLE IF NOT EXISTS holder (pid INTEGER NOT NULL, command TEXT NOT NULL, started_at TEXT NOT NULL)");
    client.exec("DELETE FROM holder");
    // Statements are finalized at once: a connection with a live statement closes only when it is collected.
    const insert = client.prepare("INSERT INTO holder (pid, command, started_at) VALUES (?, ?, ?)");
    insert.run(holder.pid, holder.command, holder.startedAt);
    insert.finalize();
    client.exec("COMMIT");
  } catch (e) {
    client.close();
    const code = (e as { code?: unknown }).code;
    if (code === "SQLITE_BUSY" || code === "SQLITE_LOCKED") throw new DatabaseInUseError(database, readLockHolder(path));
    throw new StoreOpenError(`cannot lock database ${database} (lock file ${path}): ${reason(e)}`);
  }
  let held = true;
  return {
    path,
    release() {
      if (!held) return;
      held = false;
      client.close();
    },
  };
}

/** The holder recorded in a lock database, read without taking any lock; undefined when unreadable. */
export function readLockHolder(path: string): LockHolder | undefined {
  const uri = `file:${resolve(path).split("/").map(encodeURIComponent).join("/")}?immutable=1`;
  let reader: Database | undefined;
  try {
    reader = new Database(uri, constants.SQLITE_OPEN_READONLY | constants.SQLITE_OPEN_URI);
    const select = reader.prepare("SELECT pid, command, started_at FROM holder LIMIT 1");
    const row = select.get() as { pid: unknown; command: unknown; started_at: unknown } | null;
    select.finalize();
    if (!row || typeof row.pid !== "number" || typeof row.command !== "string" || typeof row.started_at !== "string") return undefined;
    return { pid: row.pid, command: row.command, startedAt: row.started_at };
  } catch {
    // Being written by its holder at this very moment, or not a lock database: the path names it.
    return undefined;
  } finally {
    reader?.close();
  }
}

function reason(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
