/**
 * The durable half of the money path (DESIGN.md section 9). The coordinator holds reservations in
 * memory (src/billing/wallets.ts) and writes settled requests here in small groups.
 *
 * Units: integer micro-USD; times in Unix ms.
 * Invariants every implementation keeps (test/store/money-conformance.ts):
 * - `settle` applies a whole batch in one transaction, or nothing; a batch that would take any balance
 *   below zero at any ledger entry (or names an unknown account) is refused whole;
 * - a request id is settled at most once: its usage row is the marker, and a repeated settlement
 *   changes nothing (reported as not applied);
 * - every balance change has its ledger entry (append-only) whose `balanceAfter` is the balance right
 *   after it, so the sum of an account's ledger equals its balance; a charge has its own entry with the
 *   request id; earnings and fees may be credited as one entry per receiving account per batch;
 * - a charge moves `charge` from the payer; `earning` goes to the provider's account and `fee` to the
 *   platform account, with earning + fee = charge when a provider is named.
 */
import type { SettlementJournal } from "./journal.ts";
import type { UsageRecord } from "./types.ts";

/** The account that receives the platform's share of every charge. Created by the store. */
export const PLATFORM_ACCOUNT_ID = "acct_platform";

export interface Settlement {
  readonly requestId: string;
  /** The paying account (the consumer). */
  readonly accountId: string;
  readonly keyId: string | null;
  readonly charge: number;
  /** The serving provider's account, credited with `earning`; null when nobody earns (self-route, failure). */
  readonly providerAccountId: string | null;
  readonly earning: number;
  readonly fee: number;
  readonly usage: UsageRecord;
  readonly at: number;
}

export interface SettleResult {
  /** Per settlement, in order: false when the request id was already settled. */
  readonly applied: readonly boolean[];
  /** Balances after the batch, for every account the batch touched. */
  readonly balances: ReadonlyMap<string, number>;
  /** Spent totals after the batch, for every key the batch touched. */
  readonly keySpent: ReadonlyMap<string, number>;
}

export interface MoneyStore {
  /** An account's durable balance; undefined when the account does not exist. */
  balance(accountId: string): Promise<number | undefined>;
  /** A key's durable spent total; undefined when the key does not exist. */
  keySpent(keyId: string): Promise<number | undefined>;
  /** Applies a batch atomically (see the invariants above). Throws when any write is refused. */
  settle(batch: readonly Settlement[]): Promise<SettleResult>;
  /**
   * Where settlements can be made durable before `settle` applies them (src/store/journal.ts); absent
   * when the store has none (in memory), and then every settlement waits for its `settle`.
   */
  readonly journal?: SettlementJournal;
}
