import { cpus, loadavg, totalmem } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { BUN, type CoordinatorProcess, ROOT, startCoordinator, startProvider } from "../test/support/processes.ts";
import { benchNumber, benchNumbers } from "./lib/env.ts";
import { cpuMicros, rssBytes } from "./lib/proc.ts";
import { writeResult } from "./lib/results.ts";
import { median } from "./lib/stats.ts";

const seconds = benchNumber("BENCH_SECONDS", 5);
const rounds = benchNumber("BENCH_ROUNDS", 3);
const chunks = benchNumber("BENCH_CHUNKS", 1000);
const burstStreams = benchNumbers("BENCH_RELAY_STREAMS", [16, 64, 256]);
const pacedStreams = benchNumbers("BENCH_PACED_STREAMS", [64, 256]);
const pacedTps = benchNumber("BENCH_PACED_TPS", 1000);
const openStreams = benchNumber("BENCH_OPEN_STREAMS", 5000);
const CHUNKS_TARGET = 50_000;
const BYTES_PER_STREAM_TARGET = 100_000;
/** Issue 25 point 5: sealed relay and memory per open stream, the hot path's targets. */
const SEALED_CHUNKS_TARGET_25 = 100_000;
const BYTES_PER_STREAM_TARGET_25 = 10_000;
/** One provider session announces at most this many concurrent attempts (protocol limit). */
const SESSION_MAX = 4096;
const PREFIX = "bench";
const SEALED_BUILD = "bench/echo";

const cpuSeconds = (pid: number) => cpuMicros(pid) / 1e6;

/** The median of `n` RSS samples taken `everyMs` apart (RSS moves with the collector). */
async function sampleRss(pid: number, n = 5, everyMs = 200): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < n; i++) {
    xs.push(rssBytes(pid));
    if (i < n - 1) await Bun.sleep(everyMs);
  }
  return median(xs);
}

/** Reads JSON lines from a process's stdout. */
function jsonLines(proc: Subprocess<"pipe" | "ignore", "pipe", "inherit">): () => Promise<Record<string, unknown>> {
  const reader = proc.stdout.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  return async () => {
    for (;;) {
      const newline = buffered.indexOf("\n");
      if (newline >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        return JSON.parse(line) as Record<string, unknown>;
      }
      const { done, value } = await reader.read();
      if (done) throw new Error("process ended without a result line");
      buffered += decoder.decode(value, { stream: true });
    }
  };
}

/** The consumers, as their own process; fetch's default cap on simultaneous requests is lifted. */
function consumers(options: Record<string, unknown>) {
  const proc = Bun.spawn([BUN, join(ROOT, "bench/stream-consumer.ts"), JSON.stringify(options)], {
    env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
    stdout: "pipe",
    stderr: "inherit",
  });
  return { proc, next: jsonLines(proc) };
}

/** bench/stream-provider.ts; resolves once every connection is welcomed. */
async function benchProvider(url: string, token: string, connections: number, sealed: boolean) {
  const options = { url, token, prefix: PREFIX, pacedTps, connections, maxConcurrency: SESSION_MAX, sealed };
  const proc = Bun.spawn([BUN, join(ROOT, "bench/stream-provider.ts"), JSON.stringify(options)], {
    stdin: "pipe",
    stdout: "pipe",
    stderr: "inherit",
  });
  await jsonLines(proc)();
  return {
    pid: proc.pid,
    release() {
      proc.stdin.write("release\n");
      proc.stdin.flush();
    },
    async [Symbol.asyncDispose]() {
      proc.kill("SIGKILL");
      await proc.exited;
    },
  };
}

async function coordinatorWithKey(): Promise<{ coordinator: CoordinatorProcess; apiKey: string; providerToken: string }> {
  const coordinator = await startCoordinator({ UMBRA_METERING: "on" });
  const { apiKey, providerToken } = await coordinator.seed(
    [`${PREFIX}/burst`, `${PREFIX}/paced`, `${PREFIX}/hold`, SEALED_BUILD],
    { rpm: 1_000_000_000, tpm: 1_000_000_000_000 },
    1_000_000_000_000_000,
  );
  return { coordinator, apiKey, providerToken };
}

type RelayKind = "plaintext burst" | "plaintext paced" | "sealed paced";

interface RelayRow {
  kind: RelayKind;
  provider: string;
  concurrent_streams: number;
  chunks_per_stream: number;
  chunks_per_second: number;
  round_chunks_per_second: number[];
  streams_per_second: number;
  coordinator_cpu_us_per_chunk: number;
  provider_cpu_us_per_chunk: number;
  consumer_cpu_us_per_chunk: number;
  errors: number;
}

/** BENCH_ROUNDS closed-loop rounds at one concurrency; the median round is the figure. */
async function relayRounds(
  kind: RelayKind,
  provider: string,
  url: string,
  key: string,
  model: string,
  streams: number,
  pids: { coordinator: number; provider: number },
): Promise<RelayRow> {
  const rates: number[] = [];
  const perSecond: number[] = [];
  const coordinatorCpu: number[] = [];
  const providerCpu: number[] = [];
  const consumerCpu: number[] = [];
  let errors = 0;
  for (let r = 0; r < rounds; r++) {
    const c = consumers({ url, key, model, mode: "closed", streams, chunks, seconds, warmupSeconds: 1 });
    // CPU is read over the measured window only (the consumers say when it opens and closes).
    await c.next();
    const before = { coordinator: cpuSeconds(pids.coordinator), provider: cpuSeconds(pids.provider) };
    const result = (await c.next()) as { chunks: number; chunks_per_second: number; streams_per_second: number; cpu_seconds: number };
    const coordinatorUsed = cpuSeconds(pids.coordinator) - before.coordinator;
    const providerUsed = cpuSeconds(pids.provider) - before.provider;
    const { errors: roundErrors } = (await c.next()) as { errors: number };
    await c.proc.exited;
    rates.push(result.chunks_per_second);
    perSecond.push(result.streams_per_second);
    const n = Math.max(1, result.chunks);
    coordinatorCpu.push((coordinatorUsed * 1e6) / n);
    providerCpu.push((providerUsed * 1e6) / n);
    consumerCpu.push((result.cpu_seconds * 1e6) / n);
    errors += roundErrors;
  }
  const row: RelayRow = {
    kind,
    provider,
    concurrent_streams: streams,
    chunks_per_stream: chunks,
    chunks_per_second: Math.round(median(rates)),
    round_chunks_per_second: rates.map(Math.round),
    streams_per_second: Number(median(perSecond).toFixed(1)),
    coordinator_cpu_us_per_chunk: Number(median(coordinatorCpu).toFixed(2)),
    provider_cpu_us_per_chunk: Number(median(providerCpu).toFixed(2)),
    consumer_cpu_us_per_chunk: Number(median(consumerCpu).toFixed(2)),
    errors,
  };
  console.error(JSON.stringify(row));
  return row;
}

async function relayPlaintext(): Promise<RelayRow[]> {
  const { coordinator, apiKey, providerToken } = await coordinatorWithKey();
  await using _c = coordinator;
  await using provider = await benchProvider(coordinator.url, providerToken, 1, false);
  const pids = { coordinator: coordinator.proc.pid, provider: provider.pid };
  const rows: RelayRow[] = [];
  for (const streams of burstStreams) {
    const label = "bench/stream-provider.ts, as fast as the socket takes them";
    rows.push(await relayRounds("plaintext burst", label, coordinator.url, apiKey, `${PREFIX}/burst`, streams, pids));
  }
  const label = `bench/stream-provider.ts, ${pacedTps} tokens/s per stream`;
  for (const streams of pacedStreams)
    rows.push(await relayRounds("plaintext paced", label, coordinator.url, apiKey, `${PREFIX}/paced`, streams, pids));
  return rows;
}

async function relaySealed(): Promise<RelayRow[]> {
  const { coordinator, apiKey, providerToken } = await coordinatorWithKey();
  await using _c = coordinator;
  await using provider = startProvider([
    "--coordinator",
    coordinator.url,
    "--token",
    providerToken,
    "--engine",
    "echo",
    "--model",
    SEALED_BUILD,
    "--max-concurrency",
    String(SESSION_MAX),
    "--echo-tokens-per-second",
    String(pacedTps),
  ]);
  await provider.connected;
  const pids = { coordinator: coordinator.proc.pid, provider: provider.proc.pid };
  const rows: RelayRow[] = [];
  const label = `umbra-provider start --engine echo, ${pacedTps} tokens/s per stream`;
  for (const streams of pacedStreams)
    rows.push(await relayRounds("sealed paced", label, coordinator.url, apiKey, SEALED_BUILD, streams, pids));
  return rows;
}

interface MemoryRow {
  session: string;
  open_streams: number;
  opened: number;
  open_ms: number;
  rss_before_mb: number;
  rss_open_mb: number;
  rss_after_release_mb: number;
  bytes_per_stream: number;
  kb_per_stream: number;
  completed: number;
  errors: number;
}

async function openStreamMemory(sealed: boolean): Promise<MemoryRow> {
  const { coordinator, apiKey, providerToken } = await coordinatorWithKey();
  await using _c = coordinator;
  const pid = coordinator.proc.pid;
  await using provider = await benchProvider(coordinator.url, providerToken, Math.ceil(openStreams / SESSION_MAX), sealed);
  const url = coordinator.url;
  // Warm-up: the relay and hold paths run (JIT, lazily built routes), without preallocating for 5,000.
  const warm = consumers({
    url,
    key: apiKey,
    model: `${PREFIX}/burst`,
    mode: "closed",
    streams: 16,
    chunks: 100,
    seconds: 1,
    warmupSeconds: 1,
  });
  await warm.proc.exited;
  const warmHold = consumers({ url, key: apiKey, model: `${PREFIX}/hold`, mode: "hold", streams: 100 });
  await warmHold.next();
  provider.release();
  await warmHold.next();
  await warmHold.proc.exited;
  await Bun.sleep(1000);
  const before = await sampleRss(pid);

  const hold = consumers({ url, key: apiKey, model: `${PREFIX}/hold`, mode: "hold", streams: openStreams });
  const opened = (await hold.next()) as { opened: number; failed_before_first: number; ms: number };
  // Every stream is open and its consumer is reading; let the process settle, then sample.
  await Bun.sleep(1000);
  const open = await sampleRss(pid);
  provider.release();
  const done = (await hold.next()) as { completed: number; errors: number };
  await hold.proc.exited;
  await Bun.sleep(1000);
  const after = await sampleRss(pid);
  const perStream = (open - before) / openStreams;
  const row: MemoryRow = {
    session: sealed ? "sealed (bench/stream-provider.ts, sealed protocol)" : "plaintext (bench/stream-provider.ts)",
    open_streams: openStreams,
    opened: opened.opened,
    open_ms: Math.round(opened.ms),
    rss_before_mb: Number((before / 2 ** 20).toFixed(1)),
    rss_open_mb: Number((open / 2 ** 20).toFixed(1)),
    rss_after_release_mb: Number((after / 2 ** 20).toFixed(1)),
    bytes_per_stream: Math.round(perStream),
    kb_per_stream: Number((perStream / 1000).toFixed(1)),
    completed: done.completed,
    errors: done.errors + opened.failed_before_first,
  };
  console.error(JSON.stringify(row));
  return row;
}

const loadBefore = loadavg().map((x) => Number(x.toFixed(2)));
const relay = [...(await relayPlaintext()), ...(await relaySealed())];
const memory = [await openStreamMemory(false), await openStreamMemory(true)];

const kinds: RelayKind[] = ["plaintext burst", "plaintext paced", "sealed paced"];
const best = Object.fromEntries(
  kinds.map((kind) => {
    const best = Math.max(0, ...relay.filter((r) => r.kind === kind).map((r) => r.chunks_per_second));
    return [kind, { best_chunks_per_second: best, met: best >= CHUNKS_TARGET }];
  }),
);
const worstMemory = Math.max(...memory.map((m) => m.bytes_per_stream));
const result = {
  benchmark: "stream-relay",
  date: new Date().toISOString(),
  machine: {
    cores: cpus().length,
    cpu: cpus()[0]?.model ?? "unknown",
    memory_gb: Math.round(totalmem() / 2 ** 30),
    load_average_before: loadBefore,
  },
  versions: { bun: Bun.version },
  settings: {
    seconds,
    rounds,
    chunks_per_stream: chunks,
    burst_streams: burstStreams,
    paced_streams: pacedStreams,
    paced_tokens_per_second_per_stream: pacedTps,
    open_streams: openStreams,
    metering: "on",
    mode: "development",
  },
  relay,
  memory,
  targets: {
    relay_chunks_per_second: { target: `>= ${CHUNKS_TARGET}`, ...best },
    memory_per_open_stream: {
      target: `<= ${BYTES_PER_STREAM_TARGET} bytes`,
      worst_bytes: worstMemory,
      met: worstMemory <= BYTES_PER_STREAM_TARGET,
    },
    issue_25_sealed_chunks_per_second: {
      target: `>= ${SEALED_CHUNKS_TARGET_25} (sealed paced)`,
      best_chunks_per_second: best["sealed paced"]?.best_chunks_per_second ?? 0,
      met: (best["sealed paced"]?.best_chunks_per_second ?? 0) >= SEALED_CHUNKS_TARGET_25,
    },
    issue_25_memory_per_open_stream: {
      target: `<= ${BYTES_PER_STREAM_TARGET_25} bytes`,
      worst_bytes: worstMemory,
      met: worstMemory <= BYTES_PER_STREAM_TARGET_25,
    },
  },
};

console.log(
  `Relayed content chunks per second (closed loop; median of rounds; CPU per chunk by process; load average before ${loadBefore.join(" ")}):`,
);
console.table(
  relay.map((r) => ({
    case: r.kind,
    streams: r.concurrent_streams,
    "chunks/s": r.chunks_per_second,
    rounds: r.round_chunks_per_second.join(", "),
    "streams/s": r.streams_per_second,
    "coord us/chunk": r.coordinator_cpu_us_per_chunk,
    "provider us/chunk": r.provider_cpu_us_per_chunk,
    "consumer us/chunk": r.consumer_cpu_us_per_chunk,
    errors: r.errors,
  })),
);
console.log(`Coordinator memory with ${openStreams} open streams:`);
console.table(
  memory.map((m) => ({
    session: m.session,
    opened: m.opened,
    "open ms": m.open_ms,
    "RSS before MB": m.rss_before_mb,
    "RSS open MB": m.rss_open_mb,
    "RSS after MB": m.rss_after_release_mb,
    "KB/stream": m.kb_per_stream,
    completed: m.completed,
    errors: m.errors,
  })),
);
const verdict = (met: boolean) => (met ? "met" : "missed");
console.log(
  `targets: relay >= ${CHUNKS_TARGET} chunks/s: ${kinds.map((k) => `${k} ${best[k]?.best_chunks_per_second} (${verdict(best[k]?.met === true)})`).join(", ")}; ` +
    `memory <= 100 KB per open stream: worst ${(worstMemory / 1000).toFixed(1)} KB (${verdict(worstMemory <= BYTES_PER_STREAM_TARGET)})`,
);
console.log(
  `issue 25 point 5: sealed relay >= ${SEALED_CHUNKS_TARGET_25} chunks/s: ${best["sealed paced"]?.best_chunks_per_second} ` +
    `(${verdict((best["sealed paced"]?.best_chunks_per_second ?? 0) >= SEALED_CHUNKS_TARGET_25)}); memory <= 10 KB per open stream: ` +
    `worst ${(worstMemory / 1000).toFixed(1)} KB (${verdict(worstMemory <= BYTES_PER_STREAM_TARGET_25)})`,
);
console.log(`written ${writeResult("stream-relay", result)}`);
