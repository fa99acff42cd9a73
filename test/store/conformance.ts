/**
 * The Store conformance suite: every method of every domain store, driven through the Store interface
 * only, so the SQLite store and the Postgres store run it unchanged. Each test opens a fresh, empty store
 * and disposes of it at the end.
 *
 * Besides the doc comments in src/store/types.ts, the suite pins the list orders callers rely on:
 * accounts, API keys and provider tokens by creation time, then id; builds by id; aliases by alias;
 * prices by model; the ledger newest first (the last written first when times are equal); usage newest
 * first by start time. It also pins behaviour under concurrent calls: credits never lose an update, and
 * racing writes of one JWT subject or one request id let exactly one through.
 *
 * Usage, from a test file: `runStoreConformance("SQLite store", async () => ({ store, [Symbol.asyncDispose] }))`.
 */
import { describe, expect, test } from "bun:test";
import { DuplicateError } from "../../src/store/errors.ts";
import type { Account, ApiKeyRecord, ModelBuild, PriceRow, ProviderTokenRecord, Store, UsageRecord } from "../../src/store/types.ts";
import { runConsoleStoreConformance } from "./console-conformance.ts";
import { runMdmStoreConformance } from "./mdm-conformance.ts";
import { usageReportTests } from "./usage-report-conformance.ts";

/** A fresh, empty store; disposing of it closes the store and removes whatever it created. */
export interface OpenedStore extends AsyncDisposable {
  readonly store: Store;
}

export type OpenStore = () => Promise<OpenedStore>;

const T0 = 1_790_000_000_000;

/** Every field of a new key given (the store's input type leaves `linkMachines` optional). */
type FullNewKey = Omit<ApiKeyRecord, "spent" | "revokedAt">;
type FullNewToken = Omit<ProviderTokenRecord, "revokedAt">;

function newKey(input: Partial<FullNewKey> & Pick<FullNewKey, "id" | "accountId">): FullNewKey {
  return {
    keyHash: `key-hash-${input.id}`,
    hint: `…${input.id.slice(-4)}`,
    name: null,
    allowedModels: null,
    spendCap: null,
    rpm: null,
    tpm: null,
    selfRouteOnly: false,
    linkMachines: false,
    createdAt: T0,
    ...input,
  };
}

function newToken(input: Partial<FullNewToken> & Pick<FullNewToken, "id" | "accountId">): FullNewToken {
  return { tokenHash: `token-hash-${input.id}`, hint: `…${input.id.slice(-4)}`, name: null, createdAt: T0, expiresAt: null, ...input };
}

/** A build with every optional field null (created T0, owned by org, chat) but those given. */
export function newBuild(input: Partial<ModelBuild> & Pick<ModelBuild, "id">): ModelBuild {
  return {
    created: T0,
    ownedBy: "org",
    modelType: "chat",
    name: null,
    displayName: null,
    huggingFaceId: null,
    description: null,
    quantization: null,
    deprecationDate: null,
    inputModalities: null,
    outputModalities: null,
    supportedSamplingParameters: null,
    supportedFeatures: null,
    contextLength: null,
    maxOutputLength: null,
    ...input,
  };
}

/** A build with every optional field set. */
const FULL_BUILD: ModelBuild = {
  id: "org/full-build-4bit",
  created: T0 - 86_400_000,
  ownedBy: "org",
  modelType: "chat",
  name: "Full",
  displayName: "Full Build (4-bit)",
  huggingFaceId: "org/Full-Build",
  description: "Every optional field is set.",
  quantization: "4bit",
  deprecationDate: "2027-01-31",
  inputModalities: ["text", "image"],
  outputModalities: ["text"],
  supportedSamplingParameters: ["temperature", "top_p", "seed"],
  supportedFeatures: ["tools", "json_mode"],
  contextLength: 131_072,
  maxOutputLength: 8192,
};

function usageRow(input: Partial<UsageRecord> & Pick<UsageRecord, "requestId" | "accountId">): UsageRecord {
  return {
    keyId: "key-1",
    model: "org/model",
    buildId: "org/build-4bit",
    providerId: "provider-1",
    promptTokens: 120,
    cachedTokens: 20,
    completionTokens: 48,
    cost: 1_234,
    startedAt: T0,
    firstContentMs: 35,
    durationMs: 910,
    outcome: "ok",
    ...input,
  };
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

async function createAccounts(store: Store, ...ids: string[]): Promise<void> {
  for (const id of ids) await store.accounts.create({ id, name: `name of ${id}`, at: T0 });
}

export function runStoreConformance(name: string, open: OpenStore): void {
  describe(name, () => {
    test("ping resolves on an open store", async () => {
      await using t = await open();
      expect(await t.store.ping()).toBeUndefined();
    });

    test("ping rejects once the store is closed", async () => {
      await using t = await open();
      t.store.close();
      expect(await rejection(t.store.ping())).toBeInstanceOf(Error);
    });

    runConsoleStoreConformance(open);
    runMdmStoreConformance(open);

    describe("accounts", () => {
      test("create returns the account with a zero balance, and get returns the same", async () => {
        await using t = await open();
        const expected: Account = { id: "acct-1", name: "Alice", jwtSubject: "sub-1", createdAt: T0, balance: 0, reserved: 0 };
        expect(await t.store.accounts.create({ id: "acct-1", name: "Alice", jwtSubject: "sub-1", at: T0 })).toEqual(expected);
        expect(await t.store.accounts.get("acct-1")).toEqual(expected);
      });

      test("the JWT subject defaults to null, and several accounts may have none", async () => {
        await using t = await open();
        await t.store.accounts.create({ id: "acct-1", name: "One", at: T0 });
        await t.store.accounts.create({ id: "acct-2", name: "Two", jwtSubject: null, at: T0 + 1 });
        expect(await t.store.accounts.list()).toEqual([
          { id: "acct-1", name: "One", jwtSubject: null, createdAt: T0, balance: 0, reserved: 0 },
          { id: "acct-2", name: "Two", jwtSubject: null, createdAt: T0 + 1, balance: 0, reserved: 0 },
        ]);
      });

      test("get and findBySubject return undefined for unknown ids and subjects", async () => {
        await using t = await open();
        await t.store.accounts.create({ id: "acct-1", name: "Alice", jwtSubject: "sub-1", at: T0 });
        expect(await t.store.accounts.get("acct-2")).toBeUndefined();
        expect(await t.store.accounts.findBySubject("sub-2")).toBeUndefined();
      });

      test("findBySubject returns the account with that subject", async () => {
        await using t = await open();
        await t.store.accounts.create({ id: "acct-1", name: "Alice", jwtSubject: "sub-1", at: T0 });
        await t.store.accounts.create({ id: "acct-2", name: "Bob", jwtSubject: "sub-2", at: T0 });
        await t.store.accounts.credit({ accountId: "acct-2", amount: 500, at: T0 + 1 });
        expect(await t.store.accounts.findBySubject("sub-2")).toEqual({
          id: "acct-2",
          name: "Bob",
          jwtSubject: "sub-2",
          createdAt: T0,
          balance: 500,
          reserved: 0,
        });
      });

      test("a taken JWT subject throws DuplicateError naming jwt_subject and writes nothing", async () => {
        await using t = await open();
        await t.store.accounts.create({ id: "acct-1", name: "Alice", jwtSubject: "sub-1", at: T0 });
        const error = await rejection(t.store.accounts.create({ id: "acct-2", name: "Mallory", jwtSubject: "sub-1", at: T0 + 1 }));
        expect(error instanceof DuplicateError && error.field).toBe("jwt_subject");
        expect(await t.store.accounts.get("acct-2")).toBeUndefined();
        expect((await t.store.accounts.list()).map((a) => a.id)).toEqual(["acct-1"]);
      });

      test("concurrent creates with one JWT subject: one succeeds, the others throw DuplicateError", async () => {
        await using t = await open();
        const ids = ["acct-a", "acct-b", "acct-c", "acct-d", "acct-e"];
        const results = await Promise.allSettled(ids.map((id) => t.store.accounts.create({ id, name: id, jwtSubject: "sub-1", at: T0 })));
        const fulfilled = results.flatMap((r) => (r.status === "fulfilled" ? [r.value.id] : []));
        const reasons = results.flatMap((r) => (r.status === "rejected" ? [r.reason instanceof DuplicateError && r.reason.field] : []));
        expect(fulfilled).toHaveLength(1);
        expect(reasons).toEqual(["jwt_subject", "jwt_subject", "jwt_subject", "jwt_subject"]);
        expect((await t.store.accounts.list()).map((a) => a.id)).toEqual(fulfilled);
      });

      test("list is empty on a new store and ordered by creation time, then id", async () => {
        await using t = await open();
        expect(await t.store.accounts.list()).toEqual([]);
        await t.store.accounts.create({ id: "acct-c", name: "C", at: T0 + 2 });
        await t.store.accounts.create({ id: "acct-b", name: "B", at: T0 + 1 });
        await t.store.accounts.create({ id: "acct-a", name: "A", at: T0 + 2 });
        expect((await t.store.accounts.list()).map((a) => a.id)).toEqual(["acct-b", "acct-a", "acct-c"]);
      });

      test("credit adds to the balance and writes one credit ledger entry with the balance after", async () => {
        await using t = await open();
        await t.store.accounts.create({ id: "acct-1", name: "Alice", at: T0 });
        expect(await t.store.accounts.credit({ accountId: "acct-1", amount: 5_000_000, at: T0 + 10 })).toEqual({
          id: "acct-1",
          name: "Alice",
          jwtSubject: null,
          createdAt: T0,
          balance: 5_000_000,
          reserved: 0,
        });
        expect((await t.store.accounts.credit({ accountId: "acct-1", amount: 250, at: T0 + 20 }))?.balance).toBe(5_000_250);
        expect((await t.store.accounts.get("acct-1"))?.balance).toBe(5_000_250);
        const ledger = await t.store.accounts.ledger("acct-1", 10);
        expect(ledger.map(({ id: _id, ...entry }) => entry)).toEqual([
          { accountId: "acct-1", kind: "credit", amount: 250, balanceAfter: 5_000_250, requestId: null, createdAt: T0 + 20 },
          { accountId: "acct-1", kind: "credit", amount: 5_000_000, balanceAfter: 5_000_000, requestId: null, createdAt: T0 + 10 },
        ]);
      });

      test("credit of an unknown account returns undefined and writes no ledger entry", async () => {
        await using t = await open();
        await t.store.accounts.create({ id: "acct-1", name: "Alice", at: T0 });
        expect(await t.store.accounts.credit({ accountId: "acct-2", amount: 100, at: T0 + 1 })).toBeUndefined();
        expect(await t.store.accounts.ledger("acct-2", 10)).toEqual([]);
        expect(await t.store.accounts.ledger("acct-1", 10)).toEqual([]);
        expect(await t.store.accounts.get("acct-2")).toBeUndefined();
        expect((await t.store.accounts.list()).map((a) => a.id)).toEqual(["acct-1"]);
      });

      test("ledger is newest first, limited, per account, and is empty for an unknown account", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1", "acct-2");
        await t.store.accounts.credit({ accountId: "acct-1", amount: 1, at: T0 + 10 });
        await t.store.accounts.credit({ accountId: "acct-2", amount: 1_000, at: T0 + 15 });
        await t.store.accounts.credit({ accountId: "acct-1", amount: 2, at: T0 + 20 });
        // Same time as the previous credit: the one written last is the newest.
        await t.store.accounts.credit({ accountId: "acct-1", amount: 4, at: T0 + 20 });
        const all = await t.store.accounts.ledger("acct-1", 10);
        expect(all.map((e) => [e.amount, e.balanceAfter, e.createdAt])).toEqual([
          [4, 7, T0 + 20],
          [2, 3, T0 + 20],
          [1, 1, T0 + 10],
        ]);
        expect(new Set(all.map((e) => e.id)).size).toBe(3);
        expect(await t.store.accounts.ledger("acct-1", 2)).toEqual(all.slice(0, 2));
        expect((await t.store.accounts.ledger("acct-2", 10)).map((e) => e.amount)).toEqual([1_000]);
        expect(await t.store.accounts.ledger("acct-3", 10)).toEqual([]);
      });

      test("concurrent credits all apply, and every ledger entry follows from the one before it", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const amounts = Array.from({ length: 20 }, (_, i) => i + 1);
        const results = await Promise.all(amounts.map((amount) => t.store.accounts.credit({ accountId: "acct-1", amount, at: T0 + 1 })));
        expect((await t.store.accounts.get("acct-1"))?.balance).toBe(210);
        const oldestFirst = (await t.store.accounts.ledger("acct-1", 100)).reverse();
        expect(oldestFirst.map((e) => e.amount).sort((a, b) => a - b)).toEqual(amounts);
        let running = 0;
        const runningTotals = oldestFirst.map((e) => {
          running += e.amount;
          return running;
        });
        expect(oldestFirst.map((e) => e.balanceAfter)).toEqual(runningTotals);
        // Each call returned the balance right after its own credit.
        expect(results.map((a) => a?.balance).sort((a = 0, b = 0) => a - b)).toEqual(runningTotals);
      });
    });

    describe("API keys", () => {
      test("create returns the key unspent and unrevoked; get and findByHash return the same", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const input = newKey({
          id: "key-1",
          accountId: "acct-1",
          keyHash: "a".repeat(64),
          hint: "…wxyz",
          name: "laptop",
          allowedModels: ["org/model", "org/other"],
          spendCap: 2_000_000,
          rpm: 60,
          tpm: 100_000,
          selfRouteOnly: true,
          linkMachines: true,
          createdAt: T0 + 5,
        });
        const expected: ApiKeyRecord = { ...input, spent: 0, revokedAt: null };
        expect(await t.store.keys.create(input)).toEqual(expected);
        expect(await t.store.keys.get("key-1")).toEqual(expected);
        expect(await t.store.keys.findByHash("a".repeat(64))).toEqual(expected);
      });

      test("a key created without linkMachines may not link machines; one created with false neither", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const { linkMachines: _, ...withoutPermission } = newKey({ id: "key-1", accountId: "acct-1" });
        const expected: ApiKeyRecord = { ...withoutPermission, linkMachines: false, spent: 0, revokedAt: null };
        expect(await t.store.keys.create(withoutPermission)).toEqual(expected);
        expect(await t.store.keys.findByHash(withoutPermission.keyHash)).toEqual(expected);
        const explicit = newKey({ id: "key-2", accountId: "acct-1", linkMachines: false });
        expect(await t.store.keys.create(explicit)).toEqual({ ...explicit, spent: 0, revokedAt: null });
      });

      test("allowedModels null, empty and listed, and every nullable field, round-trip as given", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const keys = [
          newKey({ id: "key-1", accountId: "acct-1", allowedModels: null }),
          newKey({ id: "key-2", accountId: "acct-1", allowedModels: [] }),
          newKey({ id: "key-3", accountId: "acct-1", allowedModels: ["org/model"], selfRouteOnly: false }),
        ];
        for (const key of keys) await t.store.keys.create(key);
        const read = await Promise.all(keys.map((k) => t.store.keys.get(k.id)));
        expect(read).toEqual(keys.map((k) => ({ ...k, spent: 0, revokedAt: null })));
      });

      test("create for an unknown account returns undefined and writes nothing", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        expect(await t.store.keys.create(newKey({ id: "key-1", accountId: "acct-2" }))).toBeUndefined();
        expect(await t.store.keys.get("key-1")).toBeUndefined();
        expect(await t.store.keys.findByHash("key-hash-key-1")).toBeUndefined();
        expect(await t.store.keys.list()).toEqual([]);
      });

      test("get and findByHash return undefined for unknown ids and hashes", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        await t.store.keys.create(newKey({ id: "key-1", accountId: "acct-1" }));
        expect(await t.store.keys.get("key-2")).toBeUndefined();
        expect(await t.store.keys.findByHash("key-hash-key-2")).toBeUndefined();
      });

      test("list returns all keys or one account's, by creation time then id", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1", "acct-2");
        expect(await t.store.keys.list()).toEqual([]);
        await t.store.keys.create(newKey({ id: "key-c", accountId: "acct-1", createdAt: T0 + 3 }));
        await t.store.keys.create(newKey({ id: "key-b", accountId: "acct-2", createdAt: T0 + 2 }));
        await t.store.keys.create(newKey({ id: "key-a", accountId: "acct-1", createdAt: T0 + 3 }));
        await t.store.keys.create(newKey({ id: "key-d", accountId: "acct-1", createdAt: T0 + 1 }));
        expect((await t.store.keys.list()).map((k) => k.id)).toEqual(["key-d", "key-b", "key-a", "key-c"]);
        expect((await t.store.keys.list("acct-1")).map((k) => k.id)).toEqual(["key-d", "key-a", "key-c"]);
        expect(await t.store.keys.list("acct-2")).toEqual([
          { ...newKey({ id: "key-b", accountId: "acct-2", createdAt: T0 + 2 }), spent: 0, revokedAt: null },
        ]);
        expect(await t.store.keys.list("acct-3")).toEqual([]);
      });

      test("revoke sets the revocation time once; a second revoke keeps the first time", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const input = newKey({ id: "key-1", accountId: "acct-1" });
        await t.store.keys.create(input);
        await t.store.keys.create(newKey({ id: "key-2", accountId: "acct-1" }));
        const revoked: ApiKeyRecord = { ...input, spent: 0, revokedAt: T0 + 100 };
        expect(await t.store.keys.revoke("key-1", T0 + 100)).toEqual(revoked);
        expect(await t.store.keys.revoke("key-1", T0 + 200)).toEqual(revoked);
        expect(await t.store.keys.get("key-1")).toEqual(revoked);
        // A revoked key is still found by hash: the caller checks revokedAt.
        expect(await t.store.keys.findByHash(input.keyHash)).toEqual(revoked);
        expect((await t.store.keys.get("key-2"))?.revokedAt).toBeNull();
      });

      test("revoke of an unknown key returns undefined", async () => {
        await using t = await open();
        expect(await t.store.keys.revoke("key-1", T0)).toBeUndefined();
        expect(await t.store.keys.get("key-1")).toBeUndefined();
      });
    });

    describe("provider tokens", () => {
      test("create returns the token unrevoked; get and findByHash return the same", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const input = newToken({ id: "tok-1", accountId: "acct-1", tokenHash: "b".repeat(64), hint: "…9876", createdAt: T0 + 7 });
        const expected: ProviderTokenRecord = { ...input, revokedAt: null };
        expect(await t.store.providerTokens.create(input)).toEqual(expected);
        expect(await t.store.providerTokens.findByHash("b".repeat(64))).toEqual(expected);
        expect(await t.store.providerTokens.get("tok-1")).toEqual(expected);
        expect(await t.store.providerTokens.findByHash("c".repeat(64))).toBeUndefined();
        expect(await t.store.providerTokens.get("tok-2")).toBeUndefined();
      });

      test("expiresAt round-trips as given; a token created without it never expires (null)", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const expiring = newToken({ id: "tok-1", accountId: "acct-1", expiresAt: T0 + 86_400_000 });
        expect(await t.store.providerTokens.create(expiring)).toEqual({ ...expiring, revokedAt: null });
        expect(await t.store.providerTokens.get("tok-1")).toEqual({ ...expiring, revokedAt: null });
        expect(await t.store.providerTokens.findByHash(expiring.tokenHash)).toEqual({ ...expiring, revokedAt: null });
        const { expiresAt: _, ...withoutExpiry } = newToken({ id: "tok-2", accountId: "acct-1" });
        expect(await t.store.providerTokens.create(withoutExpiry)).toEqual({ ...withoutExpiry, expiresAt: null, revokedAt: null });
        expect(await t.store.providerTokens.list("acct-1")).toEqual([
          { ...expiring, revokedAt: null },
          { ...withoutExpiry, expiresAt: null, revokedAt: null },
        ]);
      });

      test("name round-trips as given; a token created without it has none (null)", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const named = newToken({ id: "tok-1", accountId: "acct-1", name: "Studio Mac · 2 <b>" });
        expect(await t.store.providerTokens.create(named)).toEqual({ ...named, revokedAt: null });
        expect(await t.store.providerTokens.get("tok-1")).toEqual({ ...named, revokedAt: null });
        expect(await t.store.providerTokens.findByHash(named.tokenHash)).toEqual({ ...named, revokedAt: null });
        const { name: _, ...withoutName } = newToken({ id: "tok-2", accountId: "acct-1", createdAt: T0 + 1 });
        expect(await t.store.providerTokens.create(withoutName)).toEqual({ ...withoutName, name: null, revokedAt: null });
        const nullName = newToken({ id: "tok-3", accountId: "acct-1", createdAt: T0 + 2, name: null });
        await t.store.providerTokens.create(nullName);
        expect(await t.store.providerTokens.get("tok-2")).toEqual({ ...withoutName, name: null, revokedAt: null });
        expect(await t.store.providerTokens.list("acct-1")).toEqual([
          { ...named, revokedAt: null },
          { ...withoutName, name: null, revokedAt: null },
          { ...nullName, revokedAt: null },
        ]);
        const revoked = await t.store.providerTokens.revoke("tok-1", T0 + 100);
        expect(revoked).toEqual({ ...named, revokedAt: T0 + 100 });
      });

      test("create for an unknown account returns undefined and writes nothing", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        expect(await t.store.providerTokens.create(newToken({ id: "tok-1", accountId: "acct-2" }))).toBeUndefined();
        expect(await t.store.providerTokens.findByHash("token-hash-tok-1")).toBeUndefined();
        expect(await t.store.providerTokens.list()).toEqual([]);
      });

      test("list returns all tokens or one account's, by creation time then id", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1", "acct-2");
        expect(await t.store.providerTokens.list()).toEqual([]);
        await t.store.providerTokens.create(newToken({ id: "tok-c", accountId: "acct-1", createdAt: T0 + 3 }));
        await t.store.providerTokens.create(newToken({ id: "tok-b", accountId: "acct-2", createdAt: T0 + 2 }));
        await t.store.providerTokens.create(newToken({ id: "tok-a", accountId: "acct-1", createdAt: T0 + 3 }));
        await t.store.providerTokens.create(newToken({ id: "tok-d", accountId: "acct-1", createdAt: T0 + 1 }));
        expect((await t.store.providerTokens.list()).map((k) => k.id)).toEqual(["tok-d", "tok-b", "tok-a", "tok-c"]);
        expect((await t.store.providerTokens.list("acct-1")).map((k) => k.id)).toEqual(["tok-d", "tok-a", "tok-c"]);
        expect(await t.store.providerTokens.list("acct-2")).toEqual([
          { ...newToken({ id: "tok-b", accountId: "acct-2", createdAt: T0 + 2 }), revokedAt: null },
        ]);
        expect(await t.store.providerTokens.list("acct-3")).toEqual([]);
      });

      test("revoke sets the revocation time once; a second revoke keeps the first time", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const input = newToken({ id: "tok-1", accountId: "acct-1" });
        await t.store.providerTokens.create(input);
        await t.store.providerTokens.create(newToken({ id: "tok-2", accountId: "acct-1" }));
        const revoked: ProviderTokenRecord = { ...input, revokedAt: T0 + 100 };
        expect(await t.store.providerTokens.revoke("tok-1", T0 + 100)).toEqual(revoked);
        expect(await t.store.providerTokens.revoke("tok-1", T0 + 200)).toEqual(revoked);
        expect(await t.store.providerTokens.findByHash(input.tokenHash)).toEqual(revoked);
        expect((await t.store.providerTokens.findByHash("token-hash-tok-2"))?.revokedAt).toBeNull();
      });

      test("revoke of an unknown token returns undefined", async () => {
        await using t = await open();
        expect(await t.store.providerTokens.revoke("tok-1", T0)).toBeUndefined();
        expect(await t.store.providerTokens.list()).toEqual([]);
      });
    });

    describe("catalog", () => {
      test("upsertBuild inserts every field, and getBuild returns the same", async () => {
        await using t = await open();
        expect(await t.store.catalog.upsertBuild(FULL_BUILD, T0)).toEqual(FULL_BUILD);
        expect(await t.store.catalog.getBuild(FULL_BUILD.id)).toEqual(FULL_BUILD);
      });

      test("upsertBuild of a build with only required fields stores nulls", async () => {
        await using t = await open();
        const bare = newBuild({ id: "other/plain" });
        expect(await t.store.catalog.upsertBuild(bare, T0)).toEqual(bare);
        expect(await t.store.catalog.getBuild("other/plain")).toEqual(bare);
      });

      test("upsertBuild replaces every field of an existing build, clearing omitted ones", async () => {
        await using t = await open();
        await t.store.catalog.upsertBuild(FULL_BUILD, T0);
        const replacement = newBuild({
          id: FULL_BUILD.id,
          created: T0 + 1,
          ownedBy: "other-org",
          modelType: "embedding",
          inputModalities: [],
          supportedFeatures: ["tools"],
          maxOutputLength: 1,
        });
        expect(await t.store.catalog.upsertBuild(replacement, T0 + 10)).toEqual(replacement);
        expect(await t.store.catalog.getBuild(FULL_BUILD.id)).toEqual(replacement);
        expect(await t.store.catalog.listBuilds()).toEqual([replacement]);
      });

      test("getBuild returns undefined for an unknown build", async () => {
        await using t = await open();
        await t.store.catalog.upsertBuild(FULL_BUILD, T0);
        expect(await t.store.catalog.getBuild("org/unknown")).toBeUndefined();
      });

      test("listBuilds is empty on a new store and ordered by id", async () => {
        await using t = await open();
        expect(await t.store.catalog.listBuilds()).toEqual([]);
        const b = newBuild({ id: "org/b", created: T0 });
        const a = newBuild({ id: "a/z", created: T0 + 5 });
        for (const build of [b, a, FULL_BUILD]) await t.store.catalog.upsertBuild(build, T0);
        expect(await t.store.catalog.listBuilds()).toEqual([a, b, FULL_BUILD]);
      });

      test("setAlias to an unknown build returns undefined and writes nothing", async () => {
        await using t = await open();
        await t.store.catalog.upsertBuild(FULL_BUILD, T0);
        expect(await t.store.catalog.setAlias("org/model", "org/unknown", T0)).toBeUndefined();
        expect(await t.store.catalog.getAlias("org/model")).toBeUndefined();
        expect(await t.store.catalog.listAliases()).toEqual([]);
      });

      test("setAlias creates and re-points an alias; getAlias returns it", async () => {
        await using t = await open();
        await t.store.catalog.upsertBuild(FULL_BUILD, T0);
        await t.store.catalog.upsertBuild(newBuild({ id: "org/next" }), T0);
        expect(await t.store.catalog.setAlias("org/model", FULL_BUILD.id, T0)).toEqual({ alias: "org/model", buildId: FULL_BUILD.id });
        expect(await t.store.catalog.getAlias("org/model")).toEqual({ alias: "org/model", buildId: FULL_BUILD.id });
        expect(await t.store.catalog.setAlias("org/model", "org/next", T0 + 1)).toEqual({ alias: "org/model", buildId: "org/next" });
        expect(await t.store.catalog.getAlias("org/model")).toEqual({ alias: "org/model", buildId: "org/next" });
        expect(await t.store.catalog.listAliases()).toEqual([{ alias: "org/model", buildId: "org/next" }]);
        expect(await t.store.catalog.getAlias("org/other")).toBeUndefined();
      });

      test("upserting a build that an alias points to keeps the alias", async () => {
        await using t = await open();
        await t.store.catalog.upsertBuild(FULL_BUILD, T0);
        await t.store.catalog.setAlias("org/model", FULL_BUILD.id, T0);
        const replacement = { ...FULL_BUILD, description: "updated" };
        expect(await t.store.catalog.upsertBuild(replacement, T0 + 1)).toEqual(replacement);
        expect(await t.store.catalog.getAlias("org/model")).toEqual({ alias: "org/model", buildId: FULL_BUILD.id });
      });

      test("listAliases is ordered by alias; deleteAlias is true once, then false", async () => {
        await using t = await open();
        expect(await t.store.catalog.listAliases()).toEqual([]);
        await t.store.catalog.upsertBuild(FULL_BUILD, T0);
        for (const alias of ["org/b", "org/c", "org/a"]) await t.store.catalog.setAlias(alias, FULL_BUILD.id, T0);
        expect((await t.store.catalog.listAliases()).map((a) => a.alias)).toEqual(["org/a", "org/b", "org/c"]);
        expect(await t.store.catalog.deleteAlias("org/b")).toBe(true);
        expect(await t.store.catalog.deleteAlias("org/b")).toBe(false);
        expect(await t.store.catalog.deleteAlias("org/never")).toBe(false);
        expect(await t.store.catalog.getAlias("org/b")).toBeUndefined();
        expect(await t.store.catalog.listAliases()).toEqual([
          { alias: "org/a", buildId: FULL_BUILD.id },
          { alias: "org/c", buildId: FULL_BUILD.id },
        ]);
        // Deleting an alias leaves its build alone.
        expect(await t.store.catalog.getBuild(FULL_BUILD.id)).toEqual(FULL_BUILD);
      });
    });

    describe("prices", () => {
      test("set returns the row, and get returns the same, with or without a cache-read price", async () => {
        await using t = await open();
        const rows: PriceRow[] = [
          { model: "org/model", inputPrice: 65_000, outputPrice: 130_000, cacheReadPrice: 6_500 },
          { model: "org/plain", inputPrice: 1, outputPrice: 2, cacheReadPrice: null },
        ];
        for (const row of rows) expect(await t.store.prices.set(row, T0)).toEqual(row);
        expect(await Promise.all(rows.map((r) => t.store.prices.get(r.model)))).toEqual(rows);
      });

      test("set replaces every field of an existing row, including clearing the cache-read price", async () => {
        await using t = await open();
        await t.store.prices.set({ model: "org/model", inputPrice: 65_000, outputPrice: 130_000, cacheReadPrice: 6_500 }, T0);
        const replacement: PriceRow = { model: "org/model", inputPrice: 70_000, outputPrice: 140_000, cacheReadPrice: null };
        expect(await t.store.prices.set(replacement, T0 + 1)).toEqual(replacement);
        expect(await t.store.prices.get("org/model")).toEqual(replacement);
        expect(await t.store.prices.list()).toEqual([replacement]);
      });

      test("get returns undefined for an unpriced model; list is ordered by model", async () => {
        await using t = await open();
        expect(await t.store.prices.list()).toEqual([]);
        for (const model of ["org/b", "org/c", "org/a"])
          await t.store.prices.set({ model, inputPrice: 10, outputPrice: 20, cacheReadPrice: null }, T0);
        expect(await t.store.prices.get("org/d")).toBeUndefined();
        expect((await t.store.prices.list()).map((p) => p.model)).toEqual(["org/a", "org/b", "org/c"]);
      });

      test("clear is true when it removed a row, then false; other rows stay", async () => {
        await using t = await open();
        const kept: PriceRow = { model: "org/kept", inputPrice: 10, outputPrice: 20, cacheReadPrice: 1 };
        await t.store.prices.set(kept, T0);
        await t.store.prices.set({ model: "org/model", inputPrice: 10, outputPrice: 20, cacheReadPrice: null }, T0);
        expect(await t.store.prices.clear("org/model")).toBe(true);
        expect(await t.store.prices.clear("org/model")).toBe(false);
        expect(await t.store.prices.clear("org/never")).toBe(false);
        expect(await t.store.prices.get("org/model")).toBeUndefined();
        expect(await t.store.prices.list()).toEqual([kept]);
      });
    });

    describe("usage", () => {
      test("record returns true and list returns the row, nulls included", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const full = usageRow({ requestId: "req-1", accountId: "acct-1", startedAt: T0 });
        const bare = usageRow({
          requestId: "req-2",
          accountId: "acct-1",
          startedAt: T0 + 1,
          keyId: null,
          providerId: null,
          firstContentMs: null,
        });
        expect(await t.store.usage.record(full)).toBe(true);
        expect(await t.store.usage.record(bare)).toBe(true);
        expect(await t.store.usage.list("acct-1", 10)).toEqual([bare, full]);
      });

      test("a second record for the same request returns false and leaves the first row unchanged", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const first = usageRow({ requestId: "req-1", accountId: "acct-1" });
        expect(await t.store.usage.record(first)).toBe(true);
        expect(await t.store.usage.record({ ...first, cost: 9_999, completionTokens: 1, outcome: "error", startedAt: T0 + 5 })).toBe(false);
        expect(await t.store.usage.list("acct-1", 10)).toEqual([first]);
      });

      test("concurrent records of one request: exactly one returns true", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        const rows = [1, 2, 3, 4, 5].map((cost) => usageRow({ requestId: "req-1", accountId: "acct-1", cost }));
        const results = await Promise.all(rows.map((row) => t.store.usage.record(row)));
        expect(results.filter((r) => r)).toEqual([true]);
        const winner = rows.filter((_, i) => results[i]);
        expect(await t.store.usage.list("acct-1", 10)).toEqual(winner);
      });

      test("list is newest first by start time, limited, per account, and empty for an unknown account", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1", "acct-2");
        const other = usageRow({ requestId: "req-c", accountId: "acct-2", startedAt: T0 + 25 });
        const rows = [
          usageRow({ requestId: "req-a", accountId: "acct-1", startedAt: T0 + 20 }),
          usageRow({ requestId: "req-b", accountId: "acct-1", startedAt: T0 + 10 }),
          other,
          usageRow({ requestId: "req-d", accountId: "acct-1", startedAt: T0 + 30 }),
        ];
        for (const row of rows) await t.store.usage.record(row);
        expect((await t.store.usage.list("acct-1", 10)).map((u) => u.requestId)).toEqual(["req-d", "req-a", "req-b"]);
        expect((await t.store.usage.list("acct-1", 2)).map((u) => u.requestId)).toEqual(["req-d", "req-a"]);
        expect(await t.store.usage.list("acct-2", 10)).toEqual([other]);
        expect(await t.store.usage.list("acct-3", 10)).toEqual([]);
      });
    });

    describe("reports: usage totals and earnings", () => {
      /** 2027-03-01T00:00:00Z: rows either side of this UTC midnight land on different days. */
      const MIDNIGHT = Date.UTC(2027, 2, 1);
      const sums = (key: string, requests: number, promptTokens: number, cachedTokens: number, completionTokens: number, cost: number) => ({
        key,
        requests,
        promptTokens,
        cachedTokens,
        completionTokens,
        cost,
      });

      /** Four rows of acct-1 over two UTC days, two models and two keys plus a JWT request; one row of acct-2. */
      async function seedUsage(store: Store): Promise<void> {
        await createAccounts(store, "acct-1", "acct-2");
        const rows = [
          usageRow({
            requestId: "req-1",
            accountId: "acct-1",
            model: "org/b",
            keyId: "key-2",
            startedAt: MIDNIGHT - 1,
            promptTokens: 100,
            cachedTokens: 10,
            completionTokens: 50,
            cost: 1_000,
          }),
          usageRow({
            requestId: "req-2",
            accountId: "acct-1",
            model: "org/a",
            keyId: null,
            startedAt: MIDNIGHT - 3_600_000,
            promptTokens: 200,
            cachedTokens: 0,
            completionTokens: 20,
            cost: 300,
          }),
          usageRow({
            requestId: "req-3",
            accountId: "acct-1",
            model: "org/b",
            keyId: "key-1",
            startedAt: MIDNIGHT,
            promptTokens: 7,
            cachedTokens: 3,
            completionTokens: 1,
            cost: 5,
          }),
          usageRow({
            requestId: "req-4",
            accountId: "acct-1",
            model: "Org/Upper",
            keyId: "key-2",
            startedAt: MIDNIGHT + 86_399_999,
            promptTokens: 1,
            cachedTokens: 1,
            completionTokens: 0,
            cost: 1,
          }),
          usageRow({
            requestId: "req-5",
            accountId: "acct-2",
            model: "org/a",
            keyId: "key-9",
            startedAt: MIDNIGHT,
            promptTokens: 9,
            cachedTokens: 9,
            completionTokens: 9,
            cost: 9,
          }),
        ];
        for (const row of rows) expect(await store.usage.record(row)).toBe(true);
      }

      test("totals group one account's rows by model, by key (null key as jwt) and by UTC day, each ascending by key", async () => {
        await using t = await open();
        await seedUsage(t.store);
        expect(await t.store.usage.totals("acct-1", {})).toEqual({
          byModel: [sums("Org/Upper", 1, 1, 1, 0, 1), sums("org/a", 1, 200, 0, 20, 300), sums("org/b", 2, 107, 13, 51, 1_005)],
          byKey: [sums("jwt", 1, 200, 0, 20, 300), sums("key-1", 1, 7, 3, 1, 5), sums("key-2", 2, 101, 11, 50, 1_001)],
          byDay: [sums("2027-02-28", 2, 300, 10, 70, 1_300), sums("2027-03-01", 2, 8, 4, 1, 6)],
        });
        expect(await t.store.usage.totals("acct-2", {})).toEqual({
          byModel: [sums("org/a", 1, 9, 9, 9, 9)],
          byKey: [sums("key-9", 1, 9, 9, 9, 9)],
          byDay: [sums("2027-03-01", 1, 9, 9, 9, 9)],
        });
      });

      test("since is inclusive and until exclusive, alone or together", async () => {
        await using t = await open();
        await seedUsage(t.store);
        const after = await t.store.usage.totals("acct-1", { since: MIDNIGHT });
        expect(after).toEqual({
          byModel: [sums("Org/Upper", 1, 1, 1, 0, 1), sums("org/b", 1, 7, 3, 1, 5)],
          byKey: [sums("key-1", 1, 7, 3, 1, 5), sums("key-2", 1, 1, 1, 0, 1)],
          byDay: [sums("2027-03-01", 2, 8, 4, 1, 6)],
        });
        const before = await t.store.usage.totals("acct-1", { until: MIDNIGHT });
        expect(before).toEqual({
          byModel: [sums("org/a", 1, 200, 0, 20, 300), sums("org/b", 1, 100, 10, 50, 1_000)],
          byKey: [sums("jwt", 1, 200, 0, 20, 300), sums("key-2", 1, 100, 10, 50, 1_000)],
          byDay: [sums("2027-02-28", 2, 300, 10, 70, 1_300)],
        });
        const between = await t.store.usage.totals("acct-1", { since: MIDNIGHT - 1, until: MIDNIGHT + 1 });
        expect(between.byDay).toEqual([sums("2027-02-28", 1, 100, 10, 50, 1_000), sums("2027-03-01", 1, 7, 3, 1, 5)]);
        expect(await t.store.usage.totals("acct-1", { since: MIDNIGHT, until: MIDNIGHT })).toEqual({ byModel: [], byKey: [], byDay: [] });
      });

      test("totals are empty for an account without usage and for an unknown account", async () => {
        await using t = await open();
        await seedUsage(t.store);
        await createAccounts(t.store, "acct-3");
        const empty = { byModel: [], byKey: [], byDay: [] };
        expect(await t.store.usage.totals("acct-3", {})).toEqual(empty);
        expect(await t.store.usage.totals("acct-4", {})).toEqual(empty);
      });

      test("earnings sum the account's earning entries only: not its charges, credits or the platform's fees", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1", "acct-2");
        await t.store.accounts.credit({ accountId: "acct-1", amount: 10_000, at: T0 });
        const settle = (requestId: string, charge: number, fee: number) => ({
          requestId,
          accountId: "acct-1",
          keyId: null,
          charge,
          providerAccountId: "acct-2",
          earning: charge - fee,
          fee,
          at: T0 + 1,
          usage: usageRow({ requestId, accountId: "acct-1", cost: charge }),
        });
        await t.store.money.settle([settle("req-1", 100, 10), settle("req-2", 50, 5)]);
        await t.store.money.settle([settle("req-3", 7, 1)]);
        expect(await t.store.accounts.earnings("acct-2")).toBe(90 + 45 + 6);
        // The payer pays; it earns nothing.
        expect(await t.store.accounts.earnings("acct-1")).toBe(0);
      });

      test("earnings are 0 for a fresh account, for an unknown account, and credits do not count", async () => {
        await using t = await open();
        await createAccounts(t.store, "acct-1");
        expect(await t.store.accounts.earnings("acct-1")).toBe(0);
        await t.store.accounts.credit({ accountId: "acct-1", amount: 5_000, at: T0 });
        expect(await t.store.accounts.earnings("acct-1")).toBe(0);
        expect(await t.store.accounts.earnings("acct-2")).toBe(0);
      });
    });

    usageReportTests(open);
  });
}
