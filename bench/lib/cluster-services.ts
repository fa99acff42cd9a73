/**
 * The services cluster mode needs, for the benchmarks (bench/cluster.ts): PostgreSQL, Redis and NATS at
 * BENCH_PG_URL, BENCH_REDIS_URL and BENCH_NATS_URL (default: the machine's, on their usual ports).
 * `missingServices` names each one that does not answer (the caller then skips, saying which). The
 * benchmark never touches what it did not make: a database of its own (`umbra_bench_<random>`, dropped
 * after), a key and subject prefix of its own per deployment (`umbra-bench-<random>`, its Redis keys
 * deleted after), and the CPU time of its own database's backends only (`backendCpuMicros`).
 */
import { randomBytes } from "node:crypto";
import { connect } from "@nats-io/transport-node";
import { RedisClient } from "bun";
import postgres from "postgres";
import { removeKeys as removeRedisKeys } from "../../test/support/redis.ts";
import { cpuMicros } from "./proc.ts";

export const PG_URL = process.env.BENCH_PG_URL || "postgres://postgres@127.0.0.1:5432/postgres";
export const REDIS_URL = process.env.BENCH_REDIS_URL || "redis://127.0.0.1:6379";
export const NATS_URL = process.env.BENCH_NATS_URL || "nats://127.0.0.1:4222";

const admin = () => postgres(PG_URL, { max: 1, connect_timeout: 3, onnotice: () => {} });
const host = (url: string) => new URL(url).host;

/** One line per service that does not answer within a few seconds, e.g. "PostgreSQL at 127.0.0.1:5432 (BENCH_PG_URL)". */
export async function missingServices(): Promise<string[]> {
  const pg = (async () => {
    const sql = admin();
    try {
      await sql`SELECT 1`;
      return true;
    } catch {
      return false;
    } finally {
      await sql.end({ timeout: 1 }).catch(() => {});
    }
  })();
  const redis = (async () => {
    const client = new RedisClient(REDIS_URL, { autoReconnect: false, enableOfflineQueue: false, connectionTimeout: 2000 });
    try {
      await client.connect();
      return (await client.send("PING", [])) === "PONG";
    } catch {
      return false;
    } finally {
      client.close();
    }
  })();
  const nats = connect({ servers: NATS_URL, timeout: 2000, reconnect: false }).then(
    async (nc) => {
      await nc.close();
      return true;
    },
    () => false,
  );
  const [p, r, n] = await Promise.all([pg, redis, nats]);
  return [
    ...(p ? [] : [`PostgreSQL at ${host(PG_URL)} (BENCH_PG_URL)`]),
    ...(r ? [] : [`Redis at ${host(REDIS_URL)} (BENCH_REDIS_URL)`]),
    ...(n ? [] : [`NATS at ${host(NATS_URL)} (BENCH_NATS_URL)`]),
  ];
}

export interface BenchDatabase extends AsyncDisposable {
  readonly name: string;
  readonly url: string;
}

/** A new empty database, dropped (with its connections) when disposed. */
export async function benchDatabase(): Promise<BenchDatabase> {
  const name = `umbra_bench_${randomBytes(6).toString("hex")}`;
  const sql = admin();
  try {
    await sql.unsafe(`CREATE DATABASE ${name}`);
  } finally {
    await sql.end({ timeout: 5 });
  }
  const url = new URL(PG_URL);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    async [Symbol.asyncDispose]() {
      const drop = admin();
      try {
        await drop.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await drop.end({ timeout: 5 });
      }
    },
  };
}

/** A Redis key and NATS subject prefix of one deployment's own. */
export const benchPrefix = () => `umbra-bench-${randomBytes(6).toString("hex")}`;

/** Deletes every Redis key of `prefix` (the limiter's keys are `{prefix:subject}:req` and `:tok`). */
export const removeKeys = (prefix: string): Promise<void> => removeRedisKeys(prefix, REDIS_URL);

/** CPU time used so far by each backend connected to database `name` (pid -> microseconds; /proc, same host). */
export async function backendCpuMicros(name: string): Promise<Map<number, number>> {
  const sql = admin();
  try {
    const rows = await sql<{ pid: number }[]>`SELECT pid FROM pg_stat_activity WHERE datname = ${name}`;
    const cpu = new Map<number, number>();
    for (const { pid } of rows) {
      try {
        cpu.set(pid, cpuMicros(pid));
      } catch {
        // ended meanwhile, or not on this host
      }
    }
    return cpu;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** CPU the backends used between two `backendCpuMicros` readings (a backend started meanwhile counts whole). */
export function backendCpuDelta(before: Map<number, number>, after: Map<number, number>): number {
  let total = 0;
  for (const [pid, us] of after) total += us - (before.get(pid) ?? 0);
  return total;
}
