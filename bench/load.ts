/**
 * Load generator for the chat path, run as its own process so it does not share an event loop with
 * the server under test. Two modes:
 *   closed loop: `concurrency` workers send back to back for `seconds` -> throughput;
 *   open loop:   requests start at a fixed `rate` per second for `seconds` -> latency without queueing.
 * A streamed request is timed to the last byte; it counts as an error unless it ends with [DONE].
 * Usage: bun bench/load.ts '<json options>'  -> prints one JSON result line.
 */
interface Options {
  url: string;
  key?: string;
  model: string;
  stream: boolean;
  mode: "closed" | "open";
  concurrency?: number;
  rate?: number;
  seconds: number;
  warmupSeconds?: number;
  words?: number;
}

const options = JSON.parse(process.argv[2] ?? "{}") as Options;
const content = Array.from({ length: options.words ?? 16 }, (_, i) => `word${i}`).join(" ");
const body = JSON.stringify({ model: options.model, stream: options.stream, messages: [{ role: "user", content }] });
const headers: Record<string, string> = { "content-type": "application/json" };
if (options.key) headers.authorization = `Bearer ${options.key}`;
const endpoint = `${options.url}/v1/chat/completions`;

async function once(): Promise<boolean> {
  const response = await fetch(endpoint, { method: "POST", headers, body });
  const text = await response.text();
  if (response.status !== 200) return false;
  return options.stream ? text.endsWith("data: [DONE]\n\n") : text.includes('"finish_reason"');
}

const latencies: number[] = [];
let errors = 0;
let recording = false;

async function timed(): Promise<void> {
  const start = performance.now();
  let ok = false;
  try {
    ok = await once();
  } catch {
    ok = false;
  }
  if (!recording) return;
  if (ok) latencies.push(performance.now() - start);
  else errors++;
}

async function run(seconds: number): Promise<number> {
  const started = performance.now();
  const until = started + seconds * 1000;
  if (options.mode === "closed") {
    const workers = Array.from({ length: options.concurrency ?? 32 }, async () => {
      while (performance.now() < until) await timed();
    });
    await Promise.all(workers);
  } else {
    const interval = 1000 / (options.rate ?? 100);
    const inflight: Promise<void>[] = [];
    let next = performance.now();
    while (next < until) {
      const wait = next - performance.now();
      if (wait > 0) await Bun.sleep(wait);
      inflight.push(timed());
      next += interval;
    }
    await Promise.all(inflight);
  }
  return (performance.now() - started) / 1000;
}

await run(options.warmupSeconds ?? 1);
recording = true;
const elapsed = await run(options.seconds);
latencies.sort((a, b) => a - b);
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? Number.NaN;
process.stdout.write(
  `${JSON.stringify({ requests: latencies.length, errors, rps: latencies.length / elapsed, p50_ms: pct(50), p99_ms: pct(99) })}\n`,
);

export {};
