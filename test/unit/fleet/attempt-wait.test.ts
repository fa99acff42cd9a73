/**
 * Attempt.nextWithin (the dispatcher's wait for accepted and first content): an event already queued
 * answers at once; one arriving within the bound answers and clears the timer; none within the bound
 * gives the timeout value, and an event pushed afterwards is queued for next(), not lost to the expired
 * wait. A cancel during the wait ends it with `lost`.
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
