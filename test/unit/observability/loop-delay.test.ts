/**
 * The event-loop delay histogram in /metrics (issue 25 point 4; src/observability/loop-delay.ts): a
 * deliberate 30 ms busy-wait on the loop is counted above the 20 ms bound (not an upper bound: on a
 * loaded shared host the process may also be descheduled around the wait, which only adds lateness).
 */
import { describe, expect, test } from "bun:test";
import { createMetrics } from "../../../src/observability/metrics.ts";

/** Cumulative count of the loop-delay bucket `le` in a rendered /metrics text. */
function bucket(text: string, le: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`umbra_event_loop_delay_seconds_bucket{le="${le}"}`));
  if (!line) throw new Error(`no bucket ${le}`);
  return Number(line.split(" ")[1]);
}

describe("event-loop delay histogram", () => {
  test("a 30 ms busy-wait lands above the 20 ms bound", async () => {
    const metrics = createMetrics();
    try {
      await Bun.sleep(20);
      const before = await metrics.render();
      const started = performance.now();
      while (performance.now() - started < 30) {
        // a stall on the event loop
      }
      await Bun.sleep(20);
      const after = await metrics.render();
      const above20 = (text: string) => bucket(text, "+Inf") - bucket(text, "0.02");
      expect(above20(after) - above20(before)).toBeGreaterThanOrEqual(1);
      for (const le of ["0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "+Inf"]) expect(bucket(after, le)).toBeGreaterThan(0);
    } finally {
      metrics.close();
    }
  });
});
