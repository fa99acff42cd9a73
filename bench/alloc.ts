/**
 * Bytes allocated per request (issue 25 point 3), in the coordinator and in the provider, by the method of
 * ../shared/research/perf-profile-2026-11-26.md section 5: both run with BUN_JSC_logGC=1, and what a
 * process allocated over a run is the sum over its collections of (heap at a collection's start - heap
 * after the previous one), divided by the run's requests (a lower bound: what was allocated after the
 * last collection is not counted; runs are long enough for many). One coordinator on SQLite with
 * governance on and one provider (sealed hop, receipts), as run.ts; closed loop at BENCH_CONCURRENCY
 * after an unmeasured warm-up; BENCH_ROUNDS runs per case, medians. Two provider engines (BENCH_ENGINES):
 * `echo`, the first measurement, and `openai` against bench/mock-upstream.ts (16 words, one event
 * each), the engine real providers run: its figure includes the upstream request and the parsing of
 * every event. GC logging slows both processes, so this measures allocation only, never speed.
 */
import { startCoordinator, startProvider } from "../test/support/processes.ts";
import { BUILD, CREDIT, LIMITS } from "./lib/deployment.ts";
import { benchList, benchNumber } from "./lib/env.ts";
import { allocatedKb } from "./lib/gc-log.ts";
import { startJsonServer } from "./lib/json-server.ts";
import { writeResult } from "./lib/results.ts";
import { median } from "./lib/stats.ts";

const seconds = benchNumber("BENCH_SECONDS", 5);
const rounds = benchNumber("BENCH_ROUNDS", 3);
const concurrency = benchNumber("BENCH_CONCURRENCY", 32);
const cases = benchList("BENCH_CASES", ["non-streaming", "streaming"]).map((c) => c === "streaming");
const engines = benchList("BENCH_ENGINES", ["echo", "openai"]);
if (engines.some((e) => e !== "echo" && e !== "openai")) throw new Error(`BENCH_ENGINES takes echo and openai, got ${engines.join(",")}`);
const BUN = process.execPath;
const ROOT = new URL("..", import.meta.url).pathname;
/**
 * Issue 25 point 3: the coordinator's bound, and the provider's figures at the start (main at 49958b9),
 * to halve: echo as this script first measured it (2026-11-26), openai by this script run on that commit
 * (2026-11-27, bench/HISTORY.md).
 */
const COORDINATOR_KB = 15;
const PROVIDER_BASELINE_KB: Record<string, number> = { echo: 29.6, openai: 48.9 };

async function load(url: string, key: string, stream: boolean, secs: number): Promise<number> {
  const options = { url, key, model: BUILD, stream, mode: "closed", concurrency, seconds: secs, warmupSeconds: 0 };
  const proc = Bun.spawn([BUN, `${ROOT}bench/load.ts`, JSON.stringify(options)], { stdout: "pipe", stderr: "inherit" });
  const out = await new Response(proc.stdout).text();
  if ((await proc.exited) !== 0) throw new Error("load generator failed");
  const result = JSON.parse(out) as { total_requests: number; errors: number };
  if (result.errors > 0) throw new Error(`${result.errors} requests failed`);
  return result.total_requests;
}

interface Run {
  readonly requests: number;
  readonly coordinatorKb: number;
  readonly providerKb: number;
  readonly collections: { readonly coordinator: number; readonly provider: number };
}

async function run(stream: boolean, engine: string): Promise<Run> {
  const gc = { BUN_JSC_logGC: "1" };
  await using mock = engine === "openai" ? await startJsonServer("bench/mock-upstream.ts") : undefined;
  await using coordinator = await startCoordinator({ UMBRA_METERING: "on", ...gc });
  const { apiKey, providerToken } = await coordinator.seed([BUILD], LIMITS, CREDIT);
  const engineArgs = mock ? ["--engine", "openai", "--upstream", `${mock.url}/v1`] : ["--engine", engine];
  const args = ["--coordinator", coordinator.url, "--token", providerToken, ...engineArgs, "--model", BUILD];
  await using provider = startProvider([...args, "--max-concurrency", "1024", "--dev-attestation", "on"], gc);
  await provider.connected;
  await load(coordinator.url, apiKey, stream, 2); // warm-up, unmeasured
  const [c0, p0] = [coordinator.log().length, provider.log().length];
  const requests = await load(coordinator.url, apiKey, stream, seconds);
  await Bun.sleep(200); // the last log lines
  const c = allocatedKb(coordinator.log().slice(c0));
  const p = allocatedKb(provider.log().slice(p0));
  return {
    requests,
    coordinatorKb: c.kb / requests,
    providerKb: p.kb / requests,
    collections: { coordinator: c.collections, provider: p.collections },
  };
}

const rows = [];
for (const engine of engines) {
  for (const stream of cases) {
    const runs: Run[] = [];
    for (let r = 0; r < rounds; r++) runs.push(await run(stream, engine));
    rows.push({
      case: stream ? "streaming" : "non-streaming",
      engine,
      coordinator_kb_per_request: Number(median(runs.map((x) => x.coordinatorKb)).toFixed(1)),
      provider_kb_per_request: Number(median(runs.map((x) => x.providerKb)).toFixed(1)),
      requests: Math.round(median(runs.map((x) => x.requests))),
      // Each round's figure: the spread says which differences between runs mean anything.
      coordinator_kb_rounds: runs.map((x) => Number(x.coordinatorKb.toFixed(1))),
      provider_kb_rounds: runs.map((x) => Number(x.providerKb.toFixed(1))),
      collections: runs.map((x) => x.collections),
    });
  }
}
console.log(`KB allocated per request (GC log), closed loop at ${concurrency}, ${seconds} s, median of ${rounds} runs:`);
console.table(rows.map(({ collections: _, ...r }) => r));
const targets = rows.flatMap((r) => {
  const baseline = PROVIDER_BASELINE_KB[r.engine] as number;
  return [
    {
      target: `${r.case}, ${r.engine} provider: coordinator allocates <= ${COORDINATOR_KB} KB per request (issue 25 point 3)`,
      measured: r.coordinator_kb_per_request,
      met: r.coordinator_kb_per_request <= COORDINATOR_KB,
    },
    {
      target: `${r.case}: ${r.engine} provider allocates <= ${baseline / 2} KB per request (half of ${baseline}; issue 25 point 3)`,
      measured: r.provider_kb_per_request,
      met: r.provider_kb_per_request <= baseline / 2,
    },
  ];
});
console.log("Targets:");
console.table(targets);
const { loadavg } = await import("node:os");
const date = new Date().toISOString();
console.log(
  `written ${writeResult("alloc", { date, bun: Bun.version, loadavg: loadavg(), settings: { seconds, rounds, concurrency }, rows, targets } as { date: string })}`,
);
