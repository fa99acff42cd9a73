/**
 * The money path alone: reserve, then settle, through Billing, Wallets and the SQLite store on a real
 * database file, with no HTTP and no provider. Closed loop with `in_flight` requests at a time; for each
 * level: settlements per second, settlements per group commit, and CPU per settlement (this process,
 * user + system) split into the store's commits and the rest. Each level twice: `committed` (the store
 * without a settlement journal: every group waits for its SQLite commit, spaced from 1,000 settlements
 * per second) and `journaled` (as the coordinator runs, `--settlement-group-above 0`: every group is
 * appended to the journal and applied to SQLite in larger commits; src/billing/wallets.ts).
 *
 * `node_modules/.bin/bun bench/money.ts` (BENCH_SECONDS per level, default 2). Prints a table and writes
 * bench/results/money-<timestamp>.json.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { Billing, type RequestMoney } from "../src/billing/billing.ts";
import { Wallets } from "../src/billing/wallets.ts";
import { silentLogger } from "../src/observability/logger.ts";
import { createSqliteStore } from "../src/store/sqlite/index.ts";
import type { Settlement } from "../src/store/types.ts";
import { benchNumber } from "./lib/env.ts";
import { writeResult } from "./lib/results.ts";

const seconds = benchNumber("BENCH_SECONDS", 2);
const cpuMicros = () => {
  const c = process.cpuUsage();
  return c.user + c.system;
};

async function level(inFlight: number, journal: boolean): Promise<Record<string, number | string>> {
  const dir = mkdtempSync(join(tmpdir(), "umbra-bench-money-"));
  const store = createSqliteStore(join(dir, "umbra.db"), { journal });
  try {
    await store.accounts.create({ id: "payer", name: "payer", at: 0 });
    await store.accounts.credit({ accountId: "payer", amount: 1e15, at: 0 });
    await store.accounts.create({ id: "provider", name: "provider", at: 0 });
    await store.keys.create({
      id: "key",
      accountId: "payer",
      keyHash: "hash",
      hint: "hint",
      name: null,
      allowedModels: null,
      spendCap: 1e15,
      rpm: null,
      tpm: null,
      selfRouteOnly: false,
      createdAt: 0,
    });
    let commits = 0;
    let storeCpu = 0;
    const settle = store.money.settle.bind(store.money);
    const counted = {
      ...store.money,
      settle: async (batch: readonly Settlement[]) => {
        commits++;
        const before = cpuMicros();
        try {
          return await settle(batch);
        } finally {
          storeCpu += cpuMicros() - before;
        }
      },
    };
    const wallets = new Wallets(counted, silentLogger, journal ? { spacedAbovePerSecond: 0 } : {});
    const billing = new Billing(wallets, { platformFeePercent: 10 });
    const rates = { input: 65_000, output: 130_000, cacheRead: 32_500, source: "model" as const };
    let n = 0;
    const run = async (until: number) => {
      while (performance.now() < until) {
        const hold = await billing.reserve({ accountId: "payer", keyId: "key", spendCap: 1e15, amount: 100 });
        // The request's life between reservation and settlement: at least one event-loop turn.
        await new Promise((resolve) => setImmediate(resolve));
        const money: RequestMoney = {
          requestId: `req_${(n++).toString(36).padStart(9, "0")}`,
          accountId: "payer",
          keyId: "key",
          model: "org/model",
          buildId: "org/model-4bit",
          rates,
          startedAt: 0,
          hold,
          free: false,
        };
        await billing.settle(money, {
          outcome: "completed",
          usage: { prompt_tokens: 10, completion_tokens: 10 },
          providerId: "prov",
          providerAccountId: "provider",
          firstContentMs: 1,
          endedAt: 1,
        });
      }
    };
    // Warm-up, then the measured window.
    await Promise.all(Array.from({ length: inFlight }, () => run(performance.now() + 300)));
    n = 0;
    commits = 0;
    storeCpu = 0;
    const cpu = cpuMicros();
    const started = performance.now();
    await Promise.all(Array.from({ length: inFlight }, () => run(started + seconds * 1000)));
    // Everything durable is also in the database before the clock stops (the journal's applies count).
    await wallets.flushed();
    const elapsed = (performance.now() - started) / 1000;
    const total = cpuMicros() - cpu;
    return {
      mode: journal ? "journaled" : "committed",
      in_flight: inFlight,
      settlements_per_second: Math.round(n / elapsed),
      settlements_per_commit: Number((n / Math.max(1, commits)).toFixed(1)),
      cpu_us_per_settlement: Number((total / n).toFixed(1)),
      store_cpu_us_per_commit: Math.round(storeCpu / Math.max(1, commits)),
      other_cpu_us_per_settlement: Number(((total - storeCpu) / n).toFixed(1)),
    };
  } finally {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const rows: Record<string, number | string>[] = [];
for (const inFlight of [1, 8, 64, 256]) {
  for (const journal of [false, true]) rows.push(await level(inFlight, journal));
}
const result = {
  benchmark: "money",
  date: new Date().toISOString(),
  machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown" },
  versions: { bun: Bun.version },
  settings: { seconds },
  rows,
};
console.log("Money path alone (reserve + settle, SQLite file, closed loop):");
console.table(rows);
console.log(`written ${writeResult("money", result)}`);
