/**
 * Rate limits per key (rpm, tpm) over real sockets, on a clock the test controls so every Retry-After
 * and x-ratelimit-* value is exact: the 429 envelope and its headers, the headers on successful answers
 * (JSON and streams), atomic admission under a concurrent burst, the token true-up from real usage,
 * UMBRA_DEFAULT_RPM / UMBRA_DEFAULT_TPM for keys without limits and for JWT callers, and the rule that a
 * rate-limited request reserves no money and reaches no provider.
 *
 * Token estimates below: the prompt "hi" counts ceil((2 + 8 × 4) / 4) = 9 tokens (src/billing/billing.ts
 * promptTokenEstimate), plus the output budget max_tokens.
 */
import { describe, expect, test } from "bun:test";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import type { Clock } from "../../src/coordinator/app.ts";
import type { Inference } from "../../src/protocol/frames.ts";
import { chatEnv } from "../support/chat-env.ts";
import { type Behaviour, echo, type FakeProvider } from "../support/fake-provider.ts";
import { seedAccount } from "../support/harness.ts";
import { chatBody, postChat, readSse, sseReader } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const _BUILD = "org/base-build-4bit";
const T0 = 1_760_000_000_000;

/** The app's clock: frozen unless the test moves it. */
class ManualClock implements Clock {
  private ms = T0;
  now(): number {
    return this.ms;
  }
  advance(ms: number): void {
    this.ms += ms;
  }
}

/**
 * The chat environment on a manual clock. Its seeded account hosts the provider machines (no heartbeats);
 * `account()` adds a funded consumer with one key (admin createKey fields).
 */
async function setup(env: Record<string, string> = {}) {
  const clock = new ManualClock();
  // Liveness far beyond any clock move here: the sweeper must not end providers when the test advances time.
  const ctx = await chatEnv({ clock, env: { UMBRA_PROVIDER_LIVENESS_MS: "3600000", ...env } });
  return Object.assign(ctx, {
    clock,
    account: (key: Record<string, unknown> = {}) => seedAccount(ctx.t, key),
    chat: (apiKey: string, body: Record<string, unknown>, signal?: AbortSignal) =>
      postChat(ctx.server.url, apiKey, body, signal ? { signal } : {}),
  });
}

const inferences = (p: FakeProvider) => p.received.filter((f): f is Inference => f.type === "inference");

/** Retry-After and every x-ratelimit-* header of a response (absent ones left out). */
function limitHeaders(response: Response): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of response.headers) {
    if (name === "retry-after" || name.startsWith("x-ratelimit-")) out[name] = value;
  }
  return out;
}

const requestHeaders = (limit: number, remaining: number, reset: string) => ({
  "x-ratelimit-limit-requests": String(limit),
  "x-ratelimit-remaining-requests": String(remaining),
  "x-ratelimit-reset-requests": reset,
});

const tokenHeaders = (limit: number, remaining: number, reset: string) => ({
  "x-ratelimit-limit-tokens": String(limit),
  "x-ratelimit-remaining-tokens": String(remaining),
  "x-ratelimit-reset-tokens": reset,
});

const RATE_LIMITED = { error: { message: expect.any(String), type: "rate_limit_error", code: "rate_limit_exceeded" } };

/** A successful JSON answer: its status and rate headers (the body is read to the end). */
async function answered(response: Response) {
  const headers = limitHeaders(response);
  const body = await response.text();
  expect(response.status, body).toBe(200);
  return headers;
}

/** A 429 answer: status, rate headers and envelope. */
async function rejected(response: Response) {
  return { status: response.status, headers: limitHeaders(response), body: await response.json() };
}

/**
 * Reports usage equal to the estimate (9 prompt tokens + the whole budget): the true-up changes nothing.
 * One byte of text per token, so the report stays within the usage bounds (src/billing/usage-bounds.ts).
 */
const exactUsage: Behaviour = (inf) => [
  { do: "accept" },
  { do: "chunk", delta: { content: "x".repeat(inf.request.max_tokens) } },
  { do: "complete", usage: { prompt_tokens: 9, completion_tokens: inf.request.max_tokens ?? 0 } },
];

describe("requests per minute", () => {
  test("rpm 3: answers count down, the 4th request is 429 with Retry-After from the bucket, and passes once it refills", async () => {
    await using ctx = await setup();
    const p = await ctx.provider({ heartbeat: false });
    const { apiKey } = await ctx.account({ rpm: 3 });
    const seen = [];
    for (let i = 0; i < 3; i++) seen.push(await answered(await ctx.chat(apiKey, chatBody("hi"))));
    // Each request refills in 60 s / 3 = 20 s; the reset is the time until the bucket is full again.
    expect(seen).toEqual([requestHeaders(3, 2, "20s"), requestHeaders(3, 1, "40s"), requestHeaders(3, 0, "1m0s")]);

    expect(await rejected(await ctx.chat(apiKey, chatBody("hi")))).toEqual({
      status: 429,
      headers: { "retry-after": "20", ...requestHeaders(3, 0, "1m0s") },
      body: RATE_LIMITED,
    });
    expect(inferences(p)).toHaveLength(3);

    // 1 ms short of a whole request: the wait is fractional, Retry-After still an integer (rounded up).
    ctx.clock.advance(19_999);
    expect(await rejected(await ctx.chat(apiKey, chatBody("hi")))).toEqual({
      status: 429,
      headers: { "retry-after": "1", ...requestHeaders(3, 0, "40.001s") },
      body: RATE_LIMITED,
    });
    ctx.clock.advance(1);
    expect(await answered(await ctx.chat(apiKey, chatBody("hi")))).toEqual(requestHeaders(3, 0, "1m0s"));
    expect(inferences(p)).toHaveLength(4);
  });

  test("a concurrent burst of 50 against rpm 10 lets exactly 10 through; the providers see exactly 10", async () => {
    await using ctx = await setup();
    const providers = [await ctx.provider({ heartbeat: false }), await ctx.provider({ heartbeat: false })];
    const { apiKey } = await ctx.account({ rpm: 10 });
    const responses = await Promise.all(Array.from({ length: 50 }, (_, i) => ctx.chat(apiKey, chatBody(`burst ${i}`))));
    const ok: string[] = [];
    const limited: unknown[] = [];
    for (const r of responses) {
      if (r.status === 200) ok.push((await answered(r))["x-ratelimit-remaining-requests"] ?? "missing");
      else limited.push(await rejected(r));
    }
    // Every admitted request saw a different remaining count: one debit each, none lost or doubled.
    expect(ok.sort()).toEqual(["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]);
    expect(limited).toEqual(
      Array.from({ length: 40 }, () => ({
        status: 429,
        headers: { "retry-after": "6", ...requestHeaders(10, 0, "1m0s") },
        body: RATE_LIMITED,
      })),
    );
    expect(providers.map((p) => inferences(p).length).reduce((a, b) => a + b, 0)).toBe(10);
  });

  test("a streamed answer carries the headers on its 200; a rate-limited stream request is a JSON 429", async () => {
    await using ctx = await setup();
    await ctx.provider({ heartbeat: false });
    const { apiKey } = await ctx.account({ rpm: 1, tpm: 100_000 });
    const response = await ctx.chat(apiKey, chatBody("alpha beta", { stream: true, max_tokens: 100 }));
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("text/event-stream");
    // "alpha beta": ceil((10 + 32) / 4) = 11 prompt tokens + 100.
    expect(limitHeaders(response)).toEqual({ ...requestHeaders(1, 0, "1m0s"), ...tokenHeaders(100_000, 99_889, "67ms") });
    expect((await readSse(response)).data.at(-1)).toBe("[DONE]");

    const limited = await ctx.chat(apiKey, chatBody("alpha beta", { stream: true, max_tokens: 100 }));
    expect(limited.headers.get("content-type")).toBe("application/json");
    expect(await rejected(limited)).toEqual({
      status: 429,
      // The token bucket was trued up to the echo's real usage (5 + 2 tokens) when the stream ended.
      headers: { "retry-after": "60", ...requestHeaders(1, 0, "1m0s"), ...tokenHeaders(100_000, 99_993, "5ms") },
      body: RATE_LIMITED,
    });
  });
});

describe("tokens per minute", () => {
  test("a request whose estimate exceeds the remaining tokens is 429 on tokens; a smaller one passes", async () => {
    await using ctx = await setup();
    const p = await ctx.provider({ behave: exactUsage, heartbeat: false });
    const { apiKey } = await ctx.account({ tpm: 1000 });
    const ask = (maxTokens: number) => ctx.chat(apiKey, chatBody("hi", { max_tokens: maxTokens }));

    // 9 + 600 = 609 tokens; the bucket refills 1000 per 60 s.
    expect(await answered(await ask(600))).toEqual(tokenHeaders(1000, 391, "36.54s"));
    const tooMany = await rejected(await ask(600));
    expect(tooMany).toEqual({
      status: 429,
      // (609 - 391) tokens at 1000 per minute = 13.08 s -> 14.
      headers: { "retry-after": "14", ...tokenHeaders(1000, 391, "36.54s") },
      body: RATE_LIMITED,
    });
    expect((tooMany.body as { error: { message: string } }).error.message).toContain("tokens");
    // 9 + 300 = 309 fits in 391.
    expect(await answered(await ask(300))).toEqual(tokenHeaders(1000, 82, "55.08s"));

    // (609 - 82) tokens = 31.62 s -> 32; 31 s later 0.62 s remain -> 1; then it passes.
    expect((await rejected(await ask(600))).headers["retry-after"]).toBe("32");
    ctx.clock.advance(31_000);
    expect((await rejected(await ask(600))).headers["retry-after"]).toBe("1");
    ctx.clock.advance(620);
    expect(await answered(await ask(600))).toEqual(tokenHeaders(1000, 0, "1m0s"));
    expect(inferences(p)).toHaveLength(3);
  });

  test("true-up: an answer whose real usage is far below its estimate refunds the difference (JSON, stream, failures)", async () => {
    await using ctx = await setup();
    // echo reports 5 prompt tokens + one per word: "hi" -> 6 tokens. A message "fail" fails before content.
    await ctx.provider({
      behave: (inf) =>
        inf.request.messages[0]?.content === "fail" ? [{ do: "accept" }, { do: "error", code: "engine_error" }] : echo(inf),
      heartbeat: false,
    });
    const { apiKey } = await ctx.account({ tpm: 10_000 });
    const remaining = async (response: Response) => (await answered(response))["x-ratelimit-remaining-tokens"];

    // Estimate 9 + 1000 = 1009 each.
    expect(await remaining(await ctx.chat(apiKey, chatBody("hi", { max_tokens: 1000 })))).toBe("8991");
    // Without the true-up this would be 8991 - 1009 = 7982; with it, 10000 - 6 - 1009.
    expect(await remaining(await ctx.chat(apiKey, chatBody("hi", { max_tokens: 1000, stream: true })))).toBe("8985");
    expect(await remaining(await ctx.chat(apiKey, chatBody("hi", { max_tokens: 1000 })))).toBe("8979");
    // A request that fails before content gives its whole estimate back.
    const failed = await ctx.chat(apiKey, chatBody("fail", { max_tokens: 1000 }));
    expect(failed.status).toBe(502);
    await failed.text();
    // 10000 - 3 × 6 - 1009.
    expect(await remaining(await ctx.chat(apiKey, chatBody("hi", { max_tokens: 1000 })))).toBe("8973");
    // A request whose prices cannot be read (the store failing) is a 500 that also gives its estimate back.
    const prices = ctx.t.store.prices;
    const get = prices.get.bind(prices);
    prices.get = () => Promise.reject(new Error("store unavailable"));
    const broken = await ctx.chat(apiKey, chatBody("hi", { max_tokens: 1000 }));
    prices.get = get;
    expect(broken.status).toBe(500);
    await broken.text();
    // 10000 - 4 × 6 - 1009.
    expect(await remaining(await ctx.chat(apiKey, chatBody("hi", { max_tokens: 1000 })))).toBe("8967");
  });
});

describe("account defaults (UMBRA_DEFAULT_RPM, UMBRA_DEFAULT_TPM)", () => {
  test("apply to keys without their own limits, per key; a key's own limit wins", async () => {
    await using ctx = await setup({ UMBRA_DEFAULT_RPM: "2", UMBRA_DEFAULT_TPM: "50000" });
    await ctx.provider({ heartbeat: false });
    const plain = await ctx.account();
    const second = await ctx.t.app.admin.createKey({ account_id: plain.accountId });
    const own = await ctx.account({ rpm: 5, tpm: 7000 });
    const body = chatBody("hi", { max_tokens: 91 }); // 100 tokens

    expect(await answered(await ctx.chat(plain.apiKey, body))).toEqual({
      ...requestHeaders(2, 1, "30s"),
      ...tokenHeaders(50_000, 49_900, "120ms"),
    });
    await answered(await ctx.chat(plain.apiKey, body));
    const third = await rejected(await ctx.chat(plain.apiKey, body));
    expect([third.status, third.headers["retry-after"], third.headers["x-ratelimit-limit-requests"]]).toEqual([429, "30", "2"]);
    // Another key of the same account has its own bucket under the same default.
    expect((await answered(await ctx.chat(second.key, body)))["x-ratelimit-remaining-requests"]).toBe("1");
    // A key with its own limits is not bound by the defaults.
    expect(await answered(await ctx.chat(own.apiKey, body))).toEqual({
      ...requestHeaders(5, 4, "12s"),
      ...tokenHeaders(7000, 6900, "858ms"),
    });
  });

  test("apply to JWT callers, one bucket per account", async () => {
    const pair = await generateKeyPair("ES256");
    const issuer = "https://id.example.test/";
    const audience = "umbra-api";
    await using ctx = await setup({
      UMBRA_DEFAULT_RPM: "2",
      UMBRA_JWT_PUBLIC_KEY: JSON.stringify(await exportJWK(pair.publicKey)),
      UMBRA_JWT_ISSUER: issuer,
      UMBRA_JWT_AUDIENCE: audience,
    });
    await ctx.provider({ heartbeat: false });
    const account = await ctx.t.app.admin.createAccount({ name: "jwt user", jwt_subject: "user-1" });
    await ctx.t.app.admin.creditAccount(account.id, { amount_micro_usd: 5_000_000 });
    const nowS = Math.floor(T0 / 1000);
    const jwt = () =>
      new SignJWT({ iss: issuer, aud: audience, sub: "user-1", iat: nowS, exp: nowS + 300 })
        .setProtectedHeader({ alg: "ES256" })
        .sign(pair.privateKey);
    // Two tokens of the same account share the account's bucket.
    expect(await answered(await ctx.chat(await jwt(), chatBody("hi")))).toEqual(requestHeaders(2, 1, "30s"));
    expect(await answered(await ctx.chat(await jwt(), chatBody("hi")))).toEqual(requestHeaders(2, 0, "1m0s"));
    expect(await rejected(await ctx.chat(await jwt(), chatBody("hi")))).toEqual({
      status: 429,
      headers: { "retry-after": "30", ...requestHeaders(2, 0, "1m0s") },
      body: RATE_LIMITED,
    });
  });
});

describe("a rate-limited request costs nothing", () => {
  test("no reservation, no charge, no usage row, nothing sent to a provider", async () => {
    await using ctx = await setup();
    const p = await ctx.provider({
      behave: (inf) =>
        inf.request.messages[0]?.content === "hold"
          ? [{ do: "accept" }, { do: "chunk", delta: { content: "x" } }, { do: "hang" }]
          : echo(inf),
      heartbeat: false,
    });
    const { accountId, apiKey } = await ctx.account({ rpm: 1 });
    const controller = new AbortController();
    const held = await ctx.chat(apiKey, chatBody("hold", { stream: true }), controller.signal);
    expect(held.status).toBe(200);
    const reader = sseReader(held);
    await reader.next(); // the first content: the request holds its reservation
    const before = await ctx.t.app.admin.getAccount(accountId);
    expect(before.reserved_micro_usd).toBeGreaterThan(0);

    expect((await rejected(await ctx.chat(apiKey, chatBody("hi")))).status).toBe(429);
    expect((await rejected(await ctx.chat(apiKey, chatBody("hi", { stream: true })))).status).toBe(429);
    expect(await ctx.t.app.admin.getAccount(accountId)).toEqual(before);
    expect(inferences(p)).toHaveLength(1);

    controller.abort();
    await waitFor(() => ctx.t.app.wallets.reservedFor(accountId) === 0, "the held request's reservation to be released");
    await ctx.t.app.flush();
    // Only the held request was recorded (cancelled, charged for what it generated).
    const usage = await ctx.t.store.usage.list(accountId, 10);
    expect(usage.map((u) => u.outcome)).toEqual(["cancelled"]);
    const ledger = await ctx.t.app.admin.accountLedger(accountId, {});
    expect(ledger.data.map((e) => e.kind)).toEqual(["charge", "credit"]);
  });
});
