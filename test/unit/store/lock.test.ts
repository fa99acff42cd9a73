/**
 * The database lock (src/store/sqlite/lock.ts), in one process (SQLite's unix VFS refuses a second
 * connection of the same process as it refuses another process): a second taker is refused with the
 * database and the holder named, a released lock can be taken again, the lock file is owner-only, and
 * the database itself stays open to other connections. Across processes and after kill -9:
 * test/e2e/coordinator-start.test.ts.
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { StoreOpenError } from "../../../src/store/errors.ts";
import { createSqliteStore } from "../../../src/store/sqlite/index.ts";
import { DatabaseInUseError, lockDatabase, lockPath, readLockHolder } from "../../../src/store/sqlite/lock.ts";
import { tempDir } from "../../support/harness.ts";

function refusal(take: () => unknown): unknown {
  try {
    take();
    return "taken";
  } catch (e) {
    return e instanceof DatabaseInUseError
      ? { name: e.name, message: e.message, database: e.database, holder: e.holder, isStoreOpenError: e instanceof StoreOpenError }
      : e;
  }
}

describe("database lock", () => {
  test("a second taker is refused naming the database and the holder; once released it can be taken again", () => {
    using dir = tempDir();
    const db = join(dir.path, "data/umbra.db");
    const first = lockDatabase(db, "umbra-coordinator dev");
    const holder = readLockHolder(first.path);
    expect(holder).toEqual({
      pid: process.pid,
      command: "umbra-coordinator dev",
      startedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/),
    });
    expect(refusal(() => lockDatabase(db, "umbra-coordinator serve"))).toEqual({
      name: "StoreOpenError",
      message: `database ${db} is in use by another process (pid ${process.pid}: umbra-coordinator dev, started ${holder?.startedAt}); stop it first, or give this one another --db`,
      database: db,
      holder,
      isStoreOpenError: true,
    });
    first.release();
    const second = lockDatabase(db, "umbra-coordinator migrate");
    expect(readLockHolder(second.path)).toEqual({ pid: process.pid, command: "umbra-coordinator migrate", startedAt: expect.any(String) });
    second.release();
  });

  test("the lock file sits next to the database, owner-only in an owner-only new folder; the database itself stays usable by others", () => {
    using dir = tempDir();
    const db = join(dir.path, "data/umbra.db");
    const lock = lockDatabase(db, "umbra-coordinator serve");
    try {
      const store = createSqliteStore(db);
      store.close();
      const other = new Database(db);
      const tables = other.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'accounts'").get();
      other.close();
      expect({
        path: lock.path,
        mode: statSync(lock.path).mode & 0o777,
        folderMode: statSync(join(dir.path, "data")).mode & 0o777,
        tables,
      }).toEqual({ path: lockPath(db), mode: 0o600, folderMode: 0o700, tables: { n: 1 } });
    } finally {
      lock.release();
    }
  });

  test("a lock file that cannot be created is a StoreOpenError naming it", () => {
    using dir = tempDir();
    const file = join(dir.path, "not-a-folder");
    writeFileSync(file, "x");
    const db = join(file, "umbra.db");
    expect(refusal(() => lockDatabase(db, "umbra-coordinator serve"))).toEqual(
      new StoreOpenError(`cannot create the lock file ${db}-lock: EEXIST: file already exists, mkdir '${file}'`),
    );
  });
});
