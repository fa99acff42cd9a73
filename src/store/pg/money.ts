/**
 * The Postgres MoneyStore: the semantics of the SQLite one (src/store/sqlite/money.ts) in one transaction
 * per batch, safe beside other connections and processes writing the same accounts.
 *
 * Per batch: the usage rows first (ON CONFLICT DO NOTHING: an existing row means already settled, and
 * that settlement writes nothing else); then the balances of every account the applied settlements move,
 * locked FOR UPDATE in id order (concurrent batches queue on the rows instead of losing updates, and a
 * fixed order cannot deadlock); the ledger entries computed from the locked balances, each checked >= 0
 * as the SQLite store checks them; key totals incremented in place. Any refusal rolls back the whole
 * batch. Earnings and fees are credited once per receiving account per batch.
 */
import type { Sql, TransactionSql } from "postgres";
import { type MoneyStore, PLATFORM_ACCOUNT_ID, type Settlement, type SettleResult } from "../types.ts";

type Kind = "charge" | "earning" | "fee";

export function pgMoney(client: Sql): MoneyStore {
  let platformReady = false;

  async function settleIn(sql: TransactionSql, batch: readonly Settlement[], createPlatform: boolean): Promise<SettleResult> {
    if (createPlatform) {
      await sql`INSERT INTO accounts (id, name, jwt_subject, created_at) VALUES (${PLATFORM_ACCOUNT_ID}, 'Platform', NULL, 0) ON CONFLICT DO NOTHING`;
      await sql`INSERT INTO balances (account_id, balance_micro_usd, reserved_micro_usd, updated_at)
        VALUES (${PLATFORM_ACCOUNT_ID}, 0, 0, 0) ON CONFLICT DO NOTHING`;
    }
    const applied: boolean[] = [];
    for (const { usage: u } of batch) {
      const rows = await sql`INSERT INTO usage (request_id, account_id, key_id, model, build_id, provider_id, prompt_tokens,
          cached_tokens, completion_tokens, cost_micro_usd, started_at, first_content_ms, duration_ms, outcome)
        VALUES (${u.requestId}, ${u.accountId}, ${u.keyId}, ${u.model}, ${u.buildId}, ${u.providerId}, ${u.promptTokens},
          ${u.cachedTokens}, ${u.completionTokens}, ${u.cost}, ${u.startedAt}, ${u.firstContentMs}, ${u.durationMs}, ${u.outcome})
        ON CONFLICT DO NOTHING RETURNING request_id`;
      applied.push(rows.length > 0);
    }
    const charged = batch.filter((x, i) => applied[i] && x.charge > 0);
    const moved = new Set<string>();
    for (const x of charged) {
      moved.add(x.accountId);
      if (x.providerAccountId !== null && x.earning > 0) moved.add(x.providerAccountId);
      if (x.fee > 0) moved.add(PLATFORM_ACCOUNT_ID);
    }
    const ids = [...moved].sort();
    const running = new Map<string, number>();
    if (ids.length > 0) {
      const locked = await sql<{ id: string; balance: string }[]>`
        SELECT account_id AS id, balance_micro_usd AS balance FROM balances
        WHERE account_id IN ${sql(ids)} ORDER BY account_id COLLATE "C" FOR UPDATE`;
      for (const row of locked) running.set(row.id, Number(row.balance));
      if (running.size !== ids.length) throw new Error("settlement names an account that does not exist");
    }
    const entries: {
      account_id: string;
      kind: Kind;
      amount_micro_usd: number;
      balance_after_micro_usd: number;
      request_id: string | null;
      created_at: number;
    }[] = [];
    const move = (accountId: string, kind: Kind, amount: number, requestId: string | null, at: number) => {
      const after = (running.get(accountId) ?? 0) + amount;
      // Checked per entry: a credit later in the batch must not cover an overdraft.
      if (after < 0) throw new Error("settlement would drive a balance below zero");
      running.set(accountId, after);
      entries.push({
        account_id: accountId,
        kind,
        amount_micro_usd: amount,
        balance_after_micro_usd: after,
        request_id: requestId,
        created_at: at,
      });
    };
    const credits = new Map<string, { kind: "earning" | "fee"; amount: number; at: number }>();
    const credit = (accountId: string, kind: "earning" | "fee", amount: number, at: number) => {
      const c = credits.get(accountId);
      if (c) {
        c.amount += amount;
        c.at = Math.max(c.at, at);
      } else credits.set(accountId, { kind, amount, at });
    };
    const spentDelta = new Map<string, number>();
    let lastAt = 0;
    batch.forEach((x, i) => {
      if (applied[i]) lastAt = Math.max(lastAt, x.at);
    });
    for (const x of charged) {
      move(x.accountId, "charge", -x.charge, x.requestId, x.at);
      if (x.keyId !== null) spentDelta.set(x.keyId, (spentDelta.get(x.keyId) ?? 0) + x.charge);
      if (x.providerAccountId !== null && x.earning > 0) credit(x.providerAccountId, "earning", x.earning, x.at);
      if (x.fee > 0) credit(PLATFORM_ACCOUNT_ID, "fee", x.fee, x.at);
    }
    for (const [accountId, c] of credits) move(accountId, c.kind, c.amount, null, c.at);
    // One statement, rows in order: the identity column numbers them as listed.
    if (entries.length > 0) await sql`INSERT INTO ledger_entries ${sql(entries)}`;
    for (const [id, balance] of running) {
      await sql`UPDATE balances SET balance_micro_usd = ${balance}, updated_at = ${lastAt} WHERE account_id = ${id}`;
    }
    const keySpent = new Map<string, number>();
    for (const [id, delta] of spentDelta) {
      const [row] = await sql<{ spent: string }[]>`
        UPDATE api_keys SET spent_micro_usd = spent_micro_usd + ${delta} WHERE id = ${id} RETURNING spent_micro_usd AS spent`;
      keySpent.set(id, row ? Number(row.spent) : delta);
    }
    return { applied, balances: running, keySpent };
  }

  return {
    async balance(accountId) {
      const [row] = await client<{ balance: string }[]>`SELECT balance_micro_usd AS balance FROM balances WHERE account_id = ${accountId}`;
      return row ? Number(row.balance) : undefined;
    },
    async keySpent(keyId) {
      const [row] = await client<{ spent: string }[]>`SELECT spent_micro_usd AS spent FROM api_keys WHERE id = ${keyId}`;
      return row ? Number(row.spent) : undefined;
    },
    async settle(batch) {
      const createPlatform = !platformReady && batch.some((x) => x.fee > 0);
      const result = await client.begin((sql) => settleIn(sql, batch, createPlatform));
      if (createPlatform) platformReady = true;
      return result as SettleResult;
    },
  };
}
