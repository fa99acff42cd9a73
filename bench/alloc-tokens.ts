/**
 * Objects allocated per relayed token in the coordinator and the provider (issue 25 points 3 and 5),
 * counted exactly: both run as processes with the collector off (BUN_JSC_useGC=0) and bench/lib/heap-dump.ts
 * preloaded (their object counts by type on SIGUSR2). The provider runs the openai engine against
 * bench/mock-upstream.ts, which paces its events BENCH_EVENT_DELAY_MS apart: each token is its own read,
 * turn and sealed chunk frame, as from a runtime decoding one token after another (alloc.ts's unpaced
 * mock sends an answer in one or two reads). Governance on (metering, a key with limits), signed receipts.
 * Requests go one at a time from this process (not counted). Per token = (objects per request at 17 words
 * - at 1 word) / 16, less what the process makes idle over the longer answer's extra wall time (measured:
 * windows of 1 and 3 s with nothing to do). BENCH_REQUESTS requests per case after 30 of warm-up.
 * Not a speed benchmark: the counts say what a lever on the per-token path removes (bench/HISTORY.md).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, startCoordinator, startProvider } from "../test/support/processes.ts";
import { BUILD, CREDIT, LIMITS } from "./lib/deployment.ts";
import { benchList, benchNumber } from "./lib/env.ts";
import { type Counts, grownPer, minus } from "./lib/heap-counts.ts";
import { startJsonServer } from "./lib/json-server.ts";
import { writeResult } from "./lib/results.ts";
import { signalledFiles } from "./lib/signalled.ts";

const requests = benchNumber("BENCH_REQUESTS", 100);
const delayMs = benchNumber("BENCH_EVENT_DELAY_MS", 2);
const cases = benchList("BENCH_CASES", ["non-streaming", "streaming"]);
const WORDS = [1, 17] as const;

const dumps = mkdtempSync(join(tmpdir(), "umbra-heap-dumps-"));
const measured = {
  BUN_JSC_useGC: "0",
  BUN_OPTIONS: `--preload ${join(ROOT, "bench/lib/heap-dump.ts")}`,
  BENCH_HEAP_DUMP_DIR: dumps,
};

interface Dump {
  readonly counts: Counts;
  readonly heapUsed: number;
}

/** The process's next dump (its n-th), once written. */
const dump = signalledFiles<Dump>(dumps);

interface Window {
  readonly total: number;
  readonly types: Counts;
  readonly kb: number;
  readonly ms: number;
}

/** Objects per request in each process over `n` requests (or over `idleMs` of nothing when n is 0). */
async function window(pids: readonly number[], n: number, request: () => Promise<void>, idleMs = 0): Promise<Window[]> {
  const before = [];
  for (const pid of pids) before.push(await dump(pid));
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await request();
  if (idleMs > 0) await Bun.sleep(idleMs);
  const ms = (performance.now() - t0) / Math.max(n, 1);
  await Bun.sleep(200); // the answers' last callbacks (settlement, receipt) run
  const out: Window[] = [];
  for (const [i, pid] of pids.entries()) {
    const after = await dump(pid);
    const b = before[i] as Dump;
    const grown = grownPer(b.counts, after.counts, Math.max(n, 1));
    out.push({ ...grown, kb: (after.heapUsed - b.heapUsed) / Math.max(n, 1) / 1024, ms });
  }
  return out;
}

const NAMES = ["coordinator", "provider"] as const;
const perRequest: Record<string, Window[]> = {};
let idlePerMs: number[] | undefined;
for (const words of WORDS) {
  const pacing = { MOCK_WORDS: String(words), MOCK_EVENT_DELAY_MS: String(delayMs) };
  await using mock = await startJsonServer("bench/mock-upstream.ts", pacing);
  await using coordinator = await startCoordinator({ UMBRA_METERING: "on", ...measured });
  const { apiKey, providerToken } = await coordinator.seed([BUILD], LIMITS, CREDIT);
  const engine = ["--engine", "openai", "--upstream", `${mock.url}/v1`, "--model", BUILD];
  const args = ["--coordinator", coordinator.url, "--token", providerToken, ...engine, "--dev-attestation", "on"];
  await using provider = startProvider(args, measured);
  await provider.connected;
  const pids = [coordinator.proc.pid, provider.proc.pid];
  for (const c of cases) {
    const stream = c === "streaming";
    const body = JSON.stringify({
      model: BUILD,
      messages: [{ role: "user", content: "one two three" }],
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    });
    const request = async () => {
      const r = await fetch(`${coordinator.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body,
      });
      const text = await r.text();
      if (r.status !== 200 || (stream && !text.includes("[DONE]"))) throw new Error(`chat: ${r.status}`);
    };
    for (let i = 0; i < 30; i++) await request();
    if (idlePerMs === undefined) {
      const short = await window(pids, 0, request, 1000);
      const long = await window(pids, 0, request, 3000);
      idlePerMs = pids.map((_, i) => ((long[i] as Window).total - (short[i] as Window).total) / 2000);
    }
    perRequest[`${c} ${words}`] = await window(pids, requests, request);
  }
}
rmSync(dumps, { recursive: true, force: true });

const rows = [];
for (const c of cases) {
  const one = perRequest[`${c} 1`] as Window[];
  const many = perRequest[`${c} 17`] as Window[];
  for (const [i, name] of NAMES.entries()) {
    const a = one[i] as Window;
    const b = many[i] as Window;
    const idle = ((idlePerMs as number[])[i] as number) * (b.ms - a.ms);
    rows.push({
      case: c,
      process: name,
      objects_per_token: Number(((b.total - a.total - idle) / 16).toFixed(1)),
      js_heap_kb_per_token: Number(((b.kb - a.kb) / 16).toFixed(2)),
      objects_per_request_1_word: Number(a.total.toFixed(1)),
      idle_objects_per_ms: Number(((idlePerMs as number[])[i] as number).toFixed(2)),
      types_per_token: minus(
        Object.fromEntries(Object.entries(b.types).map(([t, x]) => [t, x / 16])),
        Object.fromEntries(Object.entries(a.types).map(([t, x]) => [t, x / 16])),
      ),
    });
  }
}
console.log(`Objects per relayed token (events ${delayMs} ms apart, ${requests} requests per case, 1 and 17 words):`);
console.table(rows.map(({ types_per_token: _, ...r }) => r));
for (const r of rows) {
  const top = Object.entries(r.types_per_token)
    .slice(0, 10)
    .map(([t, n]) => `${t} ${n}`)
    .join(", ");
  console.log(`${r.case}, ${r.process}: ${top}`);
}
const result = { date: new Date().toISOString(), bun: Bun.version, settings: { requests, delayMs }, rows };
console.log(`written ${writeResult("alloc-tokens", result)}`);
