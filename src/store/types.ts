/**
 * Store interfaces, split by domain. Every implementation (SQLite now, Postgres later) passes the one
 * conformance suite in test/store/conformance.ts unchanged.
 *
 * Units: money in integer micro-USD; prices in micro-USD per million tokens; times in Unix milliseconds.
 * Methods that write several rows do it atomically: on any failure nothing is written.
 * A method returns `undefined` when the entity it names does not exist (and then writes nothing).
 */
import type { MdmStore } from "./mdm-types.ts";
export interface Account {
  readonly id: string;
  readonly name: string;
  readonly jwtSubject: string | null;
  readonly createdAt: number;
  readonly balance: number;
  readonly reserved: number;
}

export interface LedgerEntry {
  readonly id: number;
  readonly accountId: string;
  readonly kind: "credit" | "charge" | "earning" | "fee";
  readonly amount: number;
  readonly balanceAfter: number;
  readonly requestId: string | null;
  readonly createdAt: number;
}

export interface AccountStore {
  /** Creates the account and its zero balance. Throws DuplicateError when the JWT subject is taken. */
  create(input: { id: string; name: string; jwtSubject?: string | null; at: number }): Promise<Account>;
  get(id: string): Promise<Account | undefined>;
  findBySubject(subject: string): Promise<Account | undefined>;
  /** Ordered by creation time, then id. */
  list(): Promise<Account[]>;
  /** Adds a positive amount and its ledger entry in one transaction. */
  credit(input: { accountId: string; amount: number; at: number }): Promise<Account | undefined>;
  /** Newest first. */
  ledger(accountId: string, limit: number): Promise<LedgerEntry[]>;
  /**
   * The sum of the account's `earning` ledger entries, only those created at or after `since` (Unix ms)
   * when given; 0 when it has none or does not exist.
   */
  earnings(accountId: string, since?: number): Promise<number>;
}

export interface ApiKeyRecord {
  readonly id: string;
  readonly accountId: string;
  readonly keyHash: string;
  /** Last characters of the key, for people to tell keys apart. */
  readonly hint: string;
  readonly name: string | null;
  readonly allowedModels: readonly string[] | null;
  readonly spendCap: number | null;
  readonly spent: number;
  readonly rpm: number | null;
  readonly tpm: number | null;
  readonly selfRouteOnly: boolean;
  /** May approve provider device logins (link machines to the account). */
  readonly linkMachines: boolean;
  readonly createdAt: number;
  readonly revokedAt: number | null;
}

/** A key to create; `linkMachines` defaults to false. */
export type NewApiKey = Omit<ApiKeyRecord, "spent" | "revokedAt" | "linkMachines"> & { readonly linkMachines?: boolean };

export interface ApiKeyStore {
  /** Returns undefined when the account does not exist. */
  create(key: NewApiKey): Promise<ApiKeyRecord | undefined>;
  get(id: string): Promise<ApiKeyRecord | undefined>;
  /** By hash, revoked or not (callers check `revokedAt`); from memory where cached, like getBuild, getAlias, get. */
  findByHash(keyHash: string): ApiKeyRecord | undefined | Promise<ApiKeyRecord | undefined>;
  /** Ordered by creation time, then id. */
  list(accountId?: string): Promise<ApiKeyRecord[]>;
  /** Marks the key revoked (idempotent: the first revocation time stays). */
  revoke(id: string, at: number): Promise<ApiKeyRecord | undefined>;
}

export interface ProviderTokenRecord {
  readonly id: string;
  readonly accountId: string;
  readonly tokenHash: string;
  readonly hint: string;
  /** The machine's name (1..64 printable characters, from the approved device login or the admin API); null: none. */
  readonly name: string | null;
  readonly createdAt: number;
  /** Refused from this time on (Unix ms); null: never expires. */
  readonly expiresAt: number | null;
  readonly revokedAt: number | null;
}

/** A token to create; `expiresAt` and `name` default to null (never expires, no name). */
export type NewProviderToken = Omit<ProviderTokenRecord, "revokedAt" | "expiresAt" | "name"> & {
  readonly expiresAt?: number | null;
  readonly name?: string | null;
};

export interface ProviderTokenStore {
  create(token: NewProviderToken): Promise<ProviderTokenRecord | undefined>;
  get(id: string): Promise<ProviderTokenRecord | undefined>;
  findByHash(tokenHash: string): Promise<ProviderTokenRecord | undefined>;
  /** Ordered by creation time, then id. */
  list(accountId?: string): Promise<ProviderTokenRecord[]>;
  revoke(id: string, at: number): Promise<ProviderTokenRecord | undefined>;
}

export interface ModelBuild {
  readonly id: string;
  readonly created: number;
  readonly ownedBy: string;
  readonly modelType: string;
  readonly name: string | null;
  readonly displayName: string | null;
  readonly huggingFaceId: string | null;
  readonly description: string | null;
  readonly quantization: string | null;
  readonly deprecationDate: string | null;
  readonly inputModalities: readonly string[] | null;
  readonly outputModalities: readonly string[] | null;
  readonly supportedSamplingParameters: readonly string[] | null;
  readonly supportedFeatures: readonly string[] | null;
  readonly contextLength: number | null;
  readonly maxOutputLength: number | null;
}

export interface ModelAlias {
  readonly alias: string;
  readonly buildId: string;
}

export interface CatalogStore {
  /** Inserts or replaces every field of the build. */
  upsertBuild(build: ModelBuild, at: number): Promise<ModelBuild>;
  getBuild(id: string): ModelBuild | undefined | Promise<ModelBuild | undefined>;
  /** Ordered by id. */
  listBuilds(): Promise<ModelBuild[]>;
  /** Returns undefined when the build does not exist. */
  setAlias(alias: string, buildId: string, at: number): Promise<ModelAlias | undefined>;
  getAlias(alias: string): ModelAlias | undefined | Promise<ModelAlias | undefined>;
  /** Ordered by alias. */
  listAliases(): Promise<ModelAlias[]>;
  deleteAlias(alias: string): Promise<boolean>;
}

export interface PriceRow {
  readonly model: string;
  readonly inputPrice: number;
  readonly outputPrice: number;
  readonly cacheReadPrice: number | null;
}

export interface PriceStore {
  set(row: PriceRow, at: number): Promise<PriceRow>;
  /** True when a row was removed. */
  clear(model: string): Promise<boolean>;
  get(model: string): PriceRow | undefined | Promise<PriceRow | undefined>;
  /** Ordered by model. */
  list(): Promise<PriceRow[]>;
}

export interface UsageRecord {
  readonly requestId: string;
  readonly accountId: string;
  readonly keyId: string | null;
  readonly model: string;
  readonly buildId: string;
  /**
   * The serving machine's device token id (its provider session id when another replica served it and
   * did not name the token); null when no provider served it.
   */
  readonly providerId: string | null;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly completionTokens: number;
  readonly cost: number;
  readonly startedAt: number;
  readonly firstContentMs: number | null;
  readonly durationMs: number;
  readonly outcome: string;
}

/** Sums over the usage rows that share `key`. All integers. */
export interface UsageTotalsRow {
  readonly key: string;
  readonly requests: number;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly completionTokens: number;
  readonly cost: number;
}

/**
 * One account's usage grouped three ways, over the same rows. Keys: the requested model id; the API
 * key id, or `"jwt"` for requests made with a JWT (no key id); the UTC day of the start time as
 * `YYYY-MM-DD`. Each list holds only keys with at least one row, ascending by key (code-unit order).
 */
export interface UsageTotals {
  readonly byModel: readonly UsageTotalsRow[];
  readonly byKey: readonly UsageTotalsRow[];
  readonly byDay: readonly UsageTotalsRow[];
}

/** The `byKey` key of usage recorded without an API key (JWT-authenticated requests). */
export const JWT_USAGE_KEY = "jwt";

/** Which of an account's usage rows to read: `since <= startedAt < until`, and equal fields; all optional. */
export interface UsageFilter {
  readonly since?: number;
  readonly until?: number;
  readonly keyId?: string;
  readonly model?: string;
  readonly outcome?: string;
}

/** A place in the newest-first order (start time, then request id, descending): rows after it are older. */
export interface UsageCursor {
  readonly startedAt: number;
  readonly requestId: string;
}

/** Sums of one account's rows on one UTC day (`YYYY-MM-DD`) for one model. */
export interface UsageDayModelRow {
  readonly day: string;
  readonly model: string;
  readonly requests: number;
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly cost: number;
}

/** What one provider id served: rows naming it, and what they earned it (charge less the platform fee). */
export interface ProviderServedRow {
  readonly providerId: string;
  readonly requests: number;
  readonly earnings: number;
}

export interface UsageStore {
  /** Idempotent per request id: a second record for the same request is ignored (returns false). */
  record(row: UsageRecord): Promise<boolean>;
  /** Newest first (start time, then request id, descending). */
  list(accountId: string, limit: number): Promise<UsageRecord[]>;
  /**
   * Totals of the account's rows with `since <= startedAt < until` (either bound optional), read as
   * one snapshot so the three groupings agree. Empty lists for an unknown account.
   */
  totals(accountId: string, opts: { since?: number; until?: number }): Promise<UsageTotals>;
  /** At most `limit` of the account's rows matching `filter`, newest first, after `after` when given. */
  page(accountId: string, filter: UsageFilter, opts: { limit: number; after?: UsageCursor }): Promise<UsageRecord[]>;
  /** The sums of `totals`' days split by model, over the same bounds; ordered by day, then model (code units). */
  dayModelTotals(accountId: string, opts: { since?: number; until?: number }): Promise<UsageDayModelRow[]>;
  /** Per API key of the account with rows: its newest row's start time (derived: no write on use). */
  lastUsed(accountId: string): Promise<ReadonlyMap<string, number>>;
  /**
   * Per provider id given that rows name (any account's rows): their count and earnings at `feePercent`,
   * each row's charge less its fee rounded up (billing.ts `feeFor`). Ids without rows are left out.
   */
  served(providerIds: readonly string[], feePercent: number): Promise<ProviderServedRow[]>;
}

/**
 * A console session (src/console/sessions.ts), keyed by the SHA-256 (hex) of its id: the id itself is
 * never stored. Refused once `now >= expiresAt` (absolute) or `now >= idleExpiresAt` (idle).
 */
export interface ConsoleSessionRecord {
  readonly idHash: string;
  readonly accountId: string;
  readonly createdAt: number;
  readonly expiresAt: number;
  readonly idleExpiresAt: number;
}

export interface ConsoleSessionStore {
  /** Returns undefined when the account does not exist. */
  create(session: ConsoleSessionRecord): Promise<ConsoleSessionRecord | undefined>;
  /** The session by hash, expired or not: callers check the expiries. */
  findByHash(idHash: string): Promise<ConsoleSessionRecord | undefined>;
  /** Moves the idle expiry forward to `idleExpiresAt` (never back); false when the session does not exist. */
  touch(idHash: string, idleExpiresAt: number): Promise<boolean>;
  /** Deletes one session; false when it did not exist. */
  delete(idHash: string): Promise<boolean>;
  /** Deletes every session of the account; returns how many. */
  deleteAccount(accountId: string): Promise<number>;
  /** Deletes every session expired at `now` (absolute or idle); returns how many. */
  sweep(now: number): Promise<number>;
}

/** A single-use console sign-in link, keyed by the SHA-256 (hex) of its token. */
export interface SignInLinkRecord {
  readonly tokenHash: string;
  readonly accountId: string;
  readonly createdAt: number;
  /** Refused from this time on (Unix ms). */
  readonly expiresAt: number;
  /** When it was consumed; null while unused. */
  readonly usedAt: number | null;
}

export interface SignInLinkStore {
  /** Returns undefined when the account does not exist. */
  create(link: Omit<SignInLinkRecord, "usedAt">): Promise<SignInLinkRecord | undefined>;
  /**
   * Marks the link used at `now` and returns it, atomically: only while unused and `now < expiresAt`.
   * Any other call (unknown, used, expired; the loser of two concurrent calls) returns undefined.
   */
  consume(tokenHash: string, now: number): Promise<SignInLinkRecord | undefined>;
  /** Deletes every link that expired at or before `now`, used or not; returns how many. */
  sweep(now: number): Promise<number>;
}

export interface Store {
  readonly accounts: AccountStore;
  readonly mdm: MdmStore;
  readonly keys: ApiKeyStore;
  readonly providerTokens: ProviderTokenStore;
  readonly catalog: CatalogStore;
  readonly prices: PriceStore;
  readonly usage: UsageStore;
  readonly money: MoneyStore;
  readonly consoleSessions: ConsoleSessionStore;
  readonly signInLinks: SignInLinkStore;
  /** Throws when the store cannot be read. */
  ping(): Promise<void>;
  close(): void;
  /**
   * Stores shared by several processes that hear of changes (Postgres): calls `listener` with the id of
   * every provider token changed by anyone (revoked, say); returns the unsubscribe. Others poll.
   */
  onProviderTokenChange?(listener: (tokenId: string) => void): () => void;
}

/**
 * Money: the durable half of the money path (DESIGN.md section 9). The coordinator holds reservations in
 * memory (src/billing/holds.ts) and writes settled requests here in small groups (src/billing/settlement-writer.ts).
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

/** Settlements made durable in a file before `settle` applies them (implemented by src/store/journal.ts). */
export interface SettlementJournal {
  /** Settlements found in the file when it was opened (a killed process left them); may be applied already. */
  readonly recovered: readonly Settlement[];
  /** Appends settlements; returns once the write is done. Throws when the file cannot be written. */
  append(batch: readonly Settlement[]): void;
  /** Every settlement appended so far (and every recovered one) is in the database: empties the file. */
  clear(): void;
  close(): void;
}
