/**
 * The WAL checkpoint worker's body (a Worker thread, src/store/sqlite/checkpointer.ts starts it): its own
 * bun:sqlite connection to the coordinator's database, which runs `PRAGMA wal_checkpoint(PASSIVE)` every
 * `intervalMs` (copies committed frames into the database and fsyncs it, without waiting for or blocking
 * the coordinator's writers; repeated while writes arrived meanwhile), so that the event loop's
 * connection (wal_autocheckpoint=0) never pays a checkpoint's fsyncs. When the WAL file is past
 * `truncateAboveBytes` after a pass (a reader kept it from being reset), one `wal_checkpoint(TRUNCATE)`
 * shrinks it: it waits at most `truncateBusyMs` for the write lock, then holds writers while it copies
 * what is left and truncates. Reports each pass to the coordinator (counts only).
 */
import { Database } from "bun:sqlite";
import { statSync } from "node:fs";
import { parentPort, workerData } from "node:worker_threads";

export interface CheckpointWorkerData {
  readonly path: string;
  readonly intervalMs: number;
  readonly truncateAboveBytes: number;
  /** How long a TRUNCATE may wait for (and hold up) writers, in ms. */
  readonly truncateBusyMs: number;
}

/** One pass as reported to the coordinator. */
export interface CheckpointReport {
  readonly kind: "passive" | "truncate";
  /** Frames in the WAL, frames checkpointed (SQLite's own `log` and `checkpointed`), WAL bytes after. */
  readonly log: number;
  readonly checkpointed: number;
  readonly walBytes: number;
  readonly ms: number;
}

interface CheckpointRow {
  busy: number;
  log: number;
  checkpointed: number;
}

const data = workerData as CheckpointWorkerData;
const db = new Database(data.path, { readwrite: true, strict: true });
db.exec("PRAGMA busy_timeout = 0");
const walPath = `${data.path}-wal`;

function walBytes(): number {
  try {
    return statSync(walPath).size;
  } catch {
    return 0;
  }
}

function checkpoint(kind: "PASSIVE" | "TRUNCATE"): CheckpointRow {
  return db.prepare(`PRAGMA wal_checkpoint(${kind})`).get() as CheckpointRow;
}

/** Most passive checkpoints in one pass (see pass()). */
const MAX_ROUNDS = 8;

function pass(): void {
  const started = performance.now();
  // A checkpoint copies the frames that were in the WAL when it began; frames committed while it ran
  // (its fsync takes milliseconds) stay, and then the next writer cannot reset the WAL, which would grow
  // from pass to pass under steady writes. So check again while new frames arrived: each round copies
  // only what the previous one let in, and a round that finds no new frame leaves the WAL fully copied.
  let passive = checkpoint("PASSIVE");
  for (let round = 1; round < MAX_ROUNDS; round++) {
    const again = checkpoint("PASSIVE");
    const settled = again.log <= passive.log;
    passive = again;
    if (settled) break;
  }
  let size = walBytes();
  parentPort?.postMessage({
    kind: "passive",
    log: passive.log,
    checkpointed: passive.checkpointed,
    walBytes: size,
    ms: performance.now() - started,
  });
  if (size <= data.truncateAboveBytes) return;
  const t = performance.now();
  db.exec(`PRAGMA busy_timeout = ${data.truncateBusyMs}`);
  try {
    const truncated = checkpoint("TRUNCATE");
    size = walBytes();
    parentPort?.postMessage({
      kind: "truncate",
      log: truncated.log,
      checkpointed: truncated.checkpointed,
      walBytes: size,
      ms: performance.now() - t,
    });
  } finally {
    db.exec("PRAGMA busy_timeout = 0");
  }
}

const timer = setInterval(pass, data.intervalMs);
parentPort?.on("message", (message: unknown) => {
  if (message !== "stop") return;
  clearInterval(timer);
  db.close();
  parentPort?.close();
});
