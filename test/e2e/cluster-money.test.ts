/**
 * Money admission in cluster mode, as real processes: two `serve` replicas on one Postgres database
 * (the money authority), one Redis and one cluster prefix. A request's hold is a row while it runs and
 * is gone once it settles; with a balance that covers exactly N holds, requests spread over both
 * replicas and held open admit exactly N between them (the rest get 402): zero overshoot. Skipped,
 * saying so in one line, without PostgreSQL or Redis.
 */
import { afterAll, expect, test } from "bun:test";
import postgres from "postgres";
import { connectFakeProvider, type Step } from "../support/fake-provider.ts";
import { testDatabase } from "../support/pg.ts";
import { startCoordinator } from "../support/processes.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
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
