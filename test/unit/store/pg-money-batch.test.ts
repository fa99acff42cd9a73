/**
 * The money authority's batches (call-batcher.ts, migrations/0003_money_batch.sql) on real Postgres:
 * calls made together go in one round trip and are decided in order, each with the outcome it would have
 * alone (funds, quota, unknown, duplicate, held); a settlement twice in a batch or across batches is
 * charged once; a batch the database refuses is retried call by call, so only the bad call fails; a
 * round trip whose answer is lost fails every call in it, and a settlement retried after its lost commit
 * charges nothing more. (A batch of one goes through 0002's functions: the other pg-money tests cover
 * them, and the property test mixes both.) Skipped, saying so, without a server.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import postgres from "postgres";
import { pgMoneyAuthority } from "../../../src/store/pg/money-authority.ts";
import { testDatabase } from "../../support/pg.ts";
import { emptyTables, readBooks, seedAccount, seedKey } from "../../support/pg-money.ts";
import { settlementOf } from "../../support/settlements.ts";
import { startTcpProxy } from "../../support/tcp-proxy.ts";
import { waitFor } from "../../support/wait.ts";

const SUITE = "Postgres money authority batches";
const db = await testDatabase([SUITE]);

if (!db) {
  describe.skip("Postgres money authority batches (no server: see the line above)", () => test(SUITE, () => {}));
} else {
  await (await db.store()).end(); // migrations applied
  const sql = postgres(db.url, { max: 4, onnotice: () => {} });
  afterAll(() => sql.end({ timeout: 5 }));
  let a = pgMoneyAuthority(sql, { replica: "r1", ttlMs: 60_000 });
  const hold = (requestId: string, amount: number, keyId: string | null = "k2", accountId = "acct") => ({
    requestId,
    accountId,
    keyId,
    amount,
  });

  beforeEach(async () => {
    a = pgMoneyAuthority(sql, { replica: "r1", ttlMs: 60_000 });
    await emptyTables(sql);
    await seedAccount(sql, "acct", 1000);
    await seedAccount(sql, "prov", 0);
    await seedKey(sql, "k1", "acct", 300);
    await seedKey(sql, "k2", "acct", null);
    await seedKey(sql, "other", "prov", null);
  });

  describe(SUITE, () => {
    test("through the store's own pool, which drizzle shares (its JSON serializers pass values through): batches settle", async () => {
      const store = await (db as NonNullable<typeof db>).store();
      try {
        const own = store.moneyAuthority({ replica: "r-store", ttlMs: 60_000 });
        const ids = ["s-1", "s-2", "s-3"];
        await Promise.all(ids.map((id) => own.reserve(hold(id, 10))));
        const settled = await Promise.all(
          ids.map((id) => own.settle(settlementOf({ requestId: id, accountId: "acct", keyId: "k2", charge: 4 }))),
        );
        expect([settled.map((s) => s.charged), own.batches().settle.roundTrips < ids.length]).toEqual([[4, 4, 4], true]);
      } finally {
        await store.end();
      }
    });

    test("calls made together go in one round trip, decided in order with their own outcomes", async () => {
      expect("hold" in (await a.reserve(hold("open", 100)))).toBe(true);
      const out = await Promise.all([
        a.reserve(hold("ok-1", 500)),
        a.reserve(hold("too-much", 500)), // 400 left
        a.reserve(hold("capped", 301, "k1")),
        a.reserve(hold("nobody", 1, null, "no-such-account")),
        a.reserve(hold("wrong-key", 1, "other")),
        a.reserve(hold("no-key", 1, "no-such-key")),
        a.reserve(hold("open", 1)),
        a.reserve(hold("ok-2", 300, "k1")),
        a.reserve(hold("ok-2", 1)),
        a.reserve(hold("ok-3", 100)),
        a.reserve(hold("too-much-now", 1)),
      ]);
      expect(out.map((r) => ("hold" in r ? "held" : r.shortfall))).toEqual([
        "held",
        "funds",
        "quota",
        "unknown",
        "unknown",
        "unknown",
        "duplicate",
        "held",
        "duplicate",
        "held",
        "funds",
      ]);
      expect(a.batches().reserve).toMatchObject({ calls: 12, roundTrips: 2, largest: 11 });
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts.acct).toEqual({ balance: 1000, reserved: 1000 });
      expect(books.keys.k1).toEqual({ spent: 0, held: 300, cap: 300 });
      expect(Object.keys(books.holds).sort()).toEqual(["ok-1", "ok-2", "ok-3", "open"]);
      expect(books.holds["ok-2"]).toEqual({ account: "acct", key: "k1", amount: 300 });
    });

    test("a settlement twice in one batch, and again in the next, is charged once", async () => {
      await Promise.all([a.reserve(hold("s1", 300, "k1")), a.reserve(hold("s2", 200))]);
      const s1 = settlementOf({ requestId: "s1", accountId: "acct", keyId: "k1", charge: 250, providerAccountId: "prov", fee: 25 });
      const s2 = settlementOf({ requestId: "s2", accountId: "acct", keyId: "k2", charge: 500, providerAccountId: "prov", fee: 50 });
      const never = settlementOf({ requestId: "never", accountId: "acct", charge: 70 });
      const first = await Promise.all([a.settle(s1), a.settle(s2), a.settle(s1), a.settle(never)]);
      expect(first).toEqual([
        { applied: true, hadHold: true, charged: 250 },
        { applied: true, hadHold: true, charged: 200 },
        { applied: false, hadHold: false, charged: 0 },
        { applied: true, hadHold: false, charged: 0 },
      ]);
      expect(await Promise.all([a.settle(s1), a.settle(s2)])).toEqual([
        { applied: false, hadHold: false, charged: 0 },
        { applied: false, hadHold: false, charged: 0 },
      ]);
      expect(a.batches().settle).toMatchObject({ calls: 6, roundTrips: 2, largest: 4 });
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts).toEqual({
        acct: { balance: 550, reserved: 0 },
        prov: { balance: 225 + 150, reserved: 0 },
        acct_platform: { balance: 25 + 50, reserved: 0 },
      });
      expect(books.keys.k1).toEqual({ spent: 250, held: 0, cap: 300 });
      expect(books.charges).toEqual({ s1: { total: 250, entries: 1 }, s2: { total: 200, entries: 1 } });
      // Each ledger entry's balance_after is the balance once the settlements before it (request id order) were applied.
      const entries = await sql`SELECT account_id, kind, amount_micro_usd AS amount, balance_after_micro_usd AS after
        FROM ledger_entries WHERE kind <> 'credit' ORDER BY id`;
      expect(entries.map((e) => [e.account_id, e.kind, Number(e.amount), Number(e.after)])).toEqual(
        expect.arrayContaining([
          ["acct", "charge", -250, 750],
          ["acct", "charge", -200, 550],
          ["prov", "earning", 225, 225],
          ["prov", "earning", 150, 375],
          ["acct_platform", "fee", 25, 25],
          ["acct_platform", "fee", 50, 75],
        ]),
      );
      expect(entries.length).toBe(6);
    });

    test("releases together: each hold given back once", async () => {
      await Promise.all([a.reserve(hold("r1", 100, "k1")), a.reserve(hold("r2", 200))]);
      expect(await Promise.all([a.release("r2"), a.release("r1"), a.release("r2"), a.release("gone")])).toEqual([true, true, false, false]);
      expect(a.batches().release).toMatchObject({ calls: 4, roundTrips: 1 });
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts.acct).toEqual({ balance: 1000, reserved: 0 });
      expect(books.keys.k1?.held).toBe(0);
    });

    test("calls made while a batch is in flight go together in the next; batchMax 1 sends each alone", async () => {
      const first = a.reserve(hold("b0", 1));
      await Promise.resolve(); // the first round trip is on its way
      const rest = Array.from({ length: 20 }, (_, i) => a.reserve(hold(`b${i + 1}`, 1)));
      expect((await Promise.all([first, ...rest])).every((r) => "hold" in r)).toBe(true);
      expect(a.batches().reserve).toEqual(expect.objectContaining({ calls: 21, roundTrips: 2, largest: 20 }));
      const alone = pgMoneyAuthority(sql, { replica: "r1", batchMax: 1 });
      await Promise.all(Array.from({ length: 5 }, (_, i) => alone.reserve(hold(`c${i}`, 1))));
      expect(alone.batches().reserve).toMatchObject({ calls: 5, roundTrips: 5, largest: 1 });
    });

    test("a batch the database refuses is retried call by call: only the bad call fails", async () => {
      await Promise.all([a.reserve(hold("g1", 100)), a.reserve(hold("g2", 100))]);
      const good = settlementOf({ requestId: "g1", accountId: "acct", keyId: "k2", charge: 60, providerAccountId: "prov", fee: 6 });
      // The earning goes to an account that does not exist: its ledger entry breaks a foreign key.
      const bad = settlementOf({ requestId: "g2", accountId: "acct", keyId: "k2", charge: 60, providerAccountId: "ghost", fee: 6 });
      const [ok, failed] = await Promise.allSettled([a.settle(good), a.settle(bad)]);
      expect(ok).toEqual({ status: "fulfilled", value: { applied: true, hadHold: true, charged: 60 } });
      expect(failed?.status).toBe("rejected");
      expect(a.batches().settle).toMatchObject({ calls: 2, roundTrips: 3 });
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.holds).toEqual({ g2: { account: "acct", key: "k2", amount: 100 } });
      expect(books.accounts.acct).toEqual({ balance: 940, reserved: 100 });
    });

    test("a round trip whose answer is lost fails every call; the settlements retried charge nothing more", async () => {
      await Promise.all([a.reserve(hold("l1", 100)), a.reserve(hold("l2", 100))]);
      const url = new URL(db.url);
      await using proxy = startTcpProxy({ hostname: url.hostname, port: Number(url.port) });
      url.port = String(proxy.port);
      const cut = postgres(url.toString(), { max: 1, onnotice: () => {} });
      const b = pgMoneyAuthority(cut, { replica: "r2" });
      await b.renew(); // connected through the proxy
      const ss = ["l1", "l2"].map((id) => settlementOf({ requestId: id, accountId: "acct", keyId: "k2", charge: 80 }));
      // The batch waits in the database behind a lock; meanwhile the proxy stops forwarding answers.
      const blocker = await sql.reserve();
      await blocker`BEGIN`;
      await blocker`SELECT 1 FROM balances WHERE account_id = 'acct' FOR UPDATE`;
      const lost = Promise.allSettled(ss.map((s) => b.settle(s)));
      await waitFor(
        async () => (await sql`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).length > 0,
        "the batch waits",
      );
      proxy.freeze();
      await blocker`COMMIT`;
      blocker.release();
      await waitFor(async () => (await sql`SELECT 1 FROM usage`).length === 2, "the batch committed");
      await cut.end({ timeout: 0 });
      const outcomes = await lost;
      expect(outcomes.map((o) => o.status)).toEqual(["rejected", "rejected"]);
      expect(await Promise.all(ss.map((s) => a.settle(s)))).toEqual([
        { applied: false, hadHold: false, charged: 0 },
        { applied: false, hadHold: false, charged: 0 },
      ]);
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts.acct).toEqual({ balance: 840, reserved: 0 });
      expect(books.charges).toEqual({ l1: { total: 80, entries: 1 }, l2: { total: 80, entries: 1 } });
    });
  });
}
