/**
 * provider/turn-end.ts: work queued for the end of the turn runs in one pass, in order; work queued
 * during the pass (the connection's batch after the attempts' flushes) runs in the same pass, before a
 * setImmediate scheduled after the first; a throw does not stop the rest of the pass nor the next one.
 */
import { describe, expect, test } from "bun:test";
import { atTurnEnd } from "../../../src/provider/turn-end.ts";

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe("atTurnEnd", () => {
  test("one pass, in order, with what the pass itself queues", async () => {
    const order: string[] = [];
    const note = (what: string, then?: string) => {
      order.push(what);
      if (then) atTurnEnd(note, then, undefined);
    };
    atTurnEnd(note, "flush a", "batch");
    atTurnEnd(note, "flush b", undefined);
    setImmediate(() => order.push("next immediate"));
    expect(order).toEqual([]);
    await turn();
    await turn();
    expect(order).toEqual(["flush a", "flush b", "batch", "next immediate"]);
  });

  test("both arguments reach the function", async () => {
    const got: unknown[] = [];
    atTurnEnd((a: number, b: string) => got.push(a, b), 7, "x");
    await turn();
    expect(got).toEqual([7, "x"]);
  });

  test("a throw is rethrown once the pass is done; the rest of the pass and later passes run", async () => {
    // In a process of its own: the throw is an uncaught exception there, as in the provider.
    const script = `
      import { atTurnEnd } from ${JSON.stringify(`${import.meta.dir}/../../../src/provider/turn-end.ts`)};
      const seen = [];
      process.on("uncaughtException", (e) => seen.push("uncaught " + e.message));
      atTurnEnd(() => { throw new Error("boom"); }, undefined, undefined);
      atTurnEnd((w) => seen.push(w), "after the throw", undefined);
      setImmediate(() => atTurnEnd((w) => { seen.push(w); console.log(JSON.stringify(seen)); }, "next pass", undefined));
    `;
    const proc = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe" });
    const out = await new Response(proc.stdout).text();
    expect(await proc.exited).toBe(0);
    expect(JSON.parse(out)).toEqual(["after the throw", "uncaught boom", "next pass"]);
  });
});
