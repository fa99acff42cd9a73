/**
 * A cluster replica with a settlement journal (`--settlement-journal`), as real processes on one Postgres
 * database and the machine's Redis and NATS: kill -9 while settlements are in its journal, not yet all
 * applied; started again on the same journal it applies them before serving: every answered request is
 * charged exactly once (usage row and charge entry), the books hold, and its old holds and leases go
 * back. Then SIGTERM: the journal is applied before exit and left empty. The journal never holds prompt
 * or completion text. Skipped, saying so, without PostgreSQL, Redis or NATS.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import postgres from "postgres";
import { tempDir } from "../support/harness.ts";
import { NATS_URL, natsPrefix, testNats } from "../support/nats.ts";
import { testDatabase } from "../support/pg.ts";
import { readBooks } from "../support/pg-money.ts";
import { type CoordinatorProcess, startCoordinator, startProvider } from "../support/processes.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { chatBody } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const SUITE = "settlement journal across kill -9";
const db = await testDatabase([SUITE]);
const redis = await testRedis("test/e2e/cluster-journal.test.ts");
const nats = await testNats("test/e2e/cluster-journal.test.ts");
const skip = db === undefined || !redis || !nats;
const prefix = natsPrefix();
afterAll(() => removeKeys(prefix));
const sql = db && postgres(db.url, { max: 2, onnotice: () => {} });
afterAll(() => sql?.end({ timeout: 5 }));

const BUILD = "org/journal-build";
const CREDIT = 100_000_000;
const CANARY = `canary${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;

test.skipIf(skip)(
  SUITE,
  async () => {
    const pg = sql as NonNullable<typeof sql>;
    using dir = tempDir();
    const journal = join(dir.path, "settlements");
    const journalText = () =>
      ["a", "b"].map((s) => (existsSync(`${journal}-${s}`) ? readFileSync(`${journal}-${s}`, "utf8") : "")).join("");
    const env = {
      UMBRA_REDIS_URL: REDIS_URL,
      UMBRA_NATS_URL: NATS_URL,
      UMBRA_CLUSTER_PREFIX: prefix,
      UMBRA_HOLD_TTL_MS: "3000",
      UMBRA_REPLICA_ID: "j1",
      UMBRA_SETTLEMENT_JOURNAL: journal,
    };
    const start = () => startCoordinator(env, { dir: dir.path, db: db?.url ?? "" });
    await using stack = new AsyncDisposableStack();
    const first = stack.use(await start());
    const { apiKey, accountId } = await first.seed([BUILD], {}, CREDIT);
    const earner = await first.admin<{ id: string }>("POST", "/accounts", { name: "provider" });
    const { token } = await first.admin<{ token: string }>("POST", "/provider-tokens", { account_id: earner.id });
    await first.admin("PUT", `/prices/${BUILD}`, { input_price: 1_000_000, output_price: 2_000_000 });
    const provider = (on: CoordinatorProcess) =>
      stack.use(startProvider(["--coordinator", on.url, "--token", token, "--engine", "echo", "--model", BUILD]));
    await provider(first).connected;

    let answered = 0;
    const burst = async (on: CoordinatorProcess, n: number) => {
      const statuses = await Promise.all(
        Array.from({ length: n }, async () => {
          const r = await fetch(`${on.url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
            body: JSON.stringify({ ...chatBody(`${CANARY} ${CANARY}`), model: BUILD, max_tokens: 16 }),
          });
          await r.arrayBuffer();
          return r.status;
        }),
      );
      expect(statuses.every((s) => s === 200)).toBe(true);
      answered += n;
    };
    // Bursts until one ends with settlements still in the journal (answered, maybe not yet applied): kill -9 then.
    let left = "";
    for (let i = 0; i < 20 && left === ""; i++) {
      await burst(first, 24);
      left = journalText();
    }
    first.proc.kill("SIGKILL");
    await first.proc.exited;
    expect(left).not.toBe("");
    expect(left.includes(CANARY)).toBe(false);
    expect(journalText().includes(CANARY)).toBe(false);

    // Started again on the same journal: what it held is charged before anything is served.
    const second = stack.use(await start());
    const recovered = second.log().match(/"msg":"settlement journal applied","count":(\d+)\}/);
    expect(Number(recovered?.[1] ?? 0)).toBeGreaterThan(0);
    expect(journalText()).toBe("");
    const usage = async () => Number((await pg`SELECT count(*) AS n FROM usage WHERE account_id = ${accountId}`)[0]?.n ?? -1);
    expect(await usage()).toBe(answered);
    // The dead process's holds and leases go back with the restarted replica's first renewal.
    await waitFor(async () => (await readBooks(pg)).accounts[accountId]?.reserved === 0, "its old holds given back");
    let books = await readBooks(pg);
    expect(books.violations).toEqual([]);
    const charges = Object.values(books.charges);
    expect(charges.length).toBe(answered);
    expect(charges.every((c) => c.entries === 1 && c.total > 0)).toBe(true);
    expect(books.accounts[accountId]?.balance).toBe(CREDIT - charges.reduce((s, c) => s + c.total, 0));

    // SIGTERM: the journal is applied before the replica exits, and left empty.
    await provider(second).connected;
    await burst(second, 24);
    second.proc.kill("SIGTERM");
    expect(await second.proc.exited).toBe(0);
    expect(journalText()).toBe("");
    expect(await usage()).toBe(answered);
    books = await readBooks(pg);
    expect(books.violations).toEqual([]);
    expect(Object.keys(books.charges).length).toBe(answered);
    expect(books.accounts[accountId]?.reserved).toBe(0);
    expect([first.log().includes(CANARY), second.log().includes(CANARY)]).toEqual([false, false]);
  },
  90_000,
);
