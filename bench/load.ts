/**
 * Load generator for the chat path, run as its own process so it does not share an event loop with
 * the server under test. Two modes:
 *   closed loop: `concurrency` workers send back to back for `seconds` -> throughput;
 *   open loop:   requests start at a fixed `rate` per second for `seconds` -> latency without queueing.
 *     Each request has a scheduled start time (start + i / rate); the loop sleeps until the next one is
 *     due and sends every request that is due (so a late timer never lowers the rate; less than 1 ms
 *     early counts as due). Latency is timed
 *     from the actual send; `lag_p99_ms` / `lag_max_ms` say how late sends were against their schedule
 *     (the generator's own delay, the same for every server it drives).
 * A request counts as an error unless it answers 200 and, non-streaming, its body holds a
 * `finish_reason`, or, streaming, it ends with `data: [DONE]`; with `expect` set, the body must also
 * contain that text (e.g. the answer's last word, to prove content arrived). A streamed request is timed
 * to the last byte.
 * Usage: bun bench/load.ts '<json options>'  -> prints one JSON result line:
 *   {requests, total_requests (warm-up included), errors, error_kinds, rps, p50_ms, p99_ms, lag_p99_ms, lag_max_ms, samples_ms?}
 */
interface Options {
  /** Base URL; requests go to `${url}/v1/chat/completions`. */
  url: string;
  /**
   * Several base URLs instead of `url` (e.g. the replicas of one deployment): closed loop, worker i sends
   * to urls[i % n]; open loop, the i-th request goes to urls[i % n].
   */
  urls?: string[];
  /** Sent as `authorization: Bearer <key>`. */
  key?: string;
  /** Several keys instead of `key`, taken in turn as `urls` are (worker or request i: keys[i % n]). */
  keys?: string[];
  /** Extra request headers (e.g. a gateway's routing headers). */
  headers?: Record<string, string>;
  model: string;
  stream: boolean;
  /** Streaming requests ask for `stream_options: {include_usage: true}`. */
  includeUsage?: boolean;
  mode: "closed" | "open";
  concurrency?: number;
  rate?: number;
  seconds: number;
  warmupSeconds?: number;
  words?: number;
  /** Text every successful answer must contain. */
  expect?: string;
  /** Return every measured latency (ms, microsecond precision) as `samples_ms`. */
  samples?: boolean;
}

const options = JSON.parse(process.argv[2] ?? "{}") as Options;
const content = Array.from({ length: options.words ?? 16 }, (_, i) => `word${i}`).join(" ");
const body = JSON.stringify({
  model: options.model,
  stream: options.stream,
  ...(options.stream && options.includeUsage ? { stream_options: { include_usage: true } } : {}),
  messages: [{ role: "user", content }],
});
const base: Record<string, string> = { "content-type": "application/json", ...options.headers };
const keys = options.keys ?? (options.key ? [options.key] : []);
const headerSets = keys.length === 0 ? [base] : keys.map((k) => ({ ...base, authorization: `Bearer ${k}` }));
const endpoints = (options.urls ?? [options.url]).map((u) => `${u}/v1/chat/completions`);
interface Target {
  endpoint: string;
  headers: Record<string, string>;
}
/** Where the i-th worker (closed loop) or request (open loop) sends, with which key. */
const targetOf = (i: number): Target => ({
  endpoint: endpoints[i % endpoints.length] as string,
  headers: headerSets[i % headerSets.length] as Record<string, string>,
});

/** Undefined for a good answer, else what went wrong: the status and the error code, or what the answer lacked. */
async function once({ endpoint, headers }: Target): Promise<string | undefined> {
  const response = await fetch(endpoint, { method: "POST", headers, body });
  const text = await response.text();
  const code = () => /"code":"([a-z_]+)"/.exec(text)?.[1] ?? "no code";
  if (response.status !== 200) return `${response.status} ${code()}`;
  if (options.expect !== undefined && !text.includes(options.expect)) return "200 without the expected text";
  if (options.stream) return text.endsWith("data: [DONE]\n\n") ? undefined : `stream ended early: ${code()}`;
  return text.includes('"finish_reason"') ? undefined : "200 without finish_reason";
}

const latencies: number[] = [];
const lags: number[] = [];
let errors = 0;
/** Failed requests by what went wrong (status and code, or the exception's message). */
const errorKinds: Record<string, number> = {};
/** Every request finished, warm-up included (to divide the servers' CPU time by). */
let finished = 0;
let recording = false;

async function timed(target: Target): Promise<void> {
  const start = performance.now();
  let failure: string | undefined;
  try {
    failure = await once(target);
  } catch (e) {
    failure = e instanceof Error ? e.message : String(e);
  }
  finished++;
  if (!recording) return;
  if (failure === undefined) latencies.push(performance.now() - start);
  else {
    errors++;
    errorKinds[failure] = (errorKinds[failure] ?? 0) + 1;
  }
}

async function run(seconds: number): Promise<number> {
  const started = performance.now();
  const until = started + seconds * 1000;
  if (options.mode === "closed") {
    const workers = Array.from({ length: options.concurrency ?? 32 }, async (_, w) => {
      while (performance.now() < until) await timed(targetOf(w));
    });
    await Promise.all(workers);
  } else {
    const interval = 1000 / (options.rate ?? 100);
    const inflight: Promise<void>[] = [];
    let next = started;
    let sent = 0;
    while (next < until) {
      const wait = next - performance.now();
      // Bun.sleep rounds waits below 1 ms down to nothing, so a request less than 1 ms from its slot
      // is sent at once (never busy-waiting on a core the servers need).
      if (wait >= 1) await Bun.sleep(wait);
      const now = performance.now();
      while (next < now + 1 && next < until) {
        if (recording) lags.push(Math.max(0, now - next));
        inflight.push(timed(targetOf(sent++)));
        next += interval;
      }
    }
    await Promise.all(inflight);
  }
  return (performance.now() - started) / 1000;
}

await run(options.warmupSeconds ?? 1);
recording = true;
const elapsed = await run(options.seconds);
latencies.sort((a, b) => a - b);
lags.sort((a, b) => a - b);
const pct = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))] ?? Number.NaN;
const us = (ms: number) => Math.round(ms * 1000) / 1000;
process.stdout.write(
  `${JSON.stringify({
    requests: latencies.length,
    total_requests: finished,
    errors,
    error_kinds: errorKinds,
    rps: latencies.length / elapsed,
    p50_ms: pct(latencies, 50),
    p99_ms: pct(latencies, 99),
    lag_p99_ms: pct(lags, 99),
    lag_max_ms: lags.at(-1) ?? Number.NaN,
    ...(options.samples ? { samples_ms: latencies.map(us) } : {}),
  })}\n`,
);

export {};
