/**
 * Billing over the Postgres money authority (src/billing/authority-reservations.ts) on real Postgres:
 * the same 402s as Wallets', a settlement charged at most its hold with the provider paid, and one whose
 * hold was swept charging nothing and logged for review, a settlement the database did not answer sent
 * again until it did (charged once) or for the lease only. Skipped, saying so, without a server.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import postgres from "postgres";
import { AuthorityReservations } from "../../../src/billing/authority-reservations.ts";
import { Billing, type Ending, type RequestMoney } from "../../../src/billing/billing.ts";
import type { Hold } from "../../../src/billing/wallets.ts";
import { pgMoneyAuthority } from "../../../src/store/pg/money-authority.ts";
import { type LogLine, recordingLogger } from "../../support/logs.ts";
import { testDatabase } from "../../support/pg.ts";
import { emptyTables, readBooks, seedAccount, seedKey } from "../../support/pg-money.ts";
import { waitFor } from "../../support/wait.ts";

const SUITE = "Billing over the Postgres money authority";
const db = await testDatabase([SUITE]);
const RATES = { input: 1_000_000, output: 2_000_000, cacheRead: 500_000, source: "model" } as const;

if (!db) {
  describe.skip("Billing over the money authority (no server: see the line above)", () => test(SUITE, () => {}));
} else {
  await (await db.store()).end(); // migrations applied
  const sql = postgres(db.url, { max: 3, onnotice: () => {} });
  afterAll(() => sql.end({ timeout: 5 }));
  let lines: LogLine[] = [];
  const billingWith = (ttlMs: number) =>
    new Billing(new AuthorityReservations(pgMoneyAuthority(sql, { replica: "r", ttlMs, marginMs: 0 }), recordingLogger(lines)), {
      platformFeePercent: 10,
    });
  const money = (requestId: string, hold: Hold | undefined): RequestMoney => ({
    requestId,
    accountId: "acct",
    keyId: "k1",
    model: "org/model",
    buildId: "org/build",
    rates: RATES,
    startedAt: 1_000,
    hold,
    free: false,
  });
  const ending = (prompt: number, completion: number): Ending => ({
    outcome: "completed",
    usage: { prompt_tokens: prompt, completion_tokens: completion },
    providerId: "provider-1",
    providerAccountId: "prov",
    firstContentMs: 40,
    endedAt: 2_000,
  });
  const request = (requestId: string, amount: number) => ({ requestId, accountId: "acct", keyId: "k1", spendCap: 600, amount });

  beforeEach(async () => {
    lines = [];
    await emptyTables(sql);
    await seedAccount(sql, "acct", 1000);
    await seedAccount(sql, "prov", 0);
    await seedKey(sql, "k1", "acct", 600);
  });

  describe(SUITE, () => {
    test("a shortfall is the 402 Wallets gives: insufficient_quota for the cap, insufficient_funds for the balance", async () => {
      const billing = billingWith(60_000);
      await expect(billing.reserve(request("q", 700))).rejects.toMatchObject({ status: 402, type: "insufficient_quota" });
      await seedKey(sql, "k2", "acct", null);
      await expect(billing.reserve({ ...request("f", 1200), keyId: "k2", spendCap: null })).rejects.toMatchObject({
        status: 402,
        type: "insufficient_funds",
      });
      await expect(billing.reserve({ ...request("x", 1), requestId: undefined })).rejects.toThrow("request id");
    });

    test("settle charges the usage, at most the hold; the provider earns it less the fee", async () => {
      const billing = billingWith(60_000);
      const hold = await billing.reserve(request("s", 500));
      expect(hold).toEqual({ accountId: "acct", amount: 500, keyId: "k1", capped: true, done: false });
      await billing.settle(money("s", hold), ending(100, 100)); // 100 + 200
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts).toEqual({
        acct: { balance: 700, reserved: 0 },
        prov: { balance: 270, reserved: 0 },
        acct_platform: { balance: 30, reserved: 0 },
      });
      expect(books.keys.k1).toEqual({ spent: 300, held: 0, cap: 600 });
      expect(lines).toEqual([]);
    });

    test("a hold swept before its settlement: nothing charged, logged for review without content", async () => {
      const billing = billingWith(1);
      const hold = await billing.reserve(request("late", 500));
      await waitFor(async () => (await sql`SELECT 1 FROM holds WHERE expires_at < now()`).length > 0, "the hold expired");
      expect([...(await sql`SELECT umbra_sweep(10) AS n`)]).toEqual([{ n: 1 }]);
      await billing.settle(money("late", hold), ending(100, 100));
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts.acct).toEqual({ balance: 1000, reserved: 0 });
      expect(lines.map((l) => [l.level, l.msg, l.fields])).toEqual([
        ["warn", "settled without its hold: nothing charged", { request_id: "late", account_id: "acct" }],
      ]);
    });

    test("a settlement the database did not answer is sent again: charged once; it fails only after the lease", async () => {
      let failing = 2;
      const real = pgMoneyAuthority(sql, { replica: "r", ttlMs: 60_000, marginMs: 0 });
      const flaky = {
        ...real,
        settle: (s: Parameters<typeof real.settle>[0]) =>
          failing-- > 0 ? Promise.reject(new Error("connection refused")) : real.settle(s),
      };
      const billing = new Billing(new AuthorityReservations(flaky, recordingLogger(lines), { firstMs: 1, maxMs: 2 }), {
        platformFeePercent: 10,
      });
      const hold = await billing.reserve(request("retried", 500));
      await billing.settle(money("retried", hold), ending(100, 100));
      const books = await readBooks(sql);
      expect([books.violations, books.charges.retried, books.accounts.acct]).toEqual([
        [],
        { total: 300, entries: 1 },
        { balance: 700, reserved: 0 },
      ]);
      expect(lines.map((l) => [l.level, l.msg, l.fields])).toEqual([
        ["info", "settlement written after a retry", { request_id: "retried", count: 3 }],
      ]);

      failing = Number.POSITIVE_INFINITY;
      const gone = new Billing(new AuthorityReservations(flaky, recordingLogger(lines), { firstMs: 1, maxMs: 2, forMs: 20 }), {
        platformFeePercent: 10,
      });
      const second = await gone.reserve(request("never", 100));
      await expect(gone.settle(money("never", second), ending(10, 10))).rejects.toThrow("connection refused");
      expect([lines.at(-1)?.level, lines.at(-1)?.msg]).toEqual(["error", "settlement not written: the database did not answer"]);
      // Abandoned: the replica's next renewal gives the hold back, nothing charged.
      expect([(await flaky.renew()).released, (await readBooks(sql)).accounts.acct]).toEqual([1, { balance: 700, reserved: 0 }]);
    });
  });
}
