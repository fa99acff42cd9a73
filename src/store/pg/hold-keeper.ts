/**
 * A replica's upkeep of its holds (money-authority.ts): every `renewMs` (TTL/3) one renewal of all its
 * holds, then a sweep of expired ones (any replica may sweep; the dead replica's holds go this way), and
 * every `checkMs` (margin/2) a look at the deadlines: each hold newly past its deadline (no renewal in
 * time, or swept) is reported once to `onOverdue`, whose stream must stop with the in-band error. A
 * renewal that hangs or fails never delays the deadline checks. Timers are injected; nothing else here
 * keeps time.
 */
import type { MoneyAuthority } from "./money-authority.ts";

export type KeeperTimerHandle = unknown;

/** The timers the keeper runs on (structurally the settlement writer's, so tests share theirs). */
export interface KeeperTimers {
  now(): number;
  setTimeout(callback: () => void, ms: number, options?: { readonly unref?: boolean }): KeeperTimerHandle;
  clearTimeout(handle: KeeperTimerHandle): void;
}

export interface HoldKeeperOptions {
  readonly renewMs: number;
  readonly checkMs: number;
  readonly timers: KeeperTimers;
  /** Holds newly past their deadline; each id once. */
  readonly onOverdue: (requestIds: readonly string[]) => void;
  /** A renewal or sweep that failed (the database did not answer); the deadlines run on. */
  readonly onError: (e: unknown) => void;
  /** Holds a renewal gave back because no request of this replica held them any more. */
  readonly onReleased?: (count: number) => void;
}

export class HoldKeeper {
  private timer: KeeperTimerHandle | undefined;
  private lastRenew = Number.NEGATIVE_INFINITY;
  private upkeep: Promise<void> | undefined;
  private readonly reported = new Set<string>();
  private stopped = false;

  constructor(
    private readonly authority: MoneyAuthority,
    private readonly options: HoldKeeperOptions,
  ) {}

  start(): void {
    this.stopped = false;
    this.tick();
  }

  /** Stops the timer; resolves once a renewal in flight has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) this.options.timers.clearTimeout(this.timer);
    this.timer = undefined;
    await this.upkeep;
  }

  private tick(): void {
    const { timers } = this.options;
    if (this.upkeep === undefined && timers.now() - this.lastRenew >= this.options.renewMs) {
      this.lastRenew = timers.now();
      this.upkeep = this.renewAndSweep().finally(() => {
        this.upkeep = undefined;
        this.check();
      });
    }
    this.check();
    if (!this.stopped) this.timer = timers.setTimeout(() => this.tick(), this.options.checkMs, { unref: true });
  }

  private async renewAndSweep(): Promise<void> {
    try {
      const { released } = await this.authority.renew();
      if (released > 0) this.options.onReleased?.(released);
      await this.authority.sweep();
    } catch (e) {
      this.options.onError(e);
    }
  }

  private check(): void {
    const overdue = this.authority.deadlines.overdue().filter((id) => !this.reported.has(id));
    for (const id of overdue) this.reported.add(id);
    // Forgotten holds (settled, released) need no memory here either.
    for (const id of this.reported) if (this.authority.deadlines.deadline(id) === undefined) this.reported.delete(id);
    if (overdue.length > 0) this.options.onOverdue(overdue);
  }
}
