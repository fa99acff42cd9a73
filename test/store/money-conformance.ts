/**
 * The MoneyStore conformance suite: the invariants of MoneyStore in src/store/types.ts, driven
 * through the Store interface only (`store.money` for settlements; accounts, keys, ledger and usage to
 * set up and to look), so every implementation runs it unchanged. Each test opens a fresh, empty store.
 *
 * Pinned here: a charge has its own ledger entry with the request id; earnings and fees reach the
 * provider and platform accounts (the contract lets them be one entry per receiving account per batch,
 * so their entries' request ids and their count within one batch are not pinned); every `balanceAfter`
 * chains from the previous entry of the same account, so each ledger sums to its balance; what payers
 * lose is what providers and the platform gain; key spent totals grow by the charges made with the key;
 * a request id is applied at most once (in the same batch or a later one); a batch that would drive any
 * balance below zero at any entry, or that names an unknown account, throws and writes nothing at all
 * (not even the platform account); a zero charge writes only the usage row; the platform account exists
 * only once a fee was collected.
 *
 * Usage, from a test file: `runMoneyConformance("SQLite money", open)` with the opener of
 * runStoreConformance (test/store/conformance.ts).
 */
import { describe, expect, test } from "bun:test";
import { type LedgerEntry, PLATFORM_ACCOUNT_ID, type Settlement, type SettleResult, type Store } from "../../src/store/types.ts";
import { settlementOf as settlement, SETTLEMENT_T0 as T0 } from "../support/settlements.ts";
import type { OpenStore } from "./conformance.ts";

/** The fields of a ledger entry the money path decides (the id is the store's). */
type Entry = Pick<LedgerEntry, "kind" | "amount" | "balanceAfter" | "requestId">;

/** Earnings and fees may be credited once per receiving account per batch: their request id is not pinned. */
function pinned<E extends Pick<LedgerEntry, "kind" | "requestId">>(e: E): E {
  return e.kind === "earning" || e.kind === "fee" ? { ...e, requestId: null } : e;
}

/** An account's ledger, oldest first, without ids and times, earning and fee request ids as null. */
async function entries(store: Store, accountId: string): Promise<Entry[]> {
  const ledger = await store.accounts.ledger(accountId, 10_000);
  return ledger.reverse().map(({ kind, amount, balanceAfter, requestId }) => pinned({ kind, amount, balanceAfter, requestId }));
}

/** The sum of an account's entries of one kind. */
async function total(store: Store, accountId: string, kind: LedgerEntry["kind"]): Promise<number> {
  return (await entries(store, accountId)).filter((e) => e.kind === kind).reduce((sum, e) => sum + e.amount, 0);
}

/** The rejection reason of `promise`; fails the test when it resolves. */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected the promise to reject");
}

async function account(store: Store, id: string, credit = 0): Promise<void> {
  await store.accounts.create({ id, name: `name of ${id}`, at: T0 - 10_000 });
  if (credit > 0) await store.accounts.credit({ accountId: id, amount: credit, at: T0 - 5_000 });
}

async function key(store: Store, id: string, accountId: string): Promise<void> {
  const created = await store.keys.create({
    id,
    accountId,
    keyHash: `key-hash-${id}`,
    hint: `…${id.slice(-4)}`,
    name: null,
    allowedModels: null,
    spendCap: null,
    rpm: null,
    tpm: null,
    selfRouteOnly: false,
    createdAt: T0 - 9_000,
  });
  if (!created) throw new Error(`could not create key ${id}`);
}

/** Everything a settlement can write, for the accounts and keys named. */
async function snapshot(store: Store, accountIds: readonly string[], keyIds: readonly string[]) {
  const ids = [...accountIds, PLATFORM_ACCOUNT_ID];
  return {
    accounts: await store.accounts.list(),
    balances: await Promise.all(ids.map((id) => store.money.balance(id))),
    ledgers: await Promise.all(ids.map((id) => store.accounts.ledger(id, 10_000))),
    usage: await Promise.all(accountIds.map((id) => store.usage.list(id, 10_000))),
    spent: await Promise.all(keyIds.map((id) => store.money.keySpent(id))),
  };
}

/** The result reports, for what it names, the balances and totals the store now holds. */
async function expectResultMatchesStore(store: Store, result: SettleResult): Promise<void> {
  for (const [id, balance] of result.balances) expect({ id, balance: await store.money.balance(id) }).toEqual({ id, balance });
  for (const [id, spent] of result.keySpent) expect({ id, spent: await store.money.keySpent(id) }).toEqual({ id, spent });
}

/** Each entry's balanceAfter is the previous one plus its amount, and the last is the balance. */
async function expectLedgerAddsUp(store: Store, accountId: string): Promise<void> {
  const list = await entries(store, accountId);
  let running = 0;
  const chained = list.map((e) => {
    running += e.amount;
    return { ...e, balanceAfter: running };
  });
  expect({ accountId, list }).toEqual({ accountId, list: chained });
  expect({ accountId, balance: await store.money.balance(accountId) }).toEqual({ accountId, balance: running });
}

export function runMoneyConformance(name: string, open: OpenStore): void {
  describe(name, () => {
    test("settle applies charge, earning and fee with exact ledger entries, balances and key total", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer", 1_000);
      await account(store, "provider");
      await key(store, "key-1", "payer");
      const s = settlement({ requestId: "req-1", accountId: "payer", keyId: "key-1", charge: 100, providerAccountId: "provider", fee: 15 });

      const result = await store.money.settle([s]);

      expect(result).toEqual({
        applied: [true],
        balances: new Map([
          ["payer", 900],
          ["provider", 85],
          [PLATFORM_ACCOUNT_ID, 15],
        ]),
        keySpent: new Map([["key-1", 100]]),
      });
      expect({
        balances: [
          await store.money.balance("payer"),
          await store.money.balance("provider"),
          await store.money.balance(PLATFORM_ACCOUNT_ID),
        ],
        spent: await store.money.keySpent("key-1"),
        payer: await store.accounts.ledger("payer", 10),
        provider: (await store.accounts.ledger("provider", 10)).map(pinned),
        platform: (await store.accounts.ledger(PLATFORM_ACCOUNT_ID, 10)).map(pinned),
        earnings: await store.accounts.earnings("provider"),
        usage: await store.usage.list("payer", 10),
      }).toEqual({
        balances: [900, 85, 15],
        spent: 100,
        payer: [
          {
            id: expect.any(Number),
            accountId: "payer",
            kind: "charge",
            amount: -100,
            balanceAfter: 900,
            requestId: "req-1",
            createdAt: T0,
          },
          {
            id: expect.any(Number),
            accountId: "payer",
            kind: "credit",
            amount: 1_000,
            balanceAfter: 1_000,
            requestId: null,
            createdAt: T0 - 5_000,
          },
        ],
        provider: [
          {
            id: expect.any(Number),
            accountId: "provider",
            kind: "earning",
            amount: 85,
            balanceAfter: 85,
            requestId: null,
            createdAt: T0,
          },
        ],
        platform: [
          {
            id: expect.any(Number),
            accountId: PLATFORM_ACCOUNT_ID,
            kind: "fee",
            amount: 15,
            balanceAfter: 15,
            requestId: null,
            createdAt: T0,
          },
        ],
        earnings: 85,
        usage: [s.usage],
      });
    });

    test("each ledger sums to its balance; payers lose what providers and the platform gain", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer-1", 5_000);
      await account(store, "payer-2", 3_000);
      await account(store, "provider-1");
      await account(store, "provider-2");
      const batches: Settlement[][] = [
        [
          settlement({ requestId: "r-1", accountId: "payer-1", charge: 123, providerAccountId: "provider-1" }),
          settlement({ requestId: "r-2", accountId: "payer-2", charge: 7, providerAccountId: "provider-2", fee: 0 }),
          settlement({ requestId: "r-3", accountId: "payer-1", charge: 1, providerAccountId: "provider-2", fee: 1 }),
        ],
        [settlement({ requestId: "r-4", accountId: "payer-2", charge: 999, providerAccountId: null })],
        [
          settlement({ requestId: "r-5", accountId: "payer-1", charge: 250, providerAccountId: "provider-1", fee: 25 }),
          settlement({ requestId: "r-6", accountId: "payer-2", charge: 0, providerAccountId: "provider-1" }),
          settlement({ requestId: "r-7", accountId: "payer-2", charge: 31, providerAccountId: "provider-1" }),
        ],
      ];
      for (const batch of batches) await expectResultMatchesStore(store, await store.money.settle(batch));

      for (const id of ["payer-1", "payer-2", "provider-1", "provider-2", PLATFORM_ACCOUNT_ID]) await expectLedgerAddsUp(store, id);
      // Each charge has its own entry; what left the payers arrived at the providers and the platform.
      expect({
        charges: [...(await entries(store, "payer-1")), ...(await entries(store, "payer-2"))]
          .filter((e) => e.kind === "charge")
          .map((e) => [e.requestId, -e.amount])
          .sort(),
        earned: (await total(store, "provider-1", "earning")) + (await total(store, "provider-2", "earning")),
        fees: await total(store, PLATFORM_ACCOUNT_ID, "fee"),
      }).toEqual({
        charges: [
          ["r-1", 123],
          ["r-2", 7],
          ["r-3", 1],
          ["r-4", 999],
          ["r-5", 250],
          ["r-7", 31],
        ],
        earned: 110 + 225 + 27 + 7,
        fees: 13 + 1 + 999 + 25 + 4,
      });
      expect({
        balances: await Promise.all(
          ["payer-1", "payer-2", "provider-1", "provider-2", PLATFORM_ACCOUNT_ID].map((id) => store.money.balance(id)),
        ),
        earnings: [await store.accounts.earnings("provider-1"), await store.accounts.earnings("provider-2")],
      }).toEqual({
        balances: [5_000 - 123 - 1 - 250, 3_000 - 7 - 999 - 31, 110 + 225 + 27, 7, 13 + 1 + 999 + 25 + 4],
        earnings: [110 + 225 + 27, 7],
      });
    });

    test("key spent totals accumulate per key, across batches; requests without a key leave them alone", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer", 10_000);
      await account(store, "provider");
      await key(store, "key-a", "payer");
      await key(store, "key-b", "payer");
      const first = await store.money.settle([
        settlement({ requestId: "r-1", accountId: "payer", keyId: "key-a", charge: 40, providerAccountId: "provider" }),
        settlement({ requestId: "r-2", accountId: "payer", keyId: "key-b", charge: 5, providerAccountId: "provider" }),
        settlement({ requestId: "r-3", accountId: "payer", keyId: "key-a", charge: 2, providerAccountId: "provider" }),
        settlement({ requestId: "r-4", accountId: "payer", keyId: null, charge: 1_000, providerAccountId: "provider" }),
      ]);
      expect(first.keySpent).toEqual(
        new Map([
          ["key-a", 42],
          ["key-b", 5],
        ]),
      );
      const second = await store.money.settle([settlement({ requestId: "r-5", accountId: "payer", keyId: "key-b", charge: 300 })]);
      expect(second.keySpent).toEqual(new Map([["key-b", 305]]));
      expect([await store.money.keySpent("key-a"), await store.money.keySpent("key-b")]).toEqual([42, 305]);
      expect((await store.keys.list("payer")).map((k) => [k.id, k.spent])).toEqual([
        ["key-a", 42],
        ["key-b", 305],
      ]);
    });

    test("a request id repeated in the same batch is applied once", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer", 1_000);
      await account(store, "provider");
      await key(store, "key-1", "payer");
      const s = settlement({ requestId: "req-1", accountId: "payer", keyId: "key-1", charge: 100, providerAccountId: "provider" });
      const again = settlement({
        requestId: "req-1",
        accountId: "payer",
        keyId: "key-1",
        charge: 300,
        providerAccountId: "provider",
        at: T0 + 1,
      });

      const result = await store.money.settle([s, again]);

      expect(result.applied).toEqual([true, false]);
      await expectResultMatchesStore(store, result);
      expect({
        balances: [
          await store.money.balance("payer"),
          await store.money.balance("provider"),
          await store.money.balance(PLATFORM_ACCOUNT_ID),
        ],
        spent: await store.money.keySpent("key-1"),
        payer: await entries(store, "payer"),
        usage: await store.usage.list("payer", 10),
      }).toEqual({
        balances: [900, 90, 10],
        spent: 100,
        payer: [
          { kind: "credit", amount: 1_000, balanceAfter: 1_000, requestId: null },
          { kind: "charge", amount: -100, balanceAfter: 900, requestId: "req-1" },
        ],
        usage: [s.usage],
      });
    });

    test("a request id settled in an earlier batch is not applied again and changes nothing", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer", 1_000);
      await account(store, "provider");
      await key(store, "key-1", "payer");
      await store.money.settle([
        settlement({ requestId: "req-1", accountId: "payer", keyId: "key-1", charge: 100, providerAccountId: "provider" }),
      ]);
      const before = await snapshot(store, ["payer", "provider"], ["key-1"]);

      const result = await store.money.settle([
        settlement({ requestId: "req-1", accountId: "payer", keyId: "key-1", charge: 100, providerAccountId: "provider" }),
        settlement({ requestId: "req-1", accountId: "payer", keyId: "key-1", charge: 7, providerAccountId: null, at: T0 + 50 }),
      ]);

      expect(result.applied).toEqual([false, false]);
      await expectResultMatchesStore(store, result);
      expect(await snapshot(store, ["payer", "provider"], ["key-1"])).toEqual(before);
    });

    test("a batch that would overdraw an account throws and writes nothing at all", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer", 100);
      await account(store, "other", 100);
      await account(store, "provider");
      await key(store, "key-1", "payer");
      const ok = [
        settlement({ requestId: "r-1", accountId: "payer", keyId: "key-1", charge: 30, providerAccountId: "provider" }),
        settlement({ requestId: "r-2", accountId: "other", charge: 10, providerAccountId: "provider" }),
        settlement({ requestId: "r-3", accountId: "payer", keyId: "key-1", charge: 0, providerAccountId: "provider" }),
      ];
      // 30 + 71 > 100: the last settlement overdraws; the batch is also the first with a fee.
      const overdraw = settlement({ requestId: "r-4", accountId: "payer", keyId: "key-1", charge: 71, providerAccountId: "provider" });
      const before = await snapshot(store, ["payer", "other", "provider"], ["key-1"]);

      expect(await rejection(store.money.settle([...ok, overdraw]))).toBeInstanceOf(Error);

      expect(await snapshot(store, ["payer", "other", "provider"], ["key-1"])).toEqual(before);
      expect(await store.money.balance(PLATFORM_ACCOUNT_ID)).toBeUndefined();
      // Nothing of the refused batch was kept, not even the request ids: the good ones still apply.
      expect((await store.money.settle(ok)).applied).toEqual([true, true, true]);
      expect([await store.money.balance("payer"), await store.money.balance("other"), await store.money.keySpent("key-1")]).toEqual([
        70, 90, 30,
      ]);
    });

    test("an overdraft inside a batch is refused even when a later earning in the batch would cover it", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "both", 10); // pays as a consumer and earns as a provider
      await account(store, "payer", 1_000);
      await account(store, "provider");
      const pays = settlement({ requestId: "r-pays", accountId: "both", charge: 20, providerAccountId: "provider" });
      const earns = settlement({ requestId: "r-earns", accountId: "payer", charge: 50, providerAccountId: "both", fee: 0 });
      const before = await snapshot(store, ["both", "payer", "provider"], []);

      expect(await rejection(store.money.settle([pays, earns]))).toBeInstanceOf(Error);
      expect(await snapshot(store, ["both", "payer", "provider"], [])).toEqual(before);

      // Earned in an earlier batch, the same money pays.
      expect((await store.money.settle([earns])).applied).toEqual([true]);
      expect((await store.money.settle([pays])).applied).toEqual([true]);
      expect(await entries(store, "both")).toEqual([
        { kind: "credit", amount: 10, balanceAfter: 10, requestId: null },
        { kind: "earning", amount: 50, balanceAfter: 60, requestId: null },
        { kind: "charge", amount: -20, balanceAfter: 40, requestId: "r-pays" },
      ]);
    });

    test("a batch naming an unknown account throws and writes nothing", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer", 1_000);
      const before = await snapshot(store, ["payer"], []);
      const batch = [
        settlement({ requestId: "r-1", accountId: "payer", charge: 10, providerAccountId: null }),
        settlement({ requestId: "r-2", accountId: "payer", charge: 10, providerAccountId: "no-such-provider" }),
      ];
      expect(await rejection(store.money.settle(batch))).toBeInstanceOf(Error);
      expect(await snapshot(store, ["payer"], [])).toEqual(before);
    });

    test("a zero charge writes only the usage row", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer", 500);
      await account(store, "provider");
      await key(store, "key-1", "payer");
      const free = settlement({ requestId: "r-free", accountId: "payer", keyId: "key-1", charge: 0, providerAccountId: "provider" });
      const before = await snapshot(store, ["payer", "provider"], ["key-1"]);

      const result = await store.money.settle([free]);

      expect(result.applied).toEqual([true]);
      await expectResultMatchesStore(store, result);
      expect(await snapshot(store, ["payer", "provider"], ["key-1"])).toEqual({ ...before, usage: [[free.usage], []] });
    });

    test("balance and keySpent are undefined for unknown ids and zero for new ones", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer");
      await key(store, "key-1", "payer");
      expect([
        await store.money.balance("payer"),
        await store.money.keySpent("key-1"),
        await store.money.balance("no-such-account"),
        await store.money.keySpent("no-such-key"),
        await store.money.balance("key-1"),
        await store.money.keySpent("payer"),
      ]).toEqual([0, 0, undefined, undefined, undefined, undefined]);
    });

    test("the platform account appears with the first fee, not before", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer", 1_000);
      await account(store, "provider");
      const platform = async () => ({
        balance: await store.money.balance(PLATFORM_ACCOUNT_ID),
        account: await store.accounts.get(PLATFORM_ACCOUNT_ID),
        listed: (await store.accounts.list()).some((a) => a.id === PLATFORM_ACCOUNT_ID),
      });
      expect(await platform()).toEqual({ balance: undefined, account: undefined, listed: false });

      await store.money.settle([
        settlement({ requestId: "r-zero", accountId: "payer", charge: 0, providerAccountId: null }),
        settlement({ requestId: "r-no-fee", accountId: "payer", charge: 40, providerAccountId: "provider", fee: 0 }),
      ]);
      expect(await platform()).toEqual({ balance: undefined, account: undefined, listed: false });

      await store.money.settle([settlement({ requestId: "r-fee", accountId: "payer", charge: 40, providerAccountId: "provider", fee: 4 })]);
      expect(await platform()).toEqual({
        balance: 4,
        account: expect.objectContaining({ id: PLATFORM_ACCOUNT_ID, balance: 4 }),
        listed: true,
      });
      await store.money.settle([settlement({ requestId: "r-fee-2", accountId: "payer", charge: 6, providerAccountId: null })]);
      expect(await entries(store, PLATFORM_ACCOUNT_ID)).toEqual([
        { kind: "fee", amount: 4, balanceAfter: 4, requestId: null },
        { kind: "fee", amount: 6, balanceAfter: 10, requestId: null },
      ]);
    });

    test("many settlements of one account in one batch chain balanceAfter", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer-a", 1_000);
      await account(store, "payer-b", 1_000);
      await account(store, "provider");
      const batch: Settlement[] = [];
      for (let i = 1; i <= 20; i++) {
        batch.push(settlement({ requestId: `a-${i}`, accountId: "payer-a", charge: i, providerAccountId: "provider", fee: i % 3 }));
        batch.push(settlement({ requestId: `b-${i}`, accountId: "payer-b", charge: 2 * i, providerAccountId: "provider", fee: 1 }));
      }

      const result = await store.money.settle(batch);

      expect(result.applied).toEqual(batch.map(() => true));
      await expectResultMatchesStore(store, result);
      // Each payer's charges, in batch order, interleaved with the other payer's: each chains from its own.
      for (const payer of ["payer-a", "payer-b"]) {
        let balance = 1_000;
        expect(await entries(store, payer)).toEqual([
          { kind: "credit", amount: 1_000, balanceAfter: 1_000, requestId: null },
          ...batch
            .filter((s) => s.accountId === payer)
            .map((s) => {
              balance -= s.charge;
              return { kind: "charge" as const, amount: -s.charge, balanceAfter: balance, requestId: s.requestId };
            }),
        ]);
      }
      const earned = batch.reduce((sum, s) => sum + s.earning, 0);
      const fees = batch.reduce((sum, s) => sum + s.fee, 0);
      expect({
        kinds: [
          new Set((await entries(store, "provider")).map((e) => e.kind)),
          new Set((await entries(store, PLATFORM_ACCOUNT_ID)).map((e) => e.kind)),
        ],
        totals: [await total(store, "provider", "earning"), await total(store, PLATFORM_ACCOUNT_ID, "fee")],
        balances: [
          await store.money.balance("payer-a"),
          await store.money.balance("payer-b"),
          await store.money.balance("provider"),
          await store.money.balance(PLATFORM_ACCOUNT_ID),
        ],
      }).toEqual({
        kinds: [new Set(["earning"]), new Set(["fee"])],
        totals: [earned, fees],
        balances: [1_000 - 210, 1_000 - 420, earned, fees],
      });
      for (const id of ["payer-a", "payer-b", "provider", PLATFORM_ACCOUNT_ID]) await expectLedgerAddsUp(store, id);
    });

    test("concurrent batches on the same accounts lose no update", async () => {
      await using t = await open();
      const { store } = t;
      await account(store, "payer", 10_000);
      await account(store, "provider");
      const charges = Array.from({ length: 25 }, (_, i) => i + 1);
      await Promise.all(
        charges.map((charge) =>
          store.money.settle([settlement({ requestId: `r-${charge}`, accountId: "payer", charge, providerAccountId: "provider" })]),
        ),
      );
      const total = charges.reduce((sum, c) => sum + c, 0);
      const fees = charges.reduce((sum, c) => sum + Math.ceil(c / 10), 0);
      expect([
        await store.money.balance("payer"),
        await store.money.balance("provider"),
        await store.money.balance(PLATFORM_ACCOUNT_ID),
      ]).toEqual([10_000 - total, total - fees, fees]);
      for (const id of ["payer", "provider", PLATFORM_ACCOUNT_ID]) await expectLedgerAddsUp(store, id);
    });
  });
}
