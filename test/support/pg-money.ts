/**
 * The money authority's tests on real Postgres (test/unit/store/pg-money-*.test.ts): authorities on
 * connections of their own (one postgres.js pool each, like replicas), seeding by plain SQL, and the
 * books read back in one place with the invariants every test checks.
 */
import postgres, { type Sql } from "postgres";
import { type MoneyAuthority, type MoneyAuthorityOptions, pgMoneyAuthority } from "../../src/store/pg/money-authority.ts";

export interface Replica extends AsyncDisposable {
  readonly authority: MoneyAuthority;
  readonly sql: Sql;
}

/** An authority on its own pool of `max` connections to `url`. */
export function replicaOn(url: string, options: MoneyAuthorityOptions & { max?: number }): Replica {
  const sql = postgres(url, { max: options.max ?? 2, onnotice: () => {} });
  return { authority: pgMoneyAuthority(sql, options), sql, [Symbol.asyncDispose]: () => sql.end({ timeout: 5 }) };
}

/** An account with `balance` credited through a ledger entry (so the ledger sums to the balance). */
export async function seedAccount(sql: Sql, id: string, balance: number): Promise<void> {
  await sql`INSERT INTO accounts (id, name, jwt_subject, created_at) VALUES (${id}, ${id}, NULL, 0)`;
  await sql`INSERT INTO balances (account_id, balance_micro_usd, reserved_micro_usd, updated_at) VALUES (${id}, ${balance}, 0, 0)`;
  if (balance > 0) {
    await sql`INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
      VALUES (${id}, 'credit', ${balance}, ${balance}, NULL, 0)`;
  }
}

export async function seedKey(sql: Sql, id: string, accountId: string, spendCap: number | null): Promise<void> {
  await sql`INSERT INTO api_keys (id, account_id, key_hash, hint, spend_cap_micro_usd, created_at)
    VALUES (${id}, ${accountId}, ${`hash-${id}`}, 'hint', ${spendCap}, 0)`;
}

/** Credits as the store's AccountStore does: balance and ledger entry together. */
export async function credit(sql: Sql, accountId: string, amount: number): Promise<void> {
  await sql`WITH b AS (UPDATE balances SET balance_micro_usd = balance_micro_usd + ${amount}
      WHERE account_id = ${accountId} RETURNING balance_micro_usd)
    INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
    SELECT ${accountId}, 'credit', ${amount}, balance_micro_usd, NULL, 0 FROM b`;
}

export async function emptyTables(sql: Sql): Promise<void> {
  await sql`TRUNCATE holds, usage, ledger_entries, api_keys, balances, accounts RESTART IDENTITY CASCADE`;
}

export interface Books {
  /** Per account: balance and reserved. */
  readonly accounts: Record<string, { balance: number; reserved: number }>;
  readonly holds: Record<string, { account: string; key: string | null; amount: number }>;
  /** Per key: spent and held. */
  readonly keys: Record<string, { spent: number; held: number; cap: number | null }>;
  /** Per request id: the sum of its charge entries (negated) and how many there are. */
  readonly charges: Record<string, { total: number; entries: number }>;
  /** Every way the books can be wrong, as sentences; empty when they hold. */
  readonly violations: string[];
}

/** The books in one snapshot (REPEATABLE READ), and every invariant checked. */
export async function readBooks(sql: Sql): Promise<Books> {
  return (await sql.begin("ISOLATION LEVEL REPEATABLE READ", async (tx) => {
    const n = (x: unknown) => Number(x);
    const accounts: Books["accounts"] = {};
    const sums = new Map<string, number>();
    for (const r of await tx`SELECT account_id, balance_micro_usd AS b, reserved_micro_usd AS r FROM balances`) {
      accounts[r.account_id] = { balance: n(r.b), reserved: n(r.r) };
    }
    for (const r of await tx`SELECT account_id, sum(amount_micro_usd) AS s FROM ledger_entries GROUP BY account_id`) {
      sums.set(r.account_id, n(r.s));
    }
    const holds: Books["holds"] = {};
    for (const r of await tx`SELECT request_id, account_id, key_id, amount_micro_usd AS a FROM holds`) {
      holds[r.request_id] = { account: r.account_id, key: r.key_id, amount: n(r.a) };
    }
    const keys: Books["keys"] = {};
    for (const r of await tx`SELECT id, spent_micro_usd AS s, held_micro_usd AS h, spend_cap_micro_usd AS c FROM api_keys`) {
      keys[r.id] = { spent: n(r.s), held: n(r.h), cap: r.c === null ? null : n(r.c) };
    }
    const charges: Books["charges"] = {};
    for (const r of await tx`SELECT request_id, -sum(amount_micro_usd) AS t, count(*) AS c FROM ledger_entries
        WHERE kind = 'charge' GROUP BY request_id`) {
      charges[r.request_id] = { total: n(r.t), entries: n(r.c) };
    }
    const violations: string[] = [];
    const heldBy = (pick: (h: Books["holds"][string]) => string | null, id: string) =>
      Object.values(holds).reduce((s, h) => (pick(h) === id ? s + h.amount : s), 0);
    for (const [id, a] of Object.entries(accounts)) {
      if (!(a.reserved >= 0 && a.reserved <= a.balance)) violations.push(`${id}: reserved ${a.reserved}, balance ${a.balance}`);
      if (a.reserved !== heldBy((h) => h.account, id)) violations.push(`${id}: reserved ${a.reserved} != its holds`);
      if ((sums.get(id) ?? 0) !== a.balance) violations.push(`${id}: ledger ${sums.get(id) ?? 0} != balance ${a.balance}`);
    }
    for (const [id, k] of Object.entries(keys)) {
      if (k.held !== heldBy((h) => h.key, id)) violations.push(`key ${id}: held ${k.held} != its holds`);
      if (k.cap !== null && k.spent + k.held > k.cap) violations.push(`key ${id}: spent + held over the cap`);
    }
    for (const [id, c] of Object.entries(charges)) if (c.entries > 1) violations.push(`${id} charged ${c.entries} times`);
    return { accounts, holds, keys, charges, violations };
  })) as Books;
}
