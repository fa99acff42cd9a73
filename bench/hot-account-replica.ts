/**
 * One replica of bench/hot-account.ts, as its own process: its own postgres.js pool (10 connections,
 * the store's default) and money authority (`leased`: balance leases on, each loop admitting on the
 * lease first, as AuthorityReservations does), `concurrency` loops of reserve then settle on one account
 * from `startAt` (epoch ms, shared by both replicas) for `seconds`. A settlement charges `charge` of the
 * hold (the provider earns, the platform takes a 10% fee), as Billing would after an answer.
 * Usage: bun bench/hot-account-replica.ts '<json options>' -> one JSON line: counts by outcome, every
 * reserve latency (ms), the authority's batch counts, CPU time of this process and of its database backends.
 */
import postgres from "postgres";
import { pgMoneyAuthority } from "../src/store/pg/money-authority.ts";
import type { Settlement } from "../src/store/types.ts";
import { cpuMicros } from "./lib/proc.ts";

interface Options {
  url: string;
  replica: string;
  accountId: string;
  keyId: string;
  providerAccountId: string;
  concurrency: number;
  startAt: number;
  seconds: number;
  batchMax: number;
  amount: number;
  /** What a settlement charges; `amount` charges the whole hold. */
  charge: number;
  /** Balance leases on (money-leases.ts); no recalls between the replicas (no NATS here). */
  leased?: boolean;
}

const o = JSON.parse(process.argv[2] ?? "{}") as Options;
const sql = postgres(o.url, { max: 10, onnotice: () => {}, connection: { application_name: o.replica } });
const authority = pgMoneyAuthority(sql, {
  replica: o.replica,
  batchMax: o.batchMax,
  ttlMs: 60_000,
  leases: o.leased ? { enabled: () => true } : false,
});
const outcomes: Record<string, number> = { admitted: 0, settled: 0, funds: 0, quota: 0, unknown: 0, duplicate: 0, errors: 0 };
const latencies: number[] = [];
let charged = 0;
let n = 0;

function settlement(requestId: string): Settlement {
  const fee = Math.ceil(o.charge / 10);
  return {
    requestId,
    accountId: o.accountId,
    keyId: o.keyId,
    charge: o.charge,
    providerAccountId: o.providerAccountId,
    earning: o.charge - fee,
    fee,
    at: Date.now(),
    usage: {
      requestId,
      accountId: o.accountId,
      keyId: o.keyId,
      model: "bench/model",
      buildId: "bench/build",
      providerId: "bench-provider",
      promptTokens: 100,
      cachedTokens: 0,
      completionTokens: 20,
      cost: o.charge,
      startedAt: Date.now(),
      firstContentMs: 1,
      durationMs: 1,
      outcome: "completed",
    },
  };
}

async function loop(until: number): Promise<void> {
  while (performance.now() < until) {
    const requestId = `${o.replica}-${(n++).toString(36)}`;
    try {
      const t = performance.now();
      const request = { requestId, accountId: o.accountId, keyId: o.keyId, amount: o.amount };
      const r = authority.admit(request) ? { hold: request } : await authority.reserve(request);
      latencies.push(performance.now() - t);
      if ("shortfall" in r) {
        outcomes[r.shortfall] = (outcomes[r.shortfall] ?? 0) + 1;
        continue;
      }
      outcomes.admitted = (outcomes.admitted ?? 0) + 1;
      const s = await authority.settle(settlement(requestId));
      if (s.applied && s.hadHold) outcomes.settled = (outcomes.settled ?? 0) + 1;
      charged += s.charged;
    } catch {
      outcomes.errors = (outcomes.errors ?? 0) + 1;
    }
  }
}

/** CPU time of this replica's database backends (the server runs on this machine), from /proc. */
async function backendCpu(): Promise<number> {
  const rows = await sql<{ pid: number }[]>`SELECT pid FROM pg_stat_activity WHERE application_name = ${o.replica}`;
  return rows.reduce((sum, r) => sum + cpuMicros(r.pid), 0);
}

await Promise.all(Array.from({ length: 10 }, () => sql`SELECT pg_sleep(0.01)`)); // the pool opened
await Bun.sleep(Math.max(0, o.startAt - Date.now()));
const dbBefore = await backendCpu();
const own = process.cpuUsage();
const started = performance.now();
await Promise.all(Array.from({ length: o.concurrency }, () => loop(started + o.seconds * 1000)));
const elapsed = (performance.now() - started) / 1000;
const used = process.cpuUsage(own);
await authority.close();
const cpu = { replicaUs: used.user + used.system, databaseUs: (await backendCpu()) - dbBefore };
console.log(JSON.stringify({ replica: o.replica, elapsed, outcomes, charged, latencies, batches: authority.batches(), cpu }));
await sql.end({ timeout: 5 });
