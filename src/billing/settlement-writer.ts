/**
 * The one serial writer loop that owns every store call that changes or re-reads money: a batch of queued
 * settlements is committed, then its new balances enter `durable` and its charges leave `pending` in one
 * step (Holds.committed/forget). Loads and refreshes (tasks) run in the same loop, so they never race a
 * commit. A settlement's promise resolves once its batch is durable.
 *
 * Group commit (docs/operations.md "Money"): from `spacedAbovePerSecond` settlements per second (over
 * RATE_WINDOW_MS), commits start at least `commitGapMs` apart and what arrives within the gap shares one;
 * below it each commits at once. With a journal (src/store/journal.ts) a spaced group is appended there
 * (durable, callers released at once) and applied in one larger commit `journalApplyMs` later, or once
 * MAX_BATCH wait; its charges stay in `pending` until then. A killed process's journal is applied at start.
 */
import type { Logger } from "../observability/logger.ts";
import type { MoneyStore, Settlement, SettleResult } from "../store/types.ts";
import type { Hold, Holds } from "./holds.ts";

/** A timer as `setTimeout` returns it (a test's manual timers may use numbers). */
export type TimerHandle = number | ReturnType<typeof setTimeout>;

/** The writer's clock and timers: real by default, driven by hand in tests. */
export interface Timers {
  /** Monotonic milliseconds. */
  now(): number;
  /** Calls `callback` after `ms`; with `unref` the timer alone keeps no process alive. */
  setTimeout(callback: () => void, ms: number, options?: { readonly unref?: boolean }): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

const realTimers: Timers = {
  now: () => performance.now(),
  setTimeout: (callback, ms, options) => {
    const timer = setTimeout(callback, ms);
    if (options?.unref) timer.unref();
    return timer;
  },
  clearTimeout: (handle) => clearTimeout(handle),
};

export interface WriterOptions {
  /** Told about every committed batch (metrics). */
  readonly observeCommit?: (settlements: number, seconds: number) => void;
  /** Least time between the starts of two commits, in ms (COMMIT_GAP_MS). */
  readonly commitGapMs?: number;
  /**
   * Settlements per second from which commits are spaced (SPACED_ABOVE_PER_SECOND; 0: always). The
   * coordinator passes 0 (`--settlement-group-above`): with a journal, grouping costs no latency, and one
   * commit per settlement costs the event loop more (commits, WAL checkpoints).
   */
  readonly spacedAbovePerSecond?: number;
  /** How long journaled settlements wait before they are applied, in ms (JOURNAL_APPLY_MS). */
  readonly journalApplyMs?: number;
  /** The clock and timers the writer waits with (realTimers). */
  readonly timers?: Timers;
}

/** Most settlements in one commit. */
const MAX_BATCH = 512;
/** Least time between the starts of two commits, in ms. */
const COMMIT_GAP_MS = 2;
/** Settlements per second from which commits are spaced by the gap. */
const SPACED_ABOVE_PER_SECOND = 1_000;
/** The window the settlement rate is measured over, in ms. */
const RATE_WINDOW_MS = 100;
/** How long journaled settlements wait before they are applied to the store, in ms. */
const JOURNAL_APPLY_MS = 50;

interface Queued {
  readonly settlement: Settlement;
  readonly hold: Hold | undefined;
  readonly resolve: () => void;
}

/** Work for the writer loop besides commits: loads and refreshes. */
export type Task = () => Promise<void>;

export class SettlementWriter {
  private queue: Queued[] = [];
  private tasks: Task[] = [];
  private running = false;
  /** When the last commit started (timers.now()); -Infinity before the first. */
  private lastCommit = Number.NEGATIVE_INFINITY;
  /** Settlement rate of the last full window, and the window being counted. */
  private rate = 0;
  private windowStart = 0;
  private windowCount = 0;
  private idle: (() => void)[] = [];
  /** Journaled settlements not yet applied to the store (their callers are released already). */
  private unapplied: Queued[] = [];
  private applyDue = false;
  /** Something was journaled since the journal was last emptied. */
  private journalDirty = false;
  private applyTimer: TimerHandle | undefined;
  private readonly timers: Timers;

  constructor(
    private readonly store: MoneyStore,
    private readonly holds: Holds,
    private readonly logger: Logger,
    private readonly options: WriterOptions = {},
  ) {
    this.timers = options.timers ?? realTimers;
    // First in the loop: what a killed process left in the journal is applied before any load or refresh.
    const recovered = store.journal?.recovered ?? [];
    if (recovered.length > 0) void this.inLoop(() => this.recover(recovered));
  }

  /** Queues a settlement for the next group commit; resolves once it is durable. */
  enqueue(settlement: Settlement, hold: Hold | undefined): Promise<void> {
    return new Promise((resolve) => {
      this.queue.push({ settlement, hold, resolve });
      this.countArrival();
      this.kick();
    });
  }

  /** Resolves when every queued settlement is durable and applied to the store (shutdown, reports). */
  flushed(): Promise<void> {
    if (!this.running && this.queue.length === 0 && this.tasks.length === 0 && this.unapplied.length === 0) return Promise.resolve();
    return new Promise((resolve) => {
      this.idle.push(resolve);
      this.kick();
    });
  }

  /**
   * Resolves once every settlement that is durable now (its answer may have been delivered) is in the
   * store, journaled ones included: reports read the store. Does not wait for later traffic.
   */
  applied(): Promise<void> {
    if (this.unapplied.length === 0) return Promise.resolve();
    return this.inLoop(async () => {
      if (this.unapplied.length > 0) await this.commitTimed(this.unapplied.splice(0));
      this.journalApplied();
    });
  }

  /** Runs `task` in the writer loop, between commits; resolves or rejects with it. */
  inLoop(task: Task): Promise<void> {
    return new Promise((resolve, reject) => {
      this.tasks.push(() => task().then(resolve, reject));
      this.kick();
    });
  }

  /** Counts one settlement towards the rate (settlements per second over the last full window). */
  private countArrival(): void {
    const now = this.timers.now();
    const elapsed = now - this.windowStart;
    if (elapsed >= RATE_WINDOW_MS) {
      this.rate = (this.windowCount * 1000) / elapsed;
      this.windowStart = now;
      this.windowCount = 0;
    }
    this.windowCount++;
  }

  private kick(): void {
    if (this.running) return;
    this.running = true;
    // Quiet traffic is committed at once; under load the writer waits out the rest of the gap so that
    // more settlements share one commit, unless a journal makes them durable without a commit. Loads and
    // refreshes (tasks) never wait: a request is behind them.
    const wait =
      this.spaced() && !this.store.journal ? (this.options.commitGapMs ?? COMMIT_GAP_MS) - (this.timers.now() - this.lastCommit) : 0;
    if (wait > 0 && this.tasks.length === 0 && this.queue.length < MAX_BATCH) this.timers.setTimeout(() => void this.loop(), wait);
    else setImmediate(() => void this.loop());
  }

  private spaced(): boolean {
    return this.rate >= (this.options.spacedAbovePerSecond ?? SPACED_ABOVE_PER_SECOND);
  }

  private async loop(): Promise<void> {
    try {
      const tasks = this.tasks;
      this.tasks = [];
      for (const task of tasks) await this.runTask(task);
      if (this.queue.length > 0) {
        const batch = this.queue.length > MAX_BATCH ? this.queue.splice(0, MAX_BATCH) : this.queue.splice(0);
        if (!(this.spaced() && this.journaled(batch))) await this.commitTimed(this.unapplied.splice(0).concat(batch));
      }
      if (this.unapplied.length >= MAX_BATCH || (this.unapplied.length > 0 && (this.applyDue || this.idle.length > 0))) {
        await this.commitTimed(this.unapplied.splice(0));
      }
      if (this.unapplied.length === 0) this.journalApplied();
    } finally {
      this.running = false;
      if (this.queue.length > 0 || this.tasks.length > 0 || (this.unapplied.length > 0 && this.idle.length > 0)) {
        this.kick();
      } else if (this.unapplied.length === 0) {
        const idle = this.idle;
        this.idle = [];
        for (const resolve of idle) resolve();
      }
    }
  }

  /**
   * Makes `batch` durable in the journal and releases its callers; the settlements wait in `unapplied`
   * for the next apply. False (nothing done) when there is no journal or it cannot be written.
   */
  private journaled(batch: Queued[]): boolean {
    const journal = this.store.journal;
    if (!journal) return false;
    try {
      journal.append(batch.map((q) => q.settlement));
    } catch (e) {
      this.logger.error("settlement journal write failed; committing directly", { error_name: e instanceof Error ? e.name : "error" });
      return false;
    }
    this.journalDirty = true;
    for (const q of batch) {
      this.unapplied.push(q);
      q.resolve();
    }
    if (this.applyTimer === undefined) {
      // Shutdown applies what is left (flushed); the timer alone keeps no process alive.
      this.applyTimer = this.timers.setTimeout(
        () => {
          this.applyTimer = undefined;
          this.applyDue = true;
          this.kick();
        },
        this.options.journalApplyMs ?? JOURNAL_APPLY_MS,
        { unref: true },
      );
    }
    return true;
  }

  /** Everything journaled is in the store: empty the journal (once per apply, not per direct commit). */
  private journalApplied(): void {
    if (!this.journalDirty) return;
    this.journalDirty = false;
    this.applyDue = false;
    if (this.applyTimer !== undefined) this.timers.clearTimeout(this.applyTimer);
    this.applyTimer = undefined;
    try {
      this.store.journal?.clear();
    } catch (e) {
      // Harmless for money (applying again changes nothing); the file only grows until the next clear.
      this.logger.warn("settlement journal could not be emptied", { error_name: e instanceof Error ? e.name : "error" });
    }
  }

  /** Applies what a killed process left in the journal (some may be in the store already), then empties it. */
  private async recover(recovered: readonly Settlement[]): Promise<void> {
    for (let i = 0; i < recovered.length; i += MAX_BATCH) {
      await this.commit(recovered.slice(i, i + MAX_BATCH).map((settlement) => ({ settlement, hold: undefined, resolve: () => {} })));
    }
    this.store.journal?.clear();
    this.logger.info("settlement journal applied", { settlements: recovered.length });
  }

  private async commitTimed(batch: Queued[]): Promise<void> {
    const started = this.timers.now();
    this.lastCommit = started;
    await this.commit(batch);
    this.options.observeCommit?.(batch.length, (this.timers.now() - started) / 1000);
  }

  private async runTask(task: Task): Promise<void> {
    try {
      await task();
    } catch {
      // The task's own promise carries the failure to its caller.
    }
  }

  private async commit(batch: Queued[]): Promise<void> {
    try {
      this.apply(batch, await this.store.settle(batch.map((q) => q.settlement)));
    } catch {
      // One refused write must not take the others with it: retry one by one.
      for (const q of batch) {
        try {
          this.apply([q], await this.store.settle([q.settlement]));
        } catch (e) {
          this.logger.error("settlement failed", {
            request_id: q.settlement.requestId,
            account_id: q.settlement.accountId,
            error_name: e instanceof Error ? e.name : "error",
          });
          this.forget(q);
          q.resolve();
        }
      }
    }
  }

  /** The batch is durable: new balances in, committed charges out of pending, callers released. */
  private apply(batch: readonly Queued[], result: SettleResult): void {
    for (const q of batch) this.forget(q);
    this.holds.committed(result);
    for (const q of batch) q.resolve();
  }

  private forget(q: Queued): void {
    if (q.hold) this.holds.forget(q.hold, q.settlement.charge);
  }
}
