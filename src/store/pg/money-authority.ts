/**
 * The money authority on Postgres: every reservation is a hold row (or, for a busy key, a share of its
 * replica's balance lease: `admit`, money-leases.ts), and the database alone decides
 * (migrations/0002_money_fns.sql, 0003_money_batch.sql). `reserve` holds on the balance and the key's cap
 * or names the shortfall (funds, quota, unknown, duplicate), `settle` is idempotent on the request id
 * and charges at most the hold (nothing more without one), `release` gives a hold back, `renew` extends
 * every hold of this replica and releases those it no longer knows (a reserve whose answer was lost, a
 * settlement `abandon`ed), `sweep` releases expired ones (any replica may run it). CHECKs keep
 * 0 <= reserved <= balance and spent + held <= cap in the database. Reserves, settlements and releases
 * are batched (call-batcher.ts): each kind has at most one round trip in flight, and the calls made
 * meanwhile go together in the next, decided in one transaction (0003's functions; a batch of one uses
 * 0002's); `batchMax` 1 sends each call alone. `deadlines` (hold-deadlines.ts): the streams to stop.
 * With a `journal` (settlement-journal.ts) a settlement returns once written there, applied in a batch later.
 */
import postgres, { type Sql } from "postgres";
import { PLATFORM_ACCOUNT_ID, type Settlement } from "../types.ts";
import { type BatchCounts, CallBatcher } from "./call-batcher.ts";
import { HoldDeadlines } from "./hold-deadlines.ts";
import { type LeaseOptions, Leases } from "./money-leases.ts";
import type { ClusterJournal, JournalEntry } from "./settlement-journal.ts";

/** Why a reserve was refused: the account's available money, the key's spend cap, no such account or
 * key (for that account), or a hold already open under that request id. */
export type Shortfall = "funds" | "quota" | "unknown" | "duplicate";

export interface HoldRequest {
  readonly requestId: string;
  readonly accountId: string;
  readonly keyId: string | null;
  /** µUSD, > 0. */
  readonly amount: number;
}

export interface Hold extends HoldRequest {
  /** On the database clock. */
  readonly expiresAt: Date;
}

export type ReserveOutcome = { readonly hold: Hold } | { readonly shortfall: Shortfall };

export interface SettleOutcome {
  /** False when the request id was settled before (nothing written). */
  readonly applied: boolean;
  /** False when no hold was open (settled, released or swept): nothing was charged; worth a review. */
  readonly hadHold: boolean;
  /** What the account paid: min(charge, hold) with a hold, else 0. */
  readonly charged: number;
  /** In the settlement journal, not yet the database: the fields above are expected, not known (logged if not so). */
  readonly journaled?: true;
}

export interface RenewOutcome {
  readonly renewed: number;
  /** Holds this replica tracked that the database no longer has (swept): their streams must stop. */
  readonly lost: readonly string[];
  /** Holds of this replica it did not track (no request of its own holds them any more): given back. */
  readonly released: number;
}

export interface MoneyAuthority {
  readonly replica: string;
  /** Admits the request on its key's balance lease (money-leases.ts), synchronously; false: `reserve` it. */
  admit(request: HoldRequest): boolean;
  reserve(request: HoldRequest): Promise<ReserveOutcome>;
  /**
   * Before refusing for money: gives back what this replica's leases on the account hold unused and asks
   * the other replicas holding leases on it (`recaller`) to do the same. True when any lease was found.
   */
  reclaim(accountId: string): Promise<boolean>;
  /** How another replica is asked to give back its leases on an account (the cluster's recall). */
  recaller: ((replica: string, accountId: string) => Promise<void>) | undefined;
  /** This replica's balance leases (the cluster's recall handler calls `recall`). */
  readonly leases: Leases;
  /** Applies the journal's settlements and gives the leases back (shutdown). */
  close(): Promise<void>;
  /** At start, before money moves: applies what a killed predecessor journaled, then journals; how many. */
  recover(): Promise<number>;
  /** Resolves once every settlement journaled so far is in the database. */
  flushed(): Promise<void>;
  settle(settlement: Settlement): Promise<SettleOutcome>;
  /** Gives the hold back uncharged; false when it was gone. */
  release(requestId: string): Promise<boolean>;
  /**
   * Extends every hold this replica owns to now + TTL (database clock), and releases those no request of
   * this process holds (not tracked, no reserve in flight). Throws when the database does.
   */
  renew(): Promise<RenewOutcome>;
  /** A hold whose settlement could not be written: forgotten here, so the next renewal gives it back. */
  abandon(requestId: string): void;
  /** Releases expired holds in batches of `batch` until none is left; returns how many. */
  sweep(batch?: number): Promise<number>;
  /** The replica's renewal bookkeeping. */
  readonly deadlines: HoldDeadlines;
  /** Calls and round trips so far, per batched kind. */
  batches(): {
    readonly reserve: BatchCounts;
    readonly settle: BatchCounts;
    readonly release: BatchCounts;
    /** Settlements of requests admitted on leases. */
    readonly leased: BatchCounts;
  };
}

export interface MoneyAuthorityOptions {
  /** This replica's name, stored on its holds. */
  readonly replica: string;
  /** A hold's life without renewal; 30 s unless given. Renew every ttl/3. */
  readonly ttlMs?: number;
  /** How long before the database's expiry the replica stops a stream; ttl/6 unless given. */
  readonly marginMs?: number;
  /** Monotonic milliseconds (performance.now unless given). */
  readonly now?: () => number;
  /** Most calls of one kind in one round trip; 256 unless given. 1: no batching. */
  readonly batchMax?: number;
  /** Balance leases (money-leases.ts); on with its defaults unless given; false: none. */
  readonly leases?: LeaseOptions | false;
  /** Settlements are written here and applied in batches behind it (settlement-journal.ts); none: each waits for its commit. */
  readonly journal?: ClusterJournal;
  /** Where a journaled settlement the database applied without its hold is told (the app's Logger fits). */
  readonly log?: AuthorityLog;
}

export interface AuthorityLog {
  warn(message: string, fields: Readonly<Record<string, string | number>>): void;
  error(message: string, fields: Readonly<Record<string, string | number>>): void;
}

interface LeasedSettlement {
  readonly settlement: Settlement;
  readonly leaseId: string;
  readonly amount: number;
}

const SHORTFALLS: Readonly<Record<string, Shortfall>> = { UM001: "funds", UM002: "quota", UM003: "unknown", "23505": "duplicate" };

/** The database refused the call with an ERROR: its transaction rolled back, so none of it happened. A
 * FATAL (the session ended) may come after a commit: its outcome is unknown, like a lost connection's. */
const rolledBack = (e: unknown) => e instanceof postgres.PostgresError && e.severity === "ERROR";

function shortfallOf(e: unknown): Shortfall | undefined {
  return e instanceof postgres.PostgresError ? SHORTFALLS[e.code] : undefined;
}

/** A batch of one goes through 0002's single-call function (fewer statements: the quiet path stays fast). */
function oneOrMany<I, O>(one: (item: I) => Promise<O>, many: (items: readonly I[]) => Promise<O[]>) {
  return async (items: readonly I[]): Promise<readonly O[]> => (items.length === 1 ? [await one(items[0] as I)] : many(items));
}

export function pgMoneyAuthority(client: Sql, options: MoneyAuthorityOptions): MoneyAuthority {
  const ttl = options.ttlMs ?? 30_000;
  const deadlines = new HoldDeadlines(ttl, options.marginMs ?? Math.floor(ttl / 6), options.now);
  const replica = options.replica;
  const max = options.batchMax ?? 256;
  const reserves = new CallBatcher<HoldRequest, ReserveOutcome>(
    oneOrMany(
      async (r) => {
        try {
          const [row] = await client<{ expires: Date }[]>`
            SELECT umbra_reserve(${r.requestId}, ${r.accountId}, ${r.keyId}, ${r.amount}, ${replica}, ${ttl}) AS expires`;
          return { hold: { ...r, expiresAt: row?.expires ?? new Date(0) } };
        } catch (e) {
          const shortfall = shortfallOf(e);
          if (shortfall === undefined) throw e;
          return { shortfall };
        }
      },
      async (rs) => {
        const rows = await client<{ item: number; shortfall: string | null; expires: Date | null }[]>`
          SELECT item, shortfall, expires FROM umbra_reserve_batch(${rs.map((r) => r.requestId)}::text[],
            ${rs.map((r) => r.accountId)}::text[], ${rs.map((r) => r.keyId)}::text[], ${rs.map((r) => r.amount)}::bigint[],
            ${replica}, ${ttl})`;
        return inOrder(rs.length, rows, (row, i): ReserveOutcome => {
          if (row.shortfall === null) return { hold: { ...(rs[i] as HoldRequest), expiresAt: row.expires ?? new Date(0) } };
          if (!Object.values(SHORTFALLS).includes(row.shortfall as Shortfall)) throw new Error(`unknown shortfall ${row.shortfall}`);
          return { shortfall: row.shortfall as Shortfall };
        });
      },
    ),
    max,
    rolledBack,
  );
  const settlements = new CallBatcher<Settlement, SettleOutcome>(
    oneOrMany(
      async (s) => {
        const u = s.usage;
        const [row] = await client<{ applied: boolean; had_hold: boolean; charged: string }[]>`
          SELECT * FROM umbra_settle(${s.requestId}, ${s.accountId}, ${s.keyId}, ${s.charge}, ${s.providerAccountId},
            ${s.earning}, ${s.fee}, ${PLATFORM_ACCOUNT_ID}, ${s.at}, ${u.model}, ${u.buildId}, ${u.providerId},
            ${u.promptTokens}, ${u.cachedTokens}, ${u.completionTokens}, ${u.startedAt}, ${u.firstContentMs},
            ${u.durationMs}, ${u.outcome})`;
        return { applied: row?.applied ?? false, hadHold: row?.had_hold ?? false, charged: Number(row?.charged ?? 0) };
      },
      async (ss) => {
        // JSON text sent as text: drizzle, sharing this client, makes its json serializers pass values through.
        const items = JSON.stringify(ss.map(settlementItem));
        const rows = await client<{ item: number; applied: boolean; had_hold: boolean; charged: string }[]>`
          SELECT item, applied, had_hold, charged FROM umbra_settle_batch(${items}::text::jsonb, ${PLATFORM_ACCOUNT_ID})`;
        return inOrder(ss.length, rows, (row) => ({ applied: row.applied, hadHold: row.had_hold, charged: Number(row.charged) }));
      },
    ),
    max,
    rolledBack,
  );
  const releases = new CallBatcher<string, boolean>(
    oneOrMany(
      async (id) => {
        const [row] = await client<{ released: boolean }[]>`SELECT umbra_release(${id}) AS released`;
        return row?.released ?? false;
      },
      async (ids) => {
        const rows = await client<{ item: number; released: boolean }[]>`
          SELECT item, released FROM umbra_release_batch(${ids as string[]}::text[])`;
        return inOrder(ids.length, rows, (row) => row.released);
      },
    ),
    max,
    rolledBack,
  );
  const leased = new CallBatcher<LeasedSettlement, SettleOutcome>(
    async (items) => {
      const json = JSON.stringify(items.map((x, i) => ({ ...settlementItem(x.settlement, i), lease_id: x.leaseId, amount: x.amount })));
      const rows = await client<{ item: number; applied: boolean; had_hold: boolean; charged: string }[]>`
        SELECT item, applied, had_hold, charged FROM umbra_settle_leased_batch(${json}::text::jsonb, ${PLATFORM_ACCOUNT_ID})`;
      return inOrder(items.length, rows, (row) => ({ applied: row.applied, hadHold: row.had_hold, charged: Number(row.charged) }));
    },
    max,
    rolledBack,
  );
  /** Reserves (and lease grants) sent and not answered yet: a renewal may already see their rows. */
  const reserving = new Set<string>();
  const leases = new Leases(
    client,
    replica,
    ttl,
    deadlines,
    reserving,
    options.leases === false ? { enabled: () => false } : options.leases,
  );
  if (options.leases !== false) leases.start();
  const journal = options.journal;
  /** A journal batch applied: the same bookkeeping as a settlement answered at once. */
  const applyJournal = async (entries: readonly JournalEntry[]) => {
    await Promise.all(
      entries.map(async ({ settlement: s, lease }) => {
        let out: SettleOutcome;
        try {
          out = lease ? await leased.call({ settlement: s, leaseId: lease.id, amount: lease.amount }) : await settlements.call(s);
        } catch (e) {
          if (!rolledBack(e)) throw e; // not answered: the batch is sent again
          // Refused by the database: sending it again would not change that. Its hold is given back.
          options.log?.error("settlement refused by the database: nothing charged", { request_id: s.requestId, account_id: s.accountId });
          authority.abandon(s.requestId);
          return;
        }
        if (lease) leases.settled(s.requestId, out.applied, out.charged);
        else deadlines.forget(s.requestId);
        if (out.applied && !out.hadHold) {
          options.log?.warn("settled without its hold: nothing charged", { request_id: s.requestId, account_id: s.accountId });
        }
      }),
    );
  };
  const authority: MoneyAuthority = {
    replica,
    deadlines,
    leases,
    recaller: undefined,
    admit(r) {
      return options.leases !== false && leases.admit(r);
    },
    async reclaim(accountId) {
      const mine = leases.holds(accountId);
      const [, others] = await Promise.all([
        leases.recall(accountId),
        client<{ owner_replica: string }[]>`SELECT DISTINCT owner_replica FROM holds
          WHERE account_id = ${accountId} AND request_id LIKE 'lease:%' AND owner_replica <> ${replica}`,
      ]);
      const recaller = authority.recaller;
      if (recaller) await Promise.all(others.map((o) => recaller(o.owner_replica, accountId).catch(() => {})));
      return mine || others.length > 0;
    },
    async close() {
      await journal?.close();
      await leases.close();
    },
    recover: async () => (journal ? journal.recover(applyJournal) : 0),
    flushed: async () => journal?.flushed(),
    async reserve(r) {
      if (!Number.isSafeInteger(r.amount) || r.amount <= 0) throw new Error(`hold amount must be a positive integer, got ${r.amount}`);
      const sentAt = deadlines.time();
      reserving.add(r.requestId);
      try {
        const out = await reserves.call({ requestId: r.requestId, accountId: r.accountId, keyId: r.keyId, amount: r.amount });
        if ("hold" in out) deadlines.track(r.requestId, sentAt);
        return out;
      } finally {
        reserving.delete(r.requestId);
      }
    },
    async settle(s) {
      const lease = leases.leased(s.requestId);
      if (journal) {
        if (lease) leases.settling(s.requestId, s.charge);
        try {
          await journal.add(lease ? { settlement: s, lease: { id: lease.leaseId, amount: lease.amount } } : { settlement: s });
          return { applied: true, hadHold: true, charged: lease ? Math.min(s.charge, lease.amount) : s.charge, journaled: true };
        } catch {
          // Closed (shutting down) or the file cannot be written: this one waits for its commit.
        }
      }
      if (lease) {
        leases.settling(s.requestId, s.charge);
        const out = await leased.call({ settlement: s, leaseId: lease.leaseId, amount: lease.amount });
        leases.settled(s.requestId, out.applied, out.charged);
        return out;
      }
      const out = await settlements.call(s);
      deadlines.forget(s.requestId);
      return out;
    },
    async release(requestId) {
      if (leases.leased(requestId)) {
        leases.forget(requestId);
        return true;
      }
      const out = await releases.call(requestId);
      deadlines.forget(requestId);
      return out;
    },
    async renew() {
      const sentAt = deadlines.time();
      const rows = await client<{ request_id: string }[]>`SELECT request_id FROM umbra_renew(${replica}, ${ttl})`;
      const ids = rows.map((x) => x.request_id);
      // A lease's requests are present as their lease is.
      const lost = deadlines.renewed(sentAt, leases.present(ids));
      leases.lost(lost);
      // Rows no request of this process holds: a reserve whose answer never came, an abandoned settlement, a closed lease.
      const orphans = ids.filter((id) => deadlines.deadline(id) === undefined && !reserving.has(id));
      if (orphans.length > 0) await Promise.all(orphans.map((id) => releases.call(id)));
      return { renewed: ids.length - orphans.length, lost, released: orphans.length };
    },
    abandon(requestId) {
      leases.forget(requestId);
      deadlines.forget(requestId);
    },
    async sweep(batch = 500) {
      let total = 0;
      for (;;) {
        const [row] = await client<{ n: number }[]>`SELECT umbra_sweep(${batch}) AS n`;
        const n = row?.n ?? 0;
        total += n;
        if (n < batch) return total;
      }
    },
    batches: () => ({ reserve: reserves.counts(), settle: settlements.counts(), release: releases.counts(), leased: leased.counts() }),
  };
  return authority;
}

/** Item i's outcome (the functions answer with each item's 1-based position, in their own order). */
function inOrder<R extends { item: number }, O>(n: number, rows: readonly R[], decode: (row: R, i: number) => O): O[] {
  const out: O[] = new Array(n);
  const seen = new Set<number>();
  for (const row of rows) {
    const i = Number(row.item) - 1;
    if (!(i >= 0 && i < n) || seen.has(i)) throw new Error(`the batch answered for item ${row.item} of ${n}`);
    seen.add(i);
    out[i] = decode(row, i);
  }
  if (seen.size !== n) throw new Error(`the batch answered ${seen.size} of ${n} items`);
  return out;
}

/** A settlement as umbra_settle_batch reads it (its parameters by name; `item` is the position). */
function settlementItem(s: Settlement, i: number) {
  const u = s.usage;
  return {
    item: i + 1,
    request_id: s.requestId,
    account_id: s.accountId,
    key_id: s.keyId,
    charge: s.charge,
    provider_account_id: s.providerAccountId,
    earning: s.earning,
    fee: s.fee,
    at_ms: s.at,
    model: u.model,
    build_id: u.buildId,
    provider_id: u.providerId,
    prompt_tokens: u.promptTokens,
    cached_tokens: u.cachedTokens,
    completion_tokens: u.completionTokens,
    started_at: u.startedAt,
    first_content_ms: u.firstContentMs,
    duration_ms: u.durationMs,
    outcome: u.outcome,
  };
}
