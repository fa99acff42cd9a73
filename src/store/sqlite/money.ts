/**
 * The SQLite MoneyStore: a batch of settlements in one synchronous transaction (STACK.md item 7: the
 * body stays synchronous so a throw rolls everything back).
 *
 * Per settlement: insert the usage row (ON CONFLICT DO NOTHING: an existing row means the request was
 * settled before, and nothing else is written), then the payer's `charge` entry (one per request, with
 * its request id). Earnings and platform fees are credited once per receiving account per batch (one
 * entry each, request id null; the usage rows say which requests they cover): a ledger row costs three
 * index updates, and this halves the rows per request. Balances and key totals are read once per
 * batch and written once per touched account or key. The balance CHECK constraint (>= 0) is the last
 * line of defence.
 */
import type { Database } from "bun:sqlite";
import { accounts, balances } from "../schema.ts";
import { type MoneyStore, PLATFORM_ACCOUNT_ID, type Settlement, type SettlementJournal, type SettleResult } from "../types.ts";
import type { Db } from "./open.ts";

/** A usage row as positional statement parameters, in the column order of `insertUsage`. */
type UsageRow = [
  string,
  string,
  string | null,
  string,
  string,
  string | null,
  number,
  number,
  number,
  number,
  number,
  number | null,
  number,
  string,
];

/** `keysChanged` gets the new spent totals after a batch that moved any (cached key records hold them). */
export function sqliteMoney(
  db: Db,
  client: Database,
  keysChanged: (spent: ReadonlyMap<string, number>) => void,
  journal?: SettlementJournal,
): MoneyStore {
  let platformReady = false;

  // Every statement of the settlement path is bun:sqlite's own prepared statement on the same
  // connection, without Drizzle's per-call placeholder mapping and result shaping: at hundreds of
  // commits per second that overhead was a large share of a commit's fixed cost (bench/HISTORY.md).
  const balanceOf = client.prepare<{ balance: number }, [string]>("SELECT balance_micro_usd AS balance FROM balances WHERE account_id = ?");
  const spentOf = client.prepare<{ spent: number }, [string]>("SELECT spent_micro_usd AS spent FROM api_keys WHERE id = ?");
  const setBalance = client.prepare<unknown, [number, number, string]>(
    "UPDATE balances SET balance_micro_usd = ?, updated_at = ? WHERE account_id = ?",
  );
  const insertUsage = client.prepare<unknown, UsageRow>(
    `INSERT INTO usage (request_id, account_id, key_id, model, build_id, provider_id, prompt_tokens, cached_tokens,
       completion_tokens, cost_micro_usd, started_at, first_content_ms, duration_ms, outcome)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT DO NOTHING`,
  );
  // Positional parameters: named ones cost an object and a name lookup per row.
  const insertEntry = client.prepare<unknown, [string, string, number, number, string | null, number]>(
    `INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
     VALUES (?, ?, ?, ?, ?, ?)`,
  );
  const setSpent = client.prepare<unknown, [number, string]>("UPDATE api_keys SET spent_micro_usd = ? WHERE id = ?");

  // The batch's transaction, made once (bun:sqlite wraps `fn` in BEGIN / COMMIT / ROLLBACK per call).
  const settleBatch = client.transaction((batch: readonly Settlement[], createPlatform: boolean): SettleResult => {
    if (createPlatform) {
      // The platform account collects fees; created with the first fee, inside the batch's own
      // transaction so that a refused batch leaves no platform account behind.
      db.insert(accounts).values({ id: PLATFORM_ACCOUNT_ID, name: "Platform", jwtSubject: null, createdAt: 0 }).onConflictDoNothing().run();
      db.insert(balances).values({ accountId: PLATFORM_ACCOUNT_ID, balance: 0, reserved: 0, updatedAt: 0 }).onConflictDoNothing().run();
    }
    const running = new Map<string, number>();
    const spent = new Map<string, number>();
    /** Earnings and fees of this batch, per receiving account: one ledger entry each. */
    const credits = new Map<string, { kind: "earning" | "fee"; amount: number; at: number }>();
    const current = (accountId: string): number => {
      let b = running.get(accountId);
      if (b === undefined) {
        b = balanceOf.get(accountId)?.balance;
        if (b === undefined) throw new Error("settlement names an account that does not exist");
        running.set(accountId, b);
      }
      return b;
    };
    const move = (accountId: string, kind: "charge" | "earning" | "fee", amount: number, requestId: string | null, at: number) => {
      const after = current(accountId) + amount;
      // Checked per entry, not only on the final balance written below: a credit later in the batch
      // must not cover an overdraft, or the ledger would keep a negative balanceAfter.
      if (after < 0) throw new Error("settlement would drive a balance below zero");
      running.set(accountId, after);
      insertEntry.run(accountId, kind, amount, after, requestId, at);
    };
    const credit = (accountId: string, kind: "earning" | "fee", amount: number, at: number) => {
      const c = credits.get(accountId);
      if (c) {
        c.amount += amount;
        c.at = Math.max(c.at, at);
      } else {
        credits.set(accountId, { kind, amount, at });
      }
    };
    const applied: boolean[] = [];
    let lastAt = 0;
    for (const x of batch) {
      // The usage row is the settlement's marker: already there means already settled.
      const u = x.usage;
      const row: UsageRow = [
        u.requestId,
        u.accountId,
        u.keyId,
        u.model,
        u.buildId,
        u.providerId,
        u.promptTokens,
        u.cachedTokens,
        u.completionTokens,
        u.cost,
        u.startedAt,
        u.firstContentMs,
        u.durationMs,
        u.outcome,
      ];
      if (insertUsage.run(...row).changes === 0) {
        applied.push(false);
        continue;
      }
      applied.push(true);
      lastAt = Math.max(lastAt, x.at);
      if (x.charge <= 0) continue;
      move(x.accountId, "charge", -x.charge, x.requestId, x.at);
      if (x.keyId !== null) spent.set(x.keyId, (spent.get(x.keyId) ?? spentOf.get(x.keyId)?.spent ?? 0) + x.charge);
      if (x.providerAccountId !== null && x.earning > 0) credit(x.providerAccountId, "earning", x.earning, x.at);
      if (x.fee > 0) credit(PLATFORM_ACCOUNT_ID, "fee", x.fee, x.at);
    }
    for (const [accountId, c] of credits) move(accountId, c.kind, c.amount, null, c.at);
    for (const [id, balance] of running) setBalance.run(balance, lastAt, id);
    for (const [id, total] of spent) setSpent.run(total, id);
    return { applied, balances: running, keySpent: spent };
  });

  return {
    journal,
    balance: async (accountId) => balanceOf.get(accountId)?.balance,
    keySpent: async (keyId) => spentOf.get(keyId)?.spent,
    async settle(batch): Promise<SettleResult> {
      const createPlatform = !platformReady && batch.some((x) => x.fee > 0);
      const result = settleBatch(batch, createPlatform);
      if (createPlatform) platformReady = true;
      if (result.keySpent.size > 0) keysChanged(result.keySpent);
      return result;
    },
  };
}
