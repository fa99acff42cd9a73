/**
 * Wallets (src/billing/wallets.ts, with holds.ts and settlement-writer.ts) against a fake MoneyStore the
 * test drives (test/support/fake-money.ts): its settles and balance reads can be held until the test
 * releases them, chosen request ids are refused, every call is recorded in order, and any two store
 * calls in flight at once are counted as an overlap (the writer loop must never let that happen). The
 * writer's clock and timers are manual: a commit gap passes when the test advances the clock.
 *
 * What is pinned: available = durable - held - pending, to the unit, before, during and after a
 * commit; the key spend cap the same way; holds, releases and settlements; a settlement resolves only
 * once its batch is durable; group commit; failure isolation; refreshes and loads in the writer loop.
 */
import { describe, expect, test } from "bun:test";
import { type Hold, Wallets } from "../../../src/billing/wallets.ts";
import { ApiError } from "../../../src/errors/api-error.ts";
import type { Settlement } from "../../../src/store/types.ts";
import { FakeMoney } from "../../support/fake-money.ts";
import { type LogLine, recordingLogger } from "../../support/logs.ts";
import { manualTimers, turns } from "../../support/manual-timers.ts";
import { settlementOf } from "../../support/settlements.ts";

interface SetupOptions {
  /** Account balances in the store (the account "provider" starts at 0 besides). */
  readonly balances: Record<string, number>;
  /** Key spend in the store. */
  readonly spent?: Record<string, number>;
  /** The writer's commit gap; 0: none. */
  readonly commitGapMs?: number;
  /** Settlements per second from which commits are spaced by the gap; 0: always. */
  readonly spacedAbovePerSecond?: number;
}

function setup({ balances, spent = {}, commitGapMs = 0, spacedAbovePerSecond = 0 }: SetupOptions) {
  const store = new FakeMoney({ provider: 0, ...balances }, spent);
  const logs: LogLine[] = [];
  const commits: number[] = [];
  const timers = manualTimers();
  const wallets = new Wallets(store, recordingLogger(logs), {
    commitGapMs,
    spacedAbovePerSecond,
    observeCommit: (n) => void commits.push(n),
    timers,
  });
  return { store, wallets, logs, commits, timers };
}

/** A settlement of `charge` by `accountId`, earned by the account "provider". */
function settlement(requestId: string, accountId: string, charge: number, keyId: string | null = null): Settlement {
  return settlementOf({ requestId, accountId, charge, keyId, providerAccountId: "provider" });
}

/** A promise and whether it has settled yet. */
function track<T>(promise: Promise<T>): { readonly promise: Promise<T>; readonly done: () => boolean } {
  let done = false;
  const watched = promise.finally(() => {
    done = true;
  });
  watched.catch(() => {});
  return { promise: watched, done: () => done };
}

/** The 402 a reservation was refused with; fails when it was granted or failed otherwise. */
async function refusal(promise: Promise<unknown>): Promise<{ status: number; type: string; code: string }> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ApiError) return { status: error.status, type: error.type, code: error.code };
    throw error;
  }
  throw new Error("expected the reservation to be refused");
}

const NO_FUNDS = { status: 402, type: "insufficient_funds", code: "insufficient_quota" };
const NO_QUOTA = { status: 402, type: "insufficient_quota", code: "insufficient_quota" };

function hold(wallets: Wallets, accountId: string, amount: number, key?: { id: string; cap: number | null }): Promise<Hold> {
  return wallets.reserve({ accountId, keyId: key?.id ?? null, spendCap: key?.cap ?? null, amount });
}

/** Whether `amount` can be held for the account right now (the probe's hold is returned at once). */
async function fits(wallets: Wallets, accountId: string, amount: number): Promise<boolean> {
  try {
    wallets.release(await hold(wallets, accountId, amount));
    return true;
  } catch (error) {
    if (error instanceof ApiError && error.type === "insufficient_funds") return false;
    throw error;
  }
}

/** Exactly `amount` is available: it fits, one more does not. Needs the writer loop free (a refusal refreshes). */
async function expectAvailable(wallets: Wallets, accountId: string, amount: number): Promise<void> {
  expect({ accountId, fits: await fits(wallets, accountId, amount), oneMore: await fits(wallets, accountId, amount + 1) }).toEqual({
    accountId,
    fits: true,
    oneMore: false,
  });
}

describe("reserve", () => {
  test("holds up to durable - held - pending exactly; one unit more is refused with 402 insufficient_funds", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000 } });
    const h1 = await hold(wallets, "A", 300);
    const h2 = await hold(wallets, "A", 200);
    store.holdSettles = true;
    const settled = wallets.settle(h2, settlement("r-1", "A", 150));
    await store.held(1);
    // durable 1,000 - held 300 - pending 150 = 550, while the batch is still committing.
    const h3 = await hold(wallets, "A", 550);
    wallets.release(h3);
    const oneMore = track(hold(wallets, "A", 551));
    await turns();
    expect(oneMore.done()).toBe(false); // the refusal waits for a refresh, behind the commit
    store.release();
    await settled;
    expect(await refusal(oneMore.promise)).toEqual(NO_FUNDS);
    await expectAvailable(wallets, "A", 550);
    wallets.release(h1);
    await expectAvailable(wallets, "A", 850);
    expect(store.overlaps).toBe(0);
  });

  test("the refusal leaves no hold behind", async () => {
    const { wallets } = setup({ balances: { A: 100 } });
    const h = await hold(wallets, "A", 60);
    expect(await refusal(hold(wallets, "A", 41))).toEqual(NO_FUNDS);
    expect(wallets.reservedFor("A")).toBe(60);
    wallets.release(h);
    await expectAvailable(wallets, "A", 100);
  });

  test("1,000 concurrent reservations against a balance worth 37 holds: exactly 37 are granted", async () => {
    const { store, wallets } = setup({ balances: { A: 37 * 250 + 249 } });
    const results = await Promise.allSettled(Array.from({ length: 1_000 }, () => hold(wallets, "A", 250)));
    const granted = results.filter((r) => r.status === "fulfilled");
    const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
    expect({
      granted: granted.length,
      refused: refused.filter((e) => e instanceof ApiError && e.type === "insufficient_funds").length,
      reserved: wallets.reservedFor("A"),
      loads: store.events.filter((e) => e === "balance A").length >= 1,
      overlaps: store.overlaps,
    }).toEqual({ granted: 37, refused: 963, reserved: 37 * 250, loads: true, overlaps: 0 });
  });

  test("the key spend cap: spent + held + pending against the cap, refused with 402 insufficient_quota", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000_000 }, spent: { K: 40 } });
    const key = { id: "K", cap: 100 };
    const h1 = await hold(wallets, "A", 60, key);
    expect(await refusal(hold(wallets, "A", 1, key))).toEqual(NO_QUOTA);
    expect(wallets.reservedFor("A")).toBe(60); // the refused reservation held nothing
    // The same account through a key without a cap is not limited by K's cap.
    wallets.release(await hold(wallets, "A", 5_000, { id: "K2", cap: null }));

    store.holdSettles = true;
    const settled = wallets.settle(h1, settlement("r-1", "A", 50, "K"));
    await store.held(1);
    // spent 40 + pending 50: 10 left while the batch commits; a key refusal needs no refresh.
    wallets.release(await hold(wallets, "A", 10, key));
    expect(await refusal(hold(wallets, "A", 11, key))).toEqual(NO_QUOTA);
    store.release();
    await settled;
    expect(store.spent.get("K")).toBe(90);
    // After the commit: spent 90 from the store, nothing pending: still exactly 10.
    const h2 = await hold(wallets, "A", 10, key);
    expect(await refusal(hold(wallets, "A", 1, key))).toEqual(NO_QUOTA);
    wallets.release(h2);
    wallets.release(await hold(wallets, "A", 10, key));
  });

  test("concurrent reservations on one capped key: exactly as many as the cap allows", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000_000 }, spent: { K: 0 } });
    const results = await Promise.allSettled(Array.from({ length: 50 }, () => hold(wallets, "A", 30, { id: "K", cap: 1_000 })));
    const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
    expect({
      granted: results.filter((r) => r.status === "fulfilled").length,
      quota: refused.filter((e) => e instanceof ApiError && e.type === "insufficient_quota").length,
      reserved: wallets.reservedFor("A"),
      keyReads: store.events.filter((e) => e === "keySpent K").length,
      overlaps: store.overlaps,
    }).toEqual({ granted: 33, quota: 17, reserved: 990, keyReads: 1, overlaps: 0 });
  });

  test("before refusing, re-reads the balance once: a credit written elsewhere counts at once", async () => {
    const { store, wallets } = setup({ balances: { A: 100 } });
    const h = await hold(wallets, "A", 100);
    store.balances.set("A", 150); // credited by another process after the load
    const h2 = await hold(wallets, "A", 50);
    expect(store.events.filter((e) => e === "balance A").length).toBe(2); // the load, the refresh
    expect(await refusal(hold(wallets, "A", 1))).toEqual(NO_FUNDS);
    expect(store.events.filter((e) => e === "balance A").length).toBe(3); // one refresh per refusal
    wallets.release(h);
    wallets.release(h2);
    expect(wallets.reservedFor("A")).toBe(0);
  });

  test("an unknown account is refused and holds nothing", async () => {
    const { wallets } = setup({ balances: {} });
    await expect(hold(wallets, "nobody", 1)).rejects.toThrow();
    expect(wallets.reservedFor("nobody")).toBe(0);
  });
});

describe("release", () => {
  test("returns the money, once", async () => {
    const { wallets } = setup({ balances: { A: 100 } });
    const h = await hold(wallets, "A", 100);
    wallets.release(h);
    wallets.release(h);
    expect(wallets.reservedFor("A")).toBe(0);
    // A second release returned nothing more: exactly the balance is available.
    await expectAvailable(wallets, "A", 100);
  });
});

describe("reservedFor", () => {
  test("reports the money held for requests in flight, per account", async () => {
    const { wallets } = setup({ balances: { A: 1_000, B: 1_000 } });
    expect(wallets.reservedFor("A")).toBe(0);
    const [h10, h20, h30] = [await hold(wallets, "A", 10), await hold(wallets, "A", 20), await hold(wallets, "A", 30)];
    await hold(wallets, "B", 7);
    expect([wallets.reservedFor("A"), wallets.reservedFor("B"), wallets.reservedFor("C")]).toEqual([60, 7, 0]);
    wallets.release(h20);
    expect(wallets.reservedFor("A")).toBe(40);
    const settled = wallets.settle(h30, settlement("r-1", "A", 5));
    expect(wallets.reservedFor("A")).toBe(10); // the charge moved to pending, the rest was released
    await settled;
    wallets.release(h10);
    expect(wallets.reservedFor("A")).toBe(0);
  });
});

describe("settle", () => {
  test("moves the charge from held to pending and releases the rest of the hold", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000 } });
    const h = await hold(wallets, "A", 400);
    store.holdSettles = true;
    const settled = wallets.settle(h, settlement("r-1", "A", 150));
    expect(wallets.reservedFor("A")).toBe(0);
    await store.held(1);
    const probe = await hold(wallets, "A", 850); // 1,000 - 150 pending: the surplus 250 is back
    wallets.release(probe);
    store.release();
    await settled;
    expect(store.balances.get("A")).toBe(850);
    await expectAvailable(wallets, "A", 850);
  });

  test("a charge above the hold throws, queues nothing, and the hold can still be released", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000 } });
    const h = await hold(wallets, "A", 100);
    expect(() => wallets.settle(h, settlement("r-1", "A", 101))).toThrow();
    expect(wallets.reservedFor("A")).toBe(100);
    await wallets.flushed();
    expect(store.batches).toEqual([]);
    wallets.release(h);
    expect(wallets.reservedFor("A")).toBe(0);
    await expectAvailable(wallets, "A", 1_000);
  });

  test("a hold is settled once: a second settle of it is ignored", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000 } });
    const h = await hold(wallets, "A", 100);
    await wallets.settle(h, settlement("r-1", "A", 60));
    await wallets.settle(h, settlement("r-2", "A", 60));
    wallets.release(h);
    expect({ batches: store.batches, balance: store.balances.get("A"), reserved: wallets.reservedFor("A") }).toEqual({
      batches: [["r-1"]],
      balance: 940,
      reserved: 0,
    });
    await expectAvailable(wallets, "A", 940);
  });

  test("resolves only once its batch is durable", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000 } });
    const h = await hold(wallets, "A", 100);
    store.holdSettles = true;
    let balanceWhenResolved: number | undefined;
    const settled = track(
      wallets.settle(h, settlement("r-1", "A", 70)).then(() => {
        balanceWhenResolved = store.balances.get("A");
      }),
    );
    await store.held(1);
    await turns();
    expect({ done: settled.done(), balance: store.balances.get("A") }).toEqual({ done: false, balance: 1_000 });
    store.release();
    await settled.promise;
    expect(balanceWhenResolved).toBe(930);
  });

  test("settlements queued while a batch commits go into the next batch together", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000, B: 1_000 } });
    const holds = [await hold(wallets, "A", 10), await hold(wallets, "A", 10), await hold(wallets, "B", 10), await hold(wallets, "A", 10)];
    store.holdSettles = true;
    const first = wallets.settle(holds[0], settlement("r-1", "A", 1));
    await store.held(1);
    const next = [
      wallets.settle(holds[1], settlement("r-2", "A", 2)),
      wallets.settle(holds[2], settlement("r-3", "B", 3)),
      wallets.settle(holds[3], settlement("r-4", "A", 4)),
    ];
    await turns();
    expect(store.batches).toEqual([["r-1"]]);
    store.release();
    await first;
    await store.held(1);
    store.release();
    await Promise.all(next);
    expect({ batches: store.batches, A: store.balances.get("A"), B: store.balances.get("B") }).toEqual({
      batches: [["r-1"], ["r-2", "r-3", "r-4"]],
      A: 993,
      B: 997,
    });
  });

  test("commits are spaced: a settlement after a quiet gap commits at once, those just after a commit share the next", async () => {
    // The clock stands still until the test advances it, so only the gap decides the outcome.
    const { store, wallets, commits, timers } = setup({ balances: { A: 1_000 }, commitGapMs: 300 });
    const holds = await Promise.all([1, 2, 3, 4].map(() => hold(wallets, "A", 10)));
    // Quiet: committed within a few event-loop turns, no timer involved.
    const first = track(wallets.settle(holds[0], settlement("r-1", "A", 1)));
    await turns();
    expect(first.done()).toBe(true);
    // Within the gap after that commit, arriving at different turns: they wait for the gap's end and
    // share one commit.
    const next = [];
    for (const i of [2, 3, 4]) {
      next.push(track(wallets.settle(holds[i - 1], settlement(`r-${i}`, "A", i))));
      await turns(2);
    }
    expect(next.map((x) => x.done())).toEqual([false, false, false]);
    timers.advance(299);
    await turns();
    expect({ done: next.map((x) => x.done()), batches: store.batches }).toEqual({ done: [false, false, false], batches: [["r-1"]] });
    timers.advance(1);
    await Promise.all(next.map((x) => x.promise));
    expect({ batches: store.batches, commits, A: store.balances.get("A") }).toEqual({
      batches: [["r-1"], ["r-2", "r-3", "r-4"]],
      commits: [1, 3],
      A: 990,
    });
  });

  test("below the spacing rate, settlements just after a commit are committed at once, not after the gap", async () => {
    // Same arrivals as above, with a gap of 300 ms, but the rate that turns spacing on is out of reach.
    const { store, wallets, commits, timers } = setup({
      balances: { A: 1_000 },
      commitGapMs: 300,
      spacedAbovePerSecond: Number.POSITIVE_INFINITY,
    });
    const holds = await Promise.all([1, 2, 3].map(() => hold(wallets, "A", 10)));
    for (const [i, h] of holds.entries()) {
      const settled = track(wallets.settle(h, settlement(`r-${i + 1}`, "A", 1)));
      await turns();
      expect(settled.done()).toBe(true);
    }
    expect({ batches: store.batches, commits, timers: timers.pending() }).toEqual({
      batches: [["r-1"], ["r-2"], ["r-3"]],
      commits: [1, 1, 1],
      timers: 0,
    });
  });

  test("across a commit, available stays exact and durable comes from the store's result", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000 }, spent: { K: 0 } });
    const key = { id: "K", cap: 1_000 };
    const kept = await hold(wallets, "A", 300, key);
    const h = await hold(wallets, "A", 200, key);
    await expectAvailable(wallets, "A", 500); // before
    store.holdSettles = true;
    const settled = wallets.settle(h, settlement("r-1", "A", 120, "K"));
    await store.held(1);
    // During: 1,000 - 300 held - 120 pending.
    wallets.release(await hold(wallets, "A", 580));
    store.balances.set("A", 2_000); // a credit lands in the store while the batch commits
    store.release();
    await settled;
    // After: durable is the store's 1,880 (credit included), nothing pending, 300 still held.
    expect(store.balances.get("A")).toBe(1_880);
    const reads = store.events.filter((e) => e === "balance A").length;
    const probe = await hold(wallets, "A", 1_580);
    expect(store.events.filter((e) => e === "balance A").length).toBe(reads); // no refresh was needed
    wallets.release(probe);
    await expectAvailable(wallets, "A", 1_580);
    // The key's spent total came from the result too: cap 1,000 - spent 120 - 300 held.
    wallets.release(await hold(wallets, "A", 580, key));
    expect(await refusal(hold(wallets, "A", 581, key))).toEqual(NO_QUOTA);
    wallets.release(kept);
  });

  test("a duplicate request id (not applied) is not charged twice in memory", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000 } });
    await wallets.settle(await hold(wallets, "A", 100), settlement("r-1", "A", 100));
    await wallets.settle(await hold(wallets, "A", 100), settlement("r-1", "A", 100));
    expect({ batches: store.batches, balance: store.balances.get("A"), reserved: wallets.reservedFor("A") }).toEqual({
      batches: [["r-1"], ["r-1"]],
      balance: 900,
      reserved: 0,
    });
    await expectAvailable(wallets, "A", 900);
  });

  test("a refused batch is retried one by one; only the refused settlement is dropped, and logged", async () => {
    const { store, wallets, logs } = setup({ balances: { A: 1_000 } });
    const holds = [await hold(wallets, "A", 100), await hold(wallets, "A", 100), await hold(wallets, "A", 100)];
    store.refused.add("r-2");
    const all = Promise.all([
      wallets.settle(holds[0], settlement("r-1", "A", 10)),
      wallets.settle(holds[1], settlement("r-2", "A", 20)),
      wallets.settle(holds[2], settlement("r-3", "A", 30)),
    ]);
    await all; // every promise resolves, the dropped one included
    expect({
      batches: store.batches,
      settled: [...store.settled].sort(),
      balance: store.balances.get("A"),
      errors: logs.filter((l) => l.level === "error"),
      overlaps: store.overlaps,
    }).toEqual({
      batches: [["r-1", "r-2", "r-3"], ["r-1"], ["r-2"], ["r-3"]],
      settled: ["r-1", "r-3"],
      balance: 960,
      errors: [{ level: "error", msg: "settlement failed", fields: { request_id: "r-2", account_id: "A", error_name: "Error" } }],
      overlaps: 0,
    });
    // The dropped charge is no longer pending: exactly the durable balance is available.
    await expectAvailable(wallets, "A", 960);
  });

  test("a settlement without a hold (self-route) records its usage and holds nothing", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000 } });
    await wallets.settle(undefined, settlement("r-free", "A", 0));
    expect({ batches: store.batches, settled: [...store.settled], balance: store.balances.get("A") }).toEqual({
      batches: [["r-free"]],
      settled: ["r-free"],
      balance: 1_000,
    });
  });
});

describe("refresh", () => {
  test("picks up a credit written elsewhere", async () => {
    const { store, wallets } = setup({ balances: { A: 100 } });
    const h = await hold(wallets, "A", 100);
    store.balances.set("A", 350);
    await wallets.refresh("A");
    const reads = store.events.filter((e) => e === "balance A").length;
    const h2 = await hold(wallets, "A", 250); // fits without another read
    expect(store.events.filter((e) => e === "balance A").length).toBe(reads);
    wallets.release(h);
    wallets.release(h2);
    await expectAvailable(wallets, "A", 350);
  });

  test("of an account not loaded here reads nothing", async () => {
    const { store, wallets } = setup({ balances: { A: 100 } });
    await wallets.refresh("A");
    expect(store.events).toEqual([]);
  });
});

describe("the writer loop", () => {
  test("a load or a refresh waits for the commit in progress", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000, B: 500 } });
    const h = await hold(wallets, "A", 100);
    store.holdSettles = true;
    const settled = wallets.settle(h, settlement("r-1", "A", 10));
    await store.held(1);
    const loadB = track(hold(wallets, "B", 500));
    const refreshA = track(wallets.refresh("A"));
    await turns();
    expect({ loadB: loadB.done(), refreshA: refreshA.done(), last: store.events.at(-1) }).toEqual({
      loadB: false,
      refreshA: false,
      last: "settle r-1",
    });
    store.release();
    await Promise.all([settled, loadB.promise, refreshA.promise]);
    expect(store.events).toEqual([
      "balance A",
      "end balance A",
      "settle r-1",
      "end settle r-1",
      "balance B",
      "end balance B",
      "balance A",
      "end balance A",
    ]);
    expect(store.overlaps).toBe(0);
  });

  test("a commit waits for the load in progress", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000, B: 500 } });
    const h = await hold(wallets, "A", 100);
    store.holdReads = true;
    const loadB = track(hold(wallets, "B", 500));
    await store.held(1);
    const settled = track(wallets.settle(h, settlement("r-1", "A", 10)));
    await turns();
    expect({ batches: store.batches, settled: settled.done(), loadB: loadB.done() }).toEqual({ batches: [], settled: false, loadB: false });
    store.release();
    await Promise.all([settled.promise, loadB.promise]);
    expect(store.events.slice(2)).toEqual(["balance B", "end balance B", "settle r-1", "end settle r-1"]);
    expect(store.overlaps).toBe(0);
  });
});

describe("flushed", () => {
  test("resolves at once when idle, and otherwise once everything queued is durable", async () => {
    const { store, wallets } = setup({ balances: { A: 1_000 } });
    await wallets.flushed();
    const holds = [await hold(wallets, "A", 10), await hold(wallets, "A", 10), await hold(wallets, "A", 10)];
    store.holdSettles = true;
    const settles = [wallets.settle(holds[0], settlement("r-1", "A", 1)), wallets.settle(holds[1], settlement("r-2", "A", 2))];
    await store.held(1);
    settles.push(wallets.settle(holds[2], settlement("r-3", "A", 3)));
    const flushed = track(wallets.flushed());
    await turns();
    expect(flushed.done()).toBe(false);
    store.release();
    await store.held(1);
    await turns();
    expect({ flushed: flushed.done(), settled: [...store.settled] }).toEqual({ flushed: false, settled: ["r-1", "r-2"] });
    store.release();
    await flushed.promise;
    expect({ settled: [...store.settled], balance: store.balances.get("A") }).toEqual({ settled: ["r-1", "r-2", "r-3"], balance: 994 });
    await Promise.all(settles);
  });
});
