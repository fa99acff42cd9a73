/**
 * What an eden collection costs the event loop, in the coordinator and the provider (issue 25 point 2's
 * p99, which is made of these pauses): a fixed part, whatever was allocated, and a part per request
 * served since the previous collection. Both run as processes with bench/lib/eden-timer.ts preloaded (a
 * timed eden collection on SIGUSR2), governance on (metering, a key with limits), the echo engine, signed
 * receipts; bench/echo-server.ts (Bun.serve and the same engine, no coordinator) is the reference. Each
 * round collects, waits 50 ms (as between the collections JavaScriptCore runs under load, so the
 * collector starts with cold caches, as it does then), serves k requests one at a time, and times the
 * next collection: fixed = the median at k = 0, per request = (median at k = BENCH_REQUESTS - fixed) / k.
 * A pause under load is about fixed + per request x the requests since the previous collection.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, startCoordinator, startProvider } from "../test/support/processes.ts";
import { BUILD, CREDIT, LIMITS } from "./lib/deployment.ts";
import { benchList, benchNumber } from "./lib/env.ts";
import { startJsonServer } from "./lib/json-server.ts";
import { writeResult } from "./lib/results.ts";
import { signalledFiles } from "./lib/signalled.ts";
import { median } from "./lib/stats.ts";

const k = benchNumber("BENCH_REQUESTS", 200);
const rounds = benchNumber("BENCH_ROUNDS", 9);
const cases = benchList("BENCH_CASES", ["non-streaming", "streaming"]);

const dir = mkdtempSync(join(tmpdir(), "umbra-eden-"));
const measured = { BUN_OPTIONS: `--preload ${join(ROOT, "bench/lib/eden-timer.ts")}`, BENCH_EDEN_DIR: dir };

interface Eden {
  readonly ms: number;
  readonly heapSize: number;
}

/** Times one eden collection in process `pid` and returns it once written. */
const eden = signalledFiles<Eden>(dir);

/** The median pause in each process after `n` requests since the previous collection. */
async function pauses(pids: readonly number[], n: number, request: () => Promise<void>): Promise<{ ms: number[]; heapMb: number[] }> {
  const ms: number[][] = pids.map(() => []);
  const heap: number[][] = pids.map(() => []);
  for (let r = 0; r < rounds; r++) {
    for (const pid of pids) await eden(pid);
    await Bun.sleep(50);
    for (let i = 0; i < n; i++) await request();
    await Bun.sleep(50); // the answers' last callbacks (settlement, receipt) run
    for (const [i, pid] of pids.entries()) {
      const e = await eden(pid);
      ms[i]?.push(e.ms);
      heap[i]?.push(e.heapSize / 2 ** 20);
    }
  }
  return { ms: ms.map(median), heapMb: heap.map(median) };
}

function chatBody(stream: boolean): string {
  return JSON.stringify({
    model: BUILD,
    messages: [{ role: "user", content: "one two three four five six seven eight" }],
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
}

async function post(url: string, body: string, headers: Record<string, string>, stream: boolean): Promise<void> {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
  const text = await r.text();
  if (r.status !== 200 || (stream && !text.includes("[DONE]"))) throw new Error(`${url}: ${r.status}`);
}

await using coordinator = await startCoordinator({ UMBRA_METERING: "on", ...measured });
const { apiKey, providerToken } = await coordinator.seed([BUILD], LIMITS, CREDIT);
const args = ["--coordinator", coordinator.url, "--token", providerToken, "--engine", "echo", "--model", BUILD];
await using provider = startProvider([...args, "--max-concurrency", "64", "--dev-attestation", "on"], measured);
await provider.connected;
await using reference = await startJsonServer("bench/echo-server.ts", measured);

const rows = [];
try {
  for (const c of cases) {
    const stream = c === "streaming";
    const body = chatBody(stream);
    const chat = () => post(`${coordinator.url}/v1/chat/completions`, body, { authorization: `Bearer ${apiKey}` }, stream);
    const direct = () => post(`${reference.url}/v1/chat/completions`, body, {}, stream);
    for (let i = 0; i < 3000; i++) await chat(); // JIT warm-up
    for (let i = 0; i < 3000; i++) await direct();
    const umbra = [coordinator.proc.pid, provider.proc.pid];
    const idleU = await pauses(umbra, 0, chat);
    const busyU = await pauses(umbra, k, chat);
    const idleR = await pauses([reference.proc.pid], 0, direct);
    const busyR = await pauses([reference.proc.pid], k, direct);
    const row = (name: string, fixed: number, busy: number, heapMb: number) => ({
      case: c,
      process: name,
      fixed_ms: Number(fixed.toFixed(3)),
      per_request_us: Number((((busy - fixed) * 1000) / k).toFixed(2)),
      pause_after_k_ms: Number(busy.toFixed(3)),
      heap_mb: Number(heapMb.toFixed(1)),
    });
    rows.push(row("coordinator", idleU.ms[0] as number, busyU.ms[0] as number, idleU.heapMb[0] as number));
    rows.push(row("provider", idleU.ms[1] as number, busyU.ms[1] as number, idleU.heapMb[1] as number));
    rows.push(row("reference (echo-server.ts)", idleR.ms[0] as number, busyR.ms[0] as number, idleR.heapMb[0] as number));
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const result = {
  date: new Date().toISOString(),
  machine: { cpus: cpus().length, model: cpus()[0]?.model, loadavg: loadavg().map((x) => Number(x.toFixed(2))) },
  bun: Bun.version,
  settings: { requests: k, rounds, cases },
  rows,
};
console.log(`Eden collection pause (median of ${rounds}): fixed, and per request served since the previous collection (k = ${k})`);
console.table(rows);
console.log(writeResult("gc-pause", result));
