/**
 * The reader side of the preloads that answer SIGUSR2 with a JSON file `<dir>/<pid>-<n>.json`, n counting
 * from 0 per process (lib/heap-dump.ts, lib/eden-timer.ts): signals a process and returns its next file once
 * it parses (a heap walk with the collector off takes a while).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** `signalled(pid)` sends SIGUSR2 to `pid` and resolves with the file its preload writes in `dir`. */
export function signalledFiles<T>(dir: string, waitMs = 30_000): (pid: number) => Promise<T> {
  const sent = new Map<number, number>();
  return async (pid) => {
    const n = sent.get(pid) ?? 0;
    sent.set(pid, n + 1);
    process.kill(pid, "SIGUSR2");
    const file = join(dir, `${pid}-${n}.json`);
    for (const deadline = Date.now() + waitMs; Date.now() < deadline; ) {
      if (existsSync(file)) {
        try {
          return JSON.parse(readFileSync(file, "utf8")) as T;
        } catch {
          // still being written
        }
      }
      await Bun.sleep(5);
    }
    throw new Error(`no file from ${pid} after SIGUSR2 (${file})`);
  };
}
