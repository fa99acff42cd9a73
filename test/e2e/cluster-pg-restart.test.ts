/**
 * Postgres restarted under load (research/scale-out.md §5.4): two `serve` replicas on a private
 * PostgreSQL server (test/support/pg-server.ts; the machine's is never restarted), the machine's Redis
 * and NATS under a prefix of the test's own, a real echo provider on each; replica a journals its
 * settlements (`--settlement-journal`), b waits for each commit. Workers send chat requests
 * (JSON and streams) to both replicas while the server is stopped (fast) and started on the same port.
 * Afterwards: every request succeeded or got a clear error (an error envelope, or a stream's in-band
 * error); every success is charged exactly once; the ledger sums to each balance; reserved = the holds
 * = 0; a's journal was applied (its files empty); neither coordinator died; both serve again; no prompt
 * or completion text in their logs.
 * Skipped, saying so, without the PostgreSQL binaries, Redis or NATS.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import postgres from "postgres";
import { tempDir } from "../support/harness.ts";
import { NATS_URL, natsPrefix, testNats } from "../support/nats.ts";
import { readBooks } from "../support/pg-money.ts";
import { privatePostgres } from "../support/pg-server.ts";
import { type CoordinatorProcess, startCoordinator, startProvider } from "../support/processes.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { parseSse } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const SUITE = "cluster mode: Postgres restarted under load";
const pg = await privatePostgres([SUITE]);
const redis = await testRedis("test/e2e/cluster-pg-restart.test.ts");
const nats = await testNats("test/e2e/cluster-pg-restart.test.ts");
const prefix = natsPrefix();
afterAll(async () => {
  await removeKeys(prefix);
  await pg?.[Symbol.asyncDispose]();
});

const BUILD = "org/pg-restart-build";
const CREDIT = 1_000_000_000;
const CANARY = `canary${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
const WORKERS = 4;

/** One request's end as the consumer saw it. */
interface Seen {
  readonly requestId: string | null;
  /** ok: a complete answer ([DONE] for a stream); error: an error envelope or in-band error; other: anything else. */
  readonly result: "ok" | "error" | "other";
  readonly status: number;
  readonly phase: "before" | "during" | "after";
}

async function chatOnce(url: string, apiKey: string, stream: boolean): Promise<Omit<Seen, "phase">> {
  try {
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: BUILD, max_tokens: 8, stream, messages: [{ role: "user", content: `${CANARY} ${CANARY}` }] }),
    });
    const requestId = r.headers.get("x-request-id");
    const text = await r.text();
    if (r.status !== 200) {
      const error = (JSON.parse(text) as { error?: { type?: string } }).error;
      return { requestId, status: r.status, result: typeof error?.type === "string" ? "error" : "other" };
    }
    if (!stream) {
      const content = (JSON.parse(text) as { choices?: { message?: { content?: string } }[] }).choices?.[0]?.message?.content;
      return { requestId, status: 200, result: content === `${CANARY} ${CANARY}` ? "ok" : "other" };
    }
    const data = parseSse(text).data;
    if (data.at(-1) === "[DONE]") return { requestId, status: 200, result: "ok" };
    return { requestId, status: 200, result: data.at(-1)?.includes('"error"') ? "error" : "other" };
  } catch {
    // A cut connection: no answer at all.
    return { requestId: null, status: 0, result: "other" };
  }
}

test.skipIf(pg === undefined || !redis || !nats)(
  SUITE,
  async () => {
    const server = pg as NonNullable<typeof pg>;
    const env = {
      UMBRA_REDIS_URL: REDIS_URL,
      UMBRA_NATS_URL: NATS_URL,
      UMBRA_CLUSTER_PREFIX: prefix,
      UMBRA_HOLD_TTL_MS: "10000",
      UMBRA_LOG_LEVEL: "debug",
    };
    using dir = tempDir();
    const journal = join(dir.path, "settlements");
    const journalText = () =>
      ["a", "b"].map((x) => (existsSync(`${journal}-${x}`) ? readFileSync(`${journal}-${x}`, "utf8") : "")).join("");
    await using a = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "a", UMBRA_SETTLEMENT_JOURNAL: journal }, { db: server.url });
    await using b = await startCoordinator({ ...env, UMBRA_REPLICA_ID: "b" }, { db: server.url });
    const { apiKey, accountId } = await a.seed([BUILD], {}, CREDIT);
    await a.admin("PUT", `/prices/${BUILD}`, { input_price: 1_000_000, output_price: 2_000_000 });
    const earner = await a.admin<{ id: string }>("POST", "/accounts", { name: "provider" });
    const { token } = await a.admin<{ token: string }>("POST", "/provider-tokens", { account_id: earner.id });
    const provider = (on: CoordinatorProcess) =>
      startProvider(["--coordinator", on.url, "--token", token, "--engine", "echo", "--model", BUILD]);
    await using pa = provider(a);
    await using pb = provider(b);
    await Promise.all([pa.connected, pb.connected]);

    let phase: Seen["phase"] = "before";
    let stopping = false;
    const seen: Seen[] = [];
    const workers = Array.from({ length: WORKERS }, async (_, w) => {
      for (let i = 0; !stopping; i++) {
        const replica = (w + i) % 2 === 0 ? a : b;
        const at = phase;
        seen.push({ ...(await chatOnce(replica.url, apiKey, w % 2 === 1)), phase: at });
      }
    });
    const okIn = (p: Seen["phase"]) => seen.filter((s) => s.phase === p && s.result === "ok").length;
    await waitFor(() => okIn("before") >= 10, "10 answers before the restart", 30_000);
    phase = "during";
    await server.restart();
    phase = "after";
    await waitFor(() => okIn("after") >= 20, "20 answers after the restart", 30_000);
    stopping = true;
    await Promise.all(workers);

    // Both replicas serve again, each on its own.
    const again = await Promise.all([chatOnce(a.url, apiKey, false), chatOnce(b.url, apiKey, true)]);
    const sql = postgres(server.url, { max: 1, onnotice: () => {} });
    try {
      // Holds of requests whose settlement could not be written are swept once their lease runs out.
      await waitFor(async () => (await sql`SELECT 1 FROM holds`).length === 0, "no hold left", 30_000);
      await waitFor(() => journalText() === "", "a's journal applied", 30_000);
      const books = await readBooks(sql);
      const charged = new Set(Object.keys(books.charges));
      const usage = new Map(
        (await sql<{ id: string; outcome: string }[]>`SELECT request_id AS id, outcome FROM usage`).map((u) => [u.id, u.outcome]),
      );
      const ok = seen.filter((s) => s.result === "ok");
      // A coordinator that died says why in its last log lines (kept out of the comparison below).
      for (const c of [a, b]) {
        if (c.proc.exitCode !== null) console.error(`coordinator exited ${c.proc.exitCode}:\n${c.log().split("\n").slice(-12).join("\n")}`);
        for (const line of c.log().split("\n"))
          if (line.includes("kept serving")) console.error(`coordinator ${String(c.started.replica_id)} survived: ${line}`);
      }
      expect({
        other: seen.filter((s) => s.result === "other"),
        okWithoutId: ok.filter((s) => s.requestId === null).length,
        okUncharged: ok.filter((s) => !charged.has(s.requestId ?? "")).map((s) => s.requestId),
        okNotCompleted: ok.filter((s) => usage.get(s.requestId ?? "") !== "completed").map((s) => s.requestId),
        violations: books.violations,
        reserved: books.accounts[accountId]?.reserved,
        again: again.map((s) => s.result),
        alive: [a.proc.exitCode, b.proc.exitCode],
        logs: [a.log().includes(CANARY), b.log().includes(CANARY)],
      }).toEqual({
        other: [],
        okWithoutId: 0,
        okUncharged: [],
        okNotCompleted: [],
        violations: [],
        reserved: 0,
        again: ["ok", "ok"],
        alive: [null, null],
        logs: [false, false],
      });
      console.info(
        `postgres restart: ${seen.length} requests, ${ok.length} answered, ${seen.length - ok.length} clear errors ` +
          `(${[...new Set(seen.filter((s) => s.result === "error").map((s) => s.status))].join(", ")})`,
      );
    } finally {
      await sql.end({ timeout: 5 });
    }
  },
  120_000,
);
