/**
 * The consumers of the stream relay benchmark (stream-relay.ts), run as their own process so they do
 * not share an event loop with the coordinator. Streaming chat requests through fetch; an SSE event is
 * counted when its terminating blank line arrives. Content is never printed or kept.
 *
 *   closed: `streams` consumers, each requesting streams of `chunks` tokens back to back for `seconds`
 *           (after `warmupSeconds`). Content chunks are the events of a stream other than its usage
 *           chunk, finish chunk and [DONE]. Prints three JSON lines: {"recording":true} when the
 *           measured window opens, chunks and streams per second when it closes, then the errors
 *           once every stream has ended.
 *   hold:   opens `streams` streams at once and waits until each has received its first event; prints
 *           {"opened":...}; then reads every stream to its end and prints {"completed":...}.
 *
 * A stream counts as an error unless it answered 200 and ended with `data: [DONE]`.
 * Usage: bun bench/stream-consumer.ts '<json options>'
 */
interface Options {
  readonly url: string;
  readonly key: string;
  readonly model: string;
  readonly mode: "closed" | "hold";
  readonly streams: number;
  readonly chunks?: number;
  readonly seconds?: number;
  readonly warmupSeconds?: number;
}

const options = JSON.parse(process.argv[2] ?? "{}") as Options;
const chunks = options.chunks ?? 1;
// The echo engine answers with the prompt's words, at most max_tokens of them; the benchmark provider
// sends max_tokens chunks. Either way a stream carries `chunks` content chunks.
const prompt = Array.from({ length: chunks }, (_, i) => `w${i}`).join(" ");
const body = JSON.stringify({ model: options.model, stream: true, max_tokens: chunks, messages: [{ role: "user", content: prompt }] });
const headers = { "content-type": "application/json", authorization: `Bearer ${options.key}` };
const endpoint = `${options.url}/v1/chat/completions`;
/** Events of a completed stream that are not content: the usage chunk, the finish chunk and [DONE]. */
const TAIL_EVENTS = 3;
const DONE = Buffer.from("data: [DONE]\n\n");
const LF = 10;

let recording = false;
let events = 0;
let completed = 0;
let errors = 0;

/** Reads one stream; `onFirst` runs when its first event arrives. Returns true when it ended well. */
async function stream(onFirst?: () => void): Promise<boolean> {
  const response = await fetch(endpoint, { method: "POST", headers, body });
  if (response.status !== 200 || !response.body) {
    await response.arrayBuffer().catch(() => undefined);
    return false;
  }
  const reader = response.body.getReader();
  let previousEndedWithLf = false;
  let first = true;
  let seen = 0;
  // The last bytes of the stream, to check the [DONE] ending without keeping content.
  let tail = Buffer.alloc(0);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const bytes = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
    let n = 0;
    if (previousEndedWithLf && bytes[0] === LF) n++;
    for (let at = bytes.indexOf("\n\n"); at >= 0; at = bytes.indexOf("\n\n", at + 2)) n++;
    previousEndedWithLf = bytes[bytes.length - 1] === LF;
    seen += n;
    if (recording) events += n;
    if (first && n > 0) {
      first = false;
      onFirst?.();
    }
    tail = bytes.length >= DONE.length ? bytes.subarray(bytes.length - DONE.length) : Buffer.concat([tail, bytes]).subarray(-DONE.length);
    tail = Buffer.from(tail);
  }
  const ok = tail.equals(DONE) && seen >= TAIL_EVENTS;
  if (ok && recording) {
    completed++;
    events -= TAIL_EVENTS;
  }
  return ok;
}

async function counted(onFirst?: () => void): Promise<void> {
  let ok = false;
  try {
    ok = await stream(onFirst);
  } catch {
    ok = false;
  }
  if (!ok) errors++;
}

async function closedLoop(seconds: number): Promise<number> {
  const started = performance.now();
  const until = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: options.streams }, async () => {
      while (performance.now() < until) await counted();
    }),
  );
  return (performance.now() - started) / 1000;
}

const print = (o: unknown) => process.stdout.write(`${JSON.stringify(o)}\n`);

if (options.mode === "closed") {
  await closedLoop(options.warmupSeconds ?? 1);
  events = 0;
  completed = 0;
  errors = 0;
  recording = true;
  // Streams still running when the window closes count what they received inside it.
  print({ recording: true });
  const cpu = process.cpuUsage();
  const started = performance.now();
  const until = started + (options.seconds ?? 5) * 1000;
  const loops = Array.from({ length: options.streams }, async () => {
    while (performance.now() < until) await counted();
  });
  await new Promise((resolve) => setTimeout(resolve, until - performance.now()));
  recording = false;
  const elapsed = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  print({
    chunks: events,
    streams_completed: completed,
    seconds: elapsed,
    cpu_seconds: (used.user + used.system) / 1e6,
    chunks_per_second: events / elapsed,
    streams_per_second: completed / elapsed,
  });
  // Streams that straddle the end of the window still have to end well.
  await Promise.all(loops);
  print({ errors });
} else {
  recording = true;
  const started = performance.now();
  let opened = 0;
  let settled = 0;
  // Reported once every stream has either received its first event or failed.
  const report = () => {
    if (++settled === options.streams) print({ opened, failed_before_first: settled - opened, ms: performance.now() - started });
  };
  const all = Array.from({ length: options.streams }, async () => {
    let first = false;
    await counted(() => {
      first = true;
      opened++;
      report();
    });
    if (!first) report();
  });
  await Promise.all(all);
  print({ completed, errors });
}

export {};
