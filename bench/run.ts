/**
 * `make bench`: the chat path through coordinator + provider (echo engine, separate processes) against
 * a direct call to the same engine, non-streaming and streaming; and the money path's cost: the same
 * Umbra path with billing and rate limits on (the default) against metering off.
 *
 * For each case: throughput with a closed loop (fixed concurrency), then latency with an open loop at a
 * fixed rate well below saturation. The headline figures are ratios and differences measured in this
 * one run: Umbra/direct throughput, added p50/p99 latency, and metering-on/metering-off throughput.
 * Results are printed as tables and written to bench/results/chat-path-<timestamp>.json.
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
const round = (n: number, digits = 3) => Number(n.toFixed(digits));

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

/** A coordinator and its provider; the key has limits high enough never to refuse, so they run. */
async function startUmbra(metering: boolean) {
  const coordinator = await startCoordinator({ UMBRA_METERING: metering ? "on" : "off" });
  const { apiKey, providerToken } = await coordinator.seed([BUILD], { rpm: 1_000_000_000, tpm: 1_000_000_000_000 }, 1_000_000_000_000);
  const provider = startProvider([
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
  return {
    url: coordinator.url,
    apiKey,
    async [Symbol.asyncDispose]() {
      await provider[Symbol.asyncDispose]();
      await coordinator[Symbol.asyncDispose]();
    },
  };
}

const direct = await startDirect();
const overhead: Record<string, unknown>[] = [];
const metering: Record<string, unknown>[] = [];
{
  await using on = await startUmbra(true);
  await using off = await startUmbra(false);
  for (const stream of [false, true]) {
    const common = { model: BUILD, stream, seconds };
    const d = await load({ ...common, url: direct.url, mode: "closed", concurrency });
    const u = await load({ ...common, url: on.url, key: on.apiKey, mode: "closed", concurrency });
    const uOff = await load({ ...common, url: off.url, key: off.apiKey, mode: "closed", concurrency });
    const dl = await load({ ...common, url: direct.url, mode: "open", rate });
    const ul = await load({ ...common, url: on.url, key: on.apiKey, mode: "open", rate });
    const kind = stream ? "streaming" : "non-streaming";
    overhead.push({
      case: kind,
      direct_rps: Math.round(d.rps),
      umbra_rps: Math.round(u.rps),
      throughput_ratio: round(u.rps / d.rps),
      direct_p50_ms: round(dl.p50_ms),
      umbra_p50_ms: round(ul.p50_ms),
      added_p50_ms: round(ul.p50_ms - dl.p50_ms),
      direct_p99_ms: round(dl.p99_ms),
      umbra_p99_ms: round(ul.p99_ms),
      added_p99_ms: round(ul.p99_ms - dl.p99_ms),
      errors: d.errors + u.errors + dl.errors + ul.errors,
    });
    metering.push({
      case: kind,
      metering_on_rps: Math.round(u.rps),
      metering_off_rps: Math.round(uOff.rps),
      on_off_ratio: round(u.rps / uOff.rps),
      target: ">= 0.9",
      errors: u.errors + uOff.errors,
    });
  }
}
direct.stop();

const result = {
  benchmark: "chat-path",
  date: new Date().toISOString(),
  machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown" },
  versions: { bun: Bun.version },
  settings: { seconds, concurrency, rate_per_second: rate, words_per_request: 16, engine: "echo" },
  overhead,
  metering,
};
console.log("Umbra (metering on) against the engine called directly:");
console.table(overhead);
console.log("Billing and rate limits on against off (same path, same run):");
console.table(metering);
mkdirSync(join(ROOT, "bench/results"), { recursive: true });
const file = join(ROOT, `bench/results/chat-path-${result.date.replace(/[:.]/g, "-")}.json`);
writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
console.log(`written ${file}`);
