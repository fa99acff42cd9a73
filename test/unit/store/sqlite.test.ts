/**
 * The SQLite store: the conformance suite on a real file, then what only SQLite has — WAL mode, foreign
 * keys on every connection, migrations applied once, refusal to start on a database it cannot write,
 * and the constraints and transactions that hold at the database level.
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { chmodSync, closeSync, mkdirSync, openSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { StoreOpenError } from "../../../src/store/errors.ts";
import { journalPath } from "../../../src/store/journal.ts";
import { MIGRATIONS } from "../../../src/store/migrations/index.ts";
import { createSqliteStore } from "../../../src/store/sqlite/index.ts";
import { openSqlite } from "../../../src/store/sqlite/open.ts";
import type { Store, UsageRecord } from "../../../src/store/types.ts";
import { runStoreConformance } from "../../store/conformance.ts";
import { runMoneyConformance } from "../../store/money-conformance.ts";
import { tempDir } from "../../support/harness.ts";

runStoreConformance("SQLite store conformance", async () => {
  const dir = tempDir();
  try {
    const store = createSqliteStore(join(dir.path, "umbra.db"));
    return {
      store,
      async [Symbol.asyncDispose]() {
        store.close();
        dir[Symbol.dispose]();
      },
    };
  } catch (error) {
    dir[Symbol.dispose]();
    throw error;
  }
});

function openStore(path: string): Store & Disposable {
  const store = createSqliteStore(path);
  return Object.assign(store, { [Symbol.dispose]: () => store.close() });
}

/** Whether a 0444 file refuses writes here (it does not for root). */
const chmodProtects = ((): boolean => {
  using dir = tempDir();
  const file = join(dir.path, "probe");
  writeFileSync(file, "");
  chmodSync(file, 0o444);
  try {
    closeSync(openSync(file, "r+"));
    return false;
  } catch {
    return true;
  }
})();

/** The StoreOpenError that opening `path` throws, or a failure when it opens. */
function openError(path: string): StoreOpenError {
  try {
    createSqliteStore(path).close();
  } catch (error) {
    if (error instanceof StoreOpenError) return error;
    throw new Error(`expected StoreOpenError, got ${String(error)}`);
  }
  throw new Error(`expected ${path} to be refused`);
}

describe("SQLite store", () => {
  test("creates missing folders and puts the database in WAL mode", async () => {
    using dir = tempDir();
    const path = join(dir.path, "nested", "deeper", "umbra.db");
    using store = openStore(path);
    await store.ping();
    using db = new Database(path);
    expect(db.query("PRAGMA journal_mode").get()).toEqual({ journal_mode: "wal" });
  });

  test("connections are opened with foreign keys enforced", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const { client } = openSqlite(path);
    using _client = client;
    expect(client.query("PRAGMA foreign_keys").get()).toEqual({ foreign_keys: 1 });
    expect(() =>
      client
        .query("INSERT INTO api_keys (id, account_id, key_hash, hint, created_at) VALUES ('key-1', 'acct-none', 'hash', 'hint', 1)")
        .run(),
    ).toThrow(/FOREIGN KEY constraint failed/);
    // The store's own connection refuses an orphan row too; check from outside that nothing was written.
    using store = openStore(path);
    const orphan: UsageRecord = {
      requestId: "req-1",
      accountId: "acct-none",
      keyId: null,
      model: "m",
      buildId: "b",
      providerId: null,
      promptTokens: 1,
      cachedTokens: 0,
      completionTokens: 1,
      cost: 1,
      startedAt: 1,
      firstContentMs: null,
      durationMs: 1,
      outcome: "ok",
    };
    await expect(store.usage.record(orphan)).rejects.toThrow(/FOREIGN KEY constraint failed/);
    expect(client.query("SELECT (SELECT count(*) FROM api_keys) + (SELECT count(*) FROM usage) AS n").get()).toEqual({ n: 0 });
  });

  test("reopening keeps the data and applies each migration exactly once", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    {
      using store = openStore(path);
      await store.accounts.create({ id: "acct-1", name: "Alice", jwtSubject: "sub-1", at: 1_000 });
      await store.accounts.credit({ accountId: "acct-1", amount: 700, at: 2_000 });
    }
    for (let i = 0; i < 2; i++) {
      using store = openStore(path);
      expect(await store.accounts.list()).toEqual([
        { id: "acct-1", name: "Alice", jwtSubject: "sub-1", createdAt: 1_000, balance: 700, reserved: 0 },
      ]);
      expect((await store.accounts.ledger("acct-1", 10)).map((e) => e.balanceAfter)).toEqual([700]);
    }
    using db = new Database(path);
    expect(db.query(`SELECT hash, created_at FROM "__drizzle_migrations" ORDER BY id`).all()).toEqual(
      MIGRATIONS.map((m) => ({ hash: new Bun.CryptoHasher("sha256").update(m.sql).digest("hex"), created_at: m.when })),
    );
  });

  describe("refuses a database it cannot write, naming the path", () => {
    test.skipIf(!chmodProtects)("a read-only file", () => {
      using dir = tempDir();
      const path = join(dir.path, "umbra.db");
      openStore(path)[Symbol.dispose]();
      chmodSync(path, 0o444);
      expect(openError(path).message).toContain(path);
    });

    const cases: [string, (dir: string) => string][] = [
      [
        "a path under a regular file",
        (dir) => {
          writeFileSync(join(dir, "file"), "not a folder");
          return join(dir, "file", "umbra.db");
        },
      ],
      [
        "a folder",
        (dir) => {
          mkdirSync(join(dir, "umbra.db"));
          return join(dir, "umbra.db");
        },
      ],
      [
        "a file that is not a SQLite database",
        (dir) => {
          writeFileSync(join(dir, "umbra.db"), Buffer.alloc(8192, 0xa5));
          return join(dir, "umbra.db");
        },
      ],
      [
        "a text file",
        (dir) => {
          writeFileSync(join(dir, "umbra.db"), "SQLite format 2\nthis is a text file, long enough to have a header\n".repeat(20));
          return join(dir, "umbra.db");
        },
      ],
    ];
    test.each(cases)("%s", (_name, make) => {
      using dir = tempDir();
      const path = make(dir.path);
      expect(openError(path).message).toContain(path);
    });
  });

  test("the database refuses a negative balance or reservation", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    using store = openStore(path);
    await store.accounts.create({ id: "acct-1", name: "Alice", at: 1_000 });
    await store.accounts.credit({ accountId: "acct-1", amount: 100, at: 2_000 });
    using db = new Database(path);
    db.exec("PRAGMA busy_timeout = 5000");
    expect(() => db.query("UPDATE balances SET balance_micro_usd = -1 WHERE account_id = 'acct-1'").run()).toThrow(
      /CHECK constraint failed: balance_not_negative/,
    );
    expect(() => db.query("UPDATE balances SET reserved_micro_usd = -1 WHERE account_id = 'acct-1'").run()).toThrow(
      /CHECK constraint failed: reserved_not_negative/,
    );
    expect(await store.accounts.get("acct-1")).toEqual({
      id: "acct-1",
      name: "Alice",
      jwtSubject: null,
      createdAt: 1_000,
      balance: 100,
      reserved: 0,
    });
  });

  test("credit writes nothing when its ledger entry fails", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    using store = openStore(path);
    await store.accounts.create({ id: "acct-1", name: "Alice", at: 1_000 });
    await store.accounts.credit({ accountId: "acct-1", amount: 100, at: 2_000 });
    using db = new Database(path);
    db.exec("PRAGMA busy_timeout = 5000");
    db.exec("CREATE TRIGGER refuse_ledger BEFORE INSERT ON ledger_entries BEGIN SELECT RAISE(ABORT, 'ledger refused'); END");
    await expect(store.accounts.credit({ accountId: "acct-1", amount: 50, at: 3_000 })).rejects.toThrow();
    expect((await store.accounts.get("acct-1"))?.balance).toBe(100);
    expect((await store.accounts.ledger("acct-1", 10)).map((e) => e.amount)).toEqual([100]);
  });
});

runMoneyConformance("SQLite money store conformance", async () => {
  const dir = tempDir();
  try {
    const store = createSqliteStore(join(dir.path, "umbra.db"));
    return {
      store,
      async [Symbol.asyncDispose]() {
        store.close();
        dir[Symbol.dispose]();
      },
    };
  } catch (error) {
    dir[Symbol.dispose]();
    throw error;
  }
});

describe("file modes", () => {
  const modeOf = (path: string) => (statSync(path).mode & 0o777).toString(8);
  const modes = (db: string) => ({
    db: modeOf(db),
    wal: modeOf(`${db}-wal`),
    shm: modeOf(`${db}-shm`),
    journal: modeOf(journalPath(db)),
  });
  const PRIVATE = { db: "600", wal: "600", shm: "600", journal: "600" };

  test("a fresh database: its new folder 0700; the database, WAL, shared memory and journal 0600", () => {
    using dir = tempDir();
    const previous = process.umask(0o022);
    try {
      const db = join(dir.path, "data", "nested", "umbra.db");
      const store = createSqliteStore(db, { journal: true });
      try {
        expect({ folder: modeOf(join(dir.path, "data", "nested")), parent: modeOf(join(dir.path, "data")), ...modes(db) }).toEqual({
          folder: "700",
          parent: "700",
          ...PRIVATE,
        });
      } finally {
        store.close();
      }
    } finally {
      process.umask(previous);
    }
  });

  test("an existing database with looser modes is tightened; an existing folder is left as it is", () => {
    using dir = tempDir();
    const folder = join(dir.path, "shared");
    mkdirSync(folder, { mode: 0o755 });
    chmodSync(folder, 0o755);
    const db = join(folder, "umbra.db");
    createSqliteStore(db, { journal: true }).close();
    // As an older version left them (or a copy made with the default umask), WAL and shared memory included.
    for (const file of [db, `${db}-wal`, `${db}-shm`, journalPath(db)]) {
      closeSync(openSync(file, "a"));
      chmodSync(file, 0o644);
    }
    const store = createSqliteStore(db, { journal: true });
    try {
      expect({ folder: modeOf(folder), ...modes(db) }).toEqual({ folder: "755", ...PRIVATE });
    } finally {
      store.close();
    }
  });
});
