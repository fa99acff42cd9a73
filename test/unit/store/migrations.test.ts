/**
 * The migrations: drizzle-kit's journal, the .sql files beside it and the list embedded in the binary
 * agree byte for byte, and a database they create has every table, column, index, foreign key and check
 * of src/store/schema.ts, and nothing else.
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { getTableName, is } from "drizzle-orm";
import { getTableConfig, SQLiteColumn, SQLiteTable } from "drizzle-orm/sqlite-core";
import { MIGRATIONS } from "../../../src/store/migrations/index.ts";
import * as schema from "../../../src/store/schema.ts";
import { createSqliteStore } from "../../../src/store/sqlite/index.ts";
import { applyMigrations } from "../../../src/store/sqlite/open.ts";
import { tempDir } from "../../support/harness.ts";

const FOLDER = join(import.meta.dir, "../../../src/store/migrations");

interface JournalEntry {
  readonly idx: number;
  readonly when: number;
  readonly tag: string;
}

// Read from disk, not imported: the embedded list imports the journal, so this is the independent copy.
const journal: { entries: JournalEntry[] } = JSON.parse(readFileSync(join(FOLDER, "meta/_journal.json"), "utf8"));

const sha256 = (bytes: string | Uint8Array) => new Bun.CryptoHasher("sha256").update(bytes).digest("hex");

describe("embedded migrations", () => {
  test("the journal is not empty, numbered in order, with increasing timestamps", () => {
    expect(journal.entries.length).toBeGreaterThan(0);
    expect(journal.entries.map((e) => e.idx)).toEqual(journal.entries.map((_, i) => i));
    // open.ts applies every migration newer than the last one applied, so timestamps must increase.
    const increasing = journal.entries.every((e, i) => i === 0 || e.when > (journal.entries[i - 1]?.when ?? Number.POSITIVE_INFINITY));
    expect(increasing).toBe(true);
  });

  test("every .sql file in the folder is in the journal, and every journal entry has its file", () => {
    const files = readdirSync(FOLDER)
      .filter((f) => f.endsWith(".sql"))
      .sort();
    expect(files).toEqual(journal.entries.map((e) => `${e.tag}.sql`).sort());
  });

  test("MIGRATIONS holds every journal entry, in journal order, with the bytes of its file", () => {
    expect(MIGRATIONS.map((m) => ({ tag: m.tag, when: m.when, sha256: sha256(m.sql) }))).toEqual(
      journal.entries.map((e) => ({ tag: e.tag, when: e.when, sha256: sha256(readFileSync(join(FOLDER, `${e.tag}.sql`))) })),
    );
  });
});

interface ColumnShape {
  readonly name: string;
  readonly type: string;
  readonly notNull: boolean;
  readonly primaryKey: boolean;
  readonly hasDefault: boolean;
}

interface IndexShape {
  readonly name: string;
  readonly unique: boolean;
  readonly columns: readonly string[];
}

interface ForeignKeyShape {
  readonly from: readonly string[];
  readonly table: string;
  readonly to: readonly string[];
}

interface TableShape {
  readonly columns: readonly ColumnShape[];
  readonly indexes: readonly IndexShape[];
  readonly foreignKeys: readonly ForeignKeyShape[];
  readonly checks: readonly string[];
}

const byName = <T extends { readonly name: string }>(a: T, b: T) => a.name.localeCompare(b.name);

/** What src/store/schema.ts declares for `table`. */
function declared(table: SQLiteTable): TableShape {
  const config = getTableConfig(table);
  const columnName = (c: unknown) => (is(c, SQLiteColumn) ? c.name : "<expression>");
  return {
    columns: config.columns
      .map((c) => ({ name: c.name, type: c.getSQLType(), notNull: c.notNull, primaryKey: c.primary, hasDefault: c.default !== undefined }))
      .sort(byName),
    indexes: [
      ...config.indexes.map((i) => ({ name: i.config.name, unique: i.config.unique, columns: i.config.columns.map(columnName) })),
      ...config.columns
        .filter((c) => c.isUnique)
        .map((c) => ({ name: c.uniqueName ?? `${config.name}_${c.name}_unique`, unique: true, columns: [c.name] })),
      ...config.uniqueConstraints.map((u) => ({ name: u.getName() ?? "<unnamed>", unique: true, columns: u.columns.map(columnName) })),
    ].sort(byName),
    foreignKeys: config.foreignKeys
      .map((fk) => {
        const ref = fk.reference();
        return { from: ref.columns.map((c) => c.name), table: getTableName(ref.foreignTable), to: ref.foreignColumns.map((c) => c.name) };
      })
      .sort((a, b) => a.from.join().localeCompare(b.from.join())),
    checks: config.checks.map((c) => c.name).sort(),
  };
}

interface TableInfoRow {
  name: string;
  type: string;
  notnull: number;
  dflt_value: string | null;
  pk: number;
}

/** What the migrated database has for the table `name`. */
function actual(db: Database, name: string): TableShape {
  const columns = db
    .query<TableInfoRow, [string]>('SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?)')
    .all(name)
    .map((c) => ({
      name: c.name,
      type: c.type.toLowerCase(),
      notNull: c.notnull === 1,
      primaryKey: c.pk > 0,
      hasDefault: c.dflt_value !== null,
    }))
    .sort(byName);
  const indexes = db
    .query<{ name: string; unique: number }, [string]>("SELECT name, \"unique\" FROM pragma_index_list(?) WHERE origin = 'c'")
    .all(name)
    .map((i) => ({
      name: i.name,
      unique: i.unique === 1,
      columns: db
        .query<{ name: string }, [string]>("SELECT name FROM pragma_index_info(?) ORDER BY seqno")
        .all(i.name)
        .map((c) => c.name),
    }))
    .sort(byName);
  const references = db
    .query<{ id: number; table: string; from: string; to: string }, [string]>(
      'SELECT id, "table", "from", "to" FROM pragma_foreign_key_list(?) ORDER BY id, seq',
    )
    .all(name);
  const foreignKeys = [...new Set(references.map((r) => r.id))]
    .map((id) => {
      const parts = references.filter((r) => r.id === id);
      return { from: parts.map((r) => r.from), table: parts[0]?.table ?? "", to: parts.map((r) => r.to) };
    })
    .sort((a, b) => a.from.join().localeCompare(b.from.join()));
  const createSql =
    db.query<{ sql: string }, [string]>("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?").get(name)?.sql ?? "";
  const checks = [...createSql.matchAll(/CONSTRAINT\s+["`]?(\w+)["`]?\s+CHECK/g)].map((m) => m[1] ?? "").sort();
  return { columns, indexes, foreignKeys, checks };
}

const TABLES = Object.values(schema).flatMap((value): [string, SQLiteTable][] =>
  is(value, SQLiteTable) ? [[getTableName(value), value]] : [],
);

/** Runs `check` on the database a fresh store creates. */
function withMigratedDatabase(check: (db: Database) => void): void {
  using dir = tempDir();
  const path = join(dir.path, "umbra.db");
  createSqliteStore(path).close();
  using db = new Database(path, { readonly: true });
  check(db);
}

describe("schema and migrations agree", () => {
  test("the schema declares tables", () => {
    expect(TABLES.map(([name]) => name)).toContain("accounts");
  });

  test("the database has exactly the schema's tables, besides drizzle's bookkeeping", () => {
    withMigratedDatabase((db) => {
      const tables = db
        .query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .all()
        .map((t) => t.name);
      expect(tables).toEqual(["__drizzle_migrations", ...TABLES.map(([name]) => name)].sort());
    });
  });

  test.each(TABLES)("table %s has the columns, indexes, foreign keys and checks of the schema", (name, table) => {
    withMigratedDatabase((db) => {
      expect(actual(db, name)).toEqual(declared(table));
    });
  });
});

describe("upgrading a database made by earlier migrations", () => {
  test("0002 (ledger ids without AUTOINCREMENT) keeps every entry and id; new ids are larger; no sequence row", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    {
      // The database as the coordinator left it before 0002: the first two migrations, marked applied.
      using db = new Database(path, { create: true, strict: true });
      applyMigrations(db, MIGRATIONS.slice(0, 2));
      db.exec("INSERT INTO accounts (id, name, created_at) VALUES ('acct-1', 'a', 1)");
      db.exec("INSERT INTO balances (account_id, balance_micro_usd, reserved_micro_usd, updated_at) VALUES ('acct-1', 70, 0, 1)");
      // Ids with a gap, as AUTOINCREMENT may leave them.
      db.exec(`INSERT INTO ledger_entries (id, account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
        VALUES (3, 'acct-1', 'credit', 100, 100, NULL, 1), (9, 'acct-1', 'charge', -30, 70, 'req-1', 2)`);
    }
    const store = createSqliteStore(path);
    try {
      expect((await store.accounts.ledger("acct-1", 10)).map((e) => [e.id, e.amount, e.balanceAfter, e.requestId])).toEqual([
        [9, -30, 70, "req-1"],
        [3, 100, 100, null],
      ]);
      await store.accounts.credit({ accountId: "acct-1", amount: 5, at: 3 });
      const [newest] = await store.accounts.ledger("acct-1", 1);
      expect(newest?.id).toBeGreaterThan(9);
      expect(newest?.balanceAfter).toBe(75);
    } finally {
      store.close();
    }
    using db = new Database(path, { readonly: true });
    const sequence = db.query("SELECT name FROM sqlite_master WHERE name = 'sqlite_sequence'").get() as { name: string } | null;
    const rows = sequence ? db.query("SELECT count(*) AS n FROM sqlite_sequence WHERE name = 'ledger_entries'").get() : { n: 0 };
    expect(rows).toEqual({ n: 0 });
  });
});

describe("upgrading a database made before 0003 (key permission to link machines, device token expiry)", () => {
  test("existing keys may not link machines; existing device tokens never expire; both keep every other field", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    {
      // The database as the coordinator left it before 0003: the first three migrations, marked applied.
      using db = new Database(path, { create: true, strict: true });
      applyMigrations(db, MIGRATIONS.slice(0, 3));
      db.exec("INSERT INTO accounts (id, name, created_at) VALUES ('acct-1', 'a', 1)");
      db.exec(`INSERT INTO api_keys (id, account_id, key_hash, hint, name, allowed_models, spend_cap_micro_usd, spent_micro_usd,
        rpm, tpm, self_route_only, created_at, revoked_at) VALUES ('key-1', 'acct-1', 'hash-1', 'abcd', 'ci', '["org/model"]',
        500, 20, 60, NULL, 0, 2, NULL)`);
      db.exec(`INSERT INTO provider_tokens (id, account_id, token_hash, hint, created_at, revoked_at)
        VALUES ('pt-1', 'acct-1', 'hash-2', 'wxyz', 3, NULL)`);
    }
    const store = createSqliteStore(path);
    try {
      expect(await store.keys.findByHash("hash-1")).toEqual({
        id: "key-1",
        accountId: "acct-1",
        keyHash: "hash-1",
        hint: "abcd",
        name: "ci",
        allowedModels: ["org/model"],
        spendCap: 500,
        spent: 20,
        rpm: 60,
        tpm: null,
        selfRouteOnly: false,
        linkMachines: false,
        createdAt: 2,
        revokedAt: null,
      });
      expect(await store.providerTokens.findByHash("hash-2")).toEqual({
        id: "pt-1",
        accountId: "acct-1",
        tokenHash: "hash-2",
        hint: "wxyz",
        name: null,
        createdAt: 3,
        expiresAt: null,
        revokedAt: null,
      });
    } finally {
      store.close();
    }
  });
});

describe("upgrading a database made before 0005 (provider token names)", () => {
  test("existing device tokens gain a null name and keep every other field; new tokens may carry one", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    {
      // The database as the coordinator left it before 0005: the first five migrations, marked applied.
      using db = new Database(path, { create: true, strict: true });
      applyMigrations(db, MIGRATIONS.slice(0, 5));
      db.exec("INSERT INTO accounts (id, name, created_at) VALUES ('acct-1', 'a', 1)");
      db.exec(`INSERT INTO provider_tokens (id, account_id, token_hash, hint, created_at, expires_at, revoked_at)
        VALUES ('pt-1', 'acct-1', 'hash-1', 'wxyz', 3, 90, NULL), ('pt-2', 'acct-1', 'hash-2', 'abcd', 4, NULL, 5)`);
    }
    const store = createSqliteStore(path);
    try {
      await store.providerTokens.create({
        id: "pt-3",
        accountId: "acct-1",
        tokenHash: "hash-3",
        hint: "efgh",
        name: "Mac mini",
        createdAt: 6,
      });
      expect(await store.providerTokens.list("acct-1")).toEqual([
        { id: "pt-1", accountId: "acct-1", tokenHash: "hash-1", hint: "wxyz", name: null, createdAt: 3, expiresAt: 90, revokedAt: null },
        { id: "pt-2", accountId: "acct-1", tokenHash: "hash-2", hint: "abcd", name: null, createdAt: 4, expiresAt: null, revokedAt: 5 },
        {
          id: "pt-3",
          accountId: "acct-1",
          tokenHash: "hash-3",
          hint: "efgh",
          name: "Mac mini",
          createdAt: 6,
          expiresAt: null,
          revokedAt: null,
        },
      ]);
    } finally {
      store.close();
    }
  });
});
