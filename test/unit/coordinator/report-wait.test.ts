/**
 * Reports (admin API, console) wait for a cluster replica's settlement journal to reach the database, but
 * not for longer than their bound: a journal stuck behind a database outage must not hold a report until
 * the outage ends (src/coordinator/app.ts settledWithin).
 */
import { describe, expect, test } from "bun:test";
import { settledWithin } from "../../../src/coordinator/app.ts";

describe("a report's wait for the journal", () => {
  test("returns once the journal is flushed", async () => {
    let flushed = false;
    const flush = async () => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      flushed = true;
    };
    const authority = { flushed: flush };
    await settledWithin(authority, 5_000);
    expect(flushed).toBe(true);
  });

  test("returns after its bound when the journal never flushes", async () => {
    const started = performance.now();
    await settledWithin({ flushed: () => new Promise<void>(() => {}) }, 50);
    expect(performance.now() - started).toBeGreaterThanOrEqual(45);
  });
});
