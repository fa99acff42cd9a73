/**
 * Preloaded into a process under measurement (`BUN_OPTIONS=--preload bench/lib/heap-dump.ts`, with
 * BENCH_HEAP_DUMP_DIR set): on SIGUSR2 it writes bun:jsc's object counts by type and the JS heap's size
 * to <dir>/<pid>-<n>.json, n counting from 0. With the collector off (BUN_JSC_useGC=0) every object the
 * process made since the last dump is in the difference of two dumps (bench/alloc-tokens.ts).
 */
import { heapStats } from "bun:jsc";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.env.BENCH_HEAP_DUMP_DIR;
let n = 0;
if (dir) {
  process.on("SIGUSR2", () => {
    const counts = heapStats().objectTypeCounts;
    writeFileSync(join(dir, `${process.pid}-${n++}.json`), JSON.stringify({ counts, heapUsed: process.memoryUsage().heapUsed }));
  });
}
