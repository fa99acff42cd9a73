/**
 * The usage reports of the store conformance suite (the console's reads): filtered pages with a cursor,
 * totals per UTC day and model, last use per key, and what each provider id served. Called inside
 * runStoreConformance (conformance.ts), so SQLite and Postgres run it unchanged.
 */
import { describe, expect, test } from "bun:test";
import type { Store, UsageRecord } from "../../src/store/types.ts";
import type { OpenStore } from "./conformance.ts";

/** 2027-03-01T00:00:00Z. */
const MIDNIGHT = Date.UTC(2027, 2, 1);

function row(input: Partial<UsageRecord> & Pick<UsageRecord, "requestId">): UsageRecord {
  return {
    accountId: "acct-1",
    keyId: "key-1",
    model: "org/a",
    buildId: "org/a-4bit",
    providerId: null,
    promptTokens: 10,
    cachedTokens: 0,
    completionTokens: 5,
    cost: 100,
    startedAt: MIDNIGHT,
    firstContentMs: null,
    durationMs: 50,
    outcome: "completed",
    ...input,
  };
}

async function seed(store: Store, rows: readonly UsageRecord[]): Promise<void> {
  for (const id of ["acct-1", "acct-2"]) await store.accounts.create({ id, name: id, at: MIDNIGHT });
  for (const r of rows) expect(await store.usage.record(r)).toBe(true);
}

const ids = (rows: readonly UsageRecord[]) => rows.map((r) => r.requestId);

export function usageReportTests(open: OpenStore): void {
  describe("usage reports", () => {
    const rows = [
      row({ requestId: "req-a", startedAt: MIDNIGHT + 10 }),
      row({ requestId: "req-b", startedAt: MIDNIGHT + 10, model: "org/b", keyId: "key-2" }),
      row({ requestId: "req-c", startedAt: MIDNIGHT + 20, outcome: "failed", keyId: null }),
      row({ requestId: "req-d", startedAt: MIDNIGHT - 5, model: "org/b" }),
      row({ requestId: "req-e", startedAt: MIDNIGHT + 30, accountId: "acct-2", keyId: "key-9" }),
    ];

    test("page: newest first (request id breaks ties), cursor after the last row, filters, per account", async () => {
      await using t = await open();
      await seed(t.store, rows);
      const all = await t.store.usage.page("acct-1", {}, { limit: 10 });
      expect(ids(all)).toEqual(["req-c", "req-b", "req-a", "req-d"]);
      expect(all[1]).toEqual(rows[1] as UsageRecord);
      const first = await t.store.usage.page("acct-1", {}, { limit: 2 });
      expect(ids(first)).toEqual(["req-c", "req-b"]);
      const last = first[1] as UsageRecord;
      const next = await t.store.usage.page("acct-1", {}, { limit: 2, after: { startedAt: last.startedAt, requestId: last.requestId } });
      expect(ids(next)).toEqual(["req-a", "req-d"]);
      expect(await t.store.usage.page("acct-1", {}, { limit: 2, after: { startedAt: MIDNIGHT - 5, requestId: "req-d" } })).toEqual([]);
      expect(ids(await t.store.usage.page("acct-1", { model: "org/b" }, { limit: 10 }))).toEqual(["req-b", "req-d"]);
      expect(ids(await t.store.usage.page("acct-1", { keyId: "key-1" }, { limit: 10 }))).toEqual(["req-a", "req-d"]);
      expect(ids(await t.store.usage.page("acct-1", { outcome: "failed" }, { limit: 10 }))).toEqual(["req-c"]);
      expect(ids(await t.store.usage.page("acct-1", { since: MIDNIGHT, until: MIDNIGHT + 20 }, { limit: 10 }))).toEqual(["req-b", "req-a"]);
      expect(ids(await t.store.usage.page("acct-1", { keyId: "key-9" }, { limit: 10 }))).toEqual([]);
      expect(ids(await t.store.usage.page("acct-2", {}, { limit: 10 }))).toEqual(["req-e"]);
      expect(await t.store.usage.page("acct-3", {}, { limit: 10 })).toEqual([]);
    });

    test("page: request ids in the same millisecond page by code unit (upper case before lower case)", async () => {
      await using t = await open();
      await seed(t.store, [
        row({ requestId: "req-a" }),
        row({ requestId: "req-B" }),
        row({ requestId: "req-b" }),
        row({ requestId: "req-A" }),
      ]);
      const one = await t.store.usage.page("acct-1", {}, { limit: 3 });
      expect(ids(one)).toEqual(["req-b", "req-a", "req-B"]);
      const rest = await t.store.usage.page("acct-1", {}, { limit: 3, after: { startedAt: MIDNIGHT, requestId: "req-B" } });
      expect(ids(rest)).toEqual(["req-A"]);
    });

    test("dayModelTotals: per UTC day and model, ordered, bounds as totals'", async () => {
      await using t = await open();
      await seed(t.store, rows);
      const sums = (day: string, model: string, requests: number, promptTokens: number, completionTokens: number, cost: number) => ({
        day,
        model,
        requests,
        promptTokens,
        completionTokens,
        cost,
      });
      expect(await t.store.usage.dayModelTotals("acct-1", {})).toEqual([
        sums("2027-02-28", "org/b", 1, 10, 5, 100),
        sums("2027-03-01", "org/a", 2, 20, 10, 200),
        sums("2027-03-01", "org/b", 1, 10, 5, 100),
      ]);
      expect(await t.store.usage.dayModelTotals("acct-1", { since: MIDNIGHT, until: MIDNIGHT + 15 })).toEqual([
        sums("2027-03-01", "org/a", 1, 10, 5, 100),
        sums("2027-03-01", "org/b", 1, 10, 5, 100),
      ]);
      expect(await t.store.usage.dayModelTotals("acct-3", {})).toEqual([]);
    });

    test("lastUsed: each key's newest start time, the account's keys only, no JWT rows", async () => {
      await using t = await open();
      await seed(t.store, rows);
      expect(await t.store.usage.lastUsed("acct-1")).toEqual(
        new Map([
          ["key-1", MIDNIGHT + 10],
          ["key-2", MIDNIGHT + 10],
        ]),
      );
      expect(await t.store.usage.lastUsed("acct-2")).toEqual(new Map([["key-9", MIDNIGHT + 30]]));
      expect((await t.store.usage.lastUsed("acct-3")).size).toBe(0);
    });

    test("served: requests and earnings (charge less the fee rounded up) per provider id asked for", async () => {
      await using t = await open();
      await seed(t.store, [
        row({ requestId: "req-1", providerId: "pt-1", cost: 1_001 }),
        row({ requestId: "req-2", providerId: "pt-1", cost: 10, accountId: "acct-2" }),
        row({ requestId: "req-3", providerId: "pt-2", cost: 0 }),
        row({ requestId: "req-4", providerId: "pt-3", cost: 50 }),
      ]);
      // 1001 - ceil(100.1) = 900; 10 - ceil(1) = 9.
      expect(await t.store.usage.served(["pt-1", "pt-2", "pt-none"], 10)).toEqual([
        { providerId: "pt-1", requests: 2, earnings: 909 },
        { providerId: "pt-2", requests: 1, earnings: 0 },
      ]);
      expect(await t.store.usage.served(["pt-1"], 0)).toEqual([{ providerId: "pt-1", requests: 2, earnings: 1_011 }]);
      expect(await t.store.usage.served([], 10)).toEqual([]);
    });
  });
}
