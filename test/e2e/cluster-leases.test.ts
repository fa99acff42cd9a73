/**
 * Balance leases across replicas (src/store/pg/money-leases.ts), two apps in one process on one Postgres
 * database, one Redis and one NATS prefix: a hot key's requests on A are admitted on A's lease (one
 * lease row, leased settlements, no reserve round trip each; /metrics and the account reports show it);
 * a request on B that only A's idle lease stands between and its money is answered, not refused: B
 * recalls A's lease over NATS before a 402; with the money really gone, B answers 402 (type
 * `insufficient_funds`). Skipped, saying so, without PostgreSQL, Redis or NATS.
 */
import { afterAll, expect, test } from "bun:test";
import postgres from "postgres";
import { loadConfig } from "../../src/config/config.ts";
import { createApp } from "../../src/coordinator/app.ts";
import { loadLinks } from "../../src/coordinator/links.ts";
import { listen } from "../../src/coordinator/server.ts";
import { createLogger } from "../../src/observability/logger.ts";
import type { MoneyAuthority } from "../../src/store/pg/money-authority.ts";
import { connectFakeProvider } from "../support/fake-provider.ts";
import { NATS_URL, natsPrefix, testNats } from "../support/nats.ts";
import { testDatabase } from "../support/pg.ts";
import { readBooks } from "../support/pg-money.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { chatBody, errorOf, postChat } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const SUITE = "cluster mode: balance leases are recalled before a 402";
const db = await testDatabase([SUITE]);
const redis = await testRedis("test/e2e/cluster-leases.test.ts");
const nats = await testNats("test/e2e/cluster-leases.test.ts");
const prefix = natsPrefix();
afterAll(() => removeKeys(prefix));
const BUILD = "org/cluster-leases-build";

async function replica(id: string) {
  const env = {
    UMBRA_DB: db?.url ?? "",
    UMBRA_ADMIN_TOKEN: "t".repeat(40),
    UMBRA_REDIS_URL: REDIS_URL,
    UMBRA_NATS_URL: NATS_URL,
    UMBRA_CLUSTER_PREFIX: prefix,
    UMBRA_REPLICA_ID: id,
  };
  const store = await (db as NonNullable<typeof db>).store();
  // Hot after two requests; never idle within the test.
  const authority: MoneyAuthority = store.moneyAuthority({ replica: id, leases: { hotCount: 2, idleMs: 600_000 } });
  const config = loadConfig({}, env, "development");
  const app = createApp({ config, store, moneyAuthority: authority, logger: createLogger("error"), links: await loadLinks(config) });
  const server = listen(app, "127.0.0.1", 0);
  return {
    app,
    authority,
    url: server.url,
    async [Symbol.asyncDispose]() {
      app.close();
      await server.stop();
      await store.end();
    },
  };
}

test.skipIf(db === undefined || !redis || !nats)(
  SUITE,
  async () => {
    await using a = await replica("a");
    await using b = await replica("b");
    const admin = a.app.admin;
    const account = await admin.createAccount({ name: "leases" });
    await admin.creditAccount(account.id, { amount_micro_usd: 100_000_000 });
    await admin.upsertModel(BUILD, {});
    await admin.setPrice(BUILD, { input_price: 1_000_000, output_price: 2_000_000 });
    const { key } = await admin.createKey({ account_id: account.id });
    const { token } = await admin.createProviderToken({ account_id: account.id });
    await using _pa = await connectFakeProvider({ url: a.url, token, models: [BUILD] });
    await using _pb = await connectFakeProvider({ url: b.url, token, models: [BUILD] });
    await using sql = Object.assign(postgres(db?.url ?? "", { max: 1, onnotice: () => {} }), {
      [Symbol.asyncDispose]: () => sql.end({ timeout: 5 }),
    });
    const ask = (url: string) => postChat(url, key, { ...chatBody("hello"), model: BUILD, max_tokens: 8 });
    const leases = () =>
      sql<{ id: string; owner: string; amount: string }[]>`SELECT request_id AS id, owner_replica AS owner, amount_micro_usd AS amount
        FROM holds WHERE account_id = ${account.id} AND request_id LIKE 'lease:%'`;
    await waitFor(() => a.app.cluster?.connected() === true && b.app.cluster?.connected() === true, "both replicas on NATS");

    // A's key gets hot: a lease row of A's, then requests admitted on it and settled against it.
    for (let i = 0; i < 3; i++) expect((await ask(a.url)).status).toBe(200);
    const [lease] = await waitFor(async () => {
      const rows = await leases();
      return rows.length === 1 && rows;
    }, "A's lease");
    expect(lease?.owner).toBe("a");
    // /metrics says so too, once A has the grant's answer (the row commits first).
    const metrics = await waitFor(async () => {
      const text = await (await fetch(`${a.url}/metrics`)).text();
      return text.includes("\numbra_money_leases 1\n") && text;
    }, "A's lease in /metrics");
    expect(metrics).toMatch(/\numbra_money_leased_micro_usd [1-9]\d*\n/);
    // Every replica's account report shows the money the lease holds as reserved (the database's figure).
    const report = await b.app.admin.getAccount(account.id);
    expect(report?.reserved_micro_usd).toBe(Number(lease?.amount));
    const reservesBefore = a.authority.batches().reserve.calls;
    for (let i = 0; i < 4; i++) expect((await ask(a.url)).status).toBe(200);
    expect(a.authority.batches().reserve.calls).toBe(reservesBefore);
    expect(a.authority.batches().leased.calls).toBeGreaterThanOrEqual(4);

    // Only A's idle lease stands between B's request and the money: B recalls it and answers.
    const [row] = await leases();
    const perRequest = Math.ceil(Number(row?.amount) / 64);
    await sql`UPDATE balances SET balance_micro_usd = reserved_micro_usd + ${Math.floor(perRequest / 2)} WHERE account_id = ${account.id}`;
    expect((await ask(b.url)).status).toBe(200);
    expect((await leases()).filter((l) => Number(l.amount) > 0)).toEqual([]);

    // The money really gone: 402, and no lease anywhere stands in for it.
    await sql`UPDATE balances SET balance_micro_usd = reserved_micro_usd + ${Math.floor(perRequest / 2)} WHERE account_id = ${account.id}`;
    const refused = await errorOf(await ask(b.url));
    expect({ status: refused.status, type: refused.body.error.type }).toEqual({ status: 402, type: "insufficient_funds" });
    const books = await readBooks(sql);
    // The balance was set by hand above, so only the holds' invariants apply to this account.
    expect(books.violations.filter((v) => !v.includes("ledger"))).toEqual([]);
  },
  60_000,
);
