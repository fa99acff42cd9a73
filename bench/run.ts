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
 * Metering on against off is measured in BENCH_ROUNDS interleaved rounds (on, off, then off, on, ...)
 * after one unmeasured warm-up round each, and the median of the per-round ratios is reported: one pair
 * of runs on a shared machine is noise.
 *
 * Environment: BENCH_SECONDS (default 5), BENCH_CONCURRENCY (32), BENCH_RATE (200 req/s), BENCH_ROUNDS (5).
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
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
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const BUILD = "bench/echo";
const round = (n: number, digits = 3) => Number(n.toFixed(digits));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

/** CPU time (user + system) a process has used so far, in microseconds (Linux /proc). */
function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  // After "pid (comm) ": state is field 0, utime field 11 and stime field 12, in clock ticks (100 per second).
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / 100;
}

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

type Umbra = Awaited<ReturnType<typeof startUmbra>>;

/** Metering on against off in `rounds` interleaved closed-loop rounds; the median ratio is the figure. */
async function meteringRounds(on: Umbra, off: Umbra, stream: boolean, provider: string): Promise<Record<string, unknown>> {
  const common = { model: BUILD, stream, seconds };
  const onRps: number[] = [];
  const offRps: number[] = [];
  const onCpu: number[] = [];
  const offCpu: number[] = [];
  let errors = 0;
  // One unmeasured round each first: a process's first seconds run colder code (JIT) than its later
  // ones, and without this the side measured first would be penalised.
  for (const target of [on, off]) await load({ ...common, url: target.url, key: target.apiKey, mode: "closed", concurrency });
  const before = await settlementBatches(on.url);
  for (let r = 0; r < rounds; r++) {
    // Alternate the order, so that a drift of the machine's load does not favour one side.
    for (const side of r % 2 === 0 ? ["on", "off"] : ["off", "on"]) {
      const target = side === "on" ? on : off;
      const cpu = cpuMicros(target.pid);
      const x = await load({ ...common, url: target.url, key: target.apiKey, mode: "closed", concurrency });
      (side === "on" ? onCpu : offCpu).push((cpuMicros(target.pid) - cpu) / Math.max(1, x.requests));
      (side === "on" ? onRps : offRps).push(x.rps);
      errors += x.errors;
    }
  }
  const after = await settlementBatches(on.url);
  const ratios = onRps.map((x, i) => x / (offRps[i] as number));
  return {
    case: stream ? "streaming" : "non-streaming",
    provider,
    rounds,
    metering_on_rps: Math.round(median(onRps)),
    metering_off_rps: Math.round(median(offRps)),
    on_off_ratio: round(median(ratios)),
    round_ratios: ratios.map((x) => round(x)),
    // The coordinator's CPU per request is far steadier than throughput on a shared machine; off/on is
    // the throughput ratio the coordinator alone would allow if it were the only thing on its core.
    coordinator_cpu_us_on: Math.round(median(onCpu)),
    coordinator_cpu_us_off: Math.round(median(offCpu)),
    cpu_off_on_ratio: round(median(offCpu) / median(onCpu)),
    settlements_per_commit: round((after.settlements - before.settlements) / Math.max(1, after.commits - before.commits), 1),
    target: ">= 0.9",
    errors,
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
    metering.push(await meteringRounds(on, off, stream, "sealed (umbra-provider, echo engine)"));
  }
}
{
  await using on = await startUmbra(true, true);
  await using off = await startUmbra(false, true);
  for (const stream of [false, true]) metering.push(await meteringRounds(on, off, stream, "plaintext (bench/plain-provider.ts)"));
}
direct.stop();

const result = {
  benchmark: "chat-path",
  date: new Date().toISOString(),
  machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown" },
  versions: { bun: Bun.version },
  settings: { seconds, concurrency, rate_per_second: rate, metering_rounds: rounds, words_per_request: 16, engine: "echo" },
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
