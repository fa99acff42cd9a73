/**
 * The money in memory: per account `durable` (its store balance as last seen), `held` (reservations of
 * requests in flight) and `pending` (settled charges not yet committed); per key with a spend cap the
 * same against the cap, with `spent` for durable. Synchronous arithmetic only: no store, no time.
 *
 * Invariants: available = durable - held - pending for an account, cap - spent - held - pending for a
 * capped key; a hold is taken only when both cover it (so no concurrency can pass a limit: one check
 * runs at a time); a hold ends exactly once, released (held goes back) or settled (the charge, never
 * more than the hold, moves from held to pending, the rest goes back); a committed charge leaves
 * `pending` in the same step as its new balance enters `durable` (`committed`), so available is exact
 * at every moment.
 */
import type { SettleResult } from "../store/types.ts";

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

interface HoldFields {
  readonly accountId: string;
  readonly amount: number;
  done: boolean;
}

/** A hold against a key's spend cap too: the key's state is tracked only then. */
export interface CappedHold extends HoldFields {
  readonly keyId: string;
  readonly capped: true;
}

export interface UncappedHold extends HoldFields {
  readonly keyId: string | null;
  readonly capped: false;
}

/** Money set aside for one request; settle or release it exactly once. */
export type Hold = CappedHold | UncappedHold;

export interface HoldRequest {
  /** The request's id: the Postgres authority keys its hold by it (in memory it is not needed). */
  readonly requestId?: string;
  readonly accountId: string;
  readonly keyId: string | null;
  readonly spendCap: number | null;
  readonly amount: number;
}

/** Why no hold was taken: the account or key is not loaded here, the balance or the key's cap is short. */
export type Shortfall = "unloaded" | "funds" | "quota";

/** The key and its cap when the request is limited by one. */
function capOf(request: HoldRequest): { readonly keyId: string; readonly spendCap: number } | null {
  return request.keyId !== null && request.spendCap !== null ? { keyId: request.keyId, spendCap: request.spendCap } : null;
}

export class Holds {
  private readonly accounts = new Map<string, AccountState>();
  private readonly keys = new Map<string, KeyState>();

  /** Money currently held for an account's requests in flight. */
  reservedFor(accountId: string): number {
    return this.accounts.get(accountId)?.held ?? 0;
  }

  hasAccount(accountId: string): boolean {
    return this.accounts.has(accountId);
  }

  hasKey(keyId: string): boolean {
    return this.keys.has(keyId);
  }

  /** The capped key whose spent total is not loaded yet, or null. */
  keyToLoad(request: HoldRequest): string | null {
    const cap = capOf(request);
    return cap !== null && !this.hasKey(cap.keyId) ? cap.keyId : null;
  }

  /** Starts tracking an account at its durable balance (no-op when tracked). */
  addAccount(accountId: string, durable: number): void {
    if (!this.accounts.has(accountId)) this.accounts.set(accountId, { durable, held: 0, pending: 0 });
  }

  /** Starts tracking a capped key at its durable spent total (no-op when tracked). */
  addKey(keyId: string, spent: number): void {
    if (!this.keys.has(keyId)) this.keys.set(keyId, { spent, held: 0, pending: 0 });
  }

  /**
   * Holds `request.amount` against the account and, with a cap, the key; or says what is short (the
   * balance is checked first). Nothing is held on a shortfall.
   */
  hold(request: HoldRequest): Hold | Shortfall {
    const { accountId, amount } = request;
    const account = this.accounts.get(accountId);
    if (!account) return "unloaded";
    if (account.durable - account.held - account.pending < amount) return "funds";
    const cap = capOf(request);
    if (cap === null) {
      account.held += amount;
      return { accountId, keyId: request.keyId, amount, capped: false, done: false };
    }
    const key = this.keys.get(cap.keyId);
    if (!key) return "unloaded";
    if (cap.spendCap - key.spent - key.held - key.pending < amount) return "quota";
    key.held += amount;
    account.held += amount;
    return { accountId, keyId: cap.keyId, amount, capped: true, done: false };
  }

  /** Returns a hold untouched. Idempotent. */
  release(hold: Hold): void {
    if (hold.done) return;
    hold.done = true;
    this.move(hold, -hold.amount, 0);
  }

  /**
   * Ends a hold with `charge`: the charge moves from held to pending, the rest is released. False (and
   * nothing changes) when the hold has ended already. Throws, leaving the hold live, when the charge
   * exceeds it.
   */
  settle(hold: Hold, charge: number): boolean {
    if (hold.done) return false;
    if (charge > hold.amount) throw new Error("a charge may never exceed its reservation");
    hold.done = true;
    this.move(hold, -hold.amount, charge);
    return true;
  }

  /** Drops a settled charge from `pending`: it is in `durable` now, or it failed for good. */
  forget(hold: Hold, charge: number): void {
    this.move(hold, 0, -charge);
  }

  /** New durable balances and spent totals from a commit, for what is tracked here. */
  committed(result: SettleResult): void {
    for (const [id, balance] of result.balances) this.refreshed(id, balance);
    for (const [id, spent] of result.keySpent) {
      const state = this.keys.get(id);
      if (state) state.spent = spent;
    }
  }

  /** An account's durable balance as re-read from the store (a credit written elsewhere). */
  refreshed(accountId: string, balance: number): void {
    const state = this.accounts.get(accountId);
    if (state) state.durable = balance;
  }

  /** Adds to a hold's account (and capped key) `held` and `pending`. */
  private move(hold: Hold, held: number, pending: number): void {
    const account = this.tracked(this.accounts, hold.accountId);
    account.held += held;
    account.pending += pending;
    if (hold.capped) {
      const key = this.tracked(this.keys, hold.keyId);
      key.held += held;
      key.pending += pending;
    }
  }

  /** A hold's account or key is tracked from its load on and never dropped. */
  private tracked<T>(states: Map<string, T>, id: string): T {
    const state = states.get(id);
    if (state === undefined) throw new Error(`no money state for ${id}`);
    return state;
  }
}
