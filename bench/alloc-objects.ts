/**
 * Objects allocated per chat request in the coordinator, by type (issue 25 point 3): exact counts, where
 * alloc.ts's bytes from the GC log spread by several KB between rounds. The coordinator runs in this
 * process with the collector off (BUN_JSC_useGC=0, so every object allocated stays counted in bun:jsc's
 * heapStats), on a SQLite file with governance on (metering, a key with limits), and a real echo provider
 * process (sealed hop, signed receipts) connects to it; requests go one at a time over a real socket.
 * What the client side costs (fetch and its response) is measured against a bare Bun.serve in the same
 * way and subtracted. BENCH_REQUESTS requests per case after a warm-up. Also the JS heap's growth per
 * request (process.memoryUsage().heapUsed, which with the collector off only grows): the objects' bytes,
 * without what lives outside the JS heap (buffers' backing stores, native cipher and key contexts), so a
 * lower bound of alloc.ts's figure. Not a speed benchmark: the counts say which lever removes what
 * (bench/HISTORY.md).
 */
import { heapStats } from "bun:jsc";
import { createLogger } from "../src/observability/logger.ts";
import { chatEnv, SEEDED_BUILD } from "../test/support/chat-env.ts";
import { benchList, benchNumber } from "./lib/env.ts";
import { type Counts, grownPer, minus } from "./lib/heap-counts.ts";
import { writeResult } from "./lib/results.ts";

const requests = benchNumber("BENCH_REQUESTS", 500);
const cases = benchList("BENCH_CASES", ["non-streaming", "streaming"]);
if (process.env.BUN_JSC_useGC !== "0") {
  // The collector must be off from the process's start: run again with it off.
  const proc = Bun.spawn([process.execPath, import.meta.path], {
    env: { ...process.env, BUN_JSC_useGC: "0" },
    stdio: ["ignore", "inherit", "inherit"],
  });
  process.exit(await proc.exited);
}

/** Objects per call of `fn` by type (after a warm-up), their total, and the JS heap's bytes per call. */
async function perCall(fn: () => Promise<void>): Promise<{ total: number; types: Counts; bytes: number }> {
  for (let i = 0; i < 50; i++) await fn();
  await Bun.sleep(100);
  const before: Counts = { ...heapStats().objectTypeCounts };
  const heapBefore = process.memoryUsage().heapUsed;
  for (let i = 0; i < requests; i++) await fn();
  await Bun.sleep(100); // the answer's last callbacks (settlement, receipt) run
  const heapAfter = process.memoryUsage().heapUsed;
  const grown = grownPer(before, { ...heapStats().objectTypeCounts }, requests);
  return { ...grown, bytes: (heapAfter - heapBefore) / requests };
}

await using ctx = await chatEnv({
  env: { UMBRA_METERING: "on" },
  logger: createLogger("info", () => {}),
  key: { rpm: 1_000_000, tpm: 1_000_000_000 },
});
await ctx.providerProcess(["--dev-attestation", "on", "--max-concurrency", "64"]);
const bare = Bun.serve({
  port: 0,
  hostname: "127.0.0.1",
  fetch: async (r) => {
    await r.arrayBuffer();
    return new Response("{}", { headers: { "content-type": "application/json" } });
  },
});
const text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen";
const rows = [];
for (const c of cases) {
  const stream = c === "streaming";
  const body = JSON.stringify({
    model: SEEDED_BUILD,
    messages: [{ role: "user", content: text }],
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
  const post = (url: string) => async () => {
    const r = await fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${ctx.apiKey}`, "content-type": "application/json" },
      body,
    });
    await r.arrayBuffer();
    if (r.status !== 200) throw new Error(`${url}: ${r.status}`);
  };
  const client = await perCall(post(`http://127.0.0.1:${bare.port}/`));
  const chat = await perCall(post(`${ctx.server.url}/v1/chat/completions`));
  const types = minus(chat.types, client.types);
  const total = Number((chat.total - client.total).toFixed(1));
  const kb = Number(((chat.bytes - client.bytes) / 1024).toFixed(1));
  rows.push({ case: c, objects_per_request: total, js_heap_kb_per_request: kb, types });
  const top = Object.entries(types)
    .slice(0, 12)
    .map(([t, n]) => `${t} ${n}`)
    .join(", ");
  console.log(`${c}: ${total} objects, ${kb} KB of JS heap per request in the coordinator (${top})`);
}
bare.stop(true);
const result = { date: new Date().toISOString(), bun: Bun.version, requests, rows };
console.log(`written ${writeResult("alloc-objects", result)}`);
