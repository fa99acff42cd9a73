/**
 * Attempt.poll() and wait() (the answer writers' and the dispatcher's way, no promise per event): poll
 * takes what is queued, then undefined, then `lost` once the attempt ended; wait's listener gets the next
 * event a microtask after its push, listeners of several attempts in one pass; a cancel hands it `lost`.
 */
import { describe, expect, test } from "bun:test";
import { Attempt } from "../../../src/fleet/attempt.ts";

const make = () => new Attempt("req_1", 0, "prov_1", "acct_1", 0, { release: () => {} });

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
