/** The Postgres AccountStore: accounts with their balance row, credits and the ledger. */
import { and, desc, eq, gte, sql } from "drizzle-orm";
import { DuplicateError } from "../errors.ts";
import type { Account, AccountStore, LedgerEntry } from "../types.ts";
import type { PgDb } from "./open.ts";
import { byCode, isUniqueViolation } from "./order.ts";
import { accounts, balances, ledgerEntries } from "./schema.ts";

const accountColumns = {
  id: accounts.id,
  name: accounts.name,
  jwtSubject: accounts.jwtSubject,
  createdAt: accounts.createdAt,
  balance: balances.balance,
  reserved: balances.reserved,
};

export function pgAccounts(db: PgDb): AccountStore {
  const select = (q: PgDb | Parameters<Parameters<PgDb["transaction"]>[0]>[0] = db) =>
    q.select(accountColumns).from(accounts).innerJoin(balances, eq(balances.accountId, accounts.id));
  const get = async (id: string): Promise<Account | undefined> => (await select().where(eq(accounts.id, id)))[0];

  return {
    async create({ id, name, jwtSubject = null, at }) {
      if (
        jwtSubject !== null &&
        (await db.select({ id: accounts.id }).from(accounts).where(eq(accounts.jwtSubject, jwtSubject))).length > 0
      ) {
        throw new DuplicateError("jwt_subject");
      }
      try {
        await db.transaction(async (tx) => {
          await tx.insert(accounts).values({ id, name, jwtSubject, createdAt: at });
          await tx.insert(balances).values({ accountId: id, balance: 0, reserved: 0, updatedAt: at });
        });
      } catch (e) {
        // Two creates racing past the check above: the unique constraint lets one through.
        if (isUniqueViolation(e, "accounts_jwt_subject_unique")) throw new DuplicateError("jwt_subject");
        throw e;
      }
      return (await get(id)) as Account;
    },
    get,
    findBySubject: async (subject) => (await select().where(eq(accounts.jwtSubject, subject)))[0],
    list: async () => select().orderBy(accounts.createdAt, byCode(accounts.id)),
    async credit({ accountId, amount, at }) {
      return db.transaction(async (tx) => {
        const [row] = await tx
          .update(balances)
          .set({ balance: sql`${balances.balance} + ${amount}`, updatedAt: at })
          .where(eq(balances.accountId, accountId))
          .returning({ balance: balances.balance });
        if (!row) return undefined;
        await tx
          .insert(ledgerEntries)
          .values({ accountId, kind: "credit", amount, balanceAfter: row.balance, requestId: null, createdAt: at });
        return (await select(tx).where(eq(accounts.id, accountId)))[0];
      });
    },
    ledger: async (accountId, limit): Promise<LedgerEntry[]> =>
      db.select().from(ledgerEntries).where(eq(ledgerEntries.accountId, accountId)).orderBy(desc(ledgerEntries.id)).limit(limit),
    async earnings(accountId, since) {
      const [row] = await db
        .select({ total: sql<number>`coalesce(sum(${ledgerEntries.amount}), 0)`.mapWith(Number) })
        .from(ledgerEntries)
        .where(
          and(
            eq(ledgerEntries.accountId, accountId),
            eq(ledgerEntries.kind, "earning"),
            since === undefined ? undefined : gte(ledgerEntries.createdAt, since),
          ),
        );
      return row?.total ?? 0;
    },
  };
}
