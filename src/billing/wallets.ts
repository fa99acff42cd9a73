/**
 * Reservations held in memory against durable balances and key caps (holds.ts), and settlements made
 * durable by the serial writer loop (settlement-writer.ts).
 *
 * Reserving is a synchronous check-and-hold once the account (and a capped key) are loaded; loads and
 * balance refreshes run in the writer loop, so they never race a commit. Before refusing for the
 * balance, a reservation re-reads it once, so a credit written elsewhere (the admin CLI) counts at once.
 *
 * A settlement's promise resolves once it is durable: callers finish the response after that, so a
 * delivered response's charge survives a crash. Reservations live only in memory: a restarted
 * coordinator holds none.
 */
import { Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import type { MoneyStore, Settlement } from "../store/types.ts";
import { type Hold, type HoldRequest, Holds } from "./holds.ts";
import { SettlementWriter, type WriterOptions } from "./settlement-writer.ts";

export type { CappedHold, Hold, HoldRequest, UncappedHold } from "./holds.ts";
export type { Timers } from "./settlement-writer.ts";
export type WalletOptions = WriterOptions;

export class Wallets {
  private readonly holds = new Holds();
  private readonly loading = new Map<string, Promise<void>>();
  private readonly writer: SettlementWriter;

  constructor(
    private readonly store: MoneyStore,
    logger: Logger,
    options: WalletOptions = {},
  ) {
    this.writer = new SettlementWriter(store, this.holds, logger, options);
  }

  /** Money currently held for an account's requests in flight (admin: reserved amount). */
  reservedFor(accountId: string): number {
    return this.holds.reservedFor(accountId);
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
    const held = this.holds.hold(request);
    return typeof held === "string" ? undefined : held;
  }

  private async reserveSlow(request: HoldRequest): Promise<Hold> {
    await this.load(request);
    let held = this.holds.hold(request);
    if (held === "funds") {
      await this.refresh(request.accountId);
      held = this.holds.hold(request);
    }
    if (held === "funds") throw Errors.insufficientFunds("the account balance is too low for this request; add credit or lower max_tokens");
    if (held === "quota") throw Errors.insufficientQuota("this API key has reached its spend cap");
    if (held === "unloaded") throw new Error("the account was not loaded");
    return held;
  }

  /** Returns a hold untouched (nothing was generated). Idempotent. */
  release(hold: Hold): void {
    this.holds.release(hold);
  }

  /**
   * Settles a request: the charge (never more than the hold) moves from held to pending, the rest is
   * released, and the settlement is queued for the next group commit. Resolves once durable.
   * `hold` is undefined for requests that reserved nothing (self-route): only usage is recorded.
   * A hold that has ended already is ignored.
   */
  settle(hold: Hold | undefined, settlement: Settlement): Promise<void> {
    if (hold && !this.holds.settle(hold, settlement.charge)) return Promise.resolve();
    return this.writer.enqueue(settlement, hold);
  }

  /** Resolves when every queued settlement is durable and applied to the store (shutdown, reports). */
  flushed(): Promise<void> {
    return this.writer.flushed();
  }

  /**
   * Resolves once every settlement that is durable now (its answer may have been delivered) is in the
   * store, journaled ones included: reports read the store. Does not wait for later traffic.
   */
  applied(): Promise<void> {
    return this.writer.applied();
  }

  /** Re-reads an account's durable balance in the writer loop (a credit was written elsewhere). */
  refresh(accountId: string): Promise<void> {
    if (!this.holds.hasAccount(accountId)) return Promise.resolve();
    return this.writer.inLoop(async () => {
      const balance = await this.store.balance(accountId);
      if (balance !== undefined) this.holds.refreshed(accountId, balance);
    });
  }

  /** Loads the account and a capped key when missing; one load per account (and key) at a time. */
  private async load(request: HoldRequest): Promise<void> {
    const keyId = this.holds.keyToLoad(request);
    if (this.holds.hasAccount(request.accountId) && keyId === null) return;
    const id = `${request.accountId}\n${keyId ?? ""}`;
    let pending = this.loading.get(id);
    if (!pending) {
      pending = this.loadNow(request.accountId, keyId).finally(() => this.loading.delete(id));
      this.loading.set(id, pending);
    }
    await pending;
  }

  /** Loads through the writer loop, so a load never interleaves with a commit. */
  private loadNow(accountId: string, keyId: string | null): Promise<void> {
    return this.writer.inLoop(async () => {
      if (!this.holds.hasAccount(accountId)) {
        const balance = await this.store.balance(accountId);
        if (balance === undefined) throw new Error("unknown account");
        this.holds.addAccount(accountId, balance);
      }
      if (keyId !== null && !this.holds.hasKey(keyId)) this.holds.addKey(keyId, (await this.store.keySpent(keyId)) ?? 0);
    });
  }
}
