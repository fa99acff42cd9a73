/**
 * Cluster mode's upkeep of this replica's holds for createApp: a HoldKeeper (store/pg/hold-keeper.ts) on
 * the process's timers, its overdue holds' answers stopped and its failures logged.
 */
import type { Logger } from "../observability/logger.ts";
import { HoldKeeper } from "../store/pg/hold-keeper.ts";
import type { MoneyAuthority } from "../store/pg/money-authority.ts";

/** Renews this replica's holds every TTL/3 (sweeping expired ones after); every margin/2, `stop`s the overdue. */
export function startHoldKeeper(authority: MoneyAuthority, logger: Logger, stop: (requestIds: readonly string[]) => void): HoldKeeper {
  const { ttlMs, marginMs } = authority.deadlines;
  const keeper = new HoldKeeper(authority, {
    renewMs: Math.max(1, Math.floor(ttlMs / 3)),
    checkMs: Math.max(1, Math.floor(marginMs / 2)),
    timers: {
      now: () => performance.now(),
      setTimeout: (callback, ms, options) => {
        const t = setTimeout(callback, ms);
        if (options?.unref) t.unref?.();
        return t;
      },
      clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
    },
    onOverdue: (ids) => {
      logger.warn("holds overdue: their answers are stopped", { count: ids.length });
      stop(ids);
    },
    onError: () => logger.warn("hold renewal or sweep failed", { reason: "database" }),
    onReleased: (count) => logger.warn("holds released: their requests ended without a settlement", { count }),
  });
  keeper.start();
  return keeper;
}
