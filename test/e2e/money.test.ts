/**
 * The money invariants of a chat request, over real sockets with fake providers:
 * - exact charges (the model's price, or the fallback), provider earnings less the platform fee, and
 *   ledgers that sum to balances;
 * - no balance and no key spend ever passes its limit, whatever the concurrency;
 * - no request reaches a provider without a reservation;
 * - no double charge through failover, disconnects or cancellation; partial answers pay for what was
 *   relayed; reservations are visible while in flight and gone after.
 */
import { describe, expect, test } from "bun:test";
import { chargeFor, feeFor, promptTokenBound, reservationFor } from "../../src/billing/billing.ts";
import { PROMPT_TEMPLATE_ALLOWANCE } from "../../src/billing/usage-bounds.ts";
import type { ChatMessage } from "../../src/protocol/chat-messages.ts";
import type { Inference } from "../../src/protocol/frames.ts";
import { PLATFORM_ACCOUNT_ID } from "../../src/store/types.ts";
import { connectFakeProvider, echo, type FakeProvider, type Step } from "../support/fake-provider.ts";
import { seedCatalog, type TestApp, testApp } from "../support/harness.ts";
import { chatBody, parseSse, postChat, providerToken, rawHttp, startServer, type TestServer } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
/** Prices on the alias org/model (seedCatalog): input 65,000, output 130,000 µUSD per million. */
const RATES = { input: 65_000, output: 130_000, cacheRead: 32_500, source: "model" as const };
const FEE_PERCENT = 10;

interface Ctx extends AsyncDisposable {
  readonly t: TestApp;
  readonly server: TestServer;
  /** The consumer account and its key. */
  readonly consumer: { accountId: string; apiKey: string; keyId: string };
  /** A provider machine on its own account. */
  machine(behave?: (inf: Inference) => readonly Step[], maxConcurrency?: number): Promise<{ provider: FakeProvider; accountId: string }>;
  balance(accountId: string): Promise<number>;
  /** Every account's ledger sums to its balance. */
  expectBooksBalanced(): Promise<void>;
}

/**
 * How settlements reach the database: one commit each (quiet traffic), or grouped through the settlement
 * journal as under load (src/billing/wallets.ts); every invariant below must hold both ways.
 */
const GROUPINGS = [
  { name: "settlements committed one by one", env: { UMBRA_SETTLEMENT_GROUP_ABOVE: "1000000000" } },
  { name: "settlements grouped through the journal", env: { UMBRA_SETTLEMENT_GROUP_ABOVE: "0" } },
] as const;
type Grouping = (typeof GROUPINGS)[number];

async function setup(
  grouping: Grouping,
  options: { credit: number; key?: Record<string, unknown>; env?: Record<string, string> },
): Promise<Ctx> {
  const t = await testApp({ env: { UMBRA_PLATFORM_FEE: String(FEE_PERCENT), ...grouping.env, ...options.env } });
  await seedCatalog(t);
  const account = await t.app.admin.createAccount({ name: "consumer" });
  if (options.credit > 0) await t.app.admin.creditAccount(account.id, { amount_micro_usd: options.credit });
  const key = await t.app.admin.createKey({ account_id: account.id, ...options.key });
  const server = startServer(t);
  const providers: FakeProvider[] = [];
  const accounts = [account.id];
  return {
    t,
    server,
    consumer: { accountId: account.id, apiKey: key.key, keyId: key.id },
    async machine(behave = echo, maxConcurrency = 64) {
      const owner = await t.app.admin.createAccount({ name: `machine-${providers.length}` });
      accounts.push(owner.id);
      const provider = await connectFakeProvider({
        url: server.url,
        token: await providerToken(t, owner.id),
        models: [BUILD],
        behave,
        maxConcurrency,
      });
      providers.push(provider);
      return { provider, accountId: owner.id };
    },
    async balance(accountId) {
      // What a report reads: journaled settlements applied first (as the admin API does).
      await t.app.wallets.applied();
      return (await t.store.accounts.get(accountId))?.balance ?? 0;
    },
    async expectBooksBalanced() {
      await t.app.flush();
      for (const id of [...accounts, PLATFORM_ACCOUNT_ID]) {
        const account = await t.store.accounts.get(id);
        if (!account) continue;
        const ledger = await t.store.accounts.ledger(id, 100_000);
        expect({ id, sum: ledger.reduce((s, e) => s + e.amount, 0) }).toEqual({ id, sum: account.balance });
        expect(account.balance).toBeGreaterThanOrEqual(0);
      }
    },
    async [Symbol.asyncDispose]() {
      for (const p of providers) await p[Symbol.asyncDispose]();
      await server[Symbol.asyncDispose]();
      await t[Symbol.asyncDispose]();
    },
  };
}

/** A provider that answers with fixed usage (by default one byte of text per completion token: within the usage bounds). */
const answer =
  (usage: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number }, text = "x".repeat(usage.completion_tokens)) =>
  (): readonly Step[] => [{ do: "accept" }, { do: "chunk", delta: { content: text } }, { do: "complete", usage }];

const MESSAGES: ChatMessage[] = [{ role: "user", content: "price me" }];
const MAX_TOKENS = 100;
/** The most prompt tokens a provider may report for MESSAGES (billing/usage-bounds.ts; no forwarded fields). */
const PROMPT_LIMIT = promptTokenBound(MESSAGES) + PROMPT_TEMPLATE_ALLOWANCE;
/** What one request with MESSAGES and MAX_TOKENS reserves on org/model: the cost of a report at every bound. */
const RESERVATION = reservationFor(PROMPT_LIMIT, MAX_TOKENS, RATES);

for (const grouping of GROUPINGS) {
  describe(grouping.name, () => {
    describe("charges and earnings", () => {
      test("a completed request is charged exactly once: usage x price, rounded up; provider earns it less the fee", async () => {
        await using ctx = await setup(grouping, { credit: 1_000_000 });
        // Within the reservation's bounds: 36 + 512 prompt tokens (UTF-8 bound of MESSAGES, template text), 100 output.
        const usage = { prompt_tokens: 30, cached_tokens: 10, completion_tokens: 90 };
        const { accountId: machine } = await ctx.machine(answer(usage));
        const response = await postChat(ctx.server.url, ctx.consumer.apiKey, {
          model: "org/model",
          messages: MESSAGES,
          max_tokens: MAX_TOKENS,
        });
        expect(response.status).toBe(200);
        const requestId = response.headers.get("x-request-id");
        await response.json();

        const charge = chargeFor(usage, RATES);
        const fee = feeFor(charge, FEE_PERCENT);
        // (20 x 65000 + 10 x 32500 + 90 x 130000) / 10^6 = 13.325 -> 14 µUSD; fee 1.4 -> 2;
        // reserved (548 x 65000 + 100 x 130000) / 10^6 = 48.62 -> 49
        expect([charge, fee, RESERVATION]).toEqual([14, 2, 49]);
        expect(await ctx.balance(ctx.consumer.accountId)).toBe(1_000_000 - charge);
        expect(await ctx.balance(machine)).toBe(charge - fee);
        expect(await ctx.balance(PLATFORM_ACCOUNT_ID)).toBe(fee);
        const [row] = await ctx.t.store.usage.list(ctx.consumer.accountId, 10);
        expect(row).toEqual({
          requestId: requestId as string,
          accountId: ctx.consumer.accountId,
          keyId: ctx.consumer.keyId,
          model: "org/model",
          buildId: BUILD,
          // The serving machine's device token.
          providerId: expect.stringMatching(/^pt_/),
          promptTokens: 30,
          cachedTokens: 10,
          completionTokens: 90,
          cost: charge,
          startedAt: expect.any(Number),
          firstContentMs: expect.any(Number),
          durationMs: expect.any(Number),
          outcome: "completed",
        });
        const [entry] = await ctx.t.store.accounts.ledger(ctx.consumer.accountId, 1);
        expect(entry).toEqual(expect.objectContaining({ kind: "charge", amount: -charge, requestId }));
        expect(ctx.t.app.wallets.reservedFor(ctx.consumer.accountId)).toBe(0);
        await ctx.expectBooksBalanced();
      });

      test("a model without a price is charged at the fallback rates", async () => {
        await using ctx = await setup(grouping, { credit: 1_000_000 });
        await ctx.t.app.admin.setAlias("org/unpriced", { build_id: BUILD });
        await ctx.machine(answer({ prompt_tokens: 500, completion_tokens: 1_000 }));
        const response = await postChat(ctx.server.url, ctx.consumer.apiKey, { model: "org/unpriced", messages: MESSAGES });
        expect(response.status).toBe(200);
        await response.json();
        await ctx.t.app.flush();
        // fallback 500,000 in + 1,500,000 out per million: 250 + 1,500 µUSD
        expect(await ctx.balance(ctx.consumer.accountId)).toBe(1_000_000 - 1_750);
      });

      test("a report at every usage bound is charged in full: the reservation is exactly what it costs", async () => {
        await using ctx = await setup(grouping, { credit: 1_000_000 });
        // Before: the reservation held only the messages' byte bound, while the usage bounds also allow a
        // chat template's text (and forwarded fields such as tool definitions): an honest report was capped.
        const usage = { prompt_tokens: PROMPT_LIMIT, completion_tokens: MAX_TOKENS };
        expect(chargeFor(usage, RATES)).toBe(RESERVATION);
        await ctx.machine(answer(usage));
        const response = await postChat(ctx.server.url, ctx.consumer.apiKey, {
          model: "org/model",
          messages: MESSAGES,
          max_tokens: MAX_TOKENS,
        });
        expect(response.status).toBe(200);
        await response.json();
        await ctx.t.app.flush();
        expect(await ctx.balance(ctx.consumer.accountId)).toBe(1_000_000 - RESERVATION);
        await ctx.expectBooksBalanced();
      });

      test("while a request runs its reservation is held and shown to the admin; afterwards it is released", async () => {
        await using ctx = await setup(grouping, { credit: 1_000_000 });
        let open!: () => void;
        const gate = new Promise<void>((resolve) => {
          open = resolve;
        });
        await ctx.machine(() => [
          { do: "accept" },
          { do: "until", ready: gate },
          ...answer({ prompt_tokens: 1, completion_tokens: 1 })().slice(1),
        ]);
        const pending = postChat(ctx.server.url, ctx.consumer.apiKey, { model: "org/model", messages: MESSAGES, max_tokens: MAX_TOKENS });
        await waitFor(() => ctx.t.app.wallets.reservedFor(ctx.consumer.accountId) > 0, "a reservation");
        const during = await ctx.t.admin("GET", `/accounts/${ctx.consumer.accountId}`);
        expect((during.body as { reserved_micro_usd: number }).reserved_micro_usd).toBe(RESERVATION);
        open();
        await (await pending).json();
        const after = await ctx.t.admin("GET", `/accounts/${ctx.consumer.accountId}`);
        expect((after.body as { reserved_micro_usd: number; balance_micro_usd: number }).reserved_micro_usd).toBe(0);
      });
    });

    describe("limits hold under concurrency", () => {
      /**
       * 1,000 concurrent requests against money worth exactly 37 reservations. The provider holds every
       * answer until all requests were either dispatched or refused, so exactly 37 can be served.
       */
      async function burst(ctx: Ctx, expected402: { type: string; code: string }) {
        let open!: () => void;
        const gate = new Promise<void>((resolve) => {
          open = resolve;
        });
        const { provider } = await ctx.machine(
          () => [
            { do: "accept" },
            { do: "until", ready: gate },
            { do: "chunk", delta: { content: "x" } },
            { do: "complete", usage: { prompt_tokens: 1, completion_tokens: 1 } },
          ],
          2_000,
        );
        const body = JSON.stringify({ model: "org/model", messages: MESSAGES, max_tokens: MAX_TOKENS });
        const headers = { authorization: `Bearer ${ctx.consumer.apiKey}`, "content-type": "application/json" };
        let refusedSoFar = 0;
        const results = Array.from({ length: 1_000 }, () =>
          rawHttp(ctx.server.url, "POST", "/v1/chat/completions", headers, body).then((r) => {
            if (r.status === 402) refusedSoFar++;
            return r;
          }),
        );
        const inferences = () => provider.received.filter((f) => f.type === "inference").length;
        await waitFor(() => refusedSoFar + inferences() === 1_000, "every request dispatched or refused");
        const dispatched = inferences();
        open();
        const all = await Promise.all(results);
        const statuses = all.map((r) => r.status);
        expect({ served: statuses.filter((s) => s === 200).length, refused: statuses.filter((s) => s === 402).length, dispatched }).toEqual(
          {
            served: 37,
            refused: 963,
            dispatched: 37,
          },
        );
        const refusal = all.find((r) => r.status === 402);
        expect(JSON.parse(refusal?.body ?? "{}")).toEqual({ error: { message: expect.any(String), ...expected402 } });
        await ctx.expectBooksBalanced();
      }

      test("account balance worth 37 requests: exactly 37 served, 963 get 402 insufficient_funds", async () => {
        await using ctx = await setup(grouping, { credit: 37 * RESERVATION });
        await burst(ctx, { type: "insufficient_funds", code: "insufficient_quota" });
        expect(await ctx.balance(ctx.consumer.accountId)).toBeGreaterThanOrEqual(0);
      }, 60_000);

      test("key spend cap worth 37 requests: exactly 37 served, 963 get 402 insufficient_quota", async () => {
        await using ctx = await setup(grouping, { credit: 1_000_000_000, key: { spend_cap_micro_usd: 37 * RESERVATION } });
        await burst(ctx, { type: "insufficient_quota", code: "insufficient_quota" });
        const key = await ctx.t.store.keys.get(ctx.consumer.keyId);
        expect(key?.spent).toBeLessThanOrEqual(37 * RESERVATION);
      }, 60_000);

      test("no request reaches a provider without a reservation: an empty account gets 402 and the provider sees nothing", async () => {
        await using ctx = await setup(grouping, { credit: 0 });
        const { provider } = await ctx.machine();
        const response = await postChat(ctx.server.url, ctx.consumer.apiKey, chatBody("hello"));
        expect(response.status).toBe(402);
        await response.json();
        expect(provider.received.filter((f) => f.type === "inference")).toEqual([]);
      });

      test("credit added by another process (straight to the store) is seen on the next request", async () => {
        await using ctx = await setup(grouping, { credit: 0 });
        await ctx.machine();
        expect((await postChat(ctx.server.url, ctx.consumer.apiKey, chatBody("first"))).status).toBe(402);
        await ctx.t.store.accounts.credit({ accountId: ctx.consumer.accountId, amount: 10_000_000, at: Date.now() });
        const response = await postChat(ctx.server.url, ctx.consumer.apiKey, chatBody("second"));
        expect(response.status).toBe(200);
        await response.json();
      });
    });

    describe("no double charge", () => {
      test("failover: the failed provider earns nothing, the serving one is paid once, the consumer charged once", async () => {
        await using ctx = await setup(grouping, { credit: 1_000_000 });
        const { accountId: failing, provider: failingProvider } = await ctx.machine(() => [
          { do: "accept" },
          { do: "error", code: "engine_error" },
        ]);
        const { accountId: serving } = await ctx.machine(answer({ prompt_tokens: 30, completion_tokens: 90 }));
        const response = await postChat(ctx.server.url, ctx.consumer.apiKey, {
          model: "org/model",
          messages: MESSAGES,
          max_tokens: MAX_TOKENS,
        });
        expect(response.status).toBe(200);
        const requestId = response.headers.get("x-request-id");
        await response.json();
        await ctx.t.app.flush();
        // Equal load: the first machine connected is tried first, and fails over.
        expect(failingProvider.received.filter((f) => f.type === "inference")).toHaveLength(1);
        const charges = (await ctx.t.store.accounts.ledger(ctx.consumer.accountId, 100)).filter((e) => e.kind === "charge");
        expect(charges.map((c) => c.requestId)).toEqual([requestId]);
        expect(await ctx.balance(failing)).toBe(0);
        const charge = chargeFor({ prompt_tokens: 30, completion_tokens: 90 }, RATES);
        expect(await ctx.balance(serving)).toBe(charge - feeFor(charge, FEE_PERCENT));
        await ctx.expectBooksBalanced();
      });

      test("a provider that disconnects mid-stream: one partial charge for what was relayed, failed outcome", async () => {
        await using ctx = await setup(grouping, { credit: 1_000_000 });
        const text = "a".repeat(400);
        await ctx.machine(() => [{ do: "accept" }, { do: "chunk", delta: { content: text } }, { do: "close" }]);
        const response = await postChat(ctx.server.url, ctx.consumer.apiKey, {
          model: "org/model",
          stream: true,
          messages: MESSAGES,
          max_tokens: MAX_TOKENS,
        });
        expect(response.status).toBe(200);
        const events = parseSse(await response.text()).data;
        expect(events.at(-1)).toContain('"error"');
        await ctx.t.app.flush();
        const [row] = await ctx.t.store.usage.list(ctx.consumer.accountId, 10);
        // 400 characters relayed: an estimate of 100 completion tokens, within the reservation.
        expect([row?.outcome, row?.completionTokens]).toEqual(["failed", 100]);
        expect(row?.cost).toBeGreaterThan(0);
        expect(row?.cost).toBeLessThanOrEqual(RESERVATION);
        const charges = (await ctx.t.store.accounts.ledger(ctx.consumer.accountId, 100)).filter((e) => e.kind === "charge");
        expect(charges).toHaveLength(1);
        await ctx.expectBooksBalanced();
      });

      test("a failure before any content costs nothing, and the attempt is still recorded", async () => {
        await using ctx = await setup(grouping, { credit: 1_000_000 });
        await ctx.machine(() => [{ do: "accept" }, { do: "error", code: "engine_error" }]);
        const response = await postChat(ctx.server.url, ctx.consumer.apiKey, chatBody("nothing"));
        expect(response.status).toBe(502);
        await response.json();
        await ctx.t.app.flush();
        expect(await ctx.balance(ctx.consumer.accountId)).toBe(1_000_000);
        expect((await ctx.t.store.usage.list(ctx.consumer.accountId, 10)).map((r) => [r.outcome, r.cost])).toEqual([["failed", 0]]);
        expect(ctx.t.app.wallets.reservedFor(ctx.consumer.accountId)).toBe(0);
      });

      test("a client that cancels mid-stream pays for what was relayed, once", async () => {
        await using ctx = await setup(grouping, { credit: 1_000_000 });
        let open!: () => void;
        const gate = new Promise<void>((resolve) => {
          open = resolve;
        });
        const { provider } = await ctx.machine(() => [
          { do: "accept" },
          { do: "chunk", delta: { content: "b".repeat(40) } },
          { do: "until", ready: gate },
          { do: "chunk", delta: { content: "late" } },
          { do: "complete", usage: { prompt_tokens: 5, completion_tokens: 50 } },
        ]);
        const controller = new AbortController();
        const response = await postChat(
          ctx.server.url,
          ctx.consumer.apiKey,
          { model: "org/model", stream: true, messages: MESSAGES, max_tokens: MAX_TOKENS },
          { signal: controller.signal },
        );
        const reader = response.body?.getReader();
        await reader?.read();
        controller.abort();
        await provider.waitFor((f) => f.type === "cancel");
        open();
        await waitFor(async () => (await ctx.t.store.usage.list(ctx.consumer.accountId, 10)).length === 1, "the usage row");
        const [row] = await ctx.t.store.usage.list(ctx.consumer.accountId, 10);
        expect([row?.outcome, row?.completionTokens]).toEqual(["cancelled", 10]);
        const charges = (await ctx.t.store.accounts.ledger(ctx.consumer.accountId, 100)).filter((e) => e.kind === "charge");
        expect(charges).toHaveLength(1);
        await ctx.expectBooksBalanced();
      });
    });
  });
}
