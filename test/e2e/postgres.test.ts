/**
 * `umbra-coordinator migrate`, the admin CLI and `serve` on a Postgres URL, as real processes: two migrate runs
 * started together on a fresh database both succeed and apply each migration once (the advisory lock);
 * the admin CLI works on the migrated database; a database that cannot be reached exits 1 without the
 * URL's password in anything printed; `serve` on the database answers a chat through a real provider and
 * charges it. Skipped, saying so, when no PostgreSQL answers.
 */
import { describe, expect, test } from "bun:test";
import postgres from "postgres";
import { PG_MIGRATIONS } from "../../src/store/pg/migrations/index.ts";
import { describeDatabase } from "../../src/store/pg/open.ts";
import { testDatabase } from "../support/pg.ts";
import { runCoordinator, startCoordinator, startProvider } from "../support/processes.ts";

const SUITE = "umbra-coordinator migrate on Postgres";
const db = await testDatabase([SUITE, "umbra-coordinator serve on Postgres"]);

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

describe.skipIf(db === undefined)("umbra-coordinator serve on Postgres", () => {
  test("a chat through a real provider is answered and charged; the ledger adds up to the balance", async () => {
    const BUILD = "org/pg-build";
    await using coordinator = await startCoordinator({}, { db: db?.url ?? "" });
    const { apiKey, providerToken, accountId } = await coordinator.seed([BUILD], {}, 100_000_000);
    await using provider = startProvider([
      "--coordinator",
      coordinator.url,
      "--token",
      providerToken,
      "--engine",
      "echo",
      "--model",
      BUILD,
    ]);
    await provider.connected;
    const response = await fetch(`${coordinator.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: BUILD, max_tokens: 16, messages: [{ role: "user", content: "hello from postgres" }] }),
    });
    expect(response.status).toBe(200);
    const requestId = response.headers.get("x-request-id");
    await response.json();
    const ledger = await coordinator.admin<{ data: { kind: string; amount_micro_usd: number; request_id: string | null }[] }>(
      "GET",
      `/accounts/${accountId}/ledger?limit=100`,
    );
    expect(ledger.data.filter((e) => e.kind === "charge").map((e) => e.request_id)).toEqual([requestId]);
    const account = await coordinator.admin<{ balance_micro_usd: number }>("GET", `/accounts/${accountId}`);
    expect(account.balance_micro_usd).toBe(ledger.data.reduce((sum, e) => sum + e.amount_micro_usd, 0));
    expect(account.balance_micro_usd).toBeLessThan(100_000_000);
  }, 60_000);
});
