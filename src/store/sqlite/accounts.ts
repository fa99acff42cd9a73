import { and, desc, eq, gte, sql } from "drizzle-orm";
import { DuplicateError } from "../errors.ts";
import { accounts, balances, ledgerEntries } from "../schema.ts";
import type { Account, AccountStore, LedgerEntry } from "../types.ts";
import type { Db } from "./open.ts";

const accountColumns = {
  id: accounts.id,
  name: accounts.name,
  jwtSubject: accounts.jwtSubject,
  createdAt: accounts.createdAt,
  balance: balances.balance,
  reserved: balances.reserved,
};

export function sqliteAccounts(db: Db): AccountStore {
  const select = () => db.select(accountColumns).from(accounts).innerJoin(balances, eq(balances.accountId, accounts.id));
  const get = (id: string): Account | undefined => select().where(eq(accounts.id, id)).get();

  return {
    async create({ id, name, jwtSubject = null, at }) {
      if (jwtSubject !== null && db.select({ id: accounts.id }).from(accounts).where(eq(accounts.jwtSubject, jwtSubject)).get()) {
        throw new DuplicateError("jwt_subject");
      }
      db.transaction((tx) => {
        tx.insert(accounts).values({ id, name, jwtSubject, createdAt: at }).run();
        tx.insert(balances).values({ accountId: id, balance: 0, reserved: 0, updatedAt: at }).run();
      });
      return get(id) as Account;
    },
    get: async (id) => get(id),
    findBySubject: async (subject) => select().where(eq(accounts.jwtSubject, subject)).get(),
    list: async () => select().orderBy(accounts.createdAt, accounts.id).all(),
    async credit({ accountId, amount, at }) {
      return db.transaction((tx) => {
        const row = tx
          .update(balances)
          .set({ balance: sql`${balances.balance} + ${amount}`, updatedAt: at })
          .where(eq(balances.accountId, accountId))
          .returning({ balance: balances.balance })
          .get();
        if (!row) return undefined;
        tx.insert(ledgerEntries)
          .values({ accountId, kind: "credit", amount, balanceAfter: row.balance, requestId: null, createdAt: at })
          .run();
        return get(accountId);
      });
    },
    ledger: async (accountId, limit): Promise<LedgerEntry[]> =>
      db.select().from(ledgerEntries).where(eq(ledgerEntries.accountId, accountId)).orderBy(desc(ledgerEntries.id)).limit(limit).all(),
    async earnings(accountId, since) {
      const row = db
        .select({ total: sql<number>`coalesce(sum(${ledgerEntries.amount}), 0)`.mapWith(Number) })
        .from(ledgerEntries)
        .where(
          and(
            eq(ledgerEntries.accountId, accountId),
            eq(ledgerEntries.kind, "earning"),
            since === undefined ? undefined : gte(ledgerEntries.createdAt, since),
          ),
        )
        .get();
      return row?.total ?? 0;
    },
  };
}
