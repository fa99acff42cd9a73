/**
 * The SQLite MoneyStore: a batch of settlements in one synchronous transaction (STACK.md item 7: the
 * body stays synchronous so a throw rolls everything back).
 *
 * Per settlement: insert the usage row (ON CONFLICT DO NOTHING: an existing row means the request was
 * settled before, and nothing else is written); then one ledger entry per movement (charge, earning,
 * fee) with its running balance. Balances and key totals are read once per batch and written once per
 * touched account or key. The balance CHECK constraint (>= 0) is the last line of defence.
 */
import { eq, sql } from "drizzle-orm";
import { type MoneyStore, PLATFORM_ACCOUNT_ID, type SettleResult } from "../money-types.ts";
import { accounts, apiKeys, balances, ledgerEntries, usage } from "../schema.ts";
import type { Db } from "./open.ts";

export function sqliteMoney(db: Db): MoneyStore {
  let platformReady = false;

  const balanceOf = db
    .select({ balance: balances.balance })
    .from(balances)
    .where(eq(balances.accountId, sql.placeholder("id")))
    .prepare();
  const spentOf = db
    .select({ spent: apiKeys.spent })
    .from(apiKeys)
    .where(eq(apiKeys.id, sql.placeholder("id")))
    .prepare();
  const setBalance = db
    .update(balances)
    .set({ balance: sql`${sql.placeholder("balance")}`, updatedAt: sql`${sql.placeholder("at")}` })
    .where(eq(balances.accountId, sql.placeholder("id")))
    .prepare();
  const setSpent = db
    .update(apiKeys)
    .set({ spent: sql`${sql.placeholder("spent")}` })
    .where(eq(apiKeys.id, sql.placeholder("id")))
    .prepare();

  return {
    balance: async (accountId) => balanceOf.get({ id: accountId })?.balance,
    keySpent: async (keyId) => spentOf.get({ id: keyId })?.spent,
    async settle(batch): Promise<SettleResult> {
      if (!platformReady && batch.some((s) => s.fee > 0)) {
        // The platform account collects fees; created with the first fee.
        db.transaction((tx) => {
          tx.insert(accounts)
            .values({ id: PLATFORM_ACCOUNT_ID, name: "Platform", jwtSubject: null, createdAt: 0 })
            .onConflictDoNothing()
            .run();
          tx.insert(balances).values({ accountId: PLATFORM_ACCOUNT_ID, balance: 0, reserved: 0, updatedAt: 0 }).onConflictDoNothing().run();
        });
        platformReady = true;
      }
      return db.transaction((tx) => {
        const running = new Map<string, number>();
        const spent = new Map<string, number>();
        const current = (accountId: string): number => {
          let b = running.get(accountId);
          if (b === undefined) {
            b = balanceOf.get({ id: accountId })?.balance;
            if (b === undefined) throw new Error("settlement names an account that does not exist");
            running.set(accountId, b);
          }
          return b;
        };
        const move = (accountId: string, kind: "charge" | "earning" | "fee", amount: number, requestId: string, at: number) => {
          const after = current(accountId) + amount;
          running.set(accountId, after);
          tx.insert(ledgerEntries).values({ accountId, kind, amount, balanceAfter: after, requestId, createdAt: at }).run();
        };
        const applied: boolean[] = [];
        let lastAt = 0;
        for (const s of batch) {
          const inserted = tx.insert(usage).values(s.usage).onConflictDoNothing().returning({ id: usage.requestId }).all();
          if (inserted.length === 0) {
            applied.push(false);
            continue;
          }
          applied.push(true);
          lastAt = Math.max(lastAt, s.at);
          if (s.charge > 0) {
            move(s.accountId, "charge", -s.charge, s.requestId, s.at);
            if (s.keyId !== null) {
              let k = spent.get(s.keyId);
              if (k === undefined) k = spentOf.get({ id: s.keyId })?.spent ?? 0;
              spent.set(s.keyId, k + s.charge);
            }
            if (s.providerAccountId !== null && s.earning > 0) move(s.providerAccountId, "earning", s.earning, s.requestId, s.at);
            if (s.fee > 0) move(PLATFORM_ACCOUNT_ID, "fee", s.fee, s.requestId, s.at);
          }
        }
        for (const [id, balance] of running) setBalance.run({ id, balance, at: lastAt });
        for (const [id, total] of spent) setSpent.run({ id, spent: total });
        return { applied, balances: running, keySpent: spent };
      });
    },
  };
}
