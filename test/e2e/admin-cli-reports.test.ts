/**
 * The report verbs of `umbra-coordinator admin` (`accounts ledger`, `accounts usage`), run as real
 * processes from source on the database of an app running in-process: each prints exactly what its
 * HTTP twin answers (stdout, exit 0), and a refusal prints the same envelope on stderr (exit 1).
 * The three processes run side by side: spawns are the slow part.
 */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { testApp } from "../support/harness.ts";

const ROOT = join(import.meta.dir, "../..");
const BUN = join(ROOT, "node_modules/.bin/bun");
const MIDNIGHT = Date.UTC(2027, 2, 1);

/** One `admin` process on `db`, with no UMBRA_* variables from the test's environment. */
async function cli(db: string, args: readonly string[]) {
  const proc = Bun.spawn([BUN, "src/coordinator/main.ts", "admin", "--db", db, ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  // Every run that opens the database names it first (" (new)" when it creates it); the rest is the verb's.
  const named = [`database: ${db}\n`, `database: ${db} (new)\n`].find((line) => stderr.startsWith(line)) ?? "";
  return { code, stdout, stderr: stderr.slice(named.length) };
}

/** A run as its HTTP twin would answer it: 200 with the printed JSON, or 400 with the printed envelope. */
function asHttp(run: { code: number; stdout: string; stderr: string }) {
  const json = (text: string): unknown => {
    try {
      return JSON.parse(text);
    } catch {
      throw new Error(`not JSON (exit ${run.code}): stdout ${JSON.stringify(run.stdout)}, stderr ${JSON.stringify(run.stderr)}`);
    }
  };
  if (run.code === 0 && run.stderr === "") return { status: 200, body: json(run.stdout) };
  if (run.code === 1 && run.stdout === "") return { status: 400, body: json(run.stderr) };
  return { status: -1, body: run };
}

describe("report verbs: CLI and HTTP twins on one database", () => {
  test("accounts ledger --limit and accounts usage --since --until print the HTTP answers; a bad date is the same refusal", async () => {
    await using t = await testApp();
    const account = await t.admin("POST", "/accounts", { name: "Acme" });
    const id = (account.body as { id: string }).id;
    const keyId = ((await t.admin("POST", "/keys", { account_id: id })).body as { id: string }).id;
    for (const amount of [1_000, 2_000, 3_000]) {
      expect((await t.admin("POST", `/accounts/${id}/credit`, { amount_micro_usd: amount })).status).toBe(200);
    }
    const row = {
      accountId: id,
      model: "org/model",
      buildId: "org/base-build-4bit",
      providerId: null,
      firstContentMs: 30,
      durationMs: 500,
    };
    const rows = [
      { requestId: "r1", keyId, startedAt: MIDNIGHT - 1, promptTokens: 100, cachedTokens: 10, completionTokens: 50, cost: 1_000 },
      { requestId: "r2", keyId: null, startedAt: MIDNIGHT, promptTokens: 7, cachedTokens: 3, completionTokens: 1, cost: 5 },
      { requestId: "r3", keyId, startedAt: MIDNIGHT + 86_400_000, promptTokens: 2, cachedTokens: 0, completionTokens: 2, cost: 4 },
    ];
    for (const r of rows) expect(await t.store.usage.record({ ...row, ...r, outcome: "ok" })).toBe(true);

    const ledgerPath = `/accounts/${id}/ledger?limit=2`;
    const usagePath = `/accounts/${id}/usage?since=2027-02-28&until=2027-03-01`;
    const refusedPath = `/accounts/${id}/usage?since=2027-02-30`;
    const [ledgerRun, usageRun, refusedRun] = await Promise.all([
      cli(t.config.db, ["accounts", "ledger", id, "--limit", "2"]),
      cli(t.config.db, ["accounts", "usage", id, "--since", "2027-02-28", "--until", "2027-03-01"]),
      cli(t.config.db, ["accounts", "usage", id, "--since", "2027-02-30"]),
    ]);
    const http = async (path: string) => {
      const r = await t.admin("GET", path);
      return { status: r.status, body: r.body };
    };

    const ledger = await http(ledgerPath);
    expect((ledger.body as { data: { amount_micro_usd: number }[] }).data.map((e) => e.amount_micro_usd)).toEqual([3_000, 2_000]);
    expect(asHttp(ledgerRun)).toEqual(ledger);

    const usage = await http(usagePath);
    expect((usage.body as { by_day: { day: string }[] }).by_day.map((d) => d.day)).toEqual(["2027-02-28", "2027-03-01"]);
    expect(asHttp(usageRun)).toEqual(usage);

    const refused = await http(refusedPath);
    expect(refused.status).toBe(400);
    expect(asHttp(refusedRun)).toEqual(refused);
  }, 60_000);
});
