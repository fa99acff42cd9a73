/**
 * WAL checkpoints off the event loop (issue 25 point 4): the coordinator's connection gets
 * `wal_autocheckpoint = 0` (its commits then write the WAL and never fsync: `synchronous = NORMAL`) and a
 * Worker thread with a connection of its own checkpoints on a schedule (checkpoint-worker.ts). A crash of
 * the worker is logged and it is restarted after a pause; the coordinator keeps serving meanwhile (the WAL
 * only grows until the next worker's pass). No `journal_size_limit`: it makes the writer that resets the
 * WAL truncate the file, an ftruncate of megabytes on the event loop (5-10 ms stalls measured); the file
 * is reused instead, and only the worker's TRUNCATE past its bound shrinks it. Stopped with the store.
 */
import type { Database } from "bun:sqlite";
import { Worker } from "node:worker_threads";
import type { CheckpointReport, CheckpointWorkerData } from "./checkpoint-worker.ts";

/** Where a worker's crash is told (the app's Logger fits; the store does not import observability/). */
export interface CheckpointLog {
  error(message: string, fields: Readonly<Record<string, string | number>>): void;
}

export interface CheckpointerOptions {
  readonly logger: CheckpointLog;
  /** Between two passive checkpoints, in ms (1000). */
  readonly intervalMs?: number;
  /** WAL size past which a passive pass is followed by a TRUNCATE (64 MiB). */
  readonly truncateAboveBytes?: number;
  /** Pause before a crashed worker is started again, in ms (1000). */
  readonly restartMs?: number;
  /** Told of every pass (tests, diagnosis). */
  readonly onReport?: (report: CheckpointReport) => void;
  /** The worker's script (tests give one that crashes); checkpoint-worker.ts by default. */
  readonly entry?: URL | string;
}

export interface Checkpointer {
  /** Workers started so far (1 + restarts). */
  starts(): number;
  stop(): Promise<void>;
}

/**
 * The worker's script. In the compiled binary it is a second entry point of `bun build --compile` (the
 * Makefile), found by its path under the entry points' common folder, src/; from source, next to this file.
 */
function workerEntry(): URL | string {
  return import.meta.url.includes("$bunfs") ? "./store/sqlite/checkpoint-worker.ts" : new URL("./checkpoint-worker.ts", import.meta.url);
}

/** Switches `client` to worker checkpoints and starts the worker on `path`. */
export function startCheckpointer(client: Database, path: string, options: CheckpointerOptions): Checkpointer {
  client.exec("PRAGMA wal_autocheckpoint = 0");
  const data: CheckpointWorkerData = {
    path,
    intervalMs: options.intervalMs ?? 1000,
    truncateAboveBytes: options.truncateAboveBytes ?? 64 * 1024 * 1024,
    truncateBusyMs: 20,
  };
  const entry = options.entry ?? workerEntry();
  let worker: Worker | undefined;
  let restart: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  let starts = 0;
  const start = (): void => {
    restart = undefined;
    if (stopped) return;
    starts++;
    const w = new Worker(entry, { workerData: data });
    worker = w;
    w.unref();
    w.on("message", (report: CheckpointReport) => options.onReport?.(report));
    w.on("error", (e) => options.logger.error("WAL checkpoint worker failed", { error_name: e instanceof Error ? e.name : "error" }));
    w.on("exit", (code) => {
      if (worker === w) worker = undefined;
      if (stopped) return;
      options.logger.error("WAL checkpoint worker stopped; restarting", { exit_code: code, restart_ms: options.restartMs ?? 1000 });
      restart = setTimeout(start, options.restartMs ?? 1000);
      restart.unref();
    });
  };
  start();
  return {
    starts: () => starts,
    async stop() {
      stopped = true;
      if (restart !== undefined) clearTimeout(restart);
      const w = worker;
      worker = undefined;
      if (!w) return;
      const exited = new Promise<void>((resolve) => w.once("exit", () => resolve()));
      w.postMessage("stop");
      // A worker stuck in a long pass is ended after a second.
      const timer = setTimeout(() => void w.terminate(), 1000);
      await exited;
      clearTimeout(timer);
    },
  };
}
