/**
 * Cluster mode (issue 21 point 7): what several replicas on Postgres + Redis + NATS cost and give, in one
 * run, governance on and the echo provider as in run.ts (bench/lib/deployment.ts):
 *   throughput  one replica on SQLite against one in cluster mode (target: cluster >= 0.70 of SQLite);
 *   scale       two cluster replicas, a provider on each, the load spread over both, against one replica
 *               with one provider (no target: everything shares the machine's cores);
 *   forwarded   a provider on replica B only, an open loop to A (forwarded over NATS) against B (local)
 *               at 0.3 x one replica's req/s above (<= BENCH_RATE): p50, p99 (target: adds <= 1 ms p50);
 *   hot account issue 21 point 2, measured by bench/hot-account.ts: its target rows are copied in here.
 * Throughput and scale: BENCH_ROUNDS rounds, each on fresh deployments warmed up unmeasured, measured
 * back to back (measuring order flips each round, start order every other round); the figures are the
 * medians of per-round ratios. Forwarded: a fresh deployment per round, samples pooled. Every run also
 * records CPU per request of each process and of the database's own Postgres backends. Skipped, naming
 * the service, when PostgreSQL, Redis or NATS does not answer (bench/lib/cluster-services.ts).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { BUN, ROOT } from "../test/support/processes.ts";
import { backendCpuDelta, backendCpuMicros, missingServices, PG_URL } from "./lib/cluster-services.ts";
import { BUILD, type Deployment, type DeployOptions, deploy } from "./lib/deployment.ts";
import { benchList, benchNumber } from "./lib/env.ts";
import { cpuMicros, cpuMicrosByName, machineBusyMicros } from "./lib/proc.ts";
import { writeResult } from "./lib/results.ts";
import { median, percentile, round } from "./lib/stats.ts";

const seconds = benchNumber("BENCH_SECONDS", 5);
const rounds = benchNumber("BENCH_ROUNDS", 4);
const concurrency = benchNumber("BENCH_CONCURRENCY", 32);
const rateCap = benchNumber("BENCH_RATE", 100);
/** The forwarded section's rate as a share of one cluster replica's throughput measured in this run. */
const RATE_SHARE = 0.3;
const warmup = benchNumber("BENCH_WARMUP_SECONDS", 2);
const cases = benchList("BENCH_CASES", ["non-streaming", "streaming"]).map((c) => c === "streaming");
// Diagnosis: paying accounts the load is spread over (a key each), and the platform fee (coordinator default when unset).
const accounts = benchNumber("BENCH_ACCOUNTS", 1);
const fee = process.env.BENCH_PLATFORM_FEE;
const [journalSetting = "on"] = benchList("BENCH_SETTLEMENT_JOURNAL", ["on"]);
if (journalSetting !== "on" && journalSetting !== "off")
  throw new Error(`BENCH_SETTLEMENT_JOURNAL must be on or off, got ${journalSetting}`);
const journal = journalSetting === "on";
const deployOptions: DeployOptions = { accounts, journal, env: fee === undefined || fee === "" ? {} : { UMBRA_PLATFORM_FEE: fee } };
const sections = benchList("BENCH_CLUSTER_SECTIONS", ["throughput", "scale", "forwarded"]);
const caseName = (stream: boolean) => (stream ? "streaming" : "non-streaming");

interface LoadResult {
  requests: number;
  total_requests: number;
  errors: number;
  /** Failed requests by status and code (bench/load.ts). */
  error_kinds?: Record<string, number>;
  rps: number;
  p50_ms: number;
  p99_ms: number;
  samples_ms?: number[];
  /** CPU per request (us) of each process of the deployment, and of its Postgres backends. */
  cpu_us: Record<string, number>;
}

const missing = await missingServices();
if (missing.length > 0) {
  console.log(`cluster section skipped: no ${missing.join(", no ")} answers`);
  process.exit(0);
}

/** Service processes whose CPU each run records, by command name; Postgres's less the deployment's own backends. */
const SERVICES = ["postgres", "redis-server", "nats-server"] as const;

/**
 * One load generator run against `d` (all its replicas' URLs unless `urls` is given), with CPU per request
 * of each process of the deployment, its Postgres backends, the other Postgres processes (WAL writer,
 * checkpointer; other databases' backends too on a shared host), Redis, NATS, the load generator, and the
 * whole machine (every core's busy time: on a quiet host, what one request costs everything together).
 */
async function load(d: Deployment, options: Record<string, unknown>, urls = d.urls): Promise<LoadResult> {
  const before = Object.fromEntries(Object.entries(d.pids).map(([k, pid]) => [k, cpuMicros(pid)]));
  const pgBefore = d.database ? await backendCpuMicros(d.database) : undefined;
  const servicesBefore = cpuMicrosByName(SERVICES);
  const machineBefore = machineBusyMicros();
  const proc = Bun.spawn(
    [BUN, join(ROOT, "bench/load.ts"), JSON.stringify({ url: urls[0], urls, keys: d.apiKeys, model: BUILD, ...options })],
    {
      stdout: "pipe",
      stderr: "inherit",
    },
  );
  const out = await new Response(proc.stdout).text();
  if ((await proc.exited) !== 0) throw new Error("load generator failed");
  const machine = machineBusyMicros() - machineBefore;
  const servicesAfter = cpuMicrosByName(SERVICES);
  const result = JSON.parse(out) as Omit<LoadResult, "cpu_us">;
  const n = Math.max(1, result.total_requests);
  const cpu_us: Record<string, number> = {};
  for (const [k, pid] of Object.entries(d.pids)) cpu_us[k] = Math.round((cpuMicros(pid) - (before[k] as number)) / n);
  let backends = 0;
  if (d.database && pgBefore) {
    backends = backendCpuDelta(pgBefore, await backendCpuMicros(d.database));
    cpu_us.postgres_backends = Math.round(backends / n);
  }
  for (const name of SERVICES) {
    const used = backendCpuDelta(servicesBefore.get(name) ?? new Map(), servicesAfter.get(name) ?? new Map());
    cpu_us[name === "postgres" ? "postgres_other" : name] = Math.round((name === "postgres" ? used - backends : used) / n);
  }
  cpu_us.load_generator = Math.round(Number(proc.resourceUsage()?.cpuTime.total ?? 0) / n);
  cpu_us.machine = Math.round(machine / n);
  return { ...result, cpu_us };
}

/** Medians per process of each run's CPU per request. */
function cpuMedians(runs: readonly LoadResult[]): Record<string, number> {
  const keys = Object.keys(runs[0]?.cpu_us ?? {});
  return Object.fromEntries(keys.map((k) => [k, Math.round(median(runs.map((x) => x.cpu_us[k] as number)))]));
}

/** Throws unless the deployment's key was charged (metering was on). */
async function charged(d: Deployment): Promise<void> {
  if ((await d.spent()) <= 0) throw new Error(`${d.mode} deployment: the key was charged nothing`);
}

const errorsOf = (...runs: LoadResult[][]) => runs.flat().reduce((n, x) => n + x.errors, 0);

/** Failed requests by what went wrong, per side, summed over the runs (empty sides left out). */
function errorKinds(sides: Record<string, LoadResult[]>): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {};
  for (const [side, runs] of Object.entries(sides)) {
    const kinds: Record<string, number> = {};
    for (const [kind, n] of runs.flatMap((x) => Object.entries(x.error_kinds ?? {}))) kinds[kind] = (kinds[kind] ?? 0) + n;
    if (Object.keys(kinds).length > 0) out[side] = kinds;
  }
  return out;
}

/**
 * Closed-loop rounds of side `a` against side `b` (fresh deployments per round, `start` makes them);
 * per case: each side's median req/s, the median of per-round ratios a/b, CPU per request.
 */
async function closedRounds(
  names: readonly [string, string],
  start: Record<string, () => Promise<Deployment>>,
): Promise<{ stream: boolean; a: LoadResult[]; b: LoadResult[] }[]> {
  const out = cases.map((stream) => ({ stream, a: [] as LoadResult[], b: [] as LoadResult[] }));
  for (let r = 0; r < rounds; r++) {
    const startOrder = (r >> 1) % 2 === 0 ? names : ([names[1], names[0]] as const);
    const started: Record<string, Deployment> = {};
    try {
      for (const name of startOrder) started[name] = await (start[name] as () => Promise<Deployment>)();
      for (const name of names) await (started[name] as Deployment).check();
      for (const [c, stream] of cases.entries()) {
        const common = { stream, mode: "closed", concurrency };
        // Unmeasured first: a process's first seconds run colder code (JIT) than its later ones.
        for (const name of names) await load(started[name] as Deployment, { ...common, seconds: warmup });
        for (const name of r % 2 === 0 ? names : [names[1], names[0]]) {
          const x = await load(started[name] as Deployment, { ...common, seconds });
          (out[c] as (typeof out)[number])[name === names[0] ? "a" : "b"].push(x);
        }
      }
      for (const name of names) await charged(started[name] as Deployment);
    } finally {
      for (const name of Object.keys(started).reverse()) await (started[name] as Deployment)[Symbol.asyncDispose]();
    }
  }
  return out;
}

function ratioRow(names: readonly [string, string], run: { stream: boolean; a: LoadResult[]; b: LoadResult[] }) {
  const ratios = run.a.map((x, i) => x.rps / (run.b[i] as LoadResult).rps);
  return {
    case: caseName(run.stream),
    [`${names[0]}_rps`]: Math.round(median(run.a.map((x) => x.rps))),
    [`${names[1]}_rps`]: Math.round(median(run.b.map((x) => x.rps))),
    ratio: round(median(ratios)),
    round_ratios: ratios.map((x) => round(x)),
    cpu_us_per_request: { [names[0]]: cpuMedians(run.a), [names[1]]: cpuMedians(run.b) },
    errors: errorsOf(run.a, run.b),
    error_kinds: errorKinds({ [names[0]]: run.a, [names[1]]: run.b }),
  };
}

/** Open-loop rounds at `rate` to replica A (forwarded: the provider is on B) and to B (local). */
async function forwardedRounds(rate: number) {
  const runs = cases.map((stream) => ({ stream, forwarded: [] as LoadResult[], local: [] as LoadResult[] }));
  for (let r = 0; r < rounds; r++) {
    await using d = await deploy("cluster", 2, [1], deployOptions);
    await d.check();
    const [a, b] = d.urls as [string, string];
    for (const [c, stream] of cases.entries()) {
      const common = { stream, mode: "open", rate, samples: true };
      for (const url of [a, b]) await load(d, { ...common, seconds: warmup }, [url]);
      for (const side of r % 2 === 0 ? ["forwarded", "local"] : ["local", "forwarded"]) {
        const x = await load(d, { ...common, seconds }, [side === "forwarded" ? a : b]);
        (runs[c] as (typeof runs)[number])[side as "forwarded" | "local"].push(x);
      }
    }
    await charged(d);
  }
  return runs.map((run) => {
    const pooled = (xs: LoadResult[]) => xs.flatMap((x) => x.samples_ms ?? []).sort((p, q) => p - q);
    const f = pooled(run.forwarded);
    const l = pooled(run.local);
    const perRound = run.forwarded.map((x, i) => round(x.p50_ms - (run.local[i] as LoadResult).p50_ms));
    for (const x of [...run.forwarded, ...run.local]) delete x.samples_ms;
    const achieved = { local: median(run.local.map((x) => x.rps)), forwarded: median(run.forwarded.map((x) => x.rps)) };
    return {
      case: caseName(run.stream),
      rate,
      // Below 95% of the rate asked, a side could not keep up: its latency is queueing, not the path's.
      saturated: Math.min(achieved.local, achieved.forwarded) < 0.95 * rate,
      local_p50_ms: round(percentile(l, 50)),
      forwarded_p50_ms: round(percentile(f, 50)),
      added_p50_ms: round(percentile(f, 50) - percentile(l, 50)),
      local_p99_ms: round(percentile(l, 99)),
      forwarded_p99_ms: round(percentile(f, 99)),
      added_p99_ms: round(percentile(f, 99) - percentile(l, 99)),
      round_added_p50_ms: perRound,
      achieved_rps: {
        local: Math.round(median(run.local.map((x) => x.rps))),
        forwarded: Math.round(median(run.forwarded.map((x) => x.rps))),
      },
      cpu_us_per_request: { local: cpuMedians(run.local), forwarded: cpuMedians(run.forwarded) },
      errors: errorsOf(run.forwarded, run.local),
      error_kinds: errorKinds({ forwarded: run.forwarded, local: run.local }),
    };
  });
}

/** Issue 21 point 2's rows, from the latest bench/results/hot-account-*.json (bench/hot-account.ts) when there is one. */
function hotAccountTargets(): Record<string, unknown>[] {
  const dir = join(import.meta.dir, "results");
  const latest = existsSync(dir)
    ? readdirSync(dir)
        .filter((f) => f.startsWith("hot-account-") && f.endsWith(".json"))
        .sort()
        .at(-1)
    : undefined;
  const pending = [
    { target: "hot account (issue 21 point 2)", measured: null, met: null, source: "bench/hot-account.ts: no results file" },
  ];
  if (latest === undefined) return pending;
  const result = JSON.parse(readFileSync(join(dir, latest), "utf8")) as {
    target?: { what?: string; overshoot_zero?: boolean };
    rows?: { phase?: string; mode?: string; admitted_per_s?: number; overshoot?: number }[];
  };
  const batched = (result.rows ?? []).filter((r) => r.phase === "throughput" && r.mode?.startsWith("batched"));
  if (result.target === undefined || batched.length === 0) return pending;
  const best = Math.max(...batched.map((r) => r.admitted_per_s ?? 0));
  const overshootZero = (result.rows ?? []).every((r) => (r.overshoot ?? 0) === 0);
  return [
    {
      target: `hot account (issue 21 point 2): ${result.target.what ?? ">= 3000 admitted/s, overshoot 0"}`,
      measured: best,
      met: best >= 3000 && overshootZero,
      source: `results/${latest}`,
    },
  ];
}

/** A fixed amount of CPU work in this process (ms, median of 5): how fast the host is today, for comparing runs. */
function hostProbeMs(): number {
  const data = new Uint8Array(16 * 1024 * 1024).fill(7);
  const times: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    new Bun.CryptoHasher("sha256").update(data).digest();
    times.push(performance.now() - t);
  }
  return round(median(times), 2);
}

async function serviceVersions(): Promise<Record<string, string>> {
  const sql = postgres(PG_URL, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ v: string }[]>`SELECT current_setting('server_version') AS v`;
    return { postgres: row?.v ?? "unknown" };
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/**
 * The ratio cluster mode could reach on this host if its replica and provider cost what SQLite mode's do
 * and its database's backends cost nothing (the machine's CPU per request less those differences): what
 * Redis, NATS, Postgres's other processes, the kernel's extra loopback traffic and the load generator
 * leave. Both sides saturate the same cores, so throughput goes as the inverse of machine CPU per request.
 */
function withCeiling<T extends { cpu_us_per_request: Record<string, Record<string, number>> }>(row: T) {
  const c = row.cpu_us_per_request.cluster ?? {};
  const q = row.cpu_us_per_request.sqlite ?? {};
  const at = (xs: Record<string, number>, k: string) => xs[k] ?? 0;
  const rest =
    at(c, "machine") -
    (at(c, "coordinator_a") - at(q, "coordinator_a")) -
    (at(c, "provider_a") - at(q, "provider_a")) -
    at(c, "postgres_backends");
  return { ...row, machine_ratio: round(at(q, "machine") / at(c, "machine")), ceiling: round(at(q, "machine") / rest) };
}

// ---- the run ----

const startedAt = Date.now();
const loadStart = loadavg();
const probe = hostProbeMs();
const commit = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: ROOT }).stdout.toString().trim();
const changed = Bun.spawnSync(["git", "status", "--porcelain", "--untracked-files=no", "--", "src", "attestation"], { cwd: ROOT })
  .stdout.toString()
  .split("\n")
  .map((line) => line.slice(3))
  .filter((path) => path.length > 0);

const THROUGHPUT = ["cluster", "sqlite"] as const;
const SCALE = ["two_replicas", "one_replica"] as const;
const throughputRuns = sections.includes("throughput")
  ? await closedRounds(THROUGHPUT, {
      cluster: () => deploy("cluster", 1, [0], deployOptions),
      sqlite: () => deploy("sqlite", 1, [0], deployOptions),
    })
  : [];
const throughput = throughputRuns.map((run) => withCeiling(ratioRow(THROUGHPUT, run)));
// Well below what one cluster replica sustained here (the slowest case), so that latency is not queueing;
// at most BENCH_RATE. Without the throughput section, BENCH_RATE.
const clusterRps = Math.min(...throughputRuns.map((run) => median(run.a.map((x) => x.rps))));
const rate = Number.isFinite(clusterRps) ? Math.max(5, Math.min(rateCap, Math.round(RATE_SHARE * clusterRps))) : rateCap;
const scale = sections.includes("scale")
  ? (
      await closedRounds(SCALE, {
        two_replicas: () => deploy("cluster", 2, [0, 1], deployOptions),
        one_replica: () => deploy("cluster", 1, [0], deployOptions),
      })
    ).map((run) => ratioRow(SCALE, run))
  : [];
const forwarded = sections.includes("forwarded") ? await forwardedRounds(rate) : [];

const targets = [
  ...throughput.map((x) => ({ target: `${x.case}: cluster / SQLite throughput >= 0.70`, measured: x.ratio, met: x.ratio >= 0.7 })),
  ...forwarded.map((x) => ({
    target: `${x.case} at ${rate} req/s: forwarding adds <= 1 ms at p50`,
    measured: x.added_p50_ms,
    met: x.added_p50_ms <= 1 && !x.saturated,
  })),
  ...hotAccountTargets(),
];
const result = {
  benchmark: "cluster",
  date: new Date().toISOString(),
  duration_s: Math.round((Date.now() - startedAt) / 1000),
  machine: {
    cores: cpus().length,
    cpu: cpus()[0]?.model ?? "unknown",
    loadavg_start: loadStart.map((x) => round(x)),
    loadavg_end: loadavg().map((x) => round(x)),
    // SHA-256 of 16 MiB in the benchmark's process: a lower figure is a faster host.
    host_probe_ms: probe,
  },
  versions: { bun: Bun.version, umbra_commit: commit, umbra_uncommitted_changes: changed, ...(await serviceVersions()) },
  settings: {
    seconds,
    rounds,
    concurrency,
    rate_per_second: rate,
    rate_rule: `${RATE_SHARE} x one cluster replica's req/s measured above, at most BENCH_RATE (${rateCap})`,
    warmup_seconds: warmup,
    accounts,
    settlement_journal: journal ? "on (each cluster replica's --settlement-journal in its folder)" : "off",
    platform_fee_percent: fee === undefined || fee === "" ? "default (10)" : Number(fee),
    engine: "echo (sealed, receipts)",
    words_per_request: 16,
  },
  governance:
    "metering on; key with rpm, tpm and a spend cap (never refusing), credit; checked per replica: 200 with x-ratelimit-* headers",
  throughput,
  scale,
  forwarded,
  targets,
};
const pick = (rows: Record<string, unknown>[], keys: string[]) => rows.map((row) => Object.fromEntries(keys.map((k) => [k, row[k]])));
console.log(`Cluster mode (${result.machine.cores} cores, Bun ${Bun.version}, host probe ${probe} ms):`);
if (throughput.length > 0) {
  console.log(`One replica in cluster mode against one on SQLite, closed loop at ${concurrency}, median of ${rounds} rounds:`);
  console.table(pick(throughput, ["case", "cluster_rps", "sqlite_rps", "ratio", "round_ratios", "machine_ratio", "ceiling", "errors"]));
  console.table(throughput.map((x) => ({ case: x.case, ...flatCpu(x.cpu_us_per_request) })));
}
if (scale.length > 0) {
  console.log(`Two replicas (a provider each, load spread) against one, cluster mode, closed loop at ${concurrency}:`);
  console.table(pick(scale, ["case", "two_replicas_rps", "one_replica_rps", "ratio", "round_ratios", "errors"]));
}
if (forwarded.length > 0) {
  console.log(`Forwarded (to A, provider on B) against local (to B), open loop at ${rate} req/s, ${rounds} rounds pooled (ms):`);
  console.table(
    pick(forwarded, [
      "case",
      "saturated",
      "local_p50_ms",
      "forwarded_p50_ms",
      "added_p50_ms",
      "local_p99_ms",
      "forwarded_p99_ms",
      "added_p99_ms",
      "errors",
    ]),
  );
}
for (const row of [...throughput, ...scale, ...forwarded]) {
  if (row.errors > 0) console.log(`${row.case}: failed requests by side and kind: ${JSON.stringify(row.error_kinds)}`);
}
console.log("Targets:");
console.table(targets);
console.log(`written ${writeResult("cluster", result)}`);

function flatCpu(cpu: Record<string, Record<string, number>>): Record<string, number> {
  return Object.fromEntries(Object.entries(cpu).flatMap(([side, xs]) => Object.entries(xs).map(([k, v]) => [`${side} ${k} us`, v])));
}
