/**
 * One hot account on the Postgres money authority (issue 21: >= 3,000 admitted requests per second
 * across two replicas, zero overshoot). Two replica processes (hot-account-replica.ts: a pool and an
 * authority each) run N reserve+settle loops each on one account and key, on a fresh database of the
 * bench's own on the machine's PostgreSQL as it is (settings recorded, none changed). Phases, each on a
 * fresh account, batched (the default, <= 256 calls per round trip) and unbatched (`batchMax` 1):
 *   throughput: a balance that never runs out, `BENCH_SECONDS`, batched at each N of `BENCH_CONCURRENCY`,
 *     unbatched at the first; admitted and settled per second, reserve latency p50/p99, calls per round trip;
 *   exhaustion: a balance covering `BENCH_EXHAUST_HOLDS` whole charges (unbatched: a twentieth),
 *     `BENCH_EXHAUST_SECONDS`, at the first N: exactly that many admitted, the rest refused for funds;
 *   both again with balance leases (admitted in memory, settled against the lease row; no recalls here).
 * After each: the books' invariants (pg-money.ts) and the overshoot (charged beyond the balance: 0).
 * `node_modules/.bin/bun bench/hot-account.ts`; BENCH_PG_URL names the server (the tests' default).
 */
import { randomBytes } from "node:crypto";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { openPostgres } from "../src/store/pg/open.ts";
import { readBooks } from "../test/support/pg-money.ts";
import { BUN, ROOT } from "../test/support/processes.ts";
import { benchNumber, benchNumbers } from "./lib/env.ts";
import { writeResult } from "./lib/results.ts";
import { percentile, round } from "./lib/stats.ts";

const loadAtStart = round(loadavg()[0] ?? 0, 2);
const ADMIN_URL = process.env.BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const seconds = benchNumber("BENCH_SECONDS", 8);
const levels = benchNumbers("BENCH_CONCURRENCY", [64, 256]);
const exhaustHolds = benchNumber("BENCH_EXHAUST_HOLDS", 2000);
const exhaustSeconds = benchNumber("BENCH_EXHAUST_SECONDS", 4);
const AMOUNT = 1000;
const REPLICAS = 2;

interface ReplicaResult {
  elapsed: number;
  outcomes: Record<string, number>;
  charged: number;
  latencies: number[];
  /** `leased`: settlements of requests admitted on balance leases. */
  batches: Record<"reserve" | "settle" | "release" | "leased", { calls: number; roundTrips: number; largest: number; waitedMs: number }>;
  cpu: { replicaUs: number; databaseUs: number };
}

const admin = postgres(ADMIN_URL, { max: 1, connect_timeout: 3, onnotice: () => {} });
try {
  await admin`SELECT 1`;
} catch {
  console.log(`hot-account: skipped, no PostgreSQL at ${new URL(ADMIN_URL).host} (set BENCH_PG_URL)`);
  process.exit(0);
}
const name = `umbra_bench_hot_${randomBytes(5).toString("hex")}`;
await admin.unsafe(`CREATE DATABASE ${name}`);
const url = new URL(ADMIN_URL);
url.pathname = `/${name}`;
const { client: sql } = await openPostgres(url.toString(), { max: 2 });
const server: Record<string, string> = {};
for (const setting of ["server_version", "synchronous_commit", "fsync", "wal_sync_method", "commit_delay", "shared_buffers"]) {
  const [row] = await sql.unsafe(`SHOW ${setting}`);
  server[setting] = String(Object.values(row ?? {})[0]);
}
await sql`INSERT INTO accounts (id, name, jwt_subject, created_at) VALUES ('prov', 'prov', NULL, 0)`;
await sql`INSERT INTO balances (account_id, balance_micro_usd, reserved_micro_usd, updated_at) VALUES ('prov', 0, 0, 0)`;

/** A fresh account with `balance` (credited through the ledger) and a key without a cap. */
async function seed(id: string, balance: number): Promise<void> {
  await sql`INSERT INTO accounts (id, name, jwt_subject, created_at) VALUES (${id}, ${id}, NULL, 0)`;
  await sql`INSERT INTO balances (account_id, balance_micro_usd, reserved_micro_usd, updated_at) VALUES (${id}, ${balance}, 0, 0)`;
  await sql`INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
    VALUES (${id}, 'credit', ${balance}, ${balance}, NULL, 0)`;
  await sql`INSERT INTO api_keys (id, account_id, key_hash, hint, spend_cap_micro_usd, created_at)
    VALUES (${`${id}-key`}, ${id}, ${`hash-${id}`}, 'hint', NULL, 0)`;
}

async function phase(
  phaseName: string,
  batchMax: number,
  concurrency: number,
  balance: number,
  charge: number,
  secs: number,
  leased = false,
) {
  const accountId = `${phaseName}-${batchMax}-${concurrency}${leased ? "-leased" : ""}`;
  await seed(accountId, balance);
  const startAt = Date.now() + 1500;
  const procs = Array.from({ length: REPLICAS }, (_, i) => {
    const options = {
      url: url.toString(),
      replica: `${accountId}-r${i}`,
      accountId,
      keyId: `${accountId}-key`,
      providerAccountId: "prov",
      concurrency,
      startAt,
      seconds: secs,
      batchMax,
      amount: AMOUNT,
      charge,
      leased,
    };
    return Bun.spawn([BUN, join(ROOT, "bench/hot-account-replica.ts"), JSON.stringify(options)], { stdout: "pipe", stderr: "inherit" });
  });
  const results = await Promise.all(
    procs.map(async (p) => {
      const out = await new Response(p.stdout).text();
      if ((await p.exited) !== 0) throw new Error("a replica failed");
      return JSON.parse(out) as ReplicaResult;
    }),
  );
  const books = await readBooks(sql);
  const sum = (pick: (r: ReplicaResult) => number) => results.reduce((s, r) => s + pick(r), 0);
  const elapsed = Math.max(...results.map((r) => r.elapsed));
  const latencies = results.flatMap((r) => r.latencies).sort((a, b) => a - b);
  const account = books.accounts[accountId] ?? { balance: Number.NaN, reserved: Number.NaN };
  const charged = sum((r) => r.charged);
  const admitted = sum((r) => r.outcomes.admitted ?? 0);
  const reserveTrips = sum((r) => r.batches.reserve.roundTrips);
  const settleTrips = sum((r) => r.batches.settle.roundTrips + r.batches.leased.roundTrips);
  return {
    phase: phaseName,
    mode: batchMax === 1 ? "unbatched" : `batched (<= ${batchMax})${leased ? ", leased" : ""}`,
    loops_per_replica: concurrency,
    seconds: round(elapsed, 2),
    admitted,
    admitted_per_s: Math.round(admitted / elapsed),
    settled_per_s: Math.round(sum((r) => r.outcomes.settled ?? 0) / elapsed),
    refused_funds: sum((r) => r.outcomes.funds ?? 0),
    refused_other: sum((r) => (r.outcomes.quota ?? 0) + (r.outcomes.unknown ?? 0) + (r.outcomes.duplicate ?? 0)),
    errors: sum((r) => r.outcomes.errors ?? 0),
    reserve_p50_ms: round(percentile(latencies, 50), 2),
    reserve_p99_ms: round(percentile(latencies, 99), 2),
    reserves_per_round_trip: round(sum((r) => r.batches.reserve.calls) / Math.max(1, reserveTrips), 1),
    settles_per_round_trip: round(sum((r) => r.batches.settle.calls + r.batches.leased.calls) / Math.max(1, settleTrips), 1),
    reserve_round_trip_ms: round(sum((r) => r.batches.reserve.waitedMs) / Math.max(1, reserveTrips), 2),
    settle_round_trip_ms: round(sum((r) => r.batches.settle.waitedMs + r.batches.leased.waitedMs) / Math.max(1, settleTrips), 2),
    // CPU per admitted request (reserve + settle): the replicas' processes and their database backends.
    replica_cpu_us: Math.round(sum((r) => r.cpu.replicaUs) / Math.max(1, admitted)),
    database_cpu_us: Math.round(sum((r) => r.cpu.databaseUs) / Math.max(1, admitted)),
    largest_batch: Math.max(...results.map((r) => Math.max(r.batches.reserve.largest, r.batches.settle.largest, r.batches.leased.largest))),
    balance_start: balance,
    balance_end: account.balance,
    reserved_end: account.reserved,
    // What the account paid beyond what it had: the books' own figure, and the replicas' sum of charges.
    overshoot: Math.max(0, -account.balance, charged - balance),
    charged_matches_books: charged === balance - account.balance,
    // Every admission charged in full: at most balance / hold of them (exactly that once it ran out).
    admitted_within_available: charge < AMOUNT || admitted * AMOUNT <= balance,
    violations: books.violations,
  };
}

const rows: Awaited<ReturnType<typeof phase>>[] = [];
try {
  const first = levels[0] ?? 64;
  for (const n of levels) rows.push(await phase("throughput", 256, n, 1e15, 700, seconds));
  rows.push(await phase("exhaustion", 256, first, exhaustHolds * AMOUNT, AMOUNT, exhaustSeconds));
  // Balance leases (cluster mode's busy keys): admitted in memory, settled against the lease row.
  rows.push(await phase("throughput", 256, first, 1e15, 700, seconds, true));
  rows.push(await phase("exhaustion", 256, first, exhaustHolds * AMOUNT, AMOUNT, exhaustSeconds, true));
  rows.push(await phase("throughput", 1, first, 1e15, 700, seconds));
  // Unbatched admits far fewer per second: a twentieth of the balance runs out in the same time.
  rows.push(await phase("exhaustion", 1, first, Math.ceil(exhaustHolds / 20) * AMOUNT, AMOUNT, exhaustSeconds));
} finally {
  await sql.end({ timeout: 5 });
  await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.end({ timeout: 5 });
}
const met = rows.filter((r) => r.phase === "throughput" && r.mode.startsWith("batched") && r.admitted_per_s >= 3000);
const [load] = loadavg();
const result = {
  benchmark: "hot-account",
  load_average_at_start: loadAtStart,
  load_average_at_end: round(load ?? 0, 2),
  date: new Date().toISOString(),
  machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown" },
  versions: { bun: Bun.version },
  server,
  settings: {
    seconds,
    loops_per_replica: levels,
    replicas: REPLICAS,
    exhaust_holds: exhaustHolds,
    exhaust_seconds: exhaustSeconds,
    hold: AMOUNT,
  },
  target: {
    what: ">= 3000 admitted/s on one account across two replicas, overshoot 0",
    met_at_loops_per_replica: met.map((r) => r.loops_per_replica),
    overshoot_zero: rows.every((r) => r.overshoot === 0 && r.violations.length === 0 && r.admitted_within_available),
  },
  rows,
};
console.log(
  `One hot account, ${REPLICAS} replica processes, PostgreSQL ${server.server_version} (synchronous_commit ${server.synchronous_commit}):`,
);
console.table(rows.map(({ violations, ...r }) => ({ ...r, violations: violations.length })));
console.log(`written ${writeResult("hot-account", result)}`);
