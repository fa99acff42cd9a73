/**
 * The Postgres ConsoleSessionStore and SignInLinkStore. Rows hold SHA-256 digests of session ids and
 * link tokens only. `consume` is one UPDATE ... RETURNING guarded by `used_at IS NULL` and the expiry:
 * under READ COMMITTED a second, concurrent UPDATE waits for the first's row lock, re-reads the row and
 * no longer matches, so a link is consumed at most once across every replica.
 */
import { and, eq, gt, isNull, lt, lte, or } from "drizzle-orm";
import type { ConsoleSessionStore, SignInLinkStore } from "../types.ts";
import type { PgDb } from "./open.ts";
import { accounts, consoleSessions, signInLinks } from "./schema.ts";

const accountExists = async (db: PgDb, id: string): Promise<boolean> =>
  (await db.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, id))).length > 0;

export function pgConsoleSessions(db: PgDb): ConsoleSessionStore {
  const find = async (hash: string) => (await db.select().from(consoleSessions).where(eq(consoleSessions.idHash, hash)))[0];
  return {
    async create(session) {
      if (!(await accountExists(db, session.accountId))) return undefined;
      await db.insert(consoleSessions).values(session);
      return find(session.idHash);
    },
    findByHash: find,
    async touch(hash, idleExpiresAt) {
      await db
        .update(consoleSessions)
        .set({ idleExpiresAt })
        .where(and(eq(consoleSessions.idHash, hash), lt(consoleSessions.idleExpiresAt, idleExpiresAt)));
      return (await find(hash)) !== undefined;
    },
    delete: async (hash) =>
      (await db.delete(consoleSessions).where(eq(consoleSessions.idHash, hash)).returning({ h: consoleSessions.idHash })).length > 0,
    deleteAccount: async (accountId) =>
      (await db.delete(consoleSessions).where(eq(consoleSessions.accountId, accountId)).returning({ h: consoleSessions.idHash })).length,
    sweep: async (now) =>
      (
        await db
          .delete(consoleSessions)
          .where(or(lte(consoleSessions.expiresAt, now), lte(consoleSessions.idleExpiresAt, now)))
          .returning({ h: consoleSessions.idHash })
      ).length,
  };
}

export function pgSignInLinks(db: PgDb): SignInLinkStore {
  return {
    async create(link) {
      if (!(await accountExists(db, link.accountId))) return undefined;
      await db.insert(signInLinks).values({ ...link, usedAt: null });
      return (await db.select().from(signInLinks).where(eq(signInLinks.tokenHash, link.tokenHash)))[0];
    },
    consume: async (hash, now) =>
      (
        await db
          .update(signInLinks)
          .set({ usedAt: now })
          .where(and(eq(signInLinks.tokenHash, hash), isNull(signInLinks.usedAt), gt(signInLinks.expiresAt, now)))
          .returning()
      )[0],
    sweep: async (now) =>
      (await db.delete(signInLinks).where(lte(signInLinks.expiresAt, now)).returning({ h: signInLinks.tokenHash })).length,
  };
}
