/**
 * The admin reports (DESIGN.md section 12, issue: balance, reserved, ledger, usage totals, earnings):
 * GET /admin/v1/accounts/{id} with `earnings_micro_usd` and `reserved_micro_usd`, GET .../ledger and
 * GET .../usage, each answer compared whole; per-day buckets across a UTC midnight; since/until bounds;
 * refusals (400 with `param`, 404 for unknown accounts). In-process through the harness, with a settable
 * clock. Live holds (`reservedFor`) are checked on AdminService directly, the way createApp hands them in.
 *
 * No public store method writes `earning` entries yet (the money store is being added), so the earnings
 * tests write ledger rows straight into the SQLite file of the harness.
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { AdminService } from "../../src/admin/admin-service.ts";
import { createSqliteStore } from "../../src/store/sqlite/index.ts";
import type { UsageRecord } from "../../src/store/types.ts";
import { type CallResult, type TestApp, tempDir, testApp } from "../support/harness.ts";

const T0_MS = 1_800_000_000_000;
const T0 = T0_MS / 1000;
const DAY_MS = 86_400_000;
/** 2027-03-01T00:00:00Z: the UTC midnight the usage rows straddle. */
const MIDNIGHT = Date.UTC(2027, 2, 1);

function manualClock() {
  let ms = T0_MS;
  return {
    now: () => ms,
    set: (value: number) => {
      ms = value;
    },
  };
}

async function app(): Promise<TestApp & { clock: ReturnType<typeof manualClock> }> {
  const clock = manualClock();
  return Object.assign(await testApp({ clock }), { clock });
}

const answer = (r: CallResult) => ({ status: r.status, body: r.body });

function refused(status: 400 | 404, param: string) {
  const [type, code] = status === 400 ? ["invalid_request_error", "invalid_value"] : ["not_found_error", "not_found"];
  return { status, body: { error: { message: expect.any(String), type, code, param } } };
}

async function createAccount(t: TestApp, name = "Acme"): Promise<string> {
  const r = await t.admin("POST", "/accounts", { name });
  expect(r.status).toBe(200);
  return (r.body as { id: string }).id;
}

async function createKey(t: TestApp, accountId: string): Promise<string> {
  const r = await t.admin("POST", "/keys", { account_id: accountId });
  expect(r.status).toBe(200);
  return (r.body as { id: string }).id;
}

/** Writes ledger rows (and the balance they end on) into the database file, as the settlement path will. */
function writeLedger(
  path: string,
  accountId: string,
  rows: readonly { kind: string; amount: number; balanceAfter: number; requestId: string | null; at: number }[],
): void {
  const db = new Database(path, { strict: true });
  try {
    const insert = db.prepare(
      "INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at) VALUES (?, ?, ?, ?, ?, ?)",
    );
    for (const r of rows) insert.run(accountId, r.kind, r.amount, r.balanceAfter, r.requestId, r.at);
    const last = rows.at(-1);
    if (last) db.prepare("UPDATE balances SET balance_micro_usd = ? WHERE account_id = ?").run(last.balanceAfter, accountId);
  } finally {
    db.close();
  }
}

function usageRow(input: Partial<UsageRecord> & Pick<UsageRecord, "requestId" | "accountId" | "startedAt">): UsageRecord {
  return {
    keyId: null,
    model: "org/model",
    buildId: "org/base-build-4bit",
    providerId: "prov-1",
    promptTokens: 0,
    cachedTokens: 0,
    completionTokens: 0,
    cost: 0,
    firstContentMs: 40,
    durationMs: 900,
    outcome: "ok",
    ...input,
  };
}

/** Sums as the usage report writes them. */
const sums = (requests: number, prompt: number, cached: number, completion: number, cost: number) => ({
  requests,
  prompt_tokens: prompt,
  cached_tokens: cached,
  completion_tokens: completion,
  cost_micro_usd: cost,
});

describe("GET /accounts/{id}: balance, reserved and earnings", () => {
  test("earnings_micro_usd sums the earning entries only; the ledger lists every entry newest first", async () => {
    await using t = await app();
    const id = await createAccount(t, "Provider Co");
    expect((await t.admin("POST", `/accounts/${id}/credit`, { amount_micro_usd: 1_000 })).status).toBe(200);
    expect(answer(await t.admin("GET", `/accounts/${id}`))).toEqual({
      status: 200,
      body: {
        id,
        object: "account",
        name: "Provider Co",
        jwt_subject: null,
        created: T0,
        balance_micro_usd: 1_000,
        reserved_micro_usd: 0,
        earnings_micro_usd: 0,
      },
    });

    writeLedger(t.config.db, id, [
      { kind: "earning", amount: 700, balanceAfter: 1_700, requestId: "req-1", at: T0_MS + 1_000 },
      { kind: "charge", amount: -50, balanceAfter: 1_650, requestId: "req-2", at: T0_MS + 2_000 },
      { kind: "earning", amount: 300, balanceAfter: 1_950, requestId: "req-3", at: T0_MS + 3_000 },
    ]);
    expect(answer(await t.admin("GET", `/accounts/${id}`))).toEqual({
      status: 200,
      body: {
        id,
        object: "account",
        name: "Provider Co",
        jwt_subject: null,
        created: T0,
        balance_micro_usd: 1_950,
        reserved_micro_usd: 0,
        earnings_micro_usd: 1_000,
      },
    });
    expect(answer(await t.admin("GET", `/accounts/${id}/ledger`))).toEqual({
      status: 200,
      body: {
        object: "list",
        data: [
          { id: 4, kind: "earning", amount_micro_usd: 300, balance_after_micro_usd: 1_950, request_id: "req-3", created: T0 + 3 },
          { id: 3, kind: "charge", amount_micro_usd: -50, balance_after_micro_usd: 1_650, request_id: "req-2", created: T0 + 2 },
          { id: 2, kind: "earning", amount_micro_usd: 700, balance_after_micro_usd: 1_700, request_id: "req-1", created: T0 + 1 },
          { id: 1, kind: "credit", amount_micro_usd: 1_000, balance_after_micro_usd: 1_000, request_id: null, created: T0 },
        ],
      },
    });
  });

  test("reserved_micro_usd is the hooks' live holds when given, else the stored value, on every account answer", async () => {
    using dir = tempDir();
    const path = join(dir.path, "umbra.db");
    const store = createSqliteStore(path);
    try {
      const holds = new Map<string, number>();
      const live = new AdminService(store, () => T0_MS, { reservedFor: (accountId) => holds.get(accountId) ?? 0 });
      const stored = new AdminService(store, () => T0_MS);
      const { id } = await live.createAccount({ name: "Acme" });
      holds.set(id, 1_234);
      const db = new Database(path, { strict: true });
      try {
        db.prepare("UPDATE balances SET reserved_micro_usd = 77 WHERE account_id = ?").run(id);
      } finally {
        db.close();
      }
      const account = (reserved: number, balance: number) => ({
        id,
        object: "account" as const,
        name: "Acme",
        jwt_subject: null,
        created: T0,
        balance_micro_usd: balance,
        reserved_micro_usd: reserved,
      });
      expect(await live.getAccount(id)).toEqual({ ...account(1_234, 0), earnings_micro_usd: 0 });
      expect(await live.listAccounts()).toEqual({ object: "list", data: [account(1_234, 0)] });
      expect(await live.creditAccount(id, { amount_micro_usd: 5_000 })).toEqual(account(1_234, 5_000));
      expect(await stored.getAccount(id)).toEqual({ ...account(77, 5_000), earnings_micro_usd: 0 });
      expect(await stored.listAccounts()).toEqual({ object: "list", data: [account(77, 5_000)] });
      holds.delete(id);
      expect(await live.getAccount(id)).toEqual({ ...account(0, 5_000), earnings_micro_usd: 0 });
    } finally {
      store.close();
    }
  });
});

describe("GET /accounts/{id}/ledger", () => {
  test("limit defaults to 100 and accepts 1 to 1000; entries are one account's, newest first", async () => {
    await using t = await app();
    const id = await createAccount(t);
    const other = await createAccount(t, "Other");
    for (let amount = 1; amount <= 101; amount++) await t.store.accounts.credit({ accountId: id, amount, at: T0_MS + amount * 1_000 });
    await t.store.accounts.credit({ accountId: other, amount: 5, at: T0_MS });
    const amounts = async (query: string) => {
      const r = await t.admin("GET", `/accounts/${id}/ledger${query}`);
      return { status: r.status, amounts: (r.body as { data: { amount_micro_usd: number }[] }).data.map((e) => e.amount_micro_usd) };
    };
    const newestFirst = Array.from({ length: 101 }, (_, i) => 101 - i);
    expect(await amounts("")).toEqual({ status: 200, amounts: newestFirst.slice(0, 100) });
    expect(await amounts("?limit=1000")).toEqual({ status: 200, amounts: newestFirst });
    expect(await amounts("?limit=2")).toEqual({ status: 200, amounts: [101, 100] });
    expect(answer(await t.admin("GET", `/accounts/${id}/ledger?limit=1`))).toEqual({
      status: 200,
      body: {
        object: "list",
        data: [{ id: 101, kind: "credit", amount_micro_usd: 101, balance_after_micro_usd: 5_151, request_id: null, created: T0 + 101 }],
      },
    });
    const fresh = await createAccount(t, "Fresh");
    expect(answer(await t.admin("GET", `/accounts/${fresh}/ledger`))).toEqual({ status: 200, body: { object: "list", data: [] } });
  });

  test.each(["0", "1001", "-1", "1.5", "1e2", "abc", "", "%20"])("limit=%s is a 400 on limit", async (limit) => {
    await using t = await app();
    const id = await createAccount(t);
    expect(answer(await t.admin("GET", `/accounts/${id}/ledger?limit=${limit}`))).toEqual(refused(400, "limit"));
  });

  test("an unknown account is a 404 on id, a broken path a 400 on id; a bad limit is refused before the lookup", async () => {
    await using t = await app();
    expect(answer(await t.admin("GET", "/accounts/acct_nope/ledger"))).toEqual(refused(404, "id"));
    expect(answer(await t.admin("GET", "/accounts/%/ledger"))).toEqual(refused(400, "id"));
    expect(answer(await t.admin("GET", "/accounts/acct_nope/ledger?limit=0"))).toEqual(refused(400, "limit"));
  });
});

describe("GET /accounts/{id}/usage", () => {
  /**
   * Five rows of one account over three UTC days (one a millisecond before MIDNIGHT, one at it, one in
   * the last millisecond of that day), two models, two keys and one JWT request; one row of another account.
   */
  async function seed(t: TestApp) {
    const id = await createAccount(t);
    const other = await createAccount(t, "Other");
    const [k1, k2] = [await createKey(t, id), await createKey(t, id)].sort() as [string, string];
    const rows = [
      usageRow({
        requestId: "r1",
        accountId: id,
        keyId: k1,
        startedAt: MIDNIGHT - 1,
        promptTokens: 100,
        cachedTokens: 10,
        completionTokens: 50,
        cost: 1_000,
      }),
      usageRow({
        requestId: "r2",
        accountId: id,
        model: "other/plain",
        startedAt: MIDNIGHT - 3_600_000,
        promptTokens: 200,
        completionTokens: 20,
        cost: 300,
      }),
      usageRow({
        requestId: "r3",
        accountId: id,
        keyId: k1,
        startedAt: MIDNIGHT,
        promptTokens: 7,
        cachedTokens: 3,
        completionTokens: 1,
        cost: 5,
      }),
      usageRow({ requestId: "r4", accountId: id, keyId: k2, startedAt: MIDNIGHT + DAY_MS - 1, promptTokens: 1, cachedTokens: 1, cost: 1 }),
      usageRow({ requestId: "r5", accountId: id, keyId: k1, startedAt: MIDNIGHT + DAY_MS, promptTokens: 2, completionTokens: 2, cost: 4 }),
      usageRow({ requestId: "r6", accountId: other, startedAt: MIDNIGHT, promptTokens: 9, cachedTokens: 9, completionTokens: 9, cost: 9 }),
    ];
    for (const row of rows) expect(await t.store.usage.record(row)).toBe(true);
    return { id, k1, k2 };
  }

  test("without bounds: totals per model, per key (jwt for JWT requests) and per UTC day, and the total", async () => {
    await using t = await app();
    const { id, k1, k2 } = await seed(t);
    expect(answer(await t.admin("GET", `/accounts/${id}/usage`))).toEqual({
      status: 200,
      body: {
        account_id: id,
        since: null,
        until: null,
        by_model: [
          { model: "org/model", ...sums(4, 110, 14, 53, 1_010) },
          { model: "other/plain", ...sums(1, 200, 0, 20, 300) },
        ],
        by_key: [
          { key_id: "jwt", ...sums(1, 200, 0, 20, 300) },
          { key_id: k1, ...sums(3, 109, 13, 53, 1_009) },
          { key_id: k2, ...sums(1, 1, 1, 0, 1) },
        ],
        by_day: [
          { day: "2027-02-28", ...sums(2, 300, 10, 70, 1_300) },
          { day: "2027-03-01", ...sums(2, 8, 4, 1, 6) },
          { day: "2027-03-02", ...sums(1, 2, 0, 2, 4) },
        ],
        total: sums(5, 310, 14, 73, 1_310),
      },
    });
  });

  test("since and until are whole UTC days, both included", async () => {
    await using t = await app();
    const { id, k1, k2 } = await seed(t);
    expect(answer(await t.admin("GET", `/accounts/${id}/usage?since=2027-03-01`))).toEqual({
      status: 200,
      body: {
        account_id: id,
        since: "2027-03-01",
        until: null,
        by_model: [{ model: "org/model", ...sums(3, 10, 4, 3, 10) }],
        by_key: [
          { key_id: k1, ...sums(2, 9, 3, 3, 9) },
          { key_id: k2, ...sums(1, 1, 1, 0, 1) },
        ],
        by_day: [
          { day: "2027-03-01", ...sums(2, 8, 4, 1, 6) },
          { day: "2027-03-02", ...sums(1, 2, 0, 2, 4) },
        ],
        total: sums(3, 10, 4, 3, 10),
      },
    });
    expect(answer(await t.admin("GET", `/accounts/${id}/usage?until=2027-02-28`))).toEqual({
      status: 200,
      body: {
        account_id: id,
        since: null,
        until: "2027-02-28",
        by_model: [
          { model: "org/model", ...sums(1, 100, 10, 50, 1_000) },
          { model: "other/plain", ...sums(1, 200, 0, 20, 300) },
        ],
        by_key: [
          { key_id: "jwt", ...sums(1, 200, 0, 20, 300) },
          { key_id: k1, ...sums(1, 100, 10, 50, 1_000) },
        ],
        by_day: [{ day: "2027-02-28", ...sums(2, 300, 10, 70, 1_300) }],
        total: sums(2, 300, 10, 70, 1_300),
      },
    });
    expect(answer(await t.admin("GET", `/accounts/${id}/usage?since=2027-03-01&until=2027-03-01`))).toEqual({
      status: 200,
      body: {
        account_id: id,
        since: "2027-03-01",
        until: "2027-03-01",
        by_model: [{ model: "org/model", ...sums(2, 8, 4, 1, 6) }],
        by_key: [
          { key_id: k1, ...sums(1, 7, 3, 1, 5) },
          { key_id: k2, ...sums(1, 1, 1, 0, 1) },
        ],
        by_day: [{ day: "2027-03-01", ...sums(2, 8, 4, 1, 6) }],
        total: sums(2, 8, 4, 1, 6),
      },
    });
  });

  test("an account without usage in the range answers empty lists and a zero total", async () => {
    await using t = await app();
    const { id } = await seed(t);
    const fresh = await createAccount(t, "Fresh");
    const empty = (accountId: string, since: string | null, until: string | null) => ({
      status: 200,
      body: { account_id: accountId, since, until, by_model: [], by_key: [], by_day: [], total: sums(0, 0, 0, 0, 0) },
    });
    expect(answer(await t.admin("GET", `/accounts/${fresh}/usage`))).toEqual(empty(fresh, null, null));
    expect(answer(await t.admin("GET", `/accounts/${id}/usage?since=2027-03-03`))).toEqual(empty(id, "2027-03-03", null));
  });

  test.each([
    ["since", "2027-02-30"],
    ["since", "2027-3-1"],
    ["since", "20270301"],
    ["since", "2027-03-01T00:00:00Z"],
    ["since", ""],
    ["until", "2027-13-01"],
    ["until", "yesterday"],
  ])("%s=%s is a 400 on that parameter", async (param, value) => {
    await using t = await app();
    const id = await createAccount(t);
    expect(answer(await t.admin("GET", `/accounts/${id}/usage?${param}=${value}`))).toEqual(refused(400, param));
  });

  test("until before since is a 400 on until; the same day is accepted", async () => {
    await using t = await app();
    const id = await createAccount(t);
    expect(answer(await t.admin("GET", `/accounts/${id}/usage?since=2027-03-02&until=2027-03-01`))).toEqual(refused(400, "until"));
    expect((await t.admin("GET", `/accounts/${id}/usage?since=2027-03-02&until=2027-03-02`)).status).toBe(200);
  });

  test("an unknown account is a 404 on id, a broken path a 400 on id; a bad date is refused before the lookup", async () => {
    await using t = await app();
    expect(answer(await t.admin("GET", "/accounts/acct_nope/usage"))).toEqual(refused(404, "id"));
    expect(answer(await t.admin("GET", "/accounts/%/usage"))).toEqual(refused(400, "id"));
    expect(answer(await t.admin("GET", "/accounts/acct_nope/usage?since=soon"))).toEqual(refused(400, "since"));
  });
});
