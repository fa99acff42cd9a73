/**
 * The console stores' conformance suite (sessions and sign-in links), run by runStoreConformance on
 * every implementation. Pins: digests are what is stored and looked up; touch only moves the idle expiry
 * forward; sign-out of one session and of every session of an account; sweeps by either expiry; a link
 * consumed exactly once, also when many consumes race, and never at or after its expiry.
 */
import { describe, expect, test } from "bun:test";
import type { ConsoleSessionRecord } from "../../src/store/types.ts";
import type { OpenStore } from "./conformance.ts";

const T0 = 1_790_000_000_000;
const HOUR = 3_600_000;

function session(input: Partial<ConsoleSessionRecord> & Pick<ConsoleSessionRecord, "idHash" | "accountId">): ConsoleSessionRecord {
  return { createdAt: T0, expiresAt: T0 + 12 * HOUR, idleExpiresAt: T0 + 2 * HOUR, ...input };
}

export function runConsoleStoreConformance(open: OpenStore): void {
  const withAccounts = async (ids: readonly string[]) => {
    const t = await open();
    for (const id of ids) await t.store.accounts.create({ id, name: id, at: T0 });
    return t;
  };

  describe("console sessions", () => {
    test("create returns the record; findByHash finds it; an unknown account writes nothing", async () => {
      await using t = await withAccounts(["acct_a"]);
      const s = session({ idHash: "h1", accountId: "acct_a" });
      expect(await t.store.consoleSessions.create(s)).toEqual(s);
      expect(await t.store.consoleSessions.findByHash("h1")).toEqual(s);
      expect(await t.store.consoleSessions.create(session({ idHash: "h2", accountId: "acct_none" }))).toBeUndefined();
      expect(await t.store.consoleSessions.findByHash("h2")).toBeUndefined();
    });

    test("touch moves the idle expiry forward only, and reports a missing session", async () => {
      await using t = await withAccounts(["acct_a"]);
      await t.store.consoleSessions.create(session({ idHash: "h1", accountId: "acct_a" }));
      expect(await t.store.consoleSessions.touch("h1", T0 + 3 * HOUR)).toBe(true);
      expect((await t.store.consoleSessions.findByHash("h1"))?.idleExpiresAt).toBe(T0 + 3 * HOUR);
      expect(await t.store.consoleSessions.touch("h1", T0 + HOUR)).toBe(true);
      expect((await t.store.consoleSessions.findByHash("h1"))?.idleExpiresAt).toBe(T0 + 3 * HOUR);
      expect(await t.store.consoleSessions.touch("nope", T0 + 4 * HOUR)).toBe(false);
    });

    test("delete ends one session; deleteAccount ends every session of that account only", async () => {
      await using t = await withAccounts(["acct_a", "acct_b"]);
      for (const [idHash, accountId] of [
        ["a1", "acct_a"],
        ["a2", "acct_a"],
        ["a3", "acct_a"],
        ["b1", "acct_b"],
      ] as const) {
        await t.store.consoleSessions.create(session({ idHash, accountId }));
      }
      expect(await t.store.consoleSessions.delete("a1")).toBe(true);
      expect(await t.store.consoleSessions.delete("a1")).toBe(false);
      expect(await t.store.consoleSessions.deleteAccount("acct_a")).toBe(2);
      const left = await Promise.all(["a1", "a2", "a3", "b1"].map((h) => t.store.consoleSessions.findByHash(h)));
      expect(left.map((s) => s?.idHash)).toEqual([undefined, undefined, undefined, "b1"]);
    });

    test("sweep deletes sessions past either expiry, at the boundary included", async () => {
      await using t = await withAccounts(["acct_a"]);
      const now = T0 + 5 * HOUR;
      await t.store.consoleSessions.create(session({ idHash: "live", accountId: "acct_a", idleExpiresAt: now + 1 }));
      await t.store.consoleSessions.create(session({ idHash: "idle", accountId: "acct_a", idleExpiresAt: now }));
      await t.store.consoleSessions.create(session({ idHash: "old", accountId: "acct_a", expiresAt: now, idleExpiresAt: now + HOUR }));
      expect(await t.store.consoleSessions.sweep(now)).toBe(2);
      const left = await Promise.all(["live", "idle", "old"].map((h) => t.store.consoleSessions.findByHash(h)));
      expect(left.map((s) => s?.idHash)).toEqual(["live", undefined, undefined]);
    });
  });

  describe("sign-in links", () => {
    const link = { tokenHash: "t1", accountId: "acct_a", createdAt: T0, expiresAt: T0 + 15 * 60_000 };

    test("create returns the unused link; an unknown account writes nothing", async () => {
      await using t = await withAccounts(["acct_a"]);
      expect(await t.store.signInLinks.create(link)).toEqual({ ...link, usedAt: null });
      expect(await t.store.signInLinks.create({ ...link, tokenHash: "t2", accountId: "acct_none" })).toBeUndefined();
      expect(await t.store.signInLinks.consume("t2", T0)).toBeUndefined();
    });

    test("consume succeeds once; a second consume fails", async () => {
      await using t = await withAccounts(["acct_a"]);
      await t.store.signInLinks.create(link);
      expect(await t.store.signInLinks.consume("t1", T0 + 1000)).toEqual({ ...link, usedAt: T0 + 1000 });
      expect(await t.store.signInLinks.consume("t1", T0 + 2000)).toBeUndefined();
      expect(await t.store.signInLinks.consume("unknown", T0)).toBeUndefined();
    });

    test("of many concurrent consumes exactly one succeeds", async () => {
      await using t = await withAccounts(["acct_a"]);
      await t.store.signInLinks.create(link);
      const results = await Promise.all(Array.from({ length: 16 }, (_, i) => t.store.signInLinks.consume("t1", T0 + i)));
      expect(results.filter((r) => r !== undefined).length).toBe(1);
    });

    test("consume fails at and after the expiry; sweep deletes expired links", async () => {
      await using t = await withAccounts(["acct_a"]);
      await t.store.signInLinks.create(link);
      await t.store.signInLinks.create({ ...link, tokenHash: "t2", expiresAt: link.expiresAt + 1 });
      expect(await t.store.signInLinks.consume("t1", link.expiresAt)).toBeUndefined();
      expect(await t.store.signInLinks.sweep(link.expiresAt)).toBe(1);
      expect(await t.store.signInLinks.consume("t2", link.expiresAt)).toEqual({
        ...link,
        tokenHash: "t2",
        expiresAt: link.expiresAt + 1,
        usedAt: link.expiresAt,
      });
    });
  });
}
