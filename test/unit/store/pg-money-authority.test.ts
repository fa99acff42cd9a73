/**
 * The money authority (src/store/pg/money-authority.ts) on real Postgres: each function, its shortfall
 * reasons, idempotent settlement, expiry on the database clock, renewal and sweeping, and many concurrent
 * reserves on one account across pools never admitting more than the balance. Skipped, saying so,
 * without a server.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import postgres from "postgres";
import { pgMoneyAuthority } from "../../../src/store/pg/money-authority.ts";
import { testDatabase } from "../../support/pg.ts";
import { emptyTables, readBooks, replicaOn, seedAccount, seedKey } from "../../support/pg-money.ts";
import { settlementOf } from "../../support/settlements.ts";
import { waitFor } from "../../support/wait.ts";

const SUITE = "Postgres money authority";
const db = await testDatabase([SUITE]);

if (!db) {
  describe.skip("Postgres money authority (no server: see the line above)", () => test(SUITE, () => {}));
} else {
  await (await db.store()).end(); // migrations applied
  const sql = postgres(db.url, { max: 4, onnotice: () => {} });
  afterAll(() => sql.end({ timeout: 5 }));
  const authorities = () => ({
    a: pgMoneyAuthority(sql, { replica: "r1", ttlMs: 60_000 }),
    /** A replica whose holds expire at once (1 ms on the database clock). */
    brief: pgMoneyAuthority(sql, { replica: "r2", ttlMs: 1, marginMs: 0 }),
  });
  let { a, brief } = authorities();
  const expired = (id: string) =>
    waitFor(async () => (await sql`SELECT 1 FROM holds WHERE request_id = ${id} AND expires_at < now()`).length > 0, `${id} expired`);
  const reserve = (requestId: string, amount: number, keyId: string | null = "k1", on = a) =>
    on.reserve({ requestId, accountId: "acct", keyId, amount });

  beforeEach(async () => {
    ({ a, brief } = authorities());
    await emptyTables(sql);
    await seedAccount(sql, "acct", 1000);
    await seedAccount(sql, "prov", 0);
    await seedKey(sql, "k1", "acct", 500);
    await seedKey(sql, "k2", "acct", null);
  });

  describe(SUITE, () => {
    test("a reserve holds the amount on the account and the key, until the database clock's expiry", async () => {
      const r = await reserve("req-1", 300);
      expect("hold" in r && r.hold.expiresAt.getTime() > Date.now() + 50_000).toBe(true);
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts.acct).toEqual({ balance: 1000, reserved: 300 });
      expect(books.keys.k1).toEqual({ spent: 0, held: 300, cap: 500 });
      expect(books.holds).toEqual({ "req-1": { account: "acct", key: "k1", amount: 300 } });
    });

    test("shortfalls name their reason and hold nothing", async () => {
      expect(await reserve("quota", 600, "k1")).toEqual({ shortfall: "quota" });
      await reserve("big", 800, "k2");
      expect(
        await Promise.all([
          reserve("funds", 300, "k2"),
          a.reserve({ requestId: "x", accountId: "nobody", keyId: null, amount: 1 }),
          reserve("y", 1, "no-such-key"),
          reserve("big", 10, "k2"),
        ]),
      ).toEqual([{ shortfall: "funds" }, { shortfall: "unknown" }, { shortfall: "unknown" }, { shortfall: "duplicate" }]);
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts.acct).toEqual({ balance: 1000, reserved: 800 });
      expect(books.keys.k1?.held).toBe(0);
      expect(Object.keys(books.holds)).toEqual(["big"]);
    });

    test("the key's cap counts what it spent and what it holds", async () => {
      await reserve("a", 200);
      await a.settle(settlementOf({ requestId: "a", accountId: "acct", keyId: "k1", charge: 200 }));
      await reserve("b", 250);
      expect(await reserve("c", 51)).toEqual({ shortfall: "quota" });
      expect("hold" in (await reserve("c", 50))).toBe(true);
    });

    test("settle charges min(cost, hold), pays earning and fee inside it, releases the hold", async () => {
      await reserve("s1", 300);
      await reserve("s2", 200, "k2");
      const over = settlementOf({ requestId: "s1", accountId: "acct", keyId: "k1", charge: 500, providerAccountId: "prov", fee: 50 });
      expect(await a.settle(over)).toEqual({ applied: true, hadHold: true, charged: 300 });
      const under = settlementOf({ requestId: "s2", accountId: "acct", keyId: "k2", charge: 120, providerAccountId: "prov", fee: 12 });
      expect(await a.settle(under)).toEqual({ applied: true, hadHold: true, charged: 120 });
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts).toEqual({
        acct: { balance: 580, reserved: 0 },
        prov: { balance: 250 + 108, reserved: 0 }, // the fee kept whole when the charge is cut
        acct_platform: { balance: 50 + 12, reserved: 0 },
      });
      expect(books.keys.k1).toEqual({ spent: 300, held: 0, cap: 500 });
      expect(books.charges).toEqual({ s1: { total: 300, entries: 1 }, s2: { total: 120, entries: 1 } });
      const [row] = await sql`SELECT cost_micro_usd AS c FROM usage WHERE request_id = 's1'`;
      expect(Number(row?.c)).toBe(300);
    });

    test("settle is idempotent on the request id; without a hold it charges nothing", async () => {
      await reserve("s1", 300);
      const s = settlementOf({ requestId: "s1", accountId: "acct", keyId: "k1", charge: 100 });
      expect(await a.settle(s)).toEqual({ applied: true, hadHold: true, charged: 100 });
      const before = await readBooks(sql);
      expect(await Promise.all([a.settle(s), a.settle(s)])).toEqual([
        { applied: false, hadHold: false, charged: 0 },
        { applied: false, hadHold: false, charged: 0 },
      ]);
      expect(await readBooks(sql)).toEqual(before);
      const never = settlementOf({ requestId: "never-held", accountId: "acct", keyId: "k1", charge: 70 });
      expect(await a.settle(never)).toEqual({ applied: true, hadHold: false, charged: 0 });
      const after = await readBooks(sql);
      expect(after.accounts.acct).toEqual({ balance: 900, reserved: 0 });
      expect(after.charges["never-held"]).toBeUndefined();
    });

    test("release gives the hold back once", async () => {
      await reserve("r1", 300);
      expect(await Promise.all([a.release("r1"), a.release("r1")])).toEqual(expect.arrayContaining([true, false]));
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts.acct).toEqual({ balance: 1000, reserved: 0 });
      expect(books.keys.k1?.held).toBe(0);
    });

    test("sweep releases expired holds only; a swept hold's settlement charges nothing more", async () => {
      await reserve("kept", 100);
      await reserve("gone", 200, "k1", brief);
      await expired("gone");
      expect(await a.sweep()).toBe(1);
      expect(Object.keys((await readBooks(sql)).holds)).toEqual(["kept"]);
      const late = settlementOf({ requestId: "gone", accountId: "acct", keyId: "k1", charge: 150 });
      expect(await brief.settle(late)).toEqual({ applied: true, hadHold: false, charged: 0 });
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts.acct).toEqual({ balance: 1000, reserved: 100 });
      expect(books.keys.k1).toEqual({ spent: 0, held: 100, cap: 500 });
    });

    test("sweep works in batches until none is left", async () => {
      for (let i = 0; i < 7; i++) await reserve(`e${i}`, 10, "k2", brief);
      await expired("e6");
      expect(await brief.sweep(3)).toBe(7);
      expect((await readBooks(sql)).accounts.acct).toEqual({ balance: 1000, reserved: 0 });
    });

    test("renew extends this replica's holds only, and reports the ones swept meanwhile", async () => {
      await reserve("mine", 100);
      await reserve("theirs", 100, "k2", brief);
      await reserve("lost", 100, "k2");
      await sql`UPDATE holds SET expires_at = now() - interval '1 second' WHERE request_id IN ('mine', 'lost')`;
      await sql`DELETE FROM holds WHERE request_id = 'lost'`; // as if swept: the books are not read here
      const r = await a.renew();
      expect(r).toEqual({ renewed: 1, lost: ["lost"], released: 0 });
      expect(a.deadlines.overdue()).toEqual(["lost"]);
      const [row] = await sql`SELECT expires_at > now() + interval '50 seconds' AS later FROM holds WHERE request_id = 'mine'`;
      expect(row?.later).toBe(true);
      await expired("theirs");
      expect(await a.sweep()).toBe(1);
    });

    test("renew gives back the holds this replica no longer knows: an abandoned settlement, a reserve answered elsewhere", async () => {
      await reserve("kept", 100);
      await reserve("abandoned", 100);
      a.abandon("abandoned");
      // A hold of this replica's name this process never tracked (a reserve whose answer was lost).
      await reserve("unanswered", 100, "k1", pgMoneyAuthority(sql, { replica: "r1", ttlMs: 60_000 }));
      expect(await a.renew()).toEqual({ renewed: 1, lost: [], released: 2 });
      const books = await readBooks(sql);
      expect([Object.keys(books.holds), books.accounts.acct, books.keys.k1?.held, books.violations]).toEqual([
        ["kept"],
        { balance: 1000, reserved: 100 },
        100,
        [],
      ]);
    });

    test("a reserve still in flight is not taken for a hold nobody knows", async () => {
      // The renewal runs while the reserve's answer is on its way: the row is there, not tracked yet.
      const pending = Promise.all([reserve("racing", 100), a.renew()]);
      const [held, renewal] = await pending;
      expect(["hold" in held, renewal.released, Object.keys((await readBooks(sql)).holds)]).toEqual([true, 0, ["racing"]]);
    });

    test("many concurrent reserves on one account across four pools admit exactly what the balance allows", async () => {
      await using p1 = replicaOn(db.url, { replica: "p1", max: 3 });
      await using p2 = replicaOn(db.url, { replica: "p2", max: 3 });
      await using p3 = replicaOn(db.url, { replica: "p3", max: 3 });
      await using p4 = replicaOn(db.url, { replica: "p4", max: 3 });
      const pools = [p1, p2, p3, p4];
      const results = await Promise.all(Array.from({ length: 200 }, (_, i) => reserve(`c${i}`, 7, "k2", (pools[i % 4] ?? p1).authority)));
      const admitted = results.filter((r) => "hold" in r).length;
      expect(admitted).toBe(142); // floor(1000 / 7)
      expect(results.filter((r) => "shortfall" in r && r.shortfall !== "funds")).toEqual([]);
      const capped = await Promise.all(Array.from({ length: 40 }, (_, i) => reserve(`q${i}`, 30, "k1", (pools[i % 4] ?? p1).authority)));
      expect(capped.filter((r) => "hold" in r).length).toBe(0); // 994 of 1000 already held: funds run out first
      const books = await readBooks(sql);
      expect(books.violations).toEqual([]);
      expect(books.accounts.acct).toEqual({ balance: 1000, reserved: 994 });
    });

    test("concurrent reserves against a key's cap admit exactly what the cap allows", async () => {
      await using p1 = replicaOn(db.url, { replica: "p1", max: 3 });
      await using p2 = replicaOn(db.url, { replica: "p2", max: 3 });
      const results = await Promise.all(
        Array.from({ length: 60 }, (_, i) => reserve(`q${i}`, 30, "k1", (i % 2 === 0 ? p1 : p2).authority)),
      );
      expect(results.filter((r) => "hold" in r).length).toBe(16); // floor(500 / 30)
      expect(new Set(results.filter((r) => "shortfall" in r).map((r) => ("shortfall" in r ? r.shortfall : "")))).toEqual(
        new Set(["quota"]),
      );
      expect((await readBooks(sql)).violations).toEqual([]);
    });
  });
}
