/**
 * Reliability, coordinator restart (issue 7 point 2 c): the coordinator process is killed (-9) or
 * stopped (SIGTERM) while JSON and streamed requests are in flight through a real provider process,
 * then started again on the same database and address. Checks: every answer a client received whole
 * has its usage row and charge (nothing settled is lost), every ledger sums to its balance, no
 * reservation survives (the live holds are zero and the whole balance is available again), the provider
 * reconnects by itself and serves, and every client in flight ends with an answer or an error (a
 * connection error after kill -9; a clean error, JSON or in-band, after SIGTERM), never a hang.
 */
import { expect } from "bun:test";
import { reservationFor } from "../../src/billing/billing.ts";
import { costOf } from "../../src/billing/money.ts";
import { usageLimits } from "../../src/billing/usage-bounds.ts";
import type { ChatMessage } from "../../src/protocol/chat-messages.ts";
import { tempDir } from "../support/harness.ts";
import { startProvider } from "../support/processes.ts";
import { parseSse } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";
import { reliabilityCase } from "./report.ts";
import {
  type Coordinator,
  chat,
  coordinatorProcess,
  messages,
  providerHome,
  providerState,
  servesNormally,
  streamed,
  type Tenant,
  unbalanced,
} from "./support.ts";

/** The prompt tokens a request with these messages reserves (the bound a provider's report is held to). */
const promptLimit = (messages: readonly ChatMessage[]) => usageLimits({ messages, max_tokens: 1 }).promptTokens;

const GROUP = "coordinator restart";
/** $100: small enough that one request can reserve the whole balance within the protocol's budget. */
const CREDIT = 100_000_000;
/** The builds have no price: the fallback rates apply (config defaults). */
const FALLBACK = { input: 500_000, output: 1_500_000, cacheRead: 250_000, source: "fallback" as const };

/** How one request ended, as its client saw it. */
type Ending =
  | { kind: "delivered"; requestId: string; stream: boolean }
  | { kind: "http-error"; status: number; body: unknown }
  | { kind: "in-band-error"; error: unknown; requestId: string }
  | { kind: "connection-error" }
  | { kind: "truncated"; stream: boolean };

/** One request, read to its end; never throws. */
async function request(url: string, t: Tenant, content: string, stream: boolean): Promise<Ending> {
  try {
    const response = await chat(url, t, { messages: messages(content), stream, max_tokens: 64 });
    const requestId = response.headers.get("x-request-id") ?? "";
    if (response.status !== 200) return { kind: "http-error", status: response.status, body: await response.json() };
    if (!stream) {
      const body = (await response.json()) as { choices?: { finish_reason?: string }[] };
      return body.choices?.[0]?.finish_reason ? { kind: "delivered", requestId, stream } : { kind: "truncated", stream };
    }
    const data = parseSse(await response.text()).data;
    const s = streamed(data);
    if (s.last === "[DONE]" && s.done === 1) return { kind: "delivered", requestId, stream };
    if (s.last && typeof s.last === "object" && "error" in s.last) return { kind: "in-band-error", error: s.last, requestId };
    return { kind: "truncated", stream };
  } catch {
    return { kind: "connection-error" };
  }
}

const words = (n: number) => Array.from({ length: n }, (_, i) => `word${i}`).join(" ");

/** Resolves to `value`, or rejects when `ms` pass first (a hang). */
function within<T>(value: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    value,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not end within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** The books after a restart: every delivered answer charged, ledgers = balances, nothing held. */
async function booksAfterRestart(c: Coordinator, t: Tenant, delivered: readonly string[]): Promise<void> {
  const charges = c.charges(t.accountId);
  const usage = new Set(c.usage(t.accountId).map((row) => row.request_id));
  expect(delivered.filter((id) => !charges.has(id) || !usage.has(id))).toEqual([]);
  expect(unbalanced(c)).toEqual([]);
  const money = await c.money(t.accountId);
  expect(money.reserved).toBe(0);
}

reliabilityCase(
  GROUP,
  "killed -9 with JSON and streams in flight",
  async (r) => {
    r.tried(
      "16 clients (8 JSON, 8 streaming) in a loop through a real provider process; the coordinator is killed -9 after 40 whole answers and restarted on the same database and port",
    );
    using dir = tempDir();
    const first = await coordinatorProcess({ dir: dir.path });
    const t = await first.seed("org/restart-kill", CREDIT);
    using home = providerHome();
    const args = ["--coordinator", first.url, "--token", t.providerToken, "--engine", "echo", "--model", t.build];
    await using provider = startProvider([...args, "--max-concurrency", "64", "--echo-tokens-per-second", "200"], {
      UMBRA_PROVIDER_HOME: home.path,
    });
    const firstProviderId = await provider.connected;

    const endings: Ending[] = [];
    let stop = false;
    const clients = Array.from({ length: 16 }, async (_, i) => {
      const stream = i % 2 === 1;
      let last: Ending = { kind: "connection-error" };
      while (!stop) {
        last = await request(first.url, t, words(24), stream);
        endings.push(last);
        if (last.kind === "connection-error") break;
      }
      return last;
    });
    const delivered = () => endings.filter((e): e is Extract<Ending, { kind: "delivered" }> => e.kind === "delivered");
    await waitFor(
      () => delivered().filter((e) => e.stream).length >= 20 && delivered().filter((e) => !e.stream).length >= 20,
      "20 whole answers of each kind",
      30_000,
    );
    await first.stop("SIGKILL");
    stop = true;
    const lasts = await within(Promise.all(clients), 20_000, "every client in flight");
    const kinds = new Set(endings.filter((e) => e.kind !== "delivered").map((e) => e.kind));
    expect([...kinds].filter((k) => k !== "connection-error" && k !== "truncated")).toEqual([]);
    expect(lasts.filter((e) => e.kind === "connection-error").length).toBeGreaterThan(0);
    r.held(
      `every client in flight ended within 20 s, with a connection error (${lasts.filter((e) => e.kind === "connection-error").length} of 16) or an answer; none hung`,
    );

    await using second = await coordinatorProcess({ dir: dir.path, port: first.port });
    const ids = delivered().map((e) => e.requestId);
    await booksAfterRestart(second, t, ids);
    r.held(`all ${ids.length} answers received whole have their usage row and charge; every ledger sums to its balance; no hold survived`);
    await waitFor(
      () => {
        const state = providerState(home.path);
        return state?.connected === true && (state as { provider_id?: string }).provider_id !== firstProviderId;
      },
      "the provider reconnected by itself",
      30_000,
    );
    await servesNormally(second.url, t);
    await servesNormally(second.url, t, true);
    r.held("the same provider process reconnected by itself and serves JSON and streams again");
    // A request whose reservation is the whole durable balance is served: nothing of it is still held.
    const { balance } = await second.money(t.accountId);
    const content = messages("the whole balance");
    const maxTokens = Number(((BigInt(balance) - costOf(promptLimit(content), FALLBACK.input)) * 1_000_000n) / BigInt(FALLBACK.output));
    expect(balance - reservationFor(promptLimit(content), maxTokens, FALLBACK)).toBeLessThan(2);
    const whole = await chat(second.url, t, { messages: content, max_tokens: maxTokens });
    expect(whole.status).toBe(200);
    await whole.json();
    r.held("after the restart a request reserving the whole durable balance is served (no reservation survived)");
  },
  60_000,
);

/**
 * SIGTERM with 8 requests (4 JSON, 4 streaming, ~1.5 s each at 40 tokens per second) in flight through a
 * real provider process; then a restart on the same database and the books. Each run has its own
 * folder, processes and ports, so the two graceful cases run at the same time.
 */
/**
 * `wordCount` words at 40 tokens per second per answer. The provider's state file, which says when all 8
 * run, is written at most every 200 ms on a change and at least every second: the stop can come up to
 * about a second after the answers started.
 */
async function gracefulStop(
  drainMs: number | undefined,
  wordCount = 60,
): Promise<{ endings: Ending[]; during: Ending; code: number; ms: number }> {
  using dir = tempDir();
  const first = await coordinatorProcess({
    dir: dir.path,
    env: drainMs === undefined ? {} : { UMBRA_SHUTDOWN_DRAIN_MS: String(drainMs) },
  });
  const t = await first.seed("org/restart-term");
  using home = providerHome();
  await using provider = startProvider(
    ["--coordinator", first.url, "--token", t.providerToken, "--engine", "echo", "--model", t.build, "--echo-tokens-per-second", "40"],
    { UMBRA_PROVIDER_HOME: home.path },
  );
  await provider.connected;
  const inFlight = Array.from({ length: 8 }, (_, i) => request(first.url, t, words(wordCount), i % 2 === 1));
  await waitFor(() => providerState(home.path)?.active === 8, "eight attempts running");
  const started = performance.now();
  const stopped = first.stop("SIGTERM");
  // A request that arrives once the coordinator is stopping (its readiness probe says so first).
  await waitFor(async () => (await fetch(`${first.url}/readyz`).catch(() => undefined))?.status !== 200, "/readyz not ready");
  const during = await request(first.url, t, "arrives during the stop", false);
  const endings = await within(Promise.all(inFlight), 20_000, "every request in flight");
  const code = await stopped;
  const ms = performance.now() - started;
  await using second = await coordinatorProcess({ dir: dir.path });
  const ended = endings.filter((e): e is Extract<Ending, { requestId: string }> => "requestId" in e).map((e) => e.requestId);
  const usage = new Set(second.usage(t.accountId).map((row) => row.request_id));
  expect(ended.filter((id) => !usage.has(id))).toEqual([]);
  await booksAfterRestart(
    second,
    t,
    endings.filter((e) => e.kind === "delivered").map((e) => (e as { requestId: string }).requestId),
  );
  return { endings, during, code, ms };
}

const tally = (endings: readonly Ending[]) => endings.map((e) => (e.kind === "http-error" ? e.status : e.kind)).join(", ");

reliabilityCase.concurrent(
  GROUP,
  "graceful stop (SIGTERM) with traffic in flight: the answers finish within the drain period",
  async (r) => {
    r.tried(
      "8 requests (4 JSON, 4 streaming, ~1.5 s each) in flight through a real provider process; SIGTERM (default drain period, 10 s); one more request while stopping",
    );
    const { endings, during, code } = await gracefulStop(undefined);
    expect(code).toBe(0);
    expect(endings.map((e) => e.kind)).toEqual(Array(8).fill("delivered"));
    expect(during).toMatchObject({
      kind: "http-error",
      status: 503,
      body: { error: { type: "service_unavailable", code: "service_unavailable" } },
    });
    r.held(`every answer in flight was delivered whole (${tally(endings)}); the new request got 503 service_unavailable; exit 0`);
    r.held("after a restart every answer has its usage row and charge, books balance, no hold");
  },
  60_000,
);

reliabilityCase.concurrent(
  GROUP,
  "graceful stop (SIGTERM) with answers longer than the drain period",
  async (r) => {
    // ~4 s answers: longer than the drain period plus the stop's own delay (up to ~1 s, above), so some are cut.
    r.tried("8 requests like those above but ~4 s each, with a drain period of 500 ms");
    const { endings, during, code, ms } = await gracefulStop(500, 160);
    expect(code).toBe(0);
    const unclean = endings.filter(
      (e) =>
        !(
          e.kind === "delivered" ||
          e.kind === "in-band-error" ||
          (e.kind === "http-error" && e.status >= 500 && typeof e.body === "object" && e.body !== null && "error" in e.body)
        ),
    );
    expect(unclean).toEqual([]);
    expect(endings.some((e) => e.kind !== "delivered")).toBe(true);
    expect(during).toMatchObject({ kind: "http-error", status: 503 });
    r.held(
      `the process exited 0 after ${(ms / 1000).toFixed(1)} s and every request ended cleanly (${tally(endings)}): cut ones with a JSON error or one in-band error event`,
    );
    r.held("after a restart every ended request has its usage row (cut ones settled for what they relayed), books balance, no hold");
  },
  60_000,
);
