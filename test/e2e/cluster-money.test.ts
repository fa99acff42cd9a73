/**
 * Money admission in cluster mode, as real processes: two `serve` replicas on one Postgres database
 * (the money authority), one Redis and one cluster prefix. A request's hold is a row while it runs and
 * is gone once it settles; with a balance that covers exactly N holds, requests spread over both
 * replicas and held open admit exactly N between them (the rest get 402): zero overshoot. In process,
 * with a short lease: a stream whose hold another replica swept ends with the in-band error, the
 * provider cancelled, nothing charged. Skipped, saying so in one line, without PostgreSQL or Redis.
 */
import { afterAll, expect, test } from "bun:test";
import postgres from "postgres";
import { loadConfig } from "../../src/config/config.ts";
import { createApp } from "../../src/coordinator/app.ts";
import { loadLinks } from "../../src/coordinator/links.ts";
import { listen } from "../../src/coordinator/server.ts";
import { createLogger } from "../../src/observability/logger.ts";
import type { CoordinatorFrame } from "../../src/protocol/frames.ts";
import { connectFakeProvider, type Step } from "../support/fake-provider.ts";
import { testDatabase } from "../support/pg.ts";
import { startCoordinator } from "../support/processes.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { chatBody, postChat, readSse } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const SUITE = "cluster mode: two serve processes admit money through Postgres";
const db = await testDatabase([SUITE]);
const redis = await testRedis("test/e2e/cluster-money.test.ts");
const prefix = `umbra-test-${crypto.randomUUID()}`;
afterAll(() => removeKeys(prefix));

const BUILD = "org/cluster-money-build";
/** Holds the balance covers in the burst below. */
const N = 3;
const BURST = 8;

test.skipIf(db === undefined || !redis)(
  SUITE,
  async () => {
    const url = db?.url ?? "";
    const env = { UMBRA_REDIS_URL: REDIS_URL, UMBRA_NATS_URL: "nats://127.0.0.1:4222", UMBRA_CLUSTER_PREFIX: prefix };
    await using a = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "a" }, { db: url });
    await using b = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "b" }, { db: url });
    const { apiKey, providerToken, accountId } = await a.seed([BUILD]);
    await a.admin("PUT", `/prices/${BUILD}`, { input_price: 1_000_000, output_price: 2_000_000 });
    // Every answer waits for the gate the test opens: its hold stays a row until then.
    let open = () => {};
    let gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const behave = (): Step[] => [
      { do: "accept" },
      { do: "until", ready: gate },
      { do: "chunk", delta: { content: "ok" } },
      { do: "complete", usage: { prompt_tokens: 5, completion_tokens: 1 } },
    ];
    await using _pa = await connectFakeProvider({ url: a.url, token: providerToken, models: [BUILD], behave });
    await using _pb = await connectFakeProvider({ url: b.url, token: providerToken, models: [BUILD], behave });
    await using sql = Object.assign(postgres(url, { max: 1, onnotice: () => {} }), {
      [Symbol.asyncDispose]: () => sql.end({ timeout: 5 }),
    });
    const holds = async () =>
      (
        await sql<
          { replica: string; amount: string }[]
        >`SELECT owner_replica AS replica, amount_micro_usd AS amount FROM holds WHERE account_id = ${accountId}`
      ).map((h) => ({ replica: h.replica, amount: Number(h.amount) }));
    let answered = 0;
    const chat = (target: string) =>
      fetch(`${target}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({ model: BUILD, max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
      }).then(async (r) => {
        await r.text();
        answered++;
        return r.status;
      });

    // One request through B: its hold is a row under B's replica id while it runs, and gone after.
    const first = chat(b.url);
    const [held] = await waitFor(async () => {
      const rows = await holds();
      return rows.length === 1 && rows;
    }, "the first request's hold");
    expect(held?.replica).toBe("b");
    open();
    expect(await first).toBe(200);
    expect(await holds()).toEqual([]);
    const hold = held?.amount ?? 0;
    expect(hold).toBeGreaterThan(0);

    // A balance that covers N holds and half of one more (set directly: the test's own books).
    gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    await sql`UPDATE balances SET balance_micro_usd = ${N * hold + Math.floor(hold / 2)} WHERE account_id = ${accountId}`;
    answered = 0;
    const statuses = Array.from({ length: BURST }, (_, i) => chat(i % 2 === 0 ? a.url : b.url));
    // The refused answer at once; the admitted wait at the gate, each with its hold.
    await waitFor(async () => answered === BURST - N && (await holds()).length === N, `${N} holds and ${BURST - N} refusals`);
    const running = await holds();
    open();
    const all = await Promise.all(statuses);
    expect({
      admitted: all.filter((s) => s === 200).length,
      refused: all.filter((s) => s === 402).length,
      heldAtOnce: running.length,
      left: await holds(),
    }).toEqual({ admitted: N, refused: BURST - N, heldAtOnce: N, left: [] });
    const [balance] = await sql<
      { reserved: string }[]
    >`SELECT reserved_micro_usd AS reserved FROM balances WHERE account_id = ${accountId}`;
    expect(Number(balance?.reserved)).toBe(0);
  },
  60_000,
);

const LOST = "a stream whose hold was swept by another replica stops with the in-band error";

test.skipIf(db === undefined)(
  LOST,
  async () => {
    const url = db?.url ?? "";
    const config = loadConfig({}, { UMBRA_DB: url, UMBRA_ADMIN_TOKEN: "t".repeat(40) }, "development");
    await using store = Object.assign(await (db as NonNullable<typeof db>).store(), {
      [Symbol.asyncDispose]: () => store.end(),
    });
    const logs: string[] = [];
    // A 3 s lease: renewals every second, deadlines checked every 250 ms.
    const moneyAuthority = store.moneyAuthority({ replica: "short", ttlMs: 3000, marginMs: 500 });
    const logger = createLogger("info", (line) => logs.push(line));
    const app = createApp({ config, store, moneyAuthority, logger, links: await loadLinks(config) });
    const server = listen(app, "127.0.0.1", 0);
    const sql = postgres(url, { max: 2, onnotice: () => {} });
    try {
      const account = await app.admin.createAccount({ name: "lost-hold" });
      await app.admin.creditAccount(account.id, { amount_micro_usd: 100_000_000 });
      const { key } = await app.admin.createKey({ account_id: account.id });
      await app.admin.upsertModel(BUILD, {});
      await app.admin.setPrice(BUILD, { input_price: 1_000_000, output_price: 2_000_000 });
      const { token } = await app.admin.createProviderToken({ account_id: account.id });
      await using p = await connectFakeProvider({
        url: server.url,
        token,
        models: [BUILD],
        behave: () => [{ do: "accept" }, { do: "chunk", delta: { content: "first" } }, { do: "hang" }],
      });
      const response = postChat(server.url, key, { ...chatBody("x", { stream: true }), model: BUILD });
      const inference = await p.waitFor((f) => f.type === "inference");
      const holds = () => sql`SELECT request_id FROM holds WHERE account_id = ${account.id}`;
      await waitFor(async () => (await holds()).length === 1, "the hold");
      // Another replica's sweep after the lease ran out, in one transaction (no renewal in between).
      await sql.begin(async (tx) => {
        await tx`UPDATE holds SET expires_at = now() - interval '1 second' WHERE account_id = ${account.id}`;
        await tx`SELECT umbra_sweep(100)`;
      });
      const { data } = await readSse(await response);
      const requestId = (inference as Extract<CoordinatorFrame, { type: "inference" }>).request_id;
      expect({
        data: data.map((d) => (d.includes('"error"') ? JSON.parse(d) : "chunk")),
        cancel: await p.waitFor((f) => f.type === "cancel"),
        holds: (await holds()).length,
        balance: (
          await sql`SELECT balance_micro_usd::float AS b, reserved_micro_usd::float AS r FROM balances WHERE account_id = ${account.id}`
        )[0],
      }).toEqual({
        data: ["chunk", { error: { message: expect.any(String), type: "service_unavailable", code: "service_unavailable" } }],
        cancel: expect.objectContaining({ type: "cancel", request_id: requestId, reason: "deadline" }),
        holds: 0,
        balance: { b: 100_000_000, r: 0 },
      });
      expect(logs.some((l) => l.includes("holds overdue"))).toBe(true);
    } finally {
      app.close();
      await server.stop();
      await sql.end({ timeout: 5 });
    }
  },
  30_000,
);
