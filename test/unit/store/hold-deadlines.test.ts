/** A replica's renewal bookkeeping (src/store/pg/hold-deadlines.ts) on a clock the test moves by hand. */
import { expect, test } from "bun:test";
import { HoldDeadlines } from "../../../src/store/pg/hold-deadlines.ts";

function clocked() {
  let t = 1_000;
  const d = new HoldDeadlines(300, 50, () => t);
  return { d, at: (v: number) => (t = v) };
}

test("a hold's deadline is its reserve's send time + TTL - margin; past it, it is overdue", () => {
  const { d, at } = clocked();
  d.track("a", 1_000);
  d.track("b", 1_100);
  expect([d.deadline("a"), d.deadline("b")]).toEqual([1_250, 1_350]);
  at(1_249);
  expect(d.overdue()).toEqual([]);
  at(1_250);
  expect(d.overdue()).toEqual(["a"]);
});

test("a renewal moves the deadlines of the holds it returned, from when it was sent", () => {
  const { d, at } = clocked();
  d.track("a", 1_000);
  expect(d.renewed(1_200, ["a"])).toEqual([]);
  expect(d.deadline("a")).toBe(1_450);
  at(1_300);
  expect(d.overdue()).toEqual([]);
});

test("a hold the renewal did not return is lost at once; one granted after it was sent is not", () => {
  const { d } = clocked();
  d.track("swept", 1_000);
  d.track("newer", 1_210, 1_215);
  expect(d.renewed(1_200, [])).toEqual(["swept"]);
  expect(d.overdue()).toEqual(["swept"]);
  expect(d.deadline("newer")).toBe(1_460);
});

test("a reserve sent before the renewal but answered after it was sent is not lost (its commit may follow the renewal's snapshot)", () => {
  const { d, at } = clocked();
  at(1_250);
  d.track("late", 1_150);
  expect(d.renewed(1_200, [])).toEqual([]);
  expect(d.held("late")).toBe(true);
  expect(d.deadline("late")).toBe(1_400);
  at(1_400);
  expect(d.held("late")).toBe(false);
});

test("a failed renewal changes nothing: the deadlines run out; settled holds are forgotten", () => {
  const { d, at } = clocked();
  d.track("a", 1_000);
  d.track("b", 1_000);
  d.forget("b");
  at(2_000);
  expect(d.overdue()).toEqual(["a"]);
  expect(d.size).toBe(1);
});

test("held: true before the deadline and for a hold not tracked; false from the deadline on and once lost", () => {
  const { d, at } = clocked();
  d.track("a", 1_000);
  d.track("swept", 1_000);
  d.renewed(1_100, ["a"]);
  at(1_349);
  expect([d.held("a"), d.held("swept"), d.held("settled")]).toEqual([true, false, true]);
  at(1_350);
  expect(d.held("a")).toBe(false);
});

test("the margin must leave some of the TTL", () => {
  expect(() => new HoldDeadlines(100, 100)).toThrow("margin");
});
