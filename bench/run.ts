/**
 * `make bench`: the chat path through coordinator + provider (echo engine, separate processes) against
 * a direct call to the same engine, non-streaming and streaming.
 *
 * For each of the four cases: throughput with a closed loop (fixed concurrency), then latency with an
 * open loop at a fixed rate well below saturation. The headline figures are ratios and differences
 * measured in this one run: Umbra/direct throughput, and added p50/p99 latency at the fixed rate.
 * Results are printed as a table and written to bench/results/chat-path-<timestamp>.json.
 *
 * Environment: BENCH_SECONDS (default 5), BENCH_CONCURRENCY (32), BENCH_RATE (200 req/s).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { join } from "node:path";
import { BUN, ROOT, startCoordinator, startProvider } from "../test/support/processes.ts";

interface LoadResult {
  requests: number;
  errors: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
}

const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 32);
const rate = Number(process.env.BENCH_RATE ?? 200);
const BUILD = "bench/echo";

async function load(options: Record<string, unknown>): Promise<LoadResult> {
  const proc = Bun.spawn([BUN, join(ROOT, "bench/load.ts"), JSON.stringify(options)], { stdout: "pipe", stderr: "inherit" });
  const out = await new Response(proc.stdout).text();
  if ((await proc.exited) !== 0) throw new Error("load generator failed");
  return JSON.parse(out) as LoadResult;
}

async function startDirect(): Promise<{ url: string; stop(): void }> {
  const proc = Bun.spawn([BUN, join(ROOT, "bench/echo-server.ts")], { stdout: "pipe", stderr: "inherit" });
  const reader = proc.stdout.getReader();
  const { value } = await reader.read();
  const { url } = JSON.parse(new TextDecoder().decode(value)) as { url: string };
  return { url, stop: () => proc.kill("SIGKILL") };
}

const direct = await startDirect();
await using coordinator = await startCoordinator();
const { apiKey, providerToken } = await coordinator.seed([BUILD], {});
await using provider = startProvider([
  "--coordinator",
  coordinator.url,
  "--token",
  providerToken,
  "--engine",
  "echo",
  "--model",
  BUILD,
  "--max-concurrency",
  "1024",
]);
await provider.connected;

const rows: Record<string, unknown>[] = [];
for (const stream of [false, true]) {
  const common = { model: BUILD, stream, seconds };
  const d = await load({ ...common, url: direct.url, mode: "closed", concurrency });
  const u = await load({ ...common, url: coordinator.url, key: apiKey, mode: "closed", concurrency });
  const dl = await load({ ...common, url: direct.url, mode: "open", rate });
  const ul = await load({ ...common, url: coordinator.url, key: apiKey, mode: "open", rate });
  rows.push({
    case: stream ? "streaming" : "non-streaming",
    direct_rps: Math.round(d.rps),
    umbra_rps: Math.round(u.rps),
    throughput_ratio: Number((u.rps / d.rps).toFixed(3)),
    direct_p50_ms: Number(dl.p50_ms.toFixed(3)),
    umbra_p50_ms: Number(ul.p50_ms.toFixed(3)),
    added_p50_ms: Number((ul.p50_ms - dl.p50_ms).toFixed(3)),
    direct_p99_ms: Number(dl.p99_ms.toFixed(3)),
    umbra_p99_ms: Number(ul.p99_ms.toFixed(3)),
    added_p99_ms: Number((ul.p99_ms - dl.p99_ms).toFixed(3)),
    errors: d.errors + u.errors + dl.errors + ul.errors,
  });
}
direct.stop();

const result = {
  benchmark: "chat-path",
  date: new Date().toISOString(),
  machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown" },
  versions: { bun: Bun.version },
  settings: { seconds, concurrency, rate_per_second: rate, words_per_request: 16, engine: "echo" },
  rows,
};
console.table(rows);
mkdirSync(join(ROOT, "bench/results"), { recursive: true });
const file = join(ROOT, `bench/results/chat-path-${result.date.replace(/[:.]/g, "-")}.json`);
writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
console.log(`written ${file}`);
