/**
 * Cluster mode under faults, as real processes (research/scale-out.md §5.4): `serve` replicas on one
 * Postgres database, the machine's Redis and NATS under a prefix of the test's own, a 3 s hold lease,
 * real echo providers streaming slowly (one attempt at a time). kill -9 of the owner replica mid-stream:
 * the consumer on A gets its content then one in-band error; the charge is at most what was relayed,
 * once. kill -9 of the forwarding replica: the owner cancels the provider's work (free again, its next
 * request served) and A's hold is swept, nothing charged. SIGSTOP of a replica past its hold's expiry,
 * then SIGCONT: it delivers no more content and charges nothing; the consumer gets one in-band error.
 * After each, the books hold (ledger = balance, reserved = its holds = 0) and no coordinator log holds
 * prompt or completion text. Skipped, saying so, without PostgreSQL, Redis or NATS.
 */
import { afterAll, expect, test } from "bun:test";
import postgres from "postgres";
import { NATS_URL, natsPrefix, testNats } from "../support/nats.ts";
import { testDatabase } from "../support/pg.ts";
import { readBooks } from "../support/pg-money.ts";
import { type CoordinatorProcess, startCoordinator, startProvider } from "../support/processes.ts";
import { REDIS_URL, removeKeys, testRedis } from "../support/redis.ts";
import { chatBody, parseSse } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const SUITES = ["kill -9 of the owner replica", "kill -9 of the forwarding replica", "SIGSTOP past the hold's expiry"];
const db = await testDatabase(SUITES);
const redis = await testRedis("test/e2e/cluster-faults.test.ts");
const nats = await testNats("test/e2e/cluster-faults.test.ts");
const skip = db === undefined || !redis || !nats;
const prefixes: string[] = [];
afterAll(() => Promise.all(prefixes.map((p) => removeKeys(p))));
const sql = db && postgres(db.url, { max: 2, onnotice: () => {} });
afterAll(() => sql?.end({ timeout: 5 }));

const BUILD = "org/faults-build";
const CREDIT = 100_000_000;
/** A word no coordinator log may contain: the prompt is made of it, and the echo answers with it. */
const CANARY = `canary${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
/** 100 words at 5 tokens a second: an answer that runs for 20 s, mid-stream whenever a fault is made. */
const PROMPT = Array.from({ length: 100 }, () => CANARY).join(" ");

interface Setup {
  readonly a: CoordinatorProcess;
  readonly b: CoordinatorProcess;
  readonly apiKey: string;
  readonly accountId: string;
  /** A real echo provider on `on`, streaming 5 tokens a second, one attempt at a time. */
  provider(on: CoordinatorProcess): ReturnType<typeof startProvider>;
}

/** Replicas `a` and `b` (3 s hold lease), an account with credit and a key, the build priced. */
async function replicas(stack: AsyncDisposableStack): Promise<Setup> {
  const prefix = natsPrefix();
  prefixes.push(prefix);
  const env = {
    UMBRA_REDIS_URL: REDIS_URL,
    UMBRA_NATS_URL: NATS_URL,
    UMBRA_CLUSTER_PREFIX: prefix,
    UMBRA_HOLD_TTL_MS: "3000",
    UMBRA_LOG_LEVEL: "debug",
  };
  const url = db?.url ?? "";
  const [a, b] = await Promise.all([
    startCoordinator({ ...env, UMBRA_REPLICA_ID: "a" }, { db: url }),
    startCoordinator({ ...env, UMBRA_REPLICA_ID: "b" }, { db: url }),
  ]);
  stack.use(a);
  stack.use(b);
  // Every scenario: no prompt or completion text in either coordinator's log.
  stack.defer(() => expect([a.log().includes(CANARY), b.log().includes(CANARY)]).toEqual([false, false]));
  const { apiKey, accountId } = await a.seed([BUILD], {}, CREDIT);
  // The providers earn on an account of their own: the consumer's balance moves by its charges alone.
  const earner = await a.admin<{ id: string }>("POST", "/accounts", { name: "provider" });
  const { token: providerToken } = await a.admin<{ token: string }>("POST", "/provider-tokens", { account_id: earner.id });
  await a.admin("PUT", `/prices/${BUILD}`, { input_price: 1_000_000, output_price: 2_000_000 });
  return {
    a,
    b,
    apiKey,
    accountId,
    provider: (on) =>
      stack.use(
        startProvider([
          ...["--coordinator", on.url, "--token", providerToken, "--engine", "echo", "--model", BUILD],
          ...["--echo-tokens-per-second", "5", "--max-concurrency", "1"],
        ]),
      ),
  };
}

/** An SSE answer read in the background: every event as it arrives, `ended` once the stream ends or is cut. */
interface Collected {
  readonly requestId: string;
  readonly events: string[];
  readonly ended: Promise<"ended" | "cut">;
}

async function streamChat(url: string, apiKey: string, body: Record<string, unknown>): Promise<Collected> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true }),
  });
  if (r.status !== 200 || !r.body) throw new Error(`stream answer ${r.status}: ${await r.text()}`);
  const events: string[] = [];
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let raw = "";
  const ended = (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return "ended" as const;
        raw += decoder.decode(value, { stream: true });
        const cut = raw.lastIndexOf("\n\n");
        if (cut < 0) continue;
        events.push(...parseSse(raw.slice(0, cut + 2)).data);
        raw = raw.slice(cut + 2);
      }
    } catch {
      return "cut" as const;
    }
  })();
  return { requestId: r.headers.get("x-request-id") ?? "", events, ended };
}

const contentOf = (events: readonly string[]) =>
  events
    .filter((e) => e !== "[DONE]" && !e.includes('"error"'))
    .map((e) => (JSON.parse(e) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta?.content ?? "")
    .join("");
const errorsOf = (events: readonly string[]) =>
  events.filter((e) => e.includes('"error"')).map((e) => (JSON.parse(e) as { error: { type: string } }).error.type);

const pgSql = () => sql as NonNullable<typeof sql>;
const holdsOf = async (requestId: string) => (await pgSql()`SELECT 1 FROM holds WHERE request_id = ${requestId}`).length;
const usageOf = async (requestId: string) =>
  (
    await pgSql()<{ outcome: string; completion: string; cost: string }[]>`
      SELECT outcome, completion_tokens AS completion, cost_micro_usd AS cost FROM usage WHERE request_id = ${requestId}`
  ).map((u) => ({ outcome: u.outcome, completion: Number(u.completion), cost: Number(u.cost) }));

/** The books hold everywhere; this account's reserved is 0 and its balance CREDIT less `charged`. */
async function booksHold(accountId: string, charged: number) {
  const books = await readBooks(pgSql());
  expect({ violations: books.violations, account: books.accounts[accountId] }).toEqual({
    violations: [],
    account: { balance: CREDIT - charged, reserved: 0 },
  });
}

/** Waits until `on` lists the build's one provider (local or another replica's) and can take a request. */
const ready = (on: CoordinatorProcess, apiKey: string) =>
  waitFor(async () => {
    const r = await fetch(`${on.url}/v1/models/${BUILD}`, { headers: { authorization: `Bearer ${apiKey}` } });
    const { metadata } = (await r.json()) as { metadata?: { provider_count?: number; can_accept?: boolean } };
    return metadata?.provider_count === 1 && metadata.can_accept === true;
  }, `${on.started.replica_id}'s /v1/models lists the provider, free`);

test.skipIf(skip)(
  "kill -9 of the owner replica mid-stream: content, then one in-band error; charged at most what was relayed, once",
  async () => {
    await using stack = new AsyncDisposableStack();
    const { a, b, apiKey, accountId, provider } = await replicas(stack);
    await provider(b).connected;
    await ready(a, apiKey);
    const answer = await streamChat(a.url, apiKey, { ...chatBody(PROMPT), model: BUILD, max_tokens: 200 });
    await waitFor(() => contentOf(answer.events).length > 0, "first content through A");
    b.proc.kill("SIGKILL");
    await b.proc.exited;
    const how = await answer.ended;
    const relayed = contentOf(answer.events);
    await waitFor(async () => (await holdsOf(answer.requestId)) === 0, "A settled the request");
    const [usage] = await usageOf(answer.requestId);
    const books = await readBooks(pgSql());
    expect({
      how,
      errors: errorsOf(answer.events),
      last: answer.events.at(-1)?.includes('"error"'),
      done: answer.events.includes("[DONE]"),
      outcome: usage?.outcome,
      // Estimated from what was relayed: 4 characters a token, rounded up.
      withinRelayed: (usage?.completion ?? Number.POSITIVE_INFINITY) <= Math.ceil(relayed.length / 4),
      charges: books.charges[answer.requestId],
    }).toEqual({
      how: "ended",
      errors: ["provider_error"],
      last: true,
      done: false,
      outcome: "failed",
      withinRelayed: true,
      charges: { total: usage?.cost ?? -1, entries: 1 },
    });
    expect(relayed.length).toBeLessThan(PROMPT.length);
    await booksHold(accountId, usage?.cost ?? 0);
  },
  60_000,
);

test.skipIf(skip)(
  "kill -9 of the forwarding replica mid-stream: the owner cancels the provider, A's hold is swept uncharged",
  async () => {
    await using stack = new AsyncDisposableStack();
    const { a, b, apiKey, accountId, provider } = await replicas(stack);
    await provider(b).connected;
    await ready(a, apiKey);
    const answer = await streamChat(a.url, apiKey, { ...chatBody(PROMPT), model: BUILD, max_tokens: 200 });
    await waitFor(() => contentOf(answer.events).length > 0, "first content through A");
    expect(await holdsOf(answer.requestId)).toBe(1);
    a.proc.kill("SIGKILL");
    await a.proc.exited;
    // The provider serves one attempt at a time and its answer would run 20 s: free within 15 s means
    // the owner cancelled it (acks silent for 3 keepalive periods, 6 s).
    await waitFor(
      async () => {
        const r = await fetch(`${b.url}/v1/models/${BUILD}`, { headers: { authorization: `Bearer ${apiKey}` } });
        return ((await r.json()) as { metadata?: { can_accept?: boolean } }).metadata?.can_accept === true;
      },
      "the provider free again on B",
      15_000,
    );
    const next = await fetch(`${b.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ ...chatBody(`${CANARY} ${CANARY}`), model: BUILD, max_tokens: 8 }),
    });
    const served = (await next.json()) as { choices?: { message?: { content?: string } }[] };
    // A's hold: B sweeps it once the lease (3 s) ran out.
    await waitFor(async () => (await holdsOf(answer.requestId)) === 0, "A's hold swept by B", 15_000);
    const [nextUsage] = await usageOf(next.headers.get("x-request-id") ?? "");
    const books = await readBooks(pgSql());
    expect({
      status: next.status,
      content: served.choices?.[0]?.message?.content,
      killedCharges: books.charges[answer.requestId],
      killedUsage: await usageOf(answer.requestId),
      sweepFailed: b.log().includes('"msg":"hold renewal or sweep failed"'),
    }).toEqual({ status: 200, content: `${CANARY} ${CANARY}`, killedCharges: undefined, killedUsage: [], sweepFailed: false });
    await booksHold(accountId, nextUsage?.cost ?? 0);
  },
  60_000,
);

test.skipIf(skip)(
  "SIGSTOP of a replica past its hold's expiry, then SIGCONT: no more content, nothing charged, one in-band error",
  async () => {
    await using stack = new AsyncDisposableStack();
    const { a, b, apiKey, accountId, provider } = await replicas(stack);
    // The provider on A itself: A holds the money and relays the answer.
    await provider(a).connected;
    await ready(a, apiKey);
    const answer = await streamChat(a.url, apiKey, { ...chatBody(PROMPT), model: BUILD, max_tokens: 200 });
    await waitFor(() => contentOf(answer.events).length > 0, "first content from A");
    a.proc.kill("SIGSTOP");
    // B's sweep releases A's hold once its lease ran out (3 s without renewal).
    await waitFor(async () => (await holdsOf(answer.requestId)) === 0, "A's hold swept by B while A is stopped", 15_000);
    // Everything A wrote before it stopped has arrived by now: what follows comes after the resume.
    const before = answer.events.length;
    a.proc.kill("SIGCONT");
    const how = await answer.ended;
    await waitFor(async () => (await usageOf(answer.requestId)).length === 1, "A's settlement recorded");
    const books = await readBooks(pgSql());
    expect({
      how,
      after: answer.events.slice(before).map((e) => (e.includes('"error"') ? errorsOf([e])[0] : "content")),
      charges: books.charges[answer.requestId],
      usage: (await usageOf(answer.requestId)).map((u) => u.cost),
      logged: a.log().includes("settled without its hold: nothing charged") && a.log().includes("holds overdue"),
    }).toEqual({ how: "ended", after: ["service_unavailable"], charges: undefined, usage: [0], logged: true });
    await booksHold(accountId, 0);
    expect(b.proc.exitCode).toBe(null);
  },
  60_000,
);
