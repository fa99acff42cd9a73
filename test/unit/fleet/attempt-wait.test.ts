/**
 * Attempt.nextWithin (the dispatcher's wait for accepted and first content): an event already queued
 * answers at once; one arriving within the bound answers and clears the timer; none within the bound
 * gives the timeout value, and an event pushed afterwards is queued for next(), not lost to the expired
 * wait. A cancel during the wait ends it with `lost`. poll() and wait() (the answer writers' way, no
 * promise per token): poll takes what is queued, wait's listener gets the next event a microtask after
 * its push.
 */
import { describe, expect, test } from "bun:test";
import { Attempt } from "../../../src/fleet/attempt.ts";

const TIMEOUT = Symbol("timeout");
const make = () => new Attempt("req_1", 0, "prov_1", "acct_1", 0, { release: () => {} });

describe("Attempt.nextWithin", () => {
  test("a queued event answers at once", async () => {
    const a = make();
    a.push({ type: "accepted" });
    expect(await a.nextWithin(10_000, TIMEOUT)).toEqual({ type: "accepted" });
  });

  test("an event within the bound answers it; the timer is gone (a later timeout would not resolve twice)", async () => {
    const a = make();
    const waiting = a.nextWithin(50, TIMEOUT);
    setTimeout(() => a.push({ type: "accepted" }), 5);
    expect(await waiting).toEqual({ type: "accepted" });
    await Bun.sleep(80);
    a.push({ type: "chunk", delta: { content: "hi" } });
    expect(await a.next()).toEqual({ type: "chunk", delta: { content: "hi" } });
  });

  test("no event within the bound: the timeout value; a later event waits for next()", async () => {
    const a = make();
    expect(await a.nextWithin(20, TIMEOUT)).toBe(TIMEOUT);
    a.push({ type: "accepted" });
    expect(a.backlog).toBe(1);
    expect(await a.next()).toEqual({ type: "accepted" });
  });

  test("a cancel during the wait ends it with lost", async () => {
    const a = make();
    const waiting = a.nextWithin(10_000, TIMEOUT);
    a.cancel("client_gone");
    expect(await waiting).toEqual({ type: "lost", reason: "cancelled: client_gone" });
    expect(await a.nextWithin(10_000, TIMEOUT)).toEqual({ type: "lost", reason: "cancelled: client_gone" });
  });
});

describe("Attempt.poll and wait", () => {
  test("poll takes queued events in order, then undefined; once ended, lost", () => {
    const a = make();
    expect(a.poll()).toBeUndefined();
    a.push({ type: "accepted" });
    a.push({ type: "chunk", delta: { content: "hi" } });
    expect(a.backlog).toBe(2);
    expect(a.poll()).toEqual({ type: "accepted" });
    expect(a.poll()).toEqual({ type: "chunk", delta: { content: "hi" } });
    expect(a.backlog).toBe(0);
    expect(a.poll()).toBeUndefined();
    a.cancel("deadline");
    expect(a.poll()).toEqual({ type: "lost", reason: "cancelled: deadline" });
  });

  test("wait's listener gets the next event a microtask after its push, once; later events queue", async () => {
    const a = make();
    const got: unknown[] = [];
    a.wait({ attemptEvent: (e) => got.push(e) });
    a.push({ type: "accepted" });
    a.push({ type: "chunk", delta: { content: "hi" } });
    expect(got).toEqual([]);
    expect(a.backlog).toBe(1);
    await Promise.resolve();
    expect(got).toEqual([{ type: "accepted" }]);
    expect(a.poll()).toEqual({ type: "chunk", delta: { content: "hi" } });
  });

  test("listeners of several attempts are handed their events in one pass, in push order", async () => {
    const [a, b] = [make(), make()];
    const got: string[] = [];
    a.wait({ attemptEvent: (e) => got.push(`a ${e.type}`) });
    b.wait({ attemptEvent: (e) => got.push(`b ${e.type}`) });
    b.push({ type: "accepted" });
    a.push({ type: "error", code: "engine_error" });
    await Promise.resolve();
    expect(got).toEqual(["b accepted", "a error"]);
  });

  test("a cancel during a wait hands it lost", async () => {
    const a = make();
    const got: unknown[] = [];
    a.wait({ attemptEvent: (e) => got.push(e) });
    a.cancel("client_gone");
    await Promise.resolve();
    expect(got).toEqual([{ type: "lost", reason: "cancelled: client_gone" }]);
  });
});
