/**
 * Event-loop stalls of the coordinator under load (issue 25 point 4): the chat path of overhead.ts's Umbra
 * side (mock upstream, `serve` with metering and the settlement journal, a provider with signed receipts)
 * driven by bench/load.ts in an open loop at BENCH_RATE (500) req/s, once per checkpoint mode per round:
 * `--sqlite-checkpoints inline` (SQLite's automatic checkpoints on the coordinator's commits, as before)
 * and `worker` (a thread of their own). Around each measured run it reads /metrics:
 * `umbra_event_loop_delay_seconds` (ticks of a 2 ms timer that ran more than 2, 5, 10, 20 ms late, per
 * minute, and the bound of the highest bucket reached) and `umbra_settlement_commit_seconds` (commits
 * over 1, 2 and 5 ms per minute, the largest bucket reached), with the run's latency percentiles.
 * Results: a printed table and bench/results/loop-stall-<timestamp>.json (load averages included).
 * Environment: BENCH_SECONDS (20), BENCH_ROUNDS (2), BENCH_RATE (500), BENCH_WARMUP_SECONDS (5).
 */
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { BUN, ROOT, startCoordinator, startProvider } from "../test/support/processes.ts";
import { benchNumber } from "./lib/env.ts";
import { startJsonServer } from "./lib/json-server.ts";
import { writeResult } from "./lib/results.ts";
import { LIMITS, MODEL, WORDS } from "./overhead-check.ts";

const seconds = benchNumber("BENCH_SECONDS", 20);
const rounds = benchNumber("BENCH_ROUNDS", 2);
const rate = benchNumber("BENCH_RATE", 500);
const warmupSeconds = benchNumber("BENCH_WARMUP_SECONDS", 5);
const MODES = ["inline", "worker"] as const;

/** Cumulative bucket counts of histogram `name` (no labels but `le`) in a /metrics text. */
function buckets(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(new RegExp(`^${name}_bucket\\{le="([^"]+)"\\} (\\d+)$`, "gm"))) out.set(m[1] as string, Number(m[2]));
  return out;
}

/** Per minute: samples above each bound; and the highest bound reached (its bucket's upper edge). */
function summary(before: Map<string, number>, after: Map<string, number>, bounds: readonly string[], minutes: number) {
  const delta = (le: string) => (after.get(le) ?? 0) - (before.get(le) ?? 0);
  const total = delta("+Inf");
  const above = Object.fromEntries(
    bounds.map((le) => [`above_${Number(le) * 1000}ms_per_min`, Math.round(((total - delta(le)) / minutes) * 10) / 10]),
  );
  const edges = [...after.keys()];
  const reached = edges.find((le, i) => i > 0 && delta(le) === total && delta(edges[i - 1] as string) < total) ?? edges[0];
  return { samples: total, ...above, max_at_most_ms: reached === "+Inf" ? "inf" : Number(reached) * 1000 };
}

async function load(url: string, key: string, runSeconds: number): Promise<Record<string, number>> {
  const options = { url, key, model: MODEL, stream: false, mode: "open", rate, seconds: runSeconds, expect: `alpha${WORDS - 1}` };
  const proc = Bun.spawn([BUN, join(ROOT, "bench/load.ts"), JSON.stringify(options)], { stdout: "pipe", stderr: "inherit" });
  const out = await new Response(proc.stdout).text();
  if ((await proc.exited) !== 0) throw new Error("load generator failed");
  return JSON.parse(out) as Record<string, number>;
}

async function measure(mode: (typeof MODES)[number]) {
  const mock = await startJsonServer("bench/mock-upstream.ts");
  await using coordinator = await startCoordinator({ UMBRA_SQLITE_CHECKPOINTS: mode });
  try {
    const { apiKey } = await coordinator.seed([MODEL], LIMITS, 1_000_000_000_000);
    const earner = await coordinator.admin<{ id: string }>("POST", "/accounts", { name: "bench provider" });
    const { token } = await coordinator.admin<{ token: string }>("POST", "/provider-tokens", { account_id: earner.id });
    const provider = startProvider(
      ["--coordinator", coordinator.url, "--token", token, "--engine", "openai", "--upstream", `${mock.url}/v1`].concat([
        "--model",
        MODEL,
        "--max-concurrency",
        "1024",
        "--dev-attestation",
        "on",
      ]),
    );
    try {
      await provider.connected;
      await load(coordinator.url, apiKey, warmupSeconds);
      const scrape = () => fetch(`${coordinator.url}/metrics`).then((r) => r.text());
      const before = await scrape();
      const loadStart = loadavg()[0] as number;
      const run = await load(coordinator.url, apiKey, seconds);
      const after = await scrape();
      const minutes = seconds / 60;
      const loop = "umbra_event_loop_delay_seconds";
      const commits = "umbra_settlement_commit_seconds";
      return {
        mode,
        rps: run.rps,
        errors: run.errors,
        p50_ms: run.p50_ms,
        p99_ms: run.p99_ms,
        loop_delay: summary(buckets(before, loop), buckets(after, loop), ["0.002", "0.005", "0.01", "0.02"], minutes),
        commits: summary(buckets(before, commits), buckets(after, commits), ["0.001", "0.002", "0.005"], minutes),
        loadavg_1m: [loadStart, loadavg()[0] as number].map((x) => Math.round(x * 100) / 100),
      };
    } finally {
      await provider[Symbol.asyncDispose]();
    }
  } finally {
    mock.proc.kill("SIGKILL");
    await mock.proc.exited;
  }
}

const started = Date.now();
const loadStart = loadavg();
const rows = [];
for (let r = 0; r < rounds; r++) {
  for (const mode of r % 2 === 0 ? MODES : [...MODES].reverse()) {
    const row = { round: r, ...(await measure(mode)) };
    console.log(JSON.stringify(row));
    rows.push(row);
  }
}
const result = {
  benchmark: "loop-stall",
  date: new Date().toISOString(),
  duration_s: Math.round((Date.now() - started) / 1000),
  machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown", loadavg_start: loadStart, loadavg_end: loadavg() },
  settings: { seconds, rounds, rate, warmup_seconds: warmupSeconds },
  rows,
};
console.table(
  rows.map((x) => ({
    mode: x.mode,
    p99_ms: x.p99_ms,
    ...x.loop_delay,
    commits_over_2ms_per_min: (x.commits as Record<string, unknown>).above_2ms_per_min,
  })),
);
console.log(writeResult("loop-stall", result));
