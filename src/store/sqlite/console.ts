/**
 * The SQLite ConsoleSessionStore and SignInLinkStore. Rows hold SHA-256 digests of session ids and link
 * tokens only. `consume` is one UPDATE ... RETURNING guarded by `used_at IS NULL` and the expiry: SQLite
 * runs one writer at a time, so a link is consumed at most once, across processes too.
 */
import { and, eq, gt, isNull, lt, lte, or } from "drizzle-orm";
import { accounts, consoleSessions, signInLinks } from "../schema.ts";
import type { ConsoleSessionStore, SignInLinkStore } from "../types.ts";
import type { Db } from "./open.ts";

const accountExists = (db: Db, id: string): boolean =>
  db.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, id)).get() !== undefined;

export function sqliteConsoleSessions(db: Db): ConsoleSessionStore {
  const find = (hash: string) => db.select().from(consoleSessions).where(eq(consoleSessions.idHash, hash)).get();
  return {
    async create(session) {
      if (!accountExists(db, session.accountId)) return undefined;
      db.insert(consoleSessions).values(session).run();
      return find(session.idHash);
    },
    findByHash: async (hash) => find(hash),
    async touch(hash, idleExpiresAt) {
      db.update(consoleSessions)
        .set({ idleExpiresAt })
        .where(and(eq(consoleSessions.idHash, hash), lt(consoleSessions.idleExpiresAt, idleExpiresAt)))
        .run();
      return find(hash) !== undefined;
    },
    delete: async (hash) =>
      db.delete(consoleSessions).where(eq(consoleSessions.idHash, hash)).returning({ h: consoleSessions.idHash }).all().length > 0,
    deleteAccount: async (accountId) =>
      db.delete(consoleSessions).where(eq(consoleSessions.accountId, accountId)).returning({ h: consoleSessions.idHash }).all().length,
    sweep: async (now) =>
      db
        .delete(consoleSessions)
        .where(or(lte(consoleSessions.expiresAt, now), lte(consoleSessions.idleExpiresAt, now)))
        .returning({ h: consoleSessions.idHash })
        .all().length,
  };
}

export function sqliteSignInLinks(db: Db): SignInLinkStore {
  return {
    async create(link) {
      if (!accountExists(db, link.accountId)) return undefined;
      db.insert(signInLinks)
        .values({ ...link, usedAt: null })
        .run();
      return db.select().from(signInLinks).where(eq(signInLinks.tokenHash, link.tokenHash)).get();
    },
    consume: async (hash, now) =>
      db
        .update(signInLinks)
        .set({ usedAt: now })
        .where(and(eq(signInLinks.tokenHash, hash), isNull(signInLinks.usedAt), gt(signInLinks.expiresAt, now)))
        .returning()
        .get(),
    sweep: async (now) =>
      db.delete(signInLinks).where(lte(signInLinks.expiresAt, now)).returning({ h: signInLinks.tokenHash }).all().length,
  };
}
