/**
 * The money authority with a settlement journal (src/store/pg/settlement-journal.ts) on real Postgres: a
 * settlement (of a hold of its own, or admitted on a balance lease) returns once journaled, the hold or
 * lease still holding its money; the batch applies it as the direct path would; what a replica killed
 * before its batch left is charged by the next process on that journal, once, even when the dead
 * replica's own batch lands too; a settlement the database refuses is logged and does not stop the
 * journal. Skipped, saying so, without a server.
 */
import { afterAll, afterEach, beforeEach, describe, expect, test } from "bun:test";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import postgres from "postgres";
import { type MoneyAuthority, type MoneyAuthorityOptions, pgMoneyAuthority } from "../../../src/store/pg/money-authority.ts";
import { ClusterJournal } from "../../../src/store/pg/settlement-journal.ts";
import { tempDir } from "../../support/harness.ts";
import { type LogLine, recordingLogger } from "../../support/logs.ts";
import { testDatabase } from "../../support/pg.ts";
import { emptyTables, readBooks, seedAccount, seedKey } from "../../support/pg-money.ts";
import { settlementOf } from "../../support/settlements.ts";
import { waitFor } from "../../support/wait.ts";

const SUITE = "Postgres money journal";
const db = await testDatabase([SUITE]);

if (!db) {
  describe.skip("Postgres money journal (no server: see the line above)", () => test(SUITE, () => {}));
} else {
  await (await db.store()).end(); // migrations applied
  const sql = postgres(db.url, { max: 4, onnotice: () => {} });
  afterAll(() => sql.end({ timeout: 5 }));
  let made: MoneyAuthority[] = [];
  let dir = tempDir();
  const journalAt = (name: string, applyMs = 20) => ClusterJournal.open(join(dir.path, name), { applyMs });
  /** An authority with a journal, started as a replica starts (recover first); closed after the test. */
  const on = async (journal: ClusterJournal, options: Partial<MoneyAuthorityOptions> = {}, keep = true) => {
    const a = pgMoneyAuthority(sql, { replica: "r1", ttlMs: 60_000, leases: false, journal, ...options });
    await a.recover();
    if (keep) made.push(a);
    return a;
  };
  const req = (requestId: string, amount: number, keyId: string | null = "k1") => ({ requestId, accountId: "acct", keyId, amount });
  const settlement = (requestId: string, charge: number, keyId: string | null = "k1") =>
    settlementOf({ requestId, accountId: "acct", keyId, charge, providerAccountId: "prov", fee: 1 });

  beforeEach(async () => {
    dir = tempDir();
    await emptyTables(sql);
    await seedAccount(sql, "acct", 10_000);
    await seedAccount(sql, "prov", 0);
    await seedKey(sql, "k1", "acct", 5_000);
  });
  afterEach(async () => {
    await Promise.all(made.map((a) => a.close()));
    made = [];
    dir[Symbol.dispose]();
  });

  describe(SUITE, () => {
    test("a settlement returns once journaled, its hold still held; the batch charges it as the direct path does", async () => {
      const a = await on(journalAt("j", 60_000));
      expect("hold" in (await a.reserve(req("p1", 100)))).toBe(true);
      expect(await a.settle(settlement("p1", 70))).toEqual({ applied: true, hadHold: true, charged: 70, journaled: true });
      let books = await readBooks(sql);
      expect(books.holds).toEqual({ p1: { account: "acct", key: "k1", amount: 100 } });
      expect(books.charges).toEqual({});
      expect(a.deadlines.deadline("p1")).toBeDefined(); // renewed until its batch is in
      await a.flushed();
      books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.holds).toEqual({});
      expect(books.charges).toEqual({ p1: { total: 70, entries: 1 } });
      expect(books.accounts.acct).toEqual({ balance: 9_930, reserved: 0 });
      expect(books.keys.k1).toEqual({ spent: 70, held: 0, cap: 5_000 });
      expect(a.deadlines.deadline("p1")).toBeUndefined();
    });

    test("leased requests: settled through the journal, charged on the lease row in one batch, the lease given back whole", async () => {
      const a = await on(journalAt("j"), { leases: { enabled: () => true, hotCount: 1, depth: 20 } });
      expect(a.admit(req("warm", 10))).toBe(false);
      const lease = await waitFor(async () => (await sql`SELECT request_id FROM holds WHERE request_id LIKE 'lease:%'`)[0], "a lease");
      await waitFor(async () => a.leases.size === 1, "the grant answered");
      const n = 8;
      for (let i = 0; i < n; i++) expect(a.admit(req(`l${i}`, 10))).toBe(true);
      const outcomes = await Promise.all(Array.from({ length: n }, (_, i) => a.settle(settlement(`l${i}`, 3 + i))));
      expect(outcomes.every((o) => o.journaled === true && o.applied)).toBe(true);
      await a.flushed();
      expect(a.batches().leased.roundTrips).toBe(1);
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(Object.keys(books.charges).sort()).toEqual(Array.from({ length: n }, (_, i) => `l${i}`));
      const charged = Array.from({ length: n }, (_, i) => 3 + i).reduce((s, x) => s + x, 0);
      expect(books.accounts.acct).toEqual({ balance: 10_000 - charged, reserved: 200 - charged });
      expect(books.holds[String(lease?.request_id)]?.amount).toBe(200 - charged);
      await a.close();
      made = [];
      expect((await readBooks(sql)).accounts.acct).toEqual({ balance: 10_000 - charged, reserved: 0 });
    });

    test("killed before its batch: the next process on the journal charges each settlement once, the dead one's late batch nothing more", async () => {
      const lines: LogLine[] = [];
      // The replica that dies: its batches wait an hour, so nothing of it reaches the database first.
      const dying = await on(journalAt("dying", 3_600_000), { leases: { enabled: () => true, hotCount: 1, depth: 20 } }, false);
      expect(dying.admit(req("warm", 10))).toBe(false);
      await waitFor(async () => dying.leases.size === 1, "the lease");
      expect(dying.admit(req("k-leased", 10))).toBe(true);
      expect("hold" in (await dying.reserve(req("k-held", 100, null)))).toBe(true);
      await dying.settle(settlement("k-leased", 9));
      await dying.settle(settlement("k-held", 60, null));
      expect((await readBooks(sql)).charges).toEqual({});
      // What the killed process's disk holds, taken up by its restart (here a copy, as the dead one still holds the lock).
      for (const suffix of ["a", "b"]) copyFileSync(join(dir.path, `dying-${suffix}`), join(dir.path, `restarted-${suffix}`));
      const restarted = await on(journalAt("restarted"), { replica: "r1", log: recordingLogger(lines) });
      let books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.charges).toEqual({ "k-leased": { total: 9, entries: 1 }, "k-held": { total: 60, entries: 1 } });
      expect(lines.filter((l) => l.level === "warn" || l.level === "error")).toEqual([]);
      // The dead replica's batch lands after all (it was only slow): nothing is charged twice.
      await dying.close();
      books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.charges).toEqual({ "k-leased": { total: 9, entries: 1 }, "k-held": { total: 60, entries: 1 } });
      expect(books.accounts.acct).toEqual({ balance: 10_000 - 69, reserved: 0 });
      expect(restarted.batches().settle.calls + restarted.batches().leased.calls).toBe(2);
    });

    test("a settlement the database refuses is logged and dropped; the journal goes on", async () => {
      const lines: LogLine[] = [];
      const a = await on(journalAt("j"), { log: recordingLogger(lines) });
      expect("hold" in (await a.reserve(req("ok", 100)))).toBe(true);
      expect("hold" in (await a.reserve(req("bad", 100)))).toBe(true);
      // A provider account that does not exist: its earning entry breaks a foreign key, so the database refuses it.
      const bad = settlementOf({ requestId: "bad", accountId: "acct", keyId: "k1", charge: 5, providerAccountId: "nobody", fee: 1 });
      await Promise.all([a.settle(bad), a.settle(settlement("ok", 50))]);
      await a.flushed();
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.charges).toEqual({ ok: { total: 50, entries: 1 } });
      expect(lines.filter((l) => l.level === "error").map((l) => [l.msg, l.fields?.request_id])).toEqual([
        ["settlement refused by the database: nothing charged", "bad"],
      ]);
    });
  });
}
