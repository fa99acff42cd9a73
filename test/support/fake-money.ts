/**
 * An in-memory MoneyStore (src/store/types.ts) with the contract's semantics (a batch applies
 * whole or not at all, a request id settles once, no balance below zero, earnings and fee credited),
 * under the test's control: settles and reads can be held until released, chosen request ids refused,
 * every call recorded in order, and two store calls in flight at once counted as an overlap.
 */
import { type MoneyStore, PLATFORM_ACCOUNT_ID, type Settlement, type SettleResult } from "../../src/store/types.ts";

/** An in-memory MoneyStore with the contract's semantics, under the test's control. */
export class FakeMoney implements MoneyStore {
  readonly balances = new Map<string, number>();
  readonly spent = new Map<string, number>();
  readonly settled = new Set<string>();
  /** Request ids of every settle call, in call order. */
  readonly batches: string[][] = [];
  /** Every settlement of every settle call, in call order (applied or not). */
  readonly settlements: Settlement[] = [];
  /** Every call and its end, in order: "balance A", "settle start r-1,r-2", "settle end" ... */
  readonly events: string[] = [];
  /** Request ids whose batches are refused (thrown at, nothing written). */
  readonly refused = new Set<string>();
  /** When set, settles (or balance and key reads) wait for release(). */
  holdSettles = false;
  holdReads = false;
  /** Store calls that started while another was in flight. */
  overlaps = 0;
  private inFlight = 0;
  private readonly gates: (() => void)[] = [];
  private waiters: { readonly what: () => boolean; readonly resolve: () => void }[] = [];

  constructor(balances: Record<string, number>, spent: Record<string, number> = {}) {
    for (const [id, b] of Object.entries(balances)) this.balances.set(id, b);
    for (const [id, s] of Object.entries(spent)) this.spent.set(id, s);
  }

  async balance(accountId: string): Promise<number | undefined> {
    return this.call(`balance ${accountId}`, this.holdReads, () => this.balances.get(accountId));
  }

  async keySpent(keyId: string): Promise<number | undefined> {
    return this.call(`keySpent ${keyId}`, this.holdReads, () => this.spent.get(keyId));
  }

  async settle(batch: readonly Settlement[]): Promise<SettleResult> {
    const ids = batch.map((s) => s.requestId);
    this.batches.push(ids);
    this.settlements.push(...batch);
    return this.call(`settle ${ids.join(",")}`, this.holdSettles, () => this.apply(batch));
  }

  /** Lets the oldest held call go on. */
  release(): void {
    const gate = this.gates.shift();
    if (!gate) throw new Error("no call is held");
    gate();
  }

  /** Resolves once at least `n` settle calls have started. */
  settlesStarted(n: number): Promise<void> {
    return this.until(() => this.batches.length >= n);
  }

  /** Resolves once `n` calls are held. */
  held(n: number): Promise<void> {
    return this.until(() => this.gates.length >= n);
  }

  private until(what: () => boolean): Promise<void> {
    if (what()) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ what, resolve }));
  }

  private wake(): void {
    const ready = this.waiters.filter((w) => w.what());
    this.waiters = this.waiters.filter((w) => !w.what());
    for (const w of ready) w.resolve();
  }

  private async call<T>(name: string, hold: boolean, body: () => T): Promise<T> {
    if (this.inFlight > 0) this.overlaps++;
    this.inFlight++;
    this.events.push(`${name}`);
    try {
      if (hold) {
        const released = new Promise<void>((resolve) => this.gates.push(resolve));
        this.wake();
        await released;
      }
      this.wake();
      return body();
    } finally {
      this.inFlight--;
      this.events.push(`end ${name}`);
    }
  }

  /** The whole batch or nothing, like a transaction. */
  private apply(batch: readonly Settlement[]): SettleResult {
    if (batch.some((s) => this.refused.has(s.requestId))) throw new Error("refused by the fake store");
    const balances = new Map<string, number>();
    const keySpent = new Map<string, number>();
    const seen = new Set(this.settled);
    const move = (id: string, amount: number) => {
      const before = balances.get(id) ?? this.balances.get(id) ?? (id === PLATFORM_ACCOUNT_ID ? 0 : undefined);
      if (before === undefined) throw new Error(`unknown account ${id}`);
      if (before + amount < 0) throw new Error("below zero");
      balances.set(id, before + amount);
    };
    const applied = batch.map((s) => {
      if (seen.has(s.requestId)) return false;
      seen.add(s.requestId);
      if (s.charge > 0) {
        move(s.accountId, -s.charge);
        if (s.keyId !== null) keySpent.set(s.keyId, (keySpent.get(s.keyId) ?? this.spent.get(s.keyId) ?? 0) + s.charge);
        if (s.providerAccountId !== null && s.earning > 0) move(s.providerAccountId, s.earning);
        if (s.fee > 0) move(PLATFORM_ACCOUNT_ID, s.fee);
      }
      return true;
    });
    for (const id of seen) this.settled.add(id);
    for (const [id, b] of balances) this.balances.set(id, b);
    for (const [id, s] of keySpent) this.spent.set(id, s);
    return { applied, balances, keySpent };
  }
}
