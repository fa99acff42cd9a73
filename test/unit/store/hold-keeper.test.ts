/**
 * A replica's hold upkeep (src/store/pg/hold-keeper.ts) on timers the test advances: renewals every
 * renewMs, deadline checks every checkMs that a hanging renewal does not hold up, each overdue hold
 * reported once. The authority is a stand-in: its deadlines are the real bookkeeping.
 */
import { expect, test } from "bun:test";
import { HoldDeadlines } from "../../../src/store/pg/hold-deadlines.ts";
import { HoldKeeper } from "../../../src/store/pg/hold-keeper.ts";
import type { MoneyAuthority, RenewOutcome } from "../../../src/store/pg/money-authority.ts";
import { manualTimers, turns } from "../../support/manual-timers.ts";

function setup() {
  const timers = manualTimers();
  const deadlines = new HoldDeadlines(300, 60, timers.now);
  let renew: () => Promise<RenewOutcome> = async () => ({ renewed: 0, lost: [], released: 0 });
  const calls: string[] = [];
  const authority = {
    replica: "r",
    deadlines,
    renew: () => {
      calls.push("renew");
      const sentAt = timers.now();
      return renew().then((r) => {
        deadlines.renewed(
          sentAt,
          ["a", "b"].filter((id) => !r.lost.includes(id)),
        );
        return r;
      });
    },
    sweep: async () => {
      calls.push("sweep");
      return 0;
    },
  } as unknown as MoneyAuthority;
  const overdue: string[][] = [];
  const errors: unknown[] = [];
  const keeper = new HoldKeeper(authority, {
    renewMs: 100,
    checkMs: 30,
    timers,
    onOverdue: (ids) => overdue.push([...ids]),
    onError: (e) => errors.push(e),
  });
  return { timers, deadlines, keeper, calls, overdue, errors, setRenew: (f: typeof renew) => (renew = f) };
}

test("renewals every renewMs keep the deadlines ahead; each is followed by a sweep", async () => {
  const s = setup();
  s.deadlines.track("a", 0);
  s.keeper.start();
  for (let i = 0; i < 20; i++) {
    s.timers.advance(30);
    await turns();
  }
  expect(s.overdue).toEqual([]);
  expect(s.calls.slice(0, 4)).toEqual(["renew", "sweep", "renew", "sweep"]);
  await s.keeper.stop();
  expect(s.timers.pending()).toBe(0);
});

test("a renewal that hangs does not hold up the check: the hold is reported once, at its deadline", async () => {
  const s = setup();
  s.setRenew(() => new Promise(() => {}));
  s.deadlines.track("a", 0);
  s.keeper.start();
  for (let t = 30; t <= 240; t += 30) {
    s.timers.advance(30);
    await turns();
    expect(s.overdue).toEqual(t >= 240 ? [["a"]] : []);
  }
  s.timers.advance(300);
  await turns();
  expect(s.overdue).toEqual([["a"]]);
});

test("a failed renewal is reported; a hold the renewal found swept is overdue at once", async () => {
  const s = setup();
  s.setRenew(async () => {
    throw new Error("database gone");
  });
  s.deadlines.track("a", 0);
  s.keeper.start();
  await turns();
  expect(s.errors).toHaveLength(1);
  s.setRenew(async () => ({ renewed: 0, lost: ["a"], released: 0 }));
  s.deadlines.track("b", 10);
  s.timers.advance(120);
  await turns();
  expect(s.overdue).toEqual([["a"]]);
  await s.keeper.stop();
});
