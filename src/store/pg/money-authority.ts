/**
 * The money authority on Postgres: every reservation is a hold row, and the database alone decides
 * (migrations/0002_money_fns.sql). One round trip per call: `reserve` is umbra_reserve (balance and key
 * cap checked and held, or a shortfall reason: funds, quota, unknown, duplicate), `settle` is umbra_settle
 * (idempotent on the request id; at most the hold is charged; without a hold nothing more is charged),
 * `release` gives a hold back, `renew` extends every hold of this replica and releases those it no longer
 * knows (a reserve whose answer was lost, a settlement `abandon`ed), `sweep` releases expired ones (any
 * replica may run it). CHECKs keep 0 <= reserved <= balance and spent + held <= cap in the database.
 *
 * The replica's side of the lease is `deadlines` (hold-deadlines.ts): `overdue()` names the holds whose
 * streams must stop because no renewal succeeded in time. Not wired into Billing yet.
 */
import type { Sql } from "postgres";
import { PLATFORM_ACCOUNT_ID, type Settlement } from "../types.ts";
import { HoldDeadlines } from "./hold-deadlines.ts";

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
  reserve(request: HoldRequest): Promise<ReserveOutcome>;
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
}

const SHORTFALLS: Readonly<Record<string, Shortfall>> = { UM001: "funds", UM002: "quota", UM003: "unknown", "23505": "duplicate" };

function shortfallOf(e: unknown): Shortfall | undefined {
  const code = typeof e === "object" && e !== null && "code" in e ? String((e as { code: unknown }).code) : "";
  return SHORTFALLS[code];
}

export function pgMoneyAuthority(client: Sql, options: MoneyAuthorityOptions): MoneyAuthority {
  const ttl = options.ttlMs ?? 30_000;
  const deadlines = new HoldDeadlines(ttl, options.marginMs ?? Math.floor(ttl / 6), options.now);
  const replica = options.replica;
  /** Reserves sent and not answered yet: a renewal may already see their rows. */
  const reserving = new Set<string>();
  return {
    replica,
    deadlines,
    async reserve(r) {
      const sentAt = deadlines.time();
      reserving.add(r.requestId);
      try {
        const [row] = await client<{ expires: Date }[]>`
          SELECT umbra_reserve(${r.requestId}, ${r.accountId}, ${r.keyId}, ${r.amount}, ${replica}, ${ttl}) AS expires`;
        deadlines.track(r.requestId, sentAt);
        return { hold: { ...r, expiresAt: row?.expires ?? new Date(0) } };
      } catch (e) {
        const shortfall = shortfallOf(e);
        if (shortfall === undefined) throw e;
        return { shortfall };
      } finally {
        reserving.delete(r.requestId);
      }
    },
    async settle(s) {
      const u = s.usage;
      const [row] = await client<{ applied: boolean; had_hold: boolean; charged: string }[]>`
        SELECT * FROM umbra_settle(${s.requestId}, ${s.accountId}, ${s.keyId}, ${s.charge}, ${s.providerAccountId},
          ${s.earning}, ${s.fee}, ${PLATFORM_ACCOUNT_ID}, ${s.at}, ${u.model}, ${u.buildId}, ${u.providerId},
          ${u.promptTokens}, ${u.cachedTokens}, ${u.completionTokens}, ${u.startedAt}, ${u.firstContentMs},
          ${u.durationMs}, ${u.outcome})`;
      deadlines.forget(s.requestId);
      return { applied: row?.applied ?? false, hadHold: row?.had_hold ?? false, charged: Number(row?.charged ?? 0) };
    },
    async release(requestId) {
      const [row] = await client<{ released: boolean }[]>`SELECT umbra_release(${requestId}) AS released`;
      deadlines.forget(requestId);
      return row?.released ?? false;
    },
    async renew() {
      const sentAt = deadlines.time();
      const rows = await client<{ request_id: string }[]>`SELECT request_id FROM umbra_renew(${replica}, ${ttl})`;
      const ids = rows.map((x) => x.request_id);
      const lost = deadlines.renewed(sentAt, ids);
      // Rows no request of this process holds: a reserve whose answer never came, an abandoned settlement.
      const orphans = ids.filter((id) => deadlines.deadline(id) === undefined && !reserving.has(id));
      for (const id of orphans) await client`SELECT umbra_release(${id})`;
      return { renewed: ids.length - orphans.length, lost, released: orphans.length };
    },
    abandon(requestId) {
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
  };
}
