/**
 * `umbra-coordinator migrate` and the admin CLI on a Postgres URL, as real processes: two migrate runs
 * started together on a fresh database both succeed and apply each migration once (the advisory lock);
 * the admin CLI works on the migrated database; a database that cannot be reached exits 1 without the
 * URL's password in anything printed. Skipped, saying so, when no PostgreSQL answers.
 */
import { describe, expect, test } from "bun:test";
import postgres from "postgres";
import { PG_MIGRATIONS } from "../../src/store/pg/migrations/index.ts";
import { describeDatabase } from "../../src/store/pg/open.ts";
import { testDatabase } from "../support/pg.ts";
import { runCoordinator } from "../support/processes.ts";

const SUITE = "umbra-coordinator migrate on Postgres";
const db = await testDatabase([SUITE]);

describe.skipIf(db === undefined)(SUITE, () => {
  test("two migrate processes started together both succeed; each migration is applied once; admin works after", async () => {
    const url = db?.url ?? "";
    const runs = await Promise.all([runCoordinator(["migrate", "--db", url]), runCoordinator(["migrate"], { env: { UMBRA_DB: url } })]);
    const migrated = { code: 0, stdout: `database ${describeDatabase(url)} is migrated\n`, stderr: "" };
    expect(runs).toEqual([migrated, migrated]);
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const rows = await sql<{ created_at: string }[]>`SELECT created_at FROM drizzle.__drizzle_migrations ORDER BY id`;
      expect(rows.map((r) => Number(r.created_at))).toEqual(PG_MIGRATIONS.map((m) => m.when));
    } finally {
      await sql.end({ timeout: 5 });
    }
    const created = await runCoordinator(["admin", "--db", url, "accounts", "create", "--name", "On Postgres"]);
    expect({ code: created.code, stderr: created.stderr }).toEqual({ code: 0, stderr: `database: ${describeDatabase(url)}\n` });
    const { id } = JSON.parse(created.stdout) as { id: string };
    const shown = await runCoordinator(["admin", "--db", url, "accounts", "get", id]);
    expect({ code: shown.code, account: JSON.parse(shown.stdout) }).toEqual({
      code: 0,
      account: expect.objectContaining({ id, name: "On Postgres" }),
    });
  });
});

test("migrate on an unreachable Postgres URL exits 1 naming the database without its password", async () => {
  const url = "postgres://umbra:hunter2-very-secret@127.0.0.1:1/umbra";
  const run = await runCoordinator(["migrate", "--db", url]);
  expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 1, stdout: "" });
  expect(run.stderr).toStartWith(`umbra-coordinator: database ${describeDatabase(url)} is not usable (connection): `);
  expect(run.stderr).not.toContain("hunter2");
});
