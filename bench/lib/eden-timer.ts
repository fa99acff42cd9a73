/**
 * Preloaded into a process under measurement (`BUN_OPTIONS=--preload bench/lib/eden-timer.ts`, with
 * BENCH_EDEN_DIR set): on SIGUSR2 it runs one eden (young-generation) collection on the event loop,
 * timed, and writes its milliseconds and the JS heap's size after it to <dir>/<pid>-<n>.json, n counting
 * from 0 (bench/gc-pause.ts). The collection is the kind JavaScriptCore runs on its own under load; it
 * stops the event loop for as long as it takes.
 */
import { edenGC, heapStats } from "bun:jsc";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.env.BENCH_EDEN_DIR;
let n = 0;
if (dir) {
  process.on("SIGUSR2", () => {
    const t0 = performance.now();
    edenGC();
    const ms = performance.now() - t0;
    const stats = heapStats();
    writeFileSync(join(dir, `${process.pid}-${n++}.json`), JSON.stringify({ ms, heapSize: stats.heapSize, objects: stats.objectCount }));
  });
}
