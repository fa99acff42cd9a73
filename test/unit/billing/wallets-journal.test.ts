/**
 * The settlement journal (src/store/journal.ts) with the wallets' writer (src/billing/settlement-writer.ts)
 * over a real SQLite file: under load a settlement is durable in the journal before it is in the
 * database, its charge stays counted against the balance until applied, reports wait for the apply, a
 * killed process's journal is applied at the next start before any money moves (exactly once), a torn
 * last line is ignored and damage elsewhere refuses the start, and a journal that cannot be written
 * falls back to a direct commit.
 *
 * A killed process is simulated with a crash image: the database, its WAL and the journal copied while
 * the first store is still open (what a SIGKILL leaves on disk), opened by a second store.
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Wallets } from "../../../src/billing/wallets.ts";
import { StoreOpenError } from "../../../src/store/errors.ts";
import { journalPath, parseJournal } from "../../../src/store/journal.ts";
import { createSqliteStore } from "../../../src/store/sqlite/index.ts";
import type { Settlement, Store } from "../../../src/store/types.ts";
import { tempDir } from "../../support/harness.ts";
import { type LogLine, recordingLogger } from "../../support/logs.ts";
import { manualTimers, turns } from "../../support/manual-timers.ts";
import { settlementOf } from "../../support/settlements.ts";

const T0 = 1_790_000_000_000;
const BALANCE = 1_000_000;

async function openStore(path: string): Promise<Store> {
  const store = createSqliteStore(path, { journal: true });
  if (!(await store.accounts.get("consumer"))) {
    await store.accounts.create({ id: "consumer", name: "Consumer", at: T0 });
    await store.accounts.create({ id: "provider", name: "Provider", at: T0 });
    await store.accounts.credit({ accountId: "consumer", amount: BALANCE, at: T0 });
  }
  return store;
}

/** Wallets that always group (as under load); journaled settlements wait `applyMs` before the apply. */
function walletsOn(store: Store, logs: LogLine[] = [], applyMs = 60_000): Wallets {
  return new Wallets(store.money, recordingLogger(logs), { spacedAbovePerSecond: 0, journalApplyMs: applyMs });
}

/** A settlement of `charge` by the consumer, earned by the provider account. */
function settlement(requestId: string, charge: number): Settlement {
  return settlementOf({ requestId, accountId: "consumer", charge, providerAccountId: "provider" });
}

/** Reserves `charge` and settles it; resolves when the wallets call the settlement durable. */
async function pay(wallets: Wallets, requestId: string, charge: number): Promise<void> {
  const hold = await wallets.reserve({ accountId: "consumer", keyId: null, spendCap: null, amount: charge });
  await wallets.settle(hold, settlement(requestId, charge));
}

function usageRows(path: string): number {
  using db = new Database(path, { readonly: true });
  return (db.query("SELECT COUNT(*) AS n FROM usage").get() as { n: number }).n;
}

function journalLines(path: string): number {
  return parseJournal(readFileSync(journalPath(path), "utf8")).length;
}

/** The books of every account: balance = sum of its ledger. */
async function books(store: Store): Promise<Record<string, { balance: number; ledger: number }>> {
  const out: Record<string, { balance: number; ledger: number }> = {};
  for (const a of await store.accounts.list()) {
    const ledger = (await store.accounts.ledger(a.id, 1000)).reduce((sum, e) => sum + e.amount, 0);
    out[a.id] = { balance: a.balance, ledger };
  }
  return out;
}

/** What a SIGKILL leaves on disk: the database, its WAL and the journal, copied into `to`. */
function crashImage(from: string, to: string): void {
  for (const suffix of ["", "-wal", "-settlements"]) {
    if (existsSync(from + suffix)) copyFileSync(from + suffix, to + suffix);
  }
}

describe("settlement journal", () => {
  test("under load a settlement is durable in the journal first, counted against the balance until applied, then applied and the journal emptied", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const store = await openStore(path);
    const wallets = walletsOn(store);
    await Promise.all(Array.from({ length: 20 }, (_, i) => pay(wallets, `req-${i}`, 1_000)));

    // Durable in the journal, not in the database yet.
    expect(journalLines(path)).toBe(20);
    expect(usageRows(path)).toBe(0);
    expect((await store.accounts.get("consumer"))?.balance).toBe(BALANCE);
    // The unapplied charges still count: the rest of the balance can be held, one unit more cannot.
    const rest = BALANCE - 20_000;
    await expect(wallets.reserve({ accountId: "consumer", keyId: null, spendCap: null, amount: rest + 1 })).rejects.toMatchObject({
      status: 402,
    });
    const hold = await wallets.reserve({ accountId: "consumer", keyId: null, spendCap: null, amount: rest });
    wallets.release(hold);

    // A report waits for the apply; the journal is emptied after it.
    await wallets.applied();
    expect(usageRows(path)).toBe(20);
    expect(readFileSync(journalPath(path), "utf8")).toBe("");
    expect(await books(store)).toEqual({
      consumer: { balance: rest, ledger: rest },
      provider: { balance: 18_000, ledger: 18_000 },
      acct_platform: { balance: 2_000, ledger: 2_000 },
    });
    // Still exact after the apply.
    await expect(wallets.reserve({ accountId: "consumer", keyId: null, spendCap: null, amount: rest + 1 })).rejects.toMatchObject({
      status: 402,
    });
    await wallets.flushed();
    store.close();
  });

  test("journaled settlements are applied on their own after the apply delay", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const store = await openStore(path);
    const timers = manualTimers();
    let committed = () => {};
    const commit = new Promise<void>((resolve) => {
      committed = resolve;
    });
    const wallets = new Wallets(store.money, recordingLogger([]), {
      spacedAbovePerSecond: 0,
      journalApplyMs: 20,
      timers,
      observeCommit: () => committed(),
    });
    await pay(wallets, "req-1", 500);
    timers.advance(19);
    await turns();
    expect({ usage: usageRows(path), journal: journalLines(path) }).toEqual({ usage: 0, journal: 1 });
    timers.advance(1);
    await commit; // the apply, started by the timer alone
    await wallets.flushed(); // the journal is emptied right after the apply's commit
    expect(usageRows(path)).toBe(1);
    expect(readFileSync(journalPath(path), "utf8")).toBe("");
    store.close();
  });

  test("when quiet (below the grouping rate) each settlement is committed at once and the journal stays empty", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const store = await openStore(path);
    const wallets = new Wallets(store.money, recordingLogger([]));
    await pay(wallets, "req-1", 500);
    expect(usageRows(path)).toBe(1);
    expect(readFileSync(journalPath(path), "utf8")).toBe("");
    store.close();
  });

  test("killed before the apply: the next start applies the journal before any money moves, exactly once", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const crashed = join(dir.path, "crashed.db");
    const first = await openStore(path);
    const wallets = walletsOn(first);
    // Ten applied, then ten only journaled when the process is killed.
    await Promise.all(Array.from({ length: 10 }, (_, i) => pay(wallets, `early-${i}`, 3_000)));
    await wallets.applied();
    await Promise.all(Array.from({ length: 10 }, (_, i) => pay(wallets, `late-${i}`, 7_000)));
    crashImage(path, crashed);
    expect(usageRows(crashed)).toBe(10);

    const logs: LogLine[] = [];
    const second = await openStore(crashed);
    const restarted = walletsOn(second, logs);
    const rest = BALANCE - 10 * 3_000 - 10 * 7_000;
    // The first money operation after the start already sees the journaled charges.
    await expect(restarted.reserve({ accountId: "consumer", keyId: null, spendCap: null, amount: rest + 1 })).rejects.toMatchObject({
      status: 402,
    });
    expect(usageRows(crashed)).toBe(20);
    expect((await books(second)).consumer).toEqual({ balance: rest, ledger: rest });
    expect(readFileSync(journalPath(crashed), "utf8")).toBe("");
    expect(logs).toContainEqual({ level: "info", msg: "settlement journal applied", fields: { settlements: 10 } });
    second.close();
    await wallets.flushed();
    first.close();
  });

  test("killed after the apply but before the journal was emptied: nothing is applied twice", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const crashed = join(dir.path, "crashed.db");
    const first = await openStore(path);
    const wallets = walletsOn(first);
    await Promise.all(Array.from({ length: 5 }, (_, i) => pay(wallets, `req-${i}`, 2_000)));
    const journaled = readFileSync(journalPath(path));
    await wallets.applied();
    crashImage(path, crashed);
    writeFileSync(journalPath(crashed), journaled);

    const second = await openStore(crashed);
    const restarted = walletsOn(second);
    await restarted.reserve({ accountId: "consumer", keyId: null, spendCap: null, amount: 1 });
    expect(usageRows(crashed)).toBe(5);
    expect(await books(second)).toEqual({
      consumer: { balance: BALANCE - 10_000, ledger: BALANCE - 10_000 },
      provider: { balance: 9_000, ledger: 9_000 },
      acct_platform: { balance: 1_000, ledger: 1_000 },
    });
    second.close();
    first.close();
  });

  test("a torn last line (never acknowledged) is ignored; damage before it refuses the start and names the line", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    (await openStore(path)).close();
    const whole = `${JSON.stringify(settlement("req-1", 1_000))}\n`;
    const torn = JSON.stringify(settlement("req-2", 1_000)).slice(0, 40);
    writeFileSync(journalPath(path), whole + torn);
    const store = await openStore(path);
    await walletsOn(store).reserve({ accountId: "consumer", keyId: null, spendCap: null, amount: 1 });
    expect(usageRows(path)).toBe(1);
    store.close();

    writeFileSync(journalPath(path), `${torn}\n${whole}`);
    expect(() => createSqliteStore(path, { journal: true })).toThrow(StoreOpenError);
    expect(() => createSqliteStore(path, { journal: true })).toThrow("damaged at line 1");
    // The file is kept as it was: it holds charges nobody else has.
    expect(readFileSync(journalPath(path), "utf8")).toBe(`${torn}\n${whole}`);
  });

  test("a line that is JSON but not a settlement is damage too", () => {
    expect(() => parseJournal(`${JSON.stringify({ requestId: "r" })}\n`)).toThrow("damaged at line 1");
    expect(() => parseJournal(`${JSON.stringify({ ...settlement("r", 1), charge: 1.5 })}\n`)).toThrow("damaged at line 1");
    expect(parseJournal("")).toEqual([]);
  });

  test("the journal file is private to its owner (mode 0600)", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const store = await openStore(path);
    expect(statSync(journalPath(path)).mode & 0o777).toBe(0o600);
    store.close();
  });

  test("a journal that cannot be written: the settlement is committed directly and the failure logged", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const store = await openStore(path);
    const journal = store.money.journal;
    if (!journal) throw new Error("the store has no journal");
    journal.append = () => {
      throw Object.assign(new Error("no space left on device"), { name: "ENOSPC" });
    };
    const logs: LogLine[] = [];
    const wallets = walletsOn(store, logs);
    await pay(wallets, "req-1", 1_000);
    expect(usageRows(path)).toBe(1);
    expect(logs.map((l) => l.msg)).toContain("settlement journal write failed; committing directly");
    store.close();
  });

  test("other processes (the admin CLI) open the database without touching the journal", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    (await openStore(path)).close();
    const line = `${JSON.stringify(settlement("req-1", 1_000))}\n`;
    writeFileSync(journalPath(path), line);
    const cli = createSqliteStore(path);
    expect(cli.money.journal).toBeUndefined();
    cli.close();
    expect(readFileSync(journalPath(path), "utf8")).toBe(line);
  });
});
