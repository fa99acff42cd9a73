/**
 * WAL checkpoints off the event loop (issue 25 point 4; src/store/sqlite/checkpointer.ts): the store's
 * connection stops checkpointing on its commits, a Worker of its own does, the WAL stays bounded over many
 * writes, and a crashed worker is logged and started again while the store keeps working.
 */
import { describe, expect, test } from "bun:test";
import { statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { CheckpointReport } from "../../../src/store/sqlite/checkpoint-worker.ts";
import { startCheckpointer } from "../../../src/store/sqlite/checkpointer.ts";
import { createSqliteStore } from "../../../src/store/sqlite/index.ts";
import { openSqlite } from "../../../src/store/sqlite/open.ts";
import { tempDir } from "../../support/harness.ts";
import { type LogLine, recordingLogger } from "../../support/logs.ts";
import { waitFor } from "../../support/wait.ts";

const walSize = (path: string): number => {
  try {
    return statSync(`${path}-wal`).size;
  } catch {
    return 0;
  }
};

describe("WAL checkpoint worker", () => {
  test("many writes: the worker checkpoints and the WAL stays under its bound", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const { client } = openSqlite(path);
    const reports: CheckpointReport[] = [];
    const lines: LogLine[] = [];
    const checkpointer = startCheckpointer(client, path, {
      logger: recordingLogger(lines),
      intervalMs: 20,
      truncateAboveBytes: 2 * 1024 * 1024,
      onReport: (r) => reports.push(r),
    });
    try {
      expect(client.prepare("PRAGMA wal_autocheckpoint").get()).toEqual({ wal_autocheckpoint: 0 });
      client.exec("CREATE TABLE filler (id INTEGER PRIMARY KEY, body TEXT NOT NULL)");
      const insert = client.prepare("INSERT INTO filler (body) VALUES (?)");
      const body = "x".repeat(1000);
      let largest = 0;
      // ~40 MB through the WAL in small commits, yielding so the worker's passes interleave. On a loaded
      // machine the worker's thread may not run for a while: past 6 MB the writer waits for its next
      // TRUNCATE (a worker that never checkpoints fails here), so the bound does not depend on timing.
      for (let round = 0; round < 200; round++) {
        client.transaction(() => {
          for (let i = 0; i < 200; i++) insert.run(body);
        })();
        largest = Math.max(largest, walSize(path));
        if (walSize(path) > 6 * 1024 * 1024) {
          const seen = reports.length;
          await waitFor(() => reports.slice(seen).some((r) => r.kind === "truncate"), "a TRUNCATE checkpoint of a WAL over 6 MB");
        }
        await Bun.sleep(1);
      }
      await waitFor(() => reports.some((r) => r.checkpointed > 0), "a checkpoint that copied frames");
      // Without checkpoints the WAL would hold all ~40 MB; the bound is the truncate threshold plus what
      // one interval can write.
      expect(largest).toBeLessThan(12 * 1024 * 1024);
      expect(lines.filter((l) => l.level === "error")).toEqual([]);
    } finally {
      await checkpointer.stop();
      client.close();
    }
  });

  test("steady writes at a moderate rate: the passive passes alone keep the WAL bounded (no TRUNCATE)", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const { client } = openSqlite(path);
    const reports: CheckpointReport[] = [];
    const checkpointer = startCheckpointer(client, path, {
      logger: recordingLogger([]),
      intervalMs: 20,
      truncateAboveBytes: 1024 * 1024 * 1024, // never
      onReport: (r) => reports.push(r),
    });
    try {
      client.exec("CREATE TABLE filler (id INTEGER PRIMARY KEY, body TEXT NOT NULL)");
      const insert = client.prepare("INSERT INTO filler (body) VALUES (?)");
      const body = "x".repeat(1000);
      let largest = 0;
      // ~12 MB through the WAL, a commit every ~5 ms (the passes' fsyncs overlap some of them).
      for (let round = 0; round < 300; round++) {
        client.transaction(() => {
          for (let i = 0; i < 40; i++) insert.run(body);
        })();
        largest = Math.max(largest, walSize(path));
        await Bun.sleep(5);
      }
      expect(reports.filter((r) => r.kind === "truncate")).toEqual([]);
      expect(largest).toBeLessThan(6 * 1024 * 1024);
    } finally {
      await checkpointer.stop();
      client.close();
    }
  });

  test("a crashed worker is logged and started again; the store keeps working", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const crashing = join(dir.path, "crashing-worker.ts");
    writeFileSync(crashing, `setTimeout(() => { throw new Error("checkpoint worker crash"); }, 5);\n`);
    const lines: LogLine[] = [];
    const store = createSqliteStore(path, {
      checkpoints: { logger: recordingLogger(lines), restartMs: 10, entry: pathToFileURL(crashing) },
    });
    try {
      await waitFor(() => lines.filter((l) => l.msg.includes("restarting")).length >= 2, "two restarts");
      await store.ping();
      await store.accounts.create({ id: "acct_1", name: "A", jwtSubject: null, at: 0 });
      expect(await store.accounts.get("acct_1")).toMatchObject({ id: "acct_1" });
    } finally {
      store.close();
    }
  });

  test("stops with the store", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const { client } = openSqlite(path);
    const checkpointer = startCheckpointer(client, path, { logger: recordingLogger([]), intervalMs: 10 });
    await Bun.sleep(50);
    await checkpointer.stop();
    expect(checkpointer.starts()).toBe(1);
    client.close();
  });
});
