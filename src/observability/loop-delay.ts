/**
 * Event-loop delay, measured as the lateness of a short self-rescheduling timer: each tick records how much
 * later than `intervalMs` after the previous one it ran. Bun 1.4.5 has perf_hooks.monitorEventLoopDelay (a
 * 30 ms busy-wait showed as 29.3 ms), but it exposes only min, max, mean and percentiles, not the samples a
 * Prometheus histogram's buckets need; this timer gives one sample per tick. Resolution: a stall of S ms is
 * recorded as between S - intervalMs and S. Cost, measured on the 2-core host in an otherwise idle
 * process: ~13 ms of CPU per second at 2 ms (a wake-up each), ~8 at 5 ms; under load the loop is awake
 * anyway and a tick costs one observation. One timer, unref'd, restarted by `refresh()` on each tick: a new
 * timer per tick was ~500 objects a second of garbage in an idle process (bench/HISTORY.md).
 */

export interface LoopDelayMonitor {
  stop(): void;
}

/** Calls `observe(seconds)` with each tick's lateness until stopped. */
export function monitorLoopDelay(observe: (seconds: number) => void, intervalMs = 2): LoopDelayMonitor {
  let stopped = false;
  let last = performance.now();
  const tick = (): void => {
    if (stopped) return;
    const now = performance.now();
    observe(Math.max(0, now - last - intervalMs) / 1000);
    last = now;
    timer.refresh(); // due intervalMs from now, as a new timer would be
  };
  const timer = setTimeout(tick, intervalMs);
  timer.unref();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
