/**
 * The Postgres migrations: drizzle-kit's journal, the .sql files beside it and the list embedded in the
 * binary agree byte for byte; on a real server, opens racing on a fresh database apply each migration
 * once (the advisory lock), and a later open applies nothing.
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
