/**
 * Provider device login (RFC 8628) over real HTTP on port 0: code -> approve (API key or JWT) -> token,
 * the token connecting as a provider and reading GET /v1/provider/me (machines, earnings today and in
 * all); deny; expiry on an injected clock; reuse of a delivered code; slow_down; credentials in the
 * wrong place; per-address and wrong-code limits (429 + Retry-After); form bodies; malformed bodies
 * answered with clear errors, never 500; the approval page's headers; no code or token in the logs.
 */

import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { exportSPKI, generateKeyPair, SignJWT } from "jose";
import { seedDevelopment } from "../../src/coordinator/dev.ts";
import { connectFakeProvider } from "../support/fake-provider.ts";
import { seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";
import { chatBody, postChat, providerToken, startServer, type TestServer } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
const GRANT = "urn:ietf:params:oauth:grant-type:device_code";
/** 2027-03-01T00:00:00Z, a UTC midnight; the clock starts 25 s before it. */
const MIDNIGHT = Date.UTC(2027, 2, 1);
const T0 = MIDNIGHT - 25_000;
const ISSUER = "https://id.example.test/";
const AUDIENCE = "umbra-api";

interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly body: unknown;
}

interface SendOptions {
  readonly json?: unknown;
  readonly form?: string;
  readonly raw?: string;
  readonly token?: string;
  readonly headers?: Record<string, string>;
}

async function send(server: TestServer, method: string, path: string, o: SendOptions = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...o.headers };
  if (o.token !== undefined) headers.authorization = `Bearer ${o.token}`;
  let body: string | undefined = o.raw;
  if (o.json !== undefined) {
    body = JSON.stringify(o.json);
    headers["content-type"] ??= "application/json";
  }
  if (o.form !== undefined) {
    body = o.form;
    headers["content-type"] ??= "application/x-www-form-urlencoded";
  }
  const response = await fetch(`${server.url}${path}`, { method, headers, ...(body === undefined ? {} : { body }) });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, body: parsed };
}

interface Started {
  readonly device_code: string;
  readonly user_code: string;
  readonly verification_uri: string;
  readonly verification_uri_complete: string;
  readonly expires_in: number;
  readonly interval: number;
}

interface Ctx extends AsyncDisposable {
  readonly t: TestApp;
  readonly server: TestServer;
  /** The account that links machines, and one of its API keys. */
  readonly owner: { accountId: string; apiKey: string };
  readonly clock: { now: () => number; advance: (ms: number) => void };
  code(body?: Record<string, unknown>): Promise<Started>;
  poll(deviceCode: string): Promise<Answer>;
  decide(userCode: string, decision: "approve" | "deny", token?: string): Promise<Answer>;
  preview(userCode: string, token?: string): Promise<Answer>;
}

async function setup(env: Record<string, string> = {}): Promise<Ctx> {
  let ms = T0;
  const clock = {
    now: () => ms,
    advance: (by: number) => {
      ms += by;
    },
  };
  const t = await testApp({ clock, env });
  await seedCatalog(t);
  // An account holder's key: allowed to link machines (keys are not, unless created so).
  const owner = await seedAccount(t, { link_machines: true }, 0);
  const server = startServer(t);
  return {
    t,
    server,
    owner,
    clock,
    async code(body = { client_id: "umbra-provider", machine_name: "mac-studio" }) {
      const r = await send(server, "POST", "/v1/provider/device/code", { json: body });
      expect(r.status).toBe(200);
      return r.body as Started;
    },
    poll: (deviceCode) =>
      send(server, "POST", "/v1/provider/device/token", {
        json: { grant_type: GRANT, device_code: deviceCode, client_id: "umbra-provider" },
      }),
    decide: (userCode, decision, token = owner.apiKey) =>
      send(server, "POST", "/v1/provider/device/approve", { token, json: { user_code: userCode, decision } }),
    preview: (userCode, token = owner.apiKey) =>
      send(server, "GET", `/v1/provider/device/preview?user_code=${encodeURIComponent(userCode)}`, { token }),
    async [Symbol.asyncDispose]() {
      await server[Symbol.asyncDispose]();
      await t[Symbol.asyncDispose]();
    },
  };
}

/** The echo provider answers one completion token per word: enough tokens for a charge above the fee. */
const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(" ");
const oauth = (error: string) => ({ status: 400, body: { error, error_description: expect.any(String) } });
const answer = (r: Answer) => ({ status: r.status, body: r.body });
const envelope = (status: number, type: string, code: string, param?: string) => ({
  status,
  body: { error: { message: expect.any(String), type, code, ...(param === undefined ? {} : { param }) } },
});

describe("the whole flow", () => {
  test("code -> approve -> token; the token connects as a provider and reads /v1/provider/me; the code is then dead", async () => {
    await using c = await setup();
    const { t, server } = c;
    const started = await send(server, "POST", "/v1/provider/device/code", {
      json: { client_id: "umbra-provider", machine_name: "Ada’s Mac mini" },
    });
    const userCode = (started.body as Started).user_code;
    expect(answer(started)).toEqual({
      status: 200,
      body: {
        device_code: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
        user_code: expect.stringMatching(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/),
        verification_uri: `${server.url}/console/device`,
        verification_uri_complete: `${server.url}/console/device?user_code=${userCode}`,
        expires_in: 600,
        interval: 5,
      },
    });
    expect(started.headers.get("cache-control")).toBe("no-store");
    const deviceCode = (started.body as Started).device_code;

    const pending = await c.poll(deviceCode);
    expect(answer(pending)).toEqual(oauth("authorization_pending"));
    expect(pending.headers.get("cache-control")).toBe("no-store");
    expect(pending.headers.get("content-type")).toStartWith("application/json");
    // Polled again at once: slow_down.
    expect(answer(await c.poll(deviceCode))).toEqual(oauth("slow_down"));

    // The person types the code loosely.
    const approved = await c.decide(` ${userCode.toLowerCase().replace("-", " ")} `, "approve");
    expect(answer(approved)).toEqual({
      status: 200,
      body: {
        user_code: userCode,
        decision: "approve",
        account_id: c.owner.accountId,
        machine_name: "Ada’s Mac mini",
        token_expires_in_seconds: null,
      },
    });
    expect(answer(await c.decide(userCode, "deny"))).toEqual(envelope(409, "conflict_error", "device_code_already_decided", "user_code"));

    c.clock.advance(10_000);
    const delivered = await c.poll(deviceCode);
    expect(answer(delivered)).toEqual({
      status: 200,
      body: {
        access_token: expect.stringMatching(/^umbra-pt-[A-Za-z0-9_-]{43}$/),
        token_type: "Bearer",
        account_id: c.owner.accountId,
        token_id: expect.stringMatching(/^pt_/),
      },
    });
    expect(delivered.headers.get("cache-control")).toBe("no-store");
    const { access_token: token, token_id: tokenId } = delivered.body as { access_token: string; token_id: string };

    // Single use: the same code never yields a second token, and the user code is gone.
    c.clock.advance(10_000);
    expect(answer(await c.poll(deviceCode))).toEqual(oauth("invalid_grant"));
    expect(answer(await c.decide(userCode, "approve"))).toEqual(envelope(404, "not_found_error", "device_code_not_found", "user_code"));
    // The token carries the machine name the approver saw.
    expect((await t.app.admin.listProviderTokens(c.owner.accountId)).data.map((p) => [p.id, p.name])).toEqual([
      [tokenId, "Ada’s Mac mini"],
    ]);

    // The token is a real provider device token.
    const me0 = await send(server, "GET", "/v1/provider/me", { token });
    expect(answer(me0)).toEqual({
      status: 200,
      body: {
        account_id: c.owner.accountId,
        token_id: tokenId,
        token_expires_at: null,
        earnings: { total_micro_usd: 0, today_micro_usd: 0 },
        balance_micro_usd: 0,
        machines: [],
      },
    });
    await using provider = await connectFakeProvider({ url: server.url, token, models: [BUILD] });
    expect(provider.providerId).toStartWith("prov_");
    // A machine on another account is not listed (it serves another build, so the chats below go to ours).
    const stranger = await t.app.admin.createAccount({ name: "stranger" });
    await using _other = await connectFakeProvider({
      url: server.url,
      token: await providerToken(t, stranger.id),
      models: ["other/plain"],
    });

    // Earnings: one chat before midnight, one after; `today` is the UTC day of the clock.
    const consumer = await seedAccount(t);
    expect((await postChat(server.url, consumer.apiKey, chatBody(words(200)))).status).toBe(200);
    await t.app.flush();
    const yesterday = (await t.app.admin.getAccount(c.owner.accountId)).earnings_micro_usd;
    // Less than the liveness timeout (15 s), so the machine stays connected.
    c.clock.advance(10_000);
    expect((await postChat(server.url, consumer.apiKey, chatBody(words(100)))).status).toBe(200);
    await t.app.flush();
    const total = (await t.app.admin.getAccount(c.owner.accountId)).earnings_micro_usd;
    expect(yesterday).toBeGreaterThan(0);
    expect(total).toBeGreaterThan(yesterday);

    const me = await send(server, "GET", "/v1/provider/me", { token });
    expect(answer(me)).toEqual({
      status: 200,
      body: {
        account_id: c.owner.accountId,
        token_id: tokenId,
        token_expires_at: null,
        earnings: { total_micro_usd: total, today_micro_usd: total - yesterday },
        balance_micro_usd: total,
        machines: [
          { provider_id: provider.providerId, trust_level: "none", models: [BUILD], active: 0, connected_at: (MIDNIGHT - 5_000) / 1000 },
        ],
      },
    });

    // Revoking the token ends /me for it too.
    await t.app.admin.revokeProviderToken(tokenId);
    expect(answer(await send(server, "GET", "/v1/provider/me", { token }))).toEqual(envelope(401, "authentication_error", "invalid_token"));

    // Nothing secret reached the logs; the decision and the account did.
    const logs = t.logs.join("\n");
    for (const secret of [deviceCode, userCode, userCode.replace("-", ""), token, c.owner.apiKey]) expect(logs).not.toContain(secret);
    expect(t.logs.filter((l) => l.includes("provider device login")).map((l) => JSON.parse(l) as Record<string, unknown>)).toEqual([
      expect.objectContaining({ msg: "provider device login approved", account_id: c.owner.accountId }),
      expect.objectContaining({ msg: "provider device login completed", account_id: c.owner.accountId }),
    ]);
  });

  test("form-encoded bodies (RFC 8628 section 3.1) work at /code and /token", async () => {
    await using c = await setup();
    const started = await send(c.server, "POST", "/v1/provider/device/code", {
      form: new URLSearchParams({ client_id: "umbra-provider", machine_name: "mac mini" }).toString(),
    });
    expect(started.status).toBe(200);
    const { device_code: deviceCode, user_code: userCode } = started.body as Started;
    const tokenForm = new URLSearchParams({ grant_type: GRANT, device_code: deviceCode }).toString();
    expect(answer(await send(c.server, "POST", "/v1/provider/device/token", { form: tokenForm }))).toEqual(oauth("authorization_pending"));
    expect((await c.decide(userCode, "approve")).body).toMatchObject({ machine_name: "mac mini" });
    c.clock.advance(5_000);
    const delivered = await send(c.server, "POST", "/v1/provider/device/token", {
      form: tokenForm,
      headers: { "content-type": "application/x-www-form-urlencoded; charset=UTF-8" },
    });
    expect(delivered.status).toBe(200);
    expect(delivered.body).toMatchObject({ token_type: "Bearer", account_id: c.owner.accountId });
  });

  test("a login that sent no machine name makes an unnamed token", async () => {
    await using c = await setup();
    const unnamed = await c.code({ client_id: "umbra-provider" });
    expect((await c.decide(unnamed.user_code, "approve")).body).toMatchObject({ machine_name: null });
    const delivered = await c.poll(unnamed.device_code);
    expect(delivered.status).toBe(200);
    const { token_id: tokenId } = delivered.body as { token_id: string };
    expect((await c.t.app.admin.listProviderTokens(c.owner.accountId)).data.map((p) => [p.id, p.name])).toEqual([[tokenId, null]]);
  });

  test("approve with a JWT: the token belongs to the JWT's account", async () => {
    const keys = await generateKeyPair("ES256");
    await using c = await setup({
      UMBRA_JWT_PUBLIC_KEY: await exportSPKI(keys.publicKey),
      UMBRA_JWT_ISSUER: ISSUER,
      UMBRA_JWT_AUDIENCE: AUDIENCE,
    });
    const account = await c.t.app.admin.createAccount({ name: "jwt user", jwt_subject: "user-7" });
    const now = Math.floor(T0 / 1000);
    const jwt = await new SignJWT({ iss: ISSUER, aud: AUDIENCE, sub: "user-7", iat: now, exp: now + 300 })
      .setProtectedHeader({ alg: "ES256" })
      .sign(keys.privateKey);
    const started = await c.code();
    expect(answer(await c.decide(started.user_code, "approve", jwt))).toEqual({
      status: 200,
      body: {
        user_code: started.user_code,
        decision: "approve",
        account_id: account.id,
        machine_name: "mac-studio",
        token_expires_in_seconds: null,
      },
    });
    const delivered = await c.poll(started.device_code);
    expect(delivered.body).toMatchObject({ account_id: account.id });
    expect((await c.t.app.admin.listProviderTokens(account.id)).data).toHaveLength(1);
    expect(c.t.logs.join("\n")).not.toContain(jwt);
  });
});

describe("deny, expiry, reuse", () => {
  test("deny: the tool gets access_denied and no token is made", async () => {
    await using c = await setup();
    const started = await c.code({ client_id: "umbra-provider" });
    expect(answer(await c.decide(started.user_code, "deny"))).toEqual({
      status: 200,
      body: {
        user_code: started.user_code,
        decision: "deny",
        account_id: c.owner.accountId,
        machine_name: null,
        token_expires_in_seconds: null,
      },
    });
    expect(answer(await c.poll(started.device_code))).toEqual(oauth("access_denied"));
    c.clock.advance(5_000);
    expect(answer(await c.poll(started.device_code))).toEqual(oauth("access_denied"));
    expect((await c.t.app.admin.listProviderTokens(c.owner.accountId)).data).toEqual([]);
    expect(c.t.logs.some((l) => l.includes("provider device login denied"))).toBe(true);
  });

  test("expiry: after expires_in the tool gets expired_token and approval answers 404", async () => {
    await using c = await setup();
    const started = await c.code();
    c.clock.advance(600_000);
    expect(answer(await c.poll(started.device_code))).toEqual(oauth("expired_token"));
    expect(answer(await c.decide(started.user_code, "approve"))).toEqual(
      envelope(404, "not_found_error", "device_code_not_found", "user_code"),
    );
    expect((await c.t.app.admin.listProviderTokens(c.owner.accountId)).data).toEqual([]);
  });

  test("an approval not collected before expiry lapses", async () => {
    await using c = await setup();
    const started = await c.code();
    expect((await c.decide(started.user_code, "approve")).status).toBe(200);
    c.clock.advance(600_000);
    expect(answer(await c.poll(started.device_code))).toEqual(oauth("expired_token"));
    expect((await c.t.app.admin.listProviderTokens(c.owner.accountId)).data).toEqual([]);
  });

  test("two racing polls of an approved code: exactly one token", async () => {
    await using c = await setup();
    const started = await c.code();
    await c.decide(started.user_code, "approve");
    const answers = await Promise.all([c.poll(started.device_code), c.poll(started.device_code), c.poll(started.device_code)]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 400, 400]);
    expect(answers.filter((a) => a.status === 400).map(answer)).toEqual([oauth("invalid_grant"), oauth("invalid_grant")]);
    expect((await c.t.app.admin.listProviderTokens(c.owner.accountId)).data).toHaveLength(1);
  });
});

describe("who may approve: an account-holder credential only (issue 18, point 4)", () => {
  test("a restricted key (allowlist, spend cap, rpm; no link_machines) can neither preview nor decide; no token is minted", async () => {
    await using c = await setup();
    // The key an account holder hands to a CI job: it must not be able to link a machine to the account.
    const ci = await c.t.app.admin.createKey({
      account_id: c.owner.accountId,
      name: "ci",
      allowed_models: [BUILD],
      spend_cap_micro_usd: 1_000,
      rpm: 5,
    });
    expect(ci.link_machines).toBe(false);

    const started = await c.code();
    const forbidden = envelope(403, "permission_error", "forbidden");
    expect(answer(await c.decide(started.user_code, "approve", ci.key))).toEqual(forbidden);
    expect(answer(await c.decide(started.user_code, "deny", ci.key))).toEqual(forbidden);
    expect(answer(await c.preview(started.user_code, ci.key))).toEqual(forbidden);
    // Refused before the code is looked up: a wrong code gets the same answer, and uses up no budget.
    for (let i = 0; i < 12; i++) expect(answer(await c.decide("BBBB-BBBB", "approve", ci.key))).toEqual(forbidden);
    expect(answer(await c.poll(started.device_code))).toEqual(oauth("authorization_pending"));
    c.clock.advance(600_000);
    expect(answer(await c.poll(started.device_code))).toEqual(oauth("expired_token"));
    expect((await c.t.app.admin.listProviderTokens(c.owner.accountId)).data).toEqual([]);
    expect(c.t.logs.some((l) => l.includes("provider device login approved"))).toBe(false);
  });

  test("a key created with link_machines approves, restrictions or not; the token is the key's account's", async () => {
    await using c = await setup();
    const linker = await c.t.app.admin.createKey({
      account_id: c.owner.accountId,
      allowed_models: [BUILD],
      rpm: 5,
      link_machines: true,
    });
    expect(linker.link_machines).toBe(true);
    const started = await c.code();
    expect(answer(await c.decide(started.user_code, "approve", linker.key))).toEqual({
      status: 200,
      body: {
        user_code: started.user_code,
        decision: "approve",
        account_id: c.owner.accountId,
        machine_name: "mac-studio",
        token_expires_in_seconds: null,
      },
    });
    expect((await c.poll(started.device_code)).body).toMatchObject({ account_id: c.owner.accountId });
    expect((await c.t.app.admin.listProviderTokens(c.owner.accountId)).data).toHaveLength(1);
  });

  test("make dev's demo key may link machines: the README's development login works with it", async () => {
    await using c = await setup();
    const demo = await seedDevelopment(c.t.app);
    expect(await c.t.app.authenticate(`Bearer ${demo.apiKey}`)).toMatchObject({ accountId: demo.accountId, linkMachines: true });
    const started = await c.code();
    expect((await c.preview(started.user_code, demo.apiKey)).status).toBe(200);
    expect((await c.decide(started.user_code, "approve", demo.apiKey)).body).toMatchObject({ account_id: demo.accountId });
    expect((await c.poll(started.device_code)).body).toMatchObject({ account_id: demo.accountId, token_type: "Bearer" });
  });

  test("preview: the machine's name and when the code was requested, before any decision", async () => {
    await using c = await setup();
    const started = await c.code({ client_id: "umbra-provider", machine_name: "<b>studio</b> & co" });
    c.clock.advance(42_000);
    const preview = await c.preview(started.user_code.toLowerCase());
    expect(answer(preview)).toEqual({
      status: 200,
      body: {
        user_code: started.user_code,
        machine_name: "<b>studio</b> & co",
        models: null,
        trust_level: null,
        requested_at: Math.floor(T0 / 1000),
        expires_at: Math.floor(T0 / 1000) + 600,
      },
    });
    expect(preview.headers.get("cache-control")).toBe("no-store");
    // A preview decides nothing.
    expect(answer(await c.poll(started.device_code))).toEqual(oauth("authorization_pending"));
    const unnamed = await c.code({ client_id: "umbra-provider" });
    expect((await c.preview(unnamed.user_code)).body).toMatchObject({ machine_name: null });
    // Once decided, a preview says so.
    await c.decide(started.user_code, "deny");
    expect(answer(await c.preview(started.user_code))).toEqual(envelope(409, "conflict_error", "device_code_already_decided", "user_code"));
  });

  test("preview: the models and trust level the tool reported (JSON array or a form field), bounded", async () => {
    await using c = await setup();
    const reported = { client_id: "umbra-provider", machine_name: "mac", models: ["org/a-4bit", "org/b"], trust_level: "hardware" };
    const started = await c.code(reported);
    expect((await c.preview(started.user_code)).body).toMatchObject({ models: ["org/a-4bit", "org/b"], trust_level: "hardware" });
    const form = await send(c.server, "POST", "/v1/provider/device/code", {
      form: new URLSearchParams({ client_id: "umbra-provider", models: "org/a org/b", trust_level: "none" }).toString(),
    });
    expect((await c.preview((form.body as Started).user_code)).body).toMatchObject({ models: ["org/a", "org/b"], trust_level: "none" });
    const refused = async (fields: Record<string, unknown>, param: string) =>
      expect(
        answer(await send(c.server, "POST", "/v1/provider/device/code", { json: { client_id: "umbra-provider", ...fields } })),
      ).toEqual(envelope(400, "invalid_request_error", "invalid_value", param));
    await refused({ trust_level: "ultimate" }, "trust_level");
    await refused({ models: Array.from({ length: 65 }, (_, i) => `org/m${i}`) }, "models");
    await refused({ models: ["has space"] }, "models");
    await refused({ models: [""] }, "models");
  });

  test("preview: bad and unknown codes; a wrong code counts against the same budget as approvals", async () => {
    await using c = await setup();
    expect(answer(await send(c.server, "GET", "/v1/provider/device/preview", { token: c.owner.apiKey }))).toEqual(
      envelope(400, "invalid_request_error", "missing_field", "user_code"),
    );
    expect(answer(await c.preview("ABCD-EFGH"))).toEqual(envelope(400, "invalid_request_error", "invalid_value", "user_code"));
    expect(answer(await send(c.server, "GET", "/v1/provider/device/preview?user_code=BBBB-BBBB"))).toEqual(
      envelope(401, "authentication_error", "invalid_api_key"),
    );
    for (let i = 0; i < 5; i++) {
      expect(answer(await c.preview("BBBB-BBBB"))).toEqual(envelope(404, "not_found_error", "device_code_not_found", "user_code"));
      expect(answer(await c.decide("BBBB-BBBB", "approve"))).toEqual(
        envelope(404, "not_found_error", "device_code_not_found", "user_code"),
      );
    }
    const started = await c.code();
    expect(answer(await c.preview(started.user_code))).toEqual(envelope(429, "rate_limit_error", "rate_limit_exceeded"));
  });

  test("an approval with a token lifetime: the token expires, is refused at /me and /connect, and its live session is dropped", async () => {
    // Heartbeats every 200 ms: the fleet's sweeper, which ends expired sessions, runs every 100 ms.
    await using c = await setup({ UMBRA_PROVIDER_HEARTBEAT_MS: "200" });
    const started = await c.code();
    const approved = await send(c.server, "POST", "/v1/provider/device/approve", {
      token: c.owner.apiKey,
      json: { user_code: started.user_code, decision: "approve", token_expires_in_seconds: 8 },
    });
    expect(approved.body).toMatchObject({ decision: "approve", token_expires_in_seconds: 8 });
    c.clock.advance(2_000);
    const delivered = await c.poll(started.device_code);
    expect(answer(delivered)).toEqual({
      status: 200,
      body: {
        access_token: expect.stringMatching(/^umbra-pt-/),
        token_type: "Bearer",
        account_id: c.owner.accountId,
        token_id: expect.stringMatching(/^pt_/),
        expires_in: 8,
      },
    });
    const { access_token: token, token_id: tokenId } = delivered.body as { access_token: string; token_id: string };
    const expiresAt = Math.floor(T0 / 1000) + 2 + 8;
    expect((await c.t.app.admin.listProviderTokens(c.owner.accountId)).data).toEqual([
      expect.objectContaining({ id: tokenId, expires_at: expiresAt, revoked_at: null }),
    ]);
    expect((await send(c.server, "GET", "/v1/provider/me", { token })).body).toMatchObject({
      token_id: tokenId,
      token_expires_at: expiresAt,
    });
    await using provider = await connectFakeProvider({ url: c.server.url, token, models: [BUILD] });
    expect(c.t.app.fleet.size).toBe(1);

    // Past the expiry (well within the 15 s liveness timeout): the session ends as for a revoked token.
    c.clock.advance(8_000);
    expect(await provider.closed).toEqual({ code: 4001, reason: "device token expired" });
    await waitFor(() => c.t.app.fleet.size === 0, "the expired session dropped");
    expect(answer(await send(c.server, "GET", "/v1/provider/me", { token }))).toEqual(
      envelope(401, "authentication_error", "invalid_token"),
    );
    const reconnect = await fetch(`${c.server.url}/v1/provider/connect`, {
      headers: { authorization: `Bearer ${token}`, upgrade: "websocket" },
    });
    expect({ status: reconnect.status, body: await reconnect.json() }).toEqual(envelope(401, "authentication_error", "invalid_token"));
  });

  test("token_expires_in_seconds: only with approve, a whole number of seconds from 1 to ten years", async () => {
    await using c = await setup();
    const started = await c.code();
    for (const [decision, value] of [
      ["deny", 60],
      ["approve", 0],
      ["approve", 1.5],
      ["approve", "60"],
      ["approve", 315_360_001],
    ] as const) {
      const r = await send(c.server, "POST", "/v1/provider/device/approve", {
        token: c.owner.apiKey,
        json: { user_code: started.user_code, decision, token_expires_in_seconds: value },
      });
      expect(answer(r)).toEqual(envelope(400, "invalid_request_error", "invalid_value", "token_expires_in_seconds"));
    }
    expect(answer(await c.poll(started.device_code))).toEqual(oauth("authorization_pending"));
  });
});

describe("credentials in the wrong place", () => {
  test("a provider device token cannot approve; a consumer key cannot read /v1/provider/me", async () => {
    await using c = await setup();
    const started = await c.code();
    const deviceToken = await providerToken(c.t, c.owner.accountId);
    expect(answer(await c.decide(started.user_code, "approve", deviceToken))).toEqual(
      envelope(401, "authentication_error", "invalid_api_key"),
    );
    expect(answer(await c.decide(started.user_code, "approve", "sk-umbra-not-a-real-key"))).toEqual(
      envelope(401, "authentication_error", "invalid_api_key"),
    );
    expect(
      answer(await send(c.server, "POST", "/v1/provider/device/approve", { json: { user_code: started.user_code, decision: "approve" } })),
    ).toEqual(envelope(401, "authentication_error", "invalid_api_key"));
    // Still pending: nothing was decided.
    expect(answer(await c.poll(started.device_code))).toEqual(oauth("authorization_pending"));

    for (const token of [c.owner.apiKey, undefined, "umbra-pt-unknown", "garbage"]) {
      expect(answer(await send(c.server, "GET", "/v1/provider/me", token === undefined ? {} : { token }))).toEqual(
        envelope(401, "authentication_error", "invalid_token"),
      );
    }
  });
});

describe("rate limits", () => {
  test("10 codes per minute per address, then 429 with Retry-After in the error envelope", async () => {
    await using c = await setup();
    for (let i = 0; i < 10; i++) await c.code();
    const refused = await send(c.server, "POST", "/v1/provider/device/code", { json: { client_id: "umbra-provider" } });
    expect(answer(refused)).toEqual(envelope(429, "rate_limit_error", "rate_limit_exceeded"));
    expect(refused.headers.get("retry-after")).toBe("6");
    c.clock.advance(6_000);
    await c.code();
  });

  test("10 wrong user codes per minute, then 429 with Retry-After even for the right code", async () => {
    await using c = await setup();
    const started = await c.code();
    for (let i = 0; i < 10; i++) {
      expect(answer(await c.decide("BBBB-BBBB", "approve"))).toEqual(
        envelope(404, "not_found_error", "device_code_not_found", "user_code"),
      );
    }
    const refused = await c.decide(started.user_code, "approve");
    expect(answer(refused)).toEqual(envelope(429, "rate_limit_error", "rate_limit_exceeded"));
    expect(refused.headers.get("retry-after")).toBe("6");
    // The address is blocked for any credential too.
    const other = await seedAccount(c.t, { link_machines: true }, 0);
    expect((await c.decide(started.user_code, "approve", other.apiKey)).status).toBe(429);
    c.clock.advance(6_000);
    expect((await c.decide(started.user_code, "approve")).status).toBe(200);
  });
});

describe("malformed requests get clear errors, never 500", () => {
  const big = JSON.stringify({ client_id: "umbra-provider", pad: "x".repeat(9_000) });
  test.each([
    ["no body", { raw: "" }, envelope(400, "invalid_request_error", "invalid_json")],
    [
      "broken JSON",
      { raw: "{oops", headers: { "content-type": "application/json" } },
      envelope(400, "invalid_request_error", "invalid_json"),
    ],
    ["an array", { json: ["client_id"] }, envelope(400, "invalid_request_error", "invalid_json")],
    ["no client_id", { json: {} }, envelope(400, "invalid_request_error", "missing_field", "client_id")],
    ["another client_id", { json: { client_id: "curl" } }, envelope(400, "invalid_request_error", "invalid_value", "client_id")],
    ["a numeric client_id", { json: { client_id: 7 } }, envelope(400, "invalid_request_error", "invalid_value", "client_id")],
    [
      "an empty machine_name",
      { json: { client_id: "umbra-provider", machine_name: "" } },
      envelope(400, "invalid_request_error", "invalid_value", "machine_name"),
    ],
    [
      "a blank machine_name",
      { json: { client_id: "umbra-provider", machine_name: "   " } },
      envelope(400, "invalid_request_error", "invalid_value", "machine_name"),
    ],
    [
      "a long machine_name",
      { json: { client_id: "umbra-provider", machine_name: "m".repeat(65) } },
      envelope(400, "invalid_request_error", "invalid_value", "machine_name"),
    ],
    [
      "a bidi override",
      { json: { client_id: "umbra-provider", machine_name: "mac\u202Eevil" } },
      envelope(400, "invalid_request_error", "invalid_value", "machine_name"),
    ],
    [
      "a newline",
      { json: { client_id: "umbra-provider", machine_name: "mac\nmini" } },
      envelope(400, "invalid_request_error", "invalid_value", "machine_name"),
    ],
    [
      "a numeric machine_name",
      { json: { client_id: "umbra-provider", machine_name: 5 } },
      envelope(400, "invalid_request_error", "invalid_value", "machine_name"),
    ],
    [
      "a form field twice",
      { form: "client_id=umbra-provider&client_id=umbra-provider" },
      envelope(400, "invalid_request_error", "invalid_value", "client_id"),
    ],
    [
      "a body over 8 KiB",
      { raw: big, headers: { "content-type": "application/json" } },
      envelope(413, "request_too_large", "request_too_large"),
    ],
  ] as const)("POST /code with %s", async (_, options, expected) => {
    await using c = await setup();
    expect(answer(await send(c.server, "POST", "/v1/provider/device/code", options))).toEqual(expected);
  });

  test("a machine_name of 64 characters beyond the BMP is accepted", async () => {
    await using c = await setup();
    expect((await c.code({ client_id: "umbra-provider", machine_name: "🖥".repeat(64) })).user_code).toBeDefined();
  });

  test.each([
    ["no body", { raw: "" }, "invalid_request"],
    ["broken JSON", { raw: "{oops", headers: { "content-type": "application/json" } }, "invalid_request"],
    ["no grant_type", { json: { device_code: "x" } }, "invalid_request"],
    ["a numeric grant_type", { json: { grant_type: 1, device_code: "x" } }, "invalid_request"],
    ["another grant_type", { json: { grant_type: "password", device_code: "x" } }, "unsupported_grant_type"],
    ["no device_code", { json: { grant_type: GRANT } }, "invalid_request"],
    ["a numeric device_code", { json: { grant_type: GRANT, device_code: 12 } }, "invalid_request"],
    ["another client_id", { json: { grant_type: GRANT, device_code: "x", client_id: "curl" } }, "invalid_client"],
    ["an unknown device_code", { json: { grant_type: GRANT, device_code: "x".repeat(43) } }, "invalid_grant"],
    ["a form field twice", { form: `grant_type=${encodeURIComponent(GRANT)}&device_code=a&device_code=b` }, "invalid_request"],
    ["a body over 8 KiB", { raw: big, headers: { "content-type": "application/json" } }, "invalid_request"],
  ] as const)("POST /token with %s -> 400 in OAuth's format", async (_, options, error) => {
    await using c = await setup();
    const r = await send(c.server, "POST", "/v1/provider/device/token", options);
    expect(answer(r)).toEqual(oauth(error));
    expect(r.headers.get("cache-control")).toBe("no-store");
    expect((r.body as { error_description: string }).error_description).toMatch(/^[\x20\x21\x23-\x5B\x5D-\x7E]+$/);
  });

  test.each([
    ["broken JSON", { raw: "{oops" }, envelope(400, "invalid_request_error", "invalid_json")],
    ["no user_code", { json: { decision: "approve" } }, envelope(400, "invalid_request_error", "missing_field", "user_code")],
    ["no decision", { json: { user_code: "BCDF-GHJK" } }, envelope(400, "invalid_request_error", "missing_field", "decision")],
    [
      "another decision",
      { json: { user_code: "BCDF-GHJK", decision: "maybe" } },
      envelope(400, "invalid_request_error", "invalid_value", "decision"),
    ],
    [
      "a numeric user_code",
      { json: { user_code: 12345678, decision: "approve" } },
      envelope(400, "invalid_request_error", "invalid_value", "user_code"),
    ],
    [
      "a user_code with vowels",
      { json: { user_code: "ABCD-EFGH", decision: "approve" } },
      envelope(400, "invalid_request_error", "invalid_value", "user_code"),
    ],
    [
      "a long user_code",
      { json: { user_code: "B".repeat(40), decision: "approve" } },
      envelope(400, "invalid_request_error", "invalid_value", "user_code"),
    ],
    [
      "an unknown field",
      { json: { user_code: "BCDF-GHJK", decision: "approve", account_id: "x" } },
      envelope(400, "invalid_request_error", "unsupported_value", "account_id"),
    ],
  ] as const)("POST /approve with %s", async (_, options, expected) => {
    await using c = await setup();
    expect(answer(await send(c.server, "POST", "/v1/provider/device/approve", { token: c.owner.apiKey, ...options }))).toEqual(expected);
  });
});

describe("GET /device", () => {
  test("a self-contained page whose CSP pins its inline script and style by hash; the query is never echoed", async () => {
    await using c = await setup();
    const r = await fetch(`${c.server.url}/device`);
    const html = await r.text();
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const csp = r.headers.get("content-security-policy") ?? "";
    const hash = (text: string) => `'sha256-${createHash("sha256").update(text).digest("base64")}'`;
    const script = /<script>([\s\S]*?)<\/script>/.exec(html)?.[1] ?? "";
    const style = /<style>([\s\S]*?)<\/style>/.exec(html)?.[1] ?? "";
    expect(csp.split("; ")).toEqual([
      "default-src 'none'",
      `script-src ${hash(script)}`,
      `style-src ${hash(style)}`,
      "connect-src 'self'",
      "form-action 'none'",
      "frame-ancestors 'none'",
      "base-uri 'none'",
    ]);
    expect(script).toContain("/v1/provider/device/approve");
    expect(script).toContain("/v1/provider/device/preview");
    // What the API answers (the machine name is the tool's text) is only ever written as text, never as HTML.
    expect(script).toContain("textContent");
    expect(script).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/);
    expect(html).not.toMatch(/<(link|img|iframe)|src=|https?:\/\//);
    expect({
      frame: r.headers.get("x-frame-options"),
      sniff: r.headers.get("x-content-type-options"),
      referrer: r.headers.get("referrer-policy"),
      cache: r.headers.get("cache-control"),
    }).toEqual({ frame: "DENY", sniff: "nosniff", referrer: "no-referrer", cache: "no-store" });
    const withQuery = await fetch(`${c.server.url}/device?user_code=${encodeURIComponent("<script>alert(1)</script>")}`);
    expect(await withQuery.text()).toBe(html);
  });
});
