/**
 * Timers the test drives (src/billing/settlement-writer.ts `Timers`): the clock stands still until
 * `advance`, which fires the timers that fall due in order. Nothing waits for real time.
 */
import type { TimerHandle, Timers } from "../../src/billing/settlement-writer.ts";

export interface ManualTimers extends Timers {
  /** Moves the clock `ms` on, firing each timer due by then at its own time. */
  advance(ms: number): void;
  /** Timers set and not yet fired or cleared. */
  pending(): number;
}

export function manualTimers(): ManualTimers {
  let now = 0;
  let next = 1;
  const due = new Map<TimerHandle, { readonly at: number; readonly callback: () => void }>();
  return {
    now: () => now,
    setTimeout: (callback, ms) => {
      const handle = next++;
      due.set(handle, { at: now + Math.max(0, ms), callback });
      return handle;
    },
    clearTimeout: (handle) => void due.delete(handle),
    pending: () => due.size,
    advance(ms) {
      const end = now + ms;
      for (;;) {
        // The earliest due timer; among equals, the first set (Map order).
        let first: [TimerHandle, { readonly at: number; readonly callback: () => void }] | undefined;
        for (const entry of due) if (entry[1].at <= end && (!first || entry[1].at < first[1].at)) first = entry;
        if (!first) break;
        due.delete(first[0]);
        now = first[1].at;
        first[1].callback();
      }
      now = end;
    },
  };
}

/** Lets the event loop turn `n` times (setImmediate, no timers): whatever was going to happen now has happened. */
export async function turns(n = 20): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}
