import { cpus } from "node:os";
import { join } from "node:path";
import { BUN, ROOT, startCoordinator, startProvider } from "../test/support/processes.ts";
import { benchNumber } from "./lib/env.ts";
import { cpuMicros } from "./lib/proc.ts";
import { writeResult } from "./lib/results.ts";
import { median, round } from "./lib/stats.ts";

interface LoadResult {
  requests: number;
  errors: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
}

const seconds = benchNumber("BENCH_SECONDS", 5);
const concurrency = benchNumber("BENCH_CONCURRENCY", 32);
const rate = benchNumber("BENCH_RATE", 200);
const rounds = benchNumber("BENCH_ROUNDS", 8);
const warmup = benchNumber("BENCH_WARMUP_SECONDS", 2);
const BUILD = "bench/echo";

/** Settlements per group commit so far, from the coordinator's own histogram. */
async function settlementBatches(url: string): Promise<{ commits: number; settlements: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? 0);
  return { commits: value("umbra_settlement_batch_size_count"), settlements: value("umbra_settlement_batch_size_sum") };
}

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

/** A provider process without crypto (bench/plain-provider.ts); resolves once it is connected. */
async function startPlainProvider(url: string, token: string) {
  const proc = Bun.spawn([BUN, join(ROOT, "bench/plain-provider.ts"), url, token, BUILD], { stdout: "pipe", stderr: "inherit" });
  const reader = proc.stdout.getReader();
  await reader.read();
  return {
    async [Symbol.asyncDispose]() {
      proc.kill("SIGKILL");
      await proc.exited;
    },
  };
}

/** `umbra-provider start --engine echo` (sealed, with receipts); resolves once it is connected. */
async function startRealProvider(url: string, token: string): Promise<AsyncDisposable> {
  const provider = startProvider([
    "--coordinator",
    url,
    "--token",
    token,
    "--engine",
    "echo",
    "--model",
    BUILD,
    "--max-concurrency",
    "1024",
    // A development identity at trust `hardware`: the provider signs a receipt for every answer and
    // the coordinator verifies it, as in production.
    "--dev-attestation",
    "on",
  ]);
  await provider.connected;
  return provider;
}

/**
 * A coordinator and its provider; the key has limits high enough never to refuse, so they run.
 * `plain`: the provider is bench/plain-provider.ts (no HPKE, no sealed chunks, no receipts), so that
 * what is measured is the coordinator's own work.
 */
async function startUmbra(metering: boolean, plain = false) {
  const coordinator = await startCoordinator({ UMBRA_METERING: metering ? "on" : "off" });
  const { apiKey, providerToken } = await coordinator.seed([BUILD], { rpm: 1_000_000_000, tpm: 1_000_000_000_000 }, 1_000_000_000_000);
  const provider: AsyncDisposable = plain
    ? await startPlainProvider(coordinator.url, providerToken)
    : await startRealProvider(coordinator.url, providerToken);
  return {
    url: coordinator.url,
    pid: coordinator.proc.pid,
    apiKey,
    async [Symbol.asyncDispose]() {
      await provider[Symbol.asyncDispose]();
      await coordinator[Symbol.asyncDispose]();
    },
  };
}

/**
 * Metering on against off in `rounds` rounds; the median of the per-round ratios is the figure. Every
 * round starts a fresh pair of Umbras (coordinator and provider each), warms both up unmeasured, then
 * measures them back to back, and stops them. Fresh processes per round because a process pair carries
 * its own speed: with metering off on both sides, one pair measured over several rounds came out 0.94
 * to 1.12 (2026-11-21, bench/HISTORY.md), wider than the effect being measured. Which side starts first
 * and which is measured first are balanced over every four rounds (start order flips each round,
 * measuring order every other round), so neither favours a side.
 * `calibration`: both sides run with metering off, so the ratio shows the method's own spread.
 */
async function meteringRounds(stream: boolean, plain: boolean, calibration = false): Promise<Record<string, unknown>> {
  const common = { model: BUILD, stream, seconds };
  const onRps: number[] = [];
  const offRps: number[] = [];
  const onCpu: number[] = [];
  const offCpu: number[] = [];
  const perCommit: number[] = [];
  let errors = 0;
  for (let r = 0; r < rounds; r++) {
    await using first = await startUmbra(r % 2 === 0 ? !calibration : false, plain);
    await using second = await startUmbra(r % 2 === 0 ? false : !calibration, plain);
    const on = r % 2 === 0 ? first : second;
    const off = r % 2 === 0 ? second : first;
    // Unmeasured first: a process's first seconds run colder code (JIT) than its later ones.
    for (const target of [first, second])
      await load({ ...common, seconds: warmup, url: target.url, key: target.apiKey, mode: "closed", concurrency });
    const before = await settlementBatches(on.url);
    for (const side of (r >> 1) % 2 === 0 ? ["on", "off"] : ["off", "on"]) {
      const target = side === "on" ? on : off;
      const cpu = cpuMicros(target.pid);
      const x = await load({ ...common, url: target.url, key: target.apiKey, mode: "closed", concurrency });
      (side === "on" ? onCpu : offCpu).push((cpuMicros(target.pid) - cpu) / Math.max(1, x.requests));
      (side === "on" ? onRps : offRps).push(x.rps);
      errors += x.errors;
    }
    const after = await settlementBatches(on.url);
    if (after.commits > before.commits) perCommit.push((after.settlements - before.settlements) / (after.commits - before.commits));
  }
  const ratios = onRps.map((x, i) => x / (offRps[i] as number));
  return {
    case: stream ? "streaming" : "non-streaming",
    provider: plain ? "plaintext (bench/plain-provider.ts)" : "sealed (umbra-provider, echo engine)",
    compared: calibration ? "off / off (calibration)" : "on / off",
    rounds,
    metering_on_rps: Math.round(median(onRps)),
    metering_off_rps: Math.round(median(offRps)),
    on_off_ratio: round(median(ratios)),
    round_ratios: ratios.map((x) => round(x)),
    // The coordinator's CPU per request: what metering costs the coordinator itself; off/on is the
    // throughput ratio the coordinator alone would allow if it were the only thing on its core.
    coordinator_cpu_us_on: Math.round(median(onCpu)),
    coordinator_cpu_us_off: Math.round(median(offCpu)),
    cpu_off_on_ratio: round(median(offCpu) / median(onCpu)),
    settlements_per_commit: perCommit.length > 0 ? round(median(perCommit), 1) : null,
    target: calibration ? "none: the spread of a comparison with no difference" : ">= 0.9",
    errors,
  };
}

const direct = await startDirect();
const overhead: Record<string, unknown>[] = [];
const metering: Record<string, unknown>[] = [];
{
  await using on = await startUmbra(true);
  for (const stream of [false, true]) {
    const common = { model: BUILD, stream, seconds };
    const d = await load({ ...common, url: direct.url, mode: "closed", concurrency });
    const u = await load({ ...common, url: on.url, key: on.apiKey, mode: "closed", concurrency });
    const dl = await load({ ...common, url: direct.url, mode: "open", rate });
    const ul = await load({ ...common, url: on.url, key: on.apiKey, mode: "open", rate });
    overhead.push({
      case: stream ? "streaming" : "non-streaming",
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
  }
}
for (const stream of [false, true]) metering.push(await meteringRounds(stream, false));
metering.push(await meteringRounds(false, false, true));
if (process.env.BENCH_PLAINTEXT === "1") for (const stream of [false, true]) metering.push(await meteringRounds(stream, true));
direct.stop();

const result = {
  benchmark: "chat-path",
  date: new Date().toISOString(),
  machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown" },
  versions: { bun: Bun.version },
  settings: {
    seconds,
    warmup_seconds: warmup,
    concurrency,
    rate_per_second: rate,
    metering_rounds: rounds,
    words_per_request: 16,
    engine: "echo",
  },
  overhead,
  metering,
};
console.log("Umbra (metering on) against the engine called directly:");
console.table(overhead);
console.log("Billing and rate limits on against off (same path, same run):");
console.table(metering);
console.log(`written ${writeResult("chat-path", result)}`);
