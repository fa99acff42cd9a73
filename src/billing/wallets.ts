/**
 * Reservations held in memory against durable balances, and settlements committed in small groups.
 *
 * Per account: `durable` (the balance in the store as this process last saw it), `held` (reservations
 * of requests in flight) and `pending` (settled charges not yet committed). Available money is
 * durable - held - pending. Per key with a spend cap: the same against the cap and the key's durable
 * spent total. Reserving is a synchronous check-and-hold in memory once the account is loaded, so no
 * concurrency can pass a limit: JavaScript runs one check at a time.
 *
 * One serial writer loop owns every store interaction that changes or re-reads money: it commits the
 * queued settlements as one batch (everything that queued since the last commit), then applies the
 * batch's new balances and drops the committed charges from `pending` in the same step, so `available`
 * is exact at every moment. Balance refreshes (to see credits written by another process, such as the
 * admin CLI) run in the same loop, so they never race a commit.
 *
 * A settlement's promise resolves once its batch is durable: callers finish the response after that,
 * so a delivered response's charge survives a crash. Reservations live only in memory: a restarted
 * coordinator holds none.
 *
 * Group commit: a commit has a fixed cost several times one settlement's (SQLite writes every page the
 * batch touched to the WAL: about 10-20 us per page, 60-70 us for a one-settlement batch on the 2-core
 * machine, against about 6 us per settlement in a batch of 64; bench/README.md). So commits are spaced
 * at least COMMIT_GAP_MS apart: a settlement arriving after a quiet gap is committed at once, and under
 * load everything that arrives within the gap shares one commit. That bounds commits to about 500 per
 * second whatever the load, at the price of at most COMMIT_GAP_MS of extra latency per response.
 * Spacing only pays under load: below SPACED_ABOVE_PER_SECOND settlements per second (measured over the
 * last RATE_WINDOW_MS) every settlement is committed at once. At 500 req/s the gap was the largest part
 * of the latency Umbra adds (1.2 of 2.6 ms at p50, bench/README.md "overhead against peers"), while
 * one-settlement commits at that rate cost a few percent of one core.
 *
 * Settlement journal: when the store has one (the coordinator's SQLite file, src/store/journal.ts) and
 * commits would be spaced, a group is made durable by appending it to the journal instead (one write,
 * no gap to wait out), its callers are released at once, and the journaled settlements are applied to
 * the store JOURNAL_APPLY_MS later (or as soon as MAX_BATCH of them are waiting) in one larger commit,
 * after which the journal is emptied. Until applied, their charges stay in `pending`, so `available` is
 * exact throughout. At start, settlements a killed process left in the journal are applied before any
 * load or refresh (they run in the same loop), so no balance is read without them. The coordinator
 * passes spacedAbovePerSecond 0 by default (`--settlement-group-above`): with a journal, grouping costs
 * no latency, and one commit per settlement costs the event loop more (commits, WAL checkpoints).
 */
import { Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import type { MoneyStore, Settlement } from "../store/types.ts";

interface AccountState {
  durable: number;
  held: number;
  pending: number;
}

interface KeyState {
  spent: number;
  held: number;
  pending: number;
}

/** Money set aside for one request; settle or release it exactly once. */
export interface Hold {
  readonly accountId: string;
  readonly keyId: string | null;
  readonly amount: number;
  /** The key's cap when one applies (the key state is tracked only then). */
  readonly capped: boolean;
  done: boolean;
}

export interface HoldRequest {
  readonly accountId: string;
  readonly keyId: string | null;
  readonly spendCap: number | null;
  readonly amount: number;
}

interface Queued {
  readonly settlement: Settlement;
  readonly hold: Hold | undefined;
  readonly resolve: () => void;
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

export interface WalletOptions {
  /** Told about every committed batch (metrics). */
  readonly observeCommit?: (settlements: number, seconds: number) => void;
  /** Least time between the starts of two commits, in ms (COMMIT_GAP_MS). */
  readonly commitGapMs?: number;
  /** Settlements per second from which commits are spaced (SPACED_ABOVE_PER_SECOND; 0: always). */
  readonly spacedAbovePerSecond?: number;
  /** How long journaled settlements wait before they are applied, in ms (JOURNAL_APPLY_MS). */
  readonly journalApplyMs?: number;
}

/** Work for the writer loop besides commits: loads and refreshes. */
type Task = () => Promise<void>;

export class Wallets {
  private readonly accounts = new Map<string, AccountState>();
  private readonly keys = new Map<string, KeyState>();
  private readonly loading = new Map<string, Promise<void>>();
  private queue: Queued[] = [];
  private tasks: Task[] = [];
  private running = false;
  /** When the last commit started (performance.now()); -Infinity before the first. */
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
  private applyTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly store: MoneyStore,
    private readonly logger: Logger,
    private readonly options: WalletOptions = {},
  ) {
    const recovered = store.journal?.recovered ?? [];
    if (recovered.length > 0) void this.inLoop(() => this.recover(recovered));
  }

  /** Money currently held for an account's requests in flight (admin: reserved amount). */
  reservedFor(accountId: string): number {
    return this.accounts.get(accountId)?.held ?? 0;
  }

  /**
   * Holds `amount` for a request. Throws 402 insufficient_funds (account balance) or 402
   * insufficient_quota (the key's spend cap). Before refusing for the balance, re-reads it once, so a
   * credit written elsewhere counts at once.
   */
  async reserve(request: HoldRequest): Promise<Hold> {
    return this.tryReserve(request) ?? this.reserveSlow(request);
  }

  /**
   * The fast path: when the account (and a capped key) are loaded and the money is there, holds it
   * synchronously; otherwise returns undefined and `reserve` takes the slow path (load, refresh, 402).
   */
  tryReserve(request: HoldRequest): Hold | undefined {
    const account = this.accounts.get(request.accountId);
    if (!account || account.durable - account.held - account.pending < request.amount) return undefined;
    const capped = request.keyId !== null && request.spendCap !== null;
    if (capped) {
      const key = this.keys.get(request.keyId as string);
      if (!key || (request.spendCap as number) - key.spent - key.held - key.pending < request.amount) return undefined;
      key.held += request.amount;
    }
    account.held += request.amount;
    return { accountId: request.accountId, keyId: request.keyId, amount: request.amount, capped, done: false };
  }

  private async reserveSlow(request: HoldRequest): Promise<Hold> {
    await this.load(request);
    if (!this.fitsAccount(request.accountId, request.amount)) {
      await this.refresh(request.accountId);
      if (!this.fitsAccount(request.accountId, request.amount)) {
        throw Errors.insufficientFunds("the account balance is too low for this request; add credit or lower max_tokens");
      }
    }
    const capped = request.keyId !== null && request.spendCap !== null;
    if (capped) {
      const key = this.keys.get(request.keyId as string) as KeyState;
      if ((request.spendCap as number) - key.spent - key.held - key.pending < request.amount) {
        throw Errors.insufficientQuota("this API key has reached its spend cap");
      }
      key.held += request.amount;
    }
    (this.accounts.get(request.accountId) as AccountState).held += request.amount;
    return { accountId: request.accountId, keyId: request.keyId, amount: request.amount, capped, done: false };
  }

  /** Returns a hold untouched (nothing was generated). Idempotent. */
  release(hold: Hold): void {
    if (hold.done) return;
    hold.done = true;
    this.unhold(hold);
  }

  /**
   * Settles a request: the charge (never more than the hold) moves from held to pending, the rest is
   * released, and the settlement is queued for the next group commit. Resolves once durable.
   * `hold` is undefined for requests that reserved nothing (self-route): only usage is recorded.
   */
  settle(hold: Hold | undefined, settlement: Settlement): Promise<void> {
    if (hold) {
      if (hold.done) return Promise.resolve();
      // Checked before the hold is marked done, so that the caller can still release it.
      if (settlement.charge > hold.amount) throw new Error("a charge may never exceed its reservation");
      hold.done = true;
      this.unhold(hold);
      (this.accounts.get(hold.accountId) as AccountState).pending += settlement.charge;
      if (hold.capped) (this.keys.get(hold.keyId as string) as KeyState).pending += settlement.charge;
    }
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

  /** Re-reads an account's durable balance in the writer loop (a credit was written elsewhere). */
  refresh(accountId: string): Promise<void> {
    if (!this.accounts.has(accountId)) return Promise.resolve();
    return this.inLoop(async () => {
      const balance = await this.store.balance(accountId);
      const state = this.accounts.get(accountId);
      if (state && balance !== undefined) state.durable = balance;
    });
  }

  /** Runs `task` in the writer loop, between commits; resolves or rejects with it. */
  private inLoop(task: Task): Promise<void> {
    return new Promise((resolve, reject) => {
      this.tasks.push(() => task().then(resolve, reject));
      this.kick();
    });
  }

  private fitsAccount(accountId: string, amount: number): boolean {
    const a = this.accounts.get(accountId) as AccountState;
    return a.durable - a.held - a.pending >= amount;
  }

  private unhold(hold: Hold): void {
    (this.accounts.get(hold.accountId) as AccountState).held -= hold.amount;
    if (hold.capped) (this.keys.get(hold.keyId as string) as KeyState).held -= hold.amount;
  }

  private async load(request: HoldRequest): Promise<void> {
    const needKey = request.keyId !== null && request.spendCap !== null && !this.keys.has(request.keyId);
    if (this.accounts.has(request.accountId) && !needKey) return;
    const id = `${request.accountId}\n${needKey ? request.keyId : ""}`;
    let pending = this.loading.get(id);
    if (!pending) {
      pending = this.loadNow(request.accountId, needKey ? request.keyId : null).finally(() => this.loading.delete(id));
      this.loading.set(id, pending);
    }
    await pending;
  }

  /** Loads through the writer loop, so a load never interleaves with a commit. */
  private loadNow(accountId: string, keyId: string | null): Promise<void> {
    return this.inLoop(async () => {
      if (!this.accounts.has(accountId)) {
        const balance = await this.store.balance(accountId);
        if (balance === undefined) throw new Error("unknown account");
        this.accounts.set(accountId, { durable: balance, held: 0, pending: 0 });
      }
      if (keyId !== null && !this.keys.has(keyId)) {
        this.keys.set(keyId, { spent: (await this.store.keySpent(keyId)) ?? 0, held: 0, pending: 0 });
      }
    });
  }

  /** Counts one settlement towards the rate (settlements per second over the last full window). */
  private countArrival(): void {
    const now = performance.now();
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
      this.spaced() && !this.store.journal ? (this.options.commitGapMs ?? COMMIT_GAP_MS) - (performance.now() - this.lastCommit) : 0;
    if (wait > 0 && this.tasks.length === 0 && this.queue.length < MAX_BATCH) setTimeout(() => void this.loop(), wait);
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
      this.applyTimer = setTimeout(() => {
        this.applyTimer = undefined;
        this.applyDue = true;
        this.kick();
      }, this.options.journalApplyMs ?? JOURNAL_APPLY_MS);
      // Shutdown applies what is left (flushed); the timer alone keeps no process alive.
      this.applyTimer.unref?.();
    }
    return true;
  }

  /** Everything journaled is in the store: empty the journal (once per apply, not per direct commit). */
  private journalApplied(): void {
    if (!this.journalDirty) return;
    this.journalDirty = false;
    this.applyDue = false;
    clearTimeout(this.applyTimer);
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
    const started = performance.now();
    this.lastCommit = started;
    await this.commit(batch);
    this.options.observeCommit?.(batch.length, (performance.now() - started) / 1000);
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
  private apply(batch: readonly Queued[], result: Awaited<ReturnType<MoneyStore["settle"]>>): void {
    for (const q of batch) this.forget(q);
    for (const [id, balance] of result.balances) {
      const state = this.accounts.get(id);
      if (state) state.durable = balance;
    }
    for (const [id, spent] of result.keySpent) {
      const state = this.keys.get(id);
      if (state) state.spent = spent;
    }
    for (const q of batch) q.resolve();
  }

  /** Drops a queued charge from `pending` (it is now in `durable`, or it failed for good). */
  private forget(q: Queued): void {
    if (!q.hold) return;
    const charge = q.settlement.charge;
    (this.accounts.get(q.hold.accountId) as AccountState).pending -= charge;
    if (q.hold.capped) (this.keys.get(q.hold.keyId as string) as KeyState).pending -= charge;
  }
}
