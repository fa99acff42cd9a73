/**
 * Console sign-in with OpenID Connect (authorization code + PKCE) against the fake identity provider
 * (test/support/fake-oidc.ts), the coordinator on a real socket: the redirect carries PKCE S256, state,
 * nonce and the public URL's redirect URI; the callback signs the mapped account in; a wrong state,
 * a missing flow cookie, a wrong nonce, audience or issuer, a foreign signing key, an unknown subject
 * and a replayed callback are refused without a session.
 */
import { describe, expect, test } from "bun:test";
import { cookieAttributes, sessionCookie } from "../support/console.ts";
import { type FakeOidc, startFakeOidc } from "../support/fake-oidc.ts";
import { testApp } from "../support/harness.ts";
import { startServer } from "../support/server.ts";

const PUBLIC = "http://127.0.0.1:18081";
const CLIENT_ID = "umbra-console";

async function oidcEnv(options: { clientSecret?: string } = {}) {
  const idp = await startFakeOidc({ clientId: CLIENT_ID, ...options });
  const t = await testApp({
    env: {
      UMBRA_PUBLIC_URL: PUBLIC,
      UMBRA_JWT_ISSUER: idp.issuer,
      UMBRA_JWT_AUDIENCE: "umbra-api",
      UMBRA_JWT_JWKS_URL: `${idp.issuer}/jwks`,
      UMBRA_OIDC_CLIENT_ID: CLIENT_ID,
      ...(options.clientSecret ? { UMBRA_OIDC_CLIENT_SECRET: options.clientSecret } : {}),
    },
  });
  const server = startServer(t);
  const account = await t.app.admin.createAccount({ name: "Grace", jwt_subject: "user-1" });
  return {
    t,
    idp,
    url: server.url,
    accountId: account.id,
    async [Symbol.asyncDispose]() {
      await server[Symbol.asyncDispose]();
      await t[Symbol.asyncDispose]();
      await idp[Symbol.asyncDispose]();
    },
  };
}

/** The reasons of the `console sign-in refused` log lines, in order. */
function refusals(logs: readonly string[]): string[] {
  return logs
    .map((l) => JSON.parse(l) as { msg: string; reason?: string })
    .filter((l) => l.msg === "console sign-in refused")
    .map((l) => l.reason ?? "");
}

interface Flow {
  readonly start: Response;
  /** The flow cookie (name=value). */
  readonly flowCookie: string;
  /** The query of the identity provider's redirect back to the callback. */
  readonly callbackSearch: string;
}

/** Start at the coordinator, follow the identity provider's authorize redirect, stop before the callback. */
async function begin(url: string, idp: FakeOidc): Promise<Flow> {
  const start = await fetch(`${url}/console/auth/oidc/start`, { redirect: "manual" });
  const location = start.headers.get("location") ?? "";
  const flowCookie = (start.headers.getSetCookie().find((c) => c.startsWith("umbra_oidc=")) ?? "").split(";")[0] as string;
  expect(location.startsWith(`${idp.issuer}/authorize?`)).toBe(true);
  const back = await fetch(location, { redirect: "manual" });
  const callback = new URL(back.headers.get("location") ?? "");
  expect(`${callback.origin}${callback.pathname}`).toBe(`${PUBLIC}/console/auth/oidc/callback`);
  return { start, flowCookie, callbackSearch: callback.search };
}

function callback(url: string, flow: Pick<Flow, "callbackSearch">, cookie?: string): Promise<Response> {
  return fetch(`${url}/console/auth/oidc/callback${flow.callbackSearch}`, {
    redirect: "manual",
    ...(cookie ? { headers: { cookie } } : {}),
  });
}

describe("OpenID Connect sign-in", () => {
  test("start redirects with PKCE S256, state, nonce and the redirect URI; the callback signs the account in", async () => {
    await using e = await oidcEnv();
    const flow = await begin(e.url, e.idp);
    const q = e.idp.lastAuthorize as URLSearchParams;
    expect({
      status: flow.start.status,
      client_id: q.get("client_id"),
      redirect_uri: q.get("redirect_uri"),
      response_type: q.get("response_type"),
      scope: q.get("scope"),
      method: q.get("code_challenge_method"),
      challenge: /^[A-Za-z0-9_-]{43}$/.test(q.get("code_challenge") ?? ""),
      state: (q.get("state") ?? "").length >= 16,
      nonce: (q.get("nonce") ?? "").length >= 16,
      flowCookie: cookieAttributes(flow.start.headers.getSetCookie()[0] ?? ""),
    }).toEqual({
      status: 302,
      client_id: CLIENT_ID,
      redirect_uri: `${PUBLIC}/console/auth/oidc/callback`,
      response_type: "code",
      scope: "openid",
      method: "S256",
      challenge: true,
      state: true,
      nonce: true,
      flowCookie: ["umbra_oidc", "path=/console/auth/oidc/callback", "max-age=600", "httponly", "samesite=lax"],
    });
    const done = await callback(e.url, flow, flow.flowCookie);
    expect([done.status, done.headers.get("location")]).toEqual([303, "/console/"]);
    const session = sessionCookie(done)?.split(";")[0] ?? "";
    const me = await fetch(`${e.url}/console/api/session`, { headers: { cookie: session } });
    expect(((await me.json()) as { account: unknown }).account).toEqual({ id: e.accountId, name: "Grace" });
    // The flow cookie is cleared whatever the outcome; the code cannot be redeemed twice.
    expect(done.headers.getSetCookie().some((c) => c.startsWith("umbra_oidc=;"))).toBe(true);
    const replay = await callback(e.url, flow, flow.flowCookie);
    expect([replay.status, sessionCookie(replay)]).toEqual([400, undefined]);
    expect(e.idp.refusals).toEqual(["code"]);
  });

  test("a confidential client sends its secret", async () => {
    await using e = await oidcEnv({ clientSecret: "s3cret-value" });
    const flow = await begin(e.url, e.idp);
    expect((await callback(e.url, flow, flow.flowCookie)).status).toBe(303);
    expect(e.idp.refusals).toEqual([]);
  });

  test("refused without a session: no flow cookie, another flow's cookie, a tampered state", async () => {
    await using e = await oidcEnv();
    const a = await begin(e.url, e.idp);
    const b = await begin(e.url, e.idp);
    const tampered = { callbackSearch: a.callbackSearch.replace(/state=([^&]+)/, "state=$1x") };
    for (const [flow, cookie] of [
      [a, undefined],
      [a, b.flowCookie],
      [tampered, a.flowCookie],
      [a, "umbra_oidc=a.b.c"],
    ] as const) {
      const r = await callback(e.url, flow, cookie);
      expect([r.status, sessionCookie(r)]).toEqual([400, undefined]);
    }
    expect(refusals(e.t.logs)).toEqual(["flow", "callback", "callback", "flow"]);
    // The right pair still works (nothing above redeemed its code).
    expect((await callback(e.url, a, a.flowCookie)).status).toBe(303);
  });

  test.each([
    ["a wrong nonce", { nonce: "another-nonce-value" }],
    ["no nonce", { nonce: undefined }],
    ["a wrong audience", { aud: "someone-else" }],
    ["the API audience instead of the client id", { aud: "umbra-api" }],
    ["a wrong issuer", { iss: "https://evil.example" }],
    ["an expired token", { exp: Math.floor(Date.now() / 1000) - 3600 }],
  ])("an ID token with %s is refused (by the token checks)", async (_, claims) => {
    await using e = await oidcEnv();
    e.idp.idToken = claims;
    const flow = await begin(e.url, e.idp);
    const r = await callback(e.url, flow, flow.flowCookie);
    expect([r.status, sessionCookie(r), refusals(e.t.logs)]).toEqual([400, undefined, ["token"]]);
  });

  test("an ID token signed by a key the issuer does not publish is refused", async () => {
    await using e = await oidcEnv();
    e.idp.signWithOtherKey = true;
    const flow = await begin(e.url, e.idp);
    const r = await callback(e.url, flow, flow.flowCookie);
    expect([r.status, sessionCookie(r), refusals(e.t.logs)]).toEqual([400, undefined, ["id_token"]]);
  });

  test("a subject linked to no account is refused, saying so", async () => {
    await using e = await oidcEnv();
    e.idp.subject = "stranger";
    const flow = await begin(e.url, e.idp);
    const r = await callback(e.url, flow, flow.flowCookie);
    expect([r.status, sessionCookie(r), (await r.text()).includes("No account is linked to this identity")]).toEqual([
      400,
      undefined,
      true,
    ]);
  });

  test("an identity provider that cannot be reached: a 503 page, logged as `provider`", async () => {
    await using t = await testApp({
      env: {
        UMBRA_PUBLIC_URL: PUBLIC,
        UMBRA_JWT_ISSUER: "http://127.0.0.1:9",
        UMBRA_JWT_AUDIENCE: "umbra-api",
        UMBRA_JWT_JWKS_URL: "http://127.0.0.1:9/jwks",
        UMBRA_OIDC_CLIENT_ID: CLIENT_ID,
      },
    });
    const r = await t.app.http.handle(new Request("http://localhost/console/auth/oidc/start"));
    expect([r.status, r.headers.get("content-type"), refusals(t.logs)]).toEqual([503, "text/html; charset=utf-8", ["provider"]]);
  });

  test("the logs name the account and the reason, never a code, state, nonce or cookie", async () => {
    await using e = await oidcEnv();
    const flow = await begin(e.url, e.idp);
    const done = await callback(e.url, flow, flow.flowCookie);
    const secrets = [
      new URLSearchParams(flow.callbackSearch).get("code") ?? "",
      new URLSearchParams(flow.callbackSearch).get("state") ?? "",
      flow.flowCookie.slice("umbra_oidc=".length),
      (sessionCookie(done) ?? "").split(";")[0]?.slice("umbra_session=".length) ?? "",
    ];
    const logs = e.t.logs.join("\n");
    expect(logs).toContain('"reason":"oidc"');
    expect(secrets.filter((x) => x.length > 0 && logs.includes(x))).toEqual([]);
  });
});
