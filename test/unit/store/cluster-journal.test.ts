/**
 * A cluster replica's settlement journal (src/store/pg/settlement-journal.ts), with a recording `apply` in
 * place of Postgres: entries of one event-loop turn are one write and resolve once written; a batch is
 * applied `applyMs` later and its file emptied only after; entries arriving during an apply go to the
 * other file; a failed apply is sent again; what a killed process left (both files, leases included) is
 * recovered before anything is taken; damage and a second process are refused; close applies what is
 * left, or keeps it in the files when the database does not answer in time.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { StoreOpenError } from "../../../src/store/errors.ts";
import { ClusterJournal, type JournalEntry } from "../../../src/store/pg/settlement-journal.ts";
import { tempDir } from "../../support/harness.ts";
import { settlementOf } from "../../support/settlements.ts";
import { waitFor } from "../../support/wait.ts";

const entry = (id: string, lease?: { id: string; amount: number }): JournalEntry => ({
  settlement: settlementOf({ requestId: id, accountId: "acct", keyId: "k1", charge: 7, providerAccountId: "prov" }),
  ...(lease ? { lease } : {}),
});
const lines = (path: string) =>
  readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l !== "");
const ids = (entries: readonly JournalEntry[]) => entries.map((e) => e.settlement.requestId);

/** An apply that records its batches and waits for `gate` (open unless closed by the test). */
function recorder() {
  const batches: string[][] = [];
  let open: () => void = () => {};
  let gate: Promise<void> = Promise.resolve();
  return {
    batches,
    hold() {
      gate = new Promise((resolve) => {
        open = resolve;
      });
    },
    release: () => open(),
    apply: async (entries: readonly JournalEntry[]) => {
      batches.push(ids(entries));
      await gate;
    },
  };
}

describe("cluster settlement journal", () => {
  test("one write per turn, resolved once written; applied applyMs later, then the file is emptied", async () => {
    using dir = tempDir();
    const path = join(dir.path, "settlements");
    const journal = ClusterJournal.open(path, { applyMs: 30 });
    const r = recorder();
    expect(await journal.recover(r.apply)).toBe(0);
    await Promise.all([journal.add(entry("a1")), journal.add(entry("a2", { id: "lease:r1:x:1", amount: 100 }))]);
    // Written, not applied: the lines carry the settlement and its lease, never anything else.
    expect(r.batches).toEqual([]);
    const written = lines(`${path}-a`).map((l) => JSON.parse(l));
    expect(written.map((l) => [l.requestId, l.lease])).toEqual([
      ["a1", undefined],
      ["a2", { id: "lease:r1:x:1", amount: 100 }],
    ]);
    expect(journal.pending).toBe(2);
    await waitFor(async () => r.batches.length === 1, "the apply");
    expect(r.batches).toEqual([["a1", "a2"]]);
    await journal.flushed();
    expect([lines(`${path}-a`), lines(`${path}-b`)]).toEqual([[], []]);
    expect(journal.pending).toBe(0);
    expect(await journal.close()).toBe(true);
  });

  test("entries added during an apply go to the other file; each file is emptied only once applied", async () => {
    using dir = tempDir();
    const path = join(dir.path, "settlements");
    const journal = ClusterJournal.open(path, { applyMs: 5 });
    const r = recorder();
    await journal.recover(r.apply);
    r.hold();
    await journal.add(entry("b1"));
    await waitFor(async () => r.batches.length === 1, "the first apply");
    await journal.add(entry("b2"));
    // b1's batch is in flight: its file keeps it; b2 is in the other.
    expect(lines(`${path}-a`).map((l) => JSON.parse(l).requestId)).toEqual(["b1"]);
    expect(lines(`${path}-b`).map((l) => JSON.parse(l).requestId)).toEqual(["b2"]);
    r.release();
    await journal.flushed();
    expect(r.batches).toEqual([["b1"], ["b2"]]);
    expect([lines(`${path}-a`), lines(`${path}-b`)]).toEqual([[], []]);
    await journal.close();
  });

  test("a batch the database did not take is sent again until it is", async () => {
    using dir = tempDir();
    const path = join(dir.path, "settlements");
    const failures: number[] = [];
    const journal = ClusterJournal.open(path, { applyMs: 1, retryMs: 5, onRetry: (_e, n) => failures.push(n) });
    let calls = 0;
    await journal.recover(async () => {
      calls++;
      if (calls < 3) throw new Error("connection closed");
    });
    await journal.add(entry("c1"));
    await journal.flushed();
    expect(calls).toBe(3);
    expect(failures).toEqual([1, 1]);
    expect(lines(`${path}-a`)).toEqual([]);
    await journal.close();
  });

  test("what a killed process left, in both files, is applied before anything is taken", async () => {
    using dir = tempDir();
    const path = join(dir.path, "settlements");
    const first = ClusterJournal.open(path, { applyMs: 5 });
    const r = recorder();
    await first.recover(r.apply);
    r.hold(); // the database never answers: like a process killed before its batches were applied
    await first.add(entry("d1", { id: "lease:r1:x:1", amount: 50 }));
    await waitFor(async () => r.batches.length === 1, "the first apply");
    await first.add(entry("d2"));
    await first.add(entry("late"));
    expect(await first.close(20)).toBe(false); // out of time: the files keep both batches
    await expect(first.add(entry("after"))).rejects.toThrow("closed");

    // A torn last line was never acknowledged: ignored.
    writeFileSync(`${path}-b`, `${readFileSync(`${path}-b`, "utf8")}{"requestId":"torn`);
    const second = ClusterJournal.open(path);
    expect(ids(second.recovered).sort()).toEqual(["d1", "d2", "late"]);
    expect(second.recovered.find((e) => e.settlement.requestId === "d1")?.lease).toEqual({ id: "lease:r1:x:1", amount: 50 });
    await expect(second.add(entry("too-early"))).rejects.toThrow("closed");
    const applied: string[][] = [];
    expect(
      await second.recover(async (entries) => {
        applied.push(ids(entries).sort());
      }),
    ).toBe(3);
    expect(applied).toEqual([["d1", "d2", "late"]]);
    expect([lines(`${path}-a`), lines(`${path}-b`)]).toEqual([[], []]);
    await second.close();
  });

  test("a second process on the journal is refused, naming it; damage is refused with its file and line", async () => {
    using dir = tempDir();
    const path = join(dir.path, "settlements");
    const journal = ClusterJournal.open(path);
    expect(() => ClusterJournal.open(path)).toThrow(/settlement journal .* is in use by another process \(pid \d+/);
    await journal.close();
    const line = JSON.stringify({ ...entry("e1").settlement, lease: { id: "lease:x", amount: -5 } });
    writeFileSync(`${path}-a`, `${line}\n`);
    expect(() => ClusterJournal.open(path)).toThrow(StoreOpenError);
    expect(() => ClusterJournal.open(path)).toThrow(`settlement journal ${path}-a is damaged at line 1`);
    writeFileSync(`${path}-a`, "not json\n");
    expect(() => ClusterJournal.open(path)).toThrow("is damaged at line 1");
  });
});
