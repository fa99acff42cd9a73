/**
 * The Postgres migrations: drizzle-kit's journal, the .sql files beside it and the list embedded in the
 * binary agree byte for byte; on a real server, opens racing on a fresh database apply each migration
 * once (the advisory lock), and a later open applies nothing; a database made by earlier migrations
 * gains the provider token name column with nulls.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import postgres from "postgres";
import { PG_MIGRATIONS } from "../../../src/store/pg/migrations/index.ts";
import { applyPgMigrations, describeDatabase, withoutSecret } from "../../../src/store/pg/open.ts";
import { testDatabase } from "../../support/pg.ts";

const FOLDER = join(import.meta.dir, "../../../src/store/pg/migrations");
const journal: { entries: { idx: number; when: number; tag: string }[] } = JSON.parse(
  readFileSync(join(FOLDER, "meta/_journal.json"), "utf8"),
);
const sha256 = (bytes: string | Uint8Array) => new Bun.CryptoHasher("sha256").update(bytes).digest("hex");

describe("embedded Postgres migrations", () => {
  test("every .sql file is in the journal, and PG_MIGRATIONS holds each entry with its file's bytes, in order", () => {
    const files = readdirSync(FOLDER)
      .filter((f) => f.endsWith(".sql"))
      .sort();
    expect(files).toEqual(journal.entries.map((e) => `${e.tag}.sql`).sort());
    expect(PG_MIGRATIONS.map((m) => ({ tag: m.tag, when: m.when, sha256: sha256(m.sql) }))).toEqual(
      journal.entries.map((e) => ({ tag: e.tag, when: e.when, sha256: sha256(readFileSync(join(FOLDER, `${e.tag}.sql`))) })),
    );
  });
});

describe("database URLs in messages", () => {
  test("the password is dropped from the description and from any message that carries it", () => {
    const url = "postgres://umbra:s3cr%21t@db.internal:5432/umbra";
    expect(describeDatabase(url)).toBe("postgres://umbra@db.internal:5432/umbra");
    expect(withoutSecret(url, `failed: ${url} s3cr!t s3cr%21t`)).toBe("failed: postgres://umbra@db.internal:5432/umbra *** ***");
  });
});

const SUITE = "Postgres migrations under the advisory lock";
const db = await testDatabase([SUITE]);

describe.skipIf(db === undefined)(SUITE, () => {
  test("eight racing migrators on a fresh database: each migration applied once, the tables all there", async () => {
    const url = db?.url ?? "";
    const clients = Array.from({ length: 8 }, () => postgres(url, { max: 2, onnotice: () => {} }));
    try {
      const applied = await Promise.all(clients.map((c) => applyPgMigrations(c)));
      expect(applied.flat().sort()).toEqual(PG_MIGRATIONS.map((m) => m.tag).sort());
      const [first] = clients;
      if (!first) throw new Error("no client");
      const rows = await first<{ hash: string }[]>`SELECT hash FROM drizzle.__drizzle_migrations ORDER BY id`;
      expect(rows.map((r) => r.hash)).toEqual(PG_MIGRATIONS.map((m) => sha256(m.sql)));
      expect(await applyPgMigrations(first)).toEqual([]);
      const [accounts] = await first`SELECT to_regclass('public.accounts') AS t`;
      expect(accounts?.t).toBe("accounts");
    } finally {
      await Promise.all(clients.map((c) => c.end({ timeout: 5 })));
    }
  });
});

const UPGRADE = "Postgres: upgrading a database made before 0006 (provider token names)";
const older = await testDatabase([UPGRADE]);

describe.skipIf(older === undefined)(UPGRADE, () => {
  test("existing device tokens gain a null name and keep every other field; new tokens may carry one", async () => {
    if (older === undefined) throw new Error("no database");
    const client = postgres(older.url, { max: 1, onnotice: () => {} });
    try {
      // The database as the coordinator left it before 0006: the first six migrations, marked applied.
      expect(await applyPgMigrations(client, PG_MIGRATIONS.slice(0, 6))).toHaveLength(6);
      await client`INSERT INTO accounts (id, name, created_at) VALUES ('acct-1', 'a', 1)`;
      await client`INSERT INTO provider_tokens (id, account_id, token_hash, hint, created_at, expires_at, revoked_at)
        VALUES ('pt-1', 'acct-1', 'hash-1', 'wxyz', 3, 90, NULL), ('pt-2', 'acct-1', 'hash-2', 'abcd', 4, NULL, 5)`;
    } finally {
      await client.end({ timeout: 5 });
    }
    const store = await older.store();
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
      await store.end();
    }
  });
});
