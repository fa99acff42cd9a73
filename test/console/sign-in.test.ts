/**
 * Console sign-in by link and console sessions, on the real app behind a real socket (issue 22 points 2
 * and 4): the page and its headers, cookie flags (loopback http or not), CSRF on state-changing routes,
 * a link used once and refused after 15 minutes, no session fixation, sign-out and sign-out everywhere,
 * idle and absolute expiry with renewal at most once a minute, and no secret in the logs.
 */
import { describe, expect, test } from "bun:test";
import { SIGN_IN_LINK_TTL_MS } from "../../src/auth/sign-in-links.ts";
import { CONSOLE_CSP } from "../../src/console/assets.ts";
import { ConsoleSessions, SESSION_ABSOLUTE_MS, SESSION_IDLE_MS } from "../../src/console/sessions.ts";
import { createApp } from "../../src/coordinator/app.ts";
import { cookieAttributes, linkToken, postSignIn, type SignedIn, sessionCookie, signIn } from "../support/console.ts";
import { testApp } from "../support/harness.ts";
import { recordingLogger } from "../support/logs.ts";
import { startServer } from "../support/server.ts";

const PUBLIC = "http://127.0.0.1:18080";

/** The app on the test's clock, on a socket, with one account; `now` moves the clock. */
async function consoleEnv(env: Record<string, string> = { UMBRA_PUBLIC_URL: PUBLIC }) {
  const clock = { t: Date.now() };
  const t = await testApp({ env, clock: { now: () => clock.t } });
  const server = startServer(t);
  const account = await t.app.admin.createAccount({ name: "Ada" });
  return {
    t,
    url: server.url,
    accountId: account.id,
    clock,
    async [Symbol.asyncDispose]() {
      await server[Symbol.asyncDispose]();
      await t[Symbol.asyncDispose]();
    },
  };
}

const get = (base: string, path: string, cookie?: string) =>
  fetch(`${base}${path}`, { redirect: "manual", ...(cookie ? { headers: { cookie } } : {}) });
const post = (base: string, path: string, s: Pick<SignedIn, "cookie">, csrf?: string) =>
  fetch(`${base}${path}`, { method: "POST", headers: { cookie: s.cookie, ...(csrf === undefined ? {} : { "x-csrf-token": csrf }) } });

async function session(base: string, s: Pick<SignedIn, "cookie">) {
  const r = await get(base, "/console/api/session", s.cookie);
  return { status: r.status, cache: r.headers.get("cache-control"), body: (await r.json()) as Record<string, unknown> };
}

async function csrfOf(base: string, s: SignedIn): Promise<string> {
  return (await session(base, s)).body.csrf_token as string;
}

describe("sign-in by link", () => {
  test("GET shows a static form (no script) with the CSP, no-store and no referrer", async () => {
    await using e = await consoleEnv();
    const token = await linkToken(e.t, e.accountId);
    const r = await get(e.url, `/console/sign-in?token=${token}`);
    const html = await r.text();
    expect({
      status: r.status,
      type: r.headers.get("content-type"),
      csp: r.headers.get("content-security-policy"),
      cache: r.headers.get("cache-control"),
      referrer: r.headers.get("referrer-policy"),
      script: /<script/i.test(html),
      form: html.includes('<form method="post" action="/console/sign-in">') && html.includes(`value="${token}"`),
    }).toEqual({
      status: 200,
      type: "text/html; charset=utf-8",
      csp: CONSOLE_CSP,
      cache: "no-store",
      referrer: "no-referrer",
      script: false,
      form: true,
    });
    // Showing the page does not consume the link (a link preview must not burn it).
    expect((await postSignIn(e.url, token)).status).toBe(303);
  });

  test("POST signs in: 303 to /console/, cookie HttpOnly, SameSite=Lax, Path=/, not Secure on loopback http", async () => {
    await using e = await consoleEnv();
    const s = await signIn(e.url, e.t, e.accountId);
    expect([s.response.status, s.response.headers.get("location")]).toEqual([303, "/console/"]);
    expect(cookieAttributes(s.setCookie)).toEqual([
      "umbra_session",
      "path=/",
      `max-age=${SESSION_ABSOLUTE_MS / 1000}`,
      "httponly",
      "samesite=lax",
    ]);
    expect(s.cookie).toMatch(/^umbra_session=[A-Za-z0-9_-]{43}$/);
    const now = e.clock.t;
    expect(await session(e.url, s)).toEqual({
      status: 200,
      cache: "no-store",
      body: {
        account: { id: e.accountId, name: "Ada" },
        csrf_token: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
        expires_at: now + SESSION_ABSOLUTE_MS,
        idle_expires_at: now + SESSION_IDLE_MS,
      },
    });
  });

  test.each([
    ["an https public URL", "https://console.example.com"],
    ["an http public URL off loopback (development mode allows it)", "http://console.example.com"],
  ])("the cookie is Secure with %s", async (_, publicUrl) => {
    await using e = await consoleEnv({ UMBRA_PUBLIC_URL: publicUrl });
    const s = await signIn(e.url, e.t, e.accountId);
    expect(cookieAttributes(s.setCookie)).toEqual([
      "umbra_session",
      "path=/",
      `max-age=${SESSION_ABSOLUTE_MS / 1000}`,
      "httponly",
      "samesite=lax",
      "secure",
    ]);
  });

  test("without a public URL no link is made (503), and a session's cookie would be Secure", async () => {
    await using e = await consoleEnv({ UMBRA_LISTEN: "127.0.0.1:0" });
    const r = await e.t.admin("POST", `/accounts/${e.accountId}/sign-in-links`);
    expect([r.status, (r.body as { error: { code: string } }).error.code]).toEqual([503, "service_unavailable"]);
    const made = await new ConsoleSessions({ store: e.t.store, now: () => e.clock.t, publicUrl: undefined }).create(e.accountId);
    expect(cookieAttributes(made?.setCookie ?? "")).toContain("secure");
  });

  test("a link signs in once: the second use is a 400 page, without a cookie", async () => {
    await using e = await consoleEnv();
    const token = await linkToken(e.t, e.accountId);
    expect((await postSignIn(e.url, token)).status).toBe(303);
    const again = await postSignIn(e.url, token);
    expect([again.status, sessionCookie(again), (await again.text()).includes("already used, or it has expired")]).toEqual([
      400,
      undefined,
      true,
    ]);
  });

  test("two concurrent uses of one link: exactly one session", async () => {
    await using e = await consoleEnv();
    const token = await linkToken(e.t, e.accountId);
    const answers = await Promise.all(Array.from({ length: 8 }, () => postSignIn(e.url, token)));
    expect(answers.map((r) => r.status).sort()).toEqual([303, 400, 400, 400, 400, 400, 400, 400]);
  });

  test("a link is valid 15 minutes: refused at its expiry, accepted just before", async () => {
    await using e = await consoleEnv();
    const late = await linkToken(e.t, e.accountId);
    const early = await linkToken(e.t, e.accountId);
    e.clock.t += SIGN_IN_LINK_TTL_MS - 1;
    expect((await postSignIn(e.url, early)).status).toBe(303);
    e.clock.t += 1;
    const r = await postSignIn(e.url, late);
    expect([r.status, sessionCookie(r)]).toEqual([400, undefined]);
  });

  test("malformed, unknown and missing tokens are refused the same way", async () => {
    await using e = await consoleEnv();
    for (const token of ["", "short", "x".repeat(43), "<script>alert(1)</script>"]) {
      const r = await postSignIn(e.url, token);
      expect([r.status, sessionCookie(r)]).toEqual([400, undefined]);
    }
    const page = await get(e.url, "/console/sign-in?token=%3Cscript%3E");
    expect([page.status, /<script/i.test(await page.text())]).toEqual([400, false]);
  });

  test("a cross-site POST is refused (login CSRF)", async () => {
    await using e = await consoleEnv();
    const token = await linkToken(e.t, e.accountId);
    const r = await fetch(`${e.url}/console/sign-in`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "cross-site" },
      body: `token=${token}`,
      redirect: "manual",
    });
    expect([r.status, sessionCookie(r)]).toEqual([403, undefined]);
    expect((await postSignIn(e.url, token)).status).toBe(303);
  });
});

describe("sessions", () => {
  test("no fixation: a presented cookie is never kept, and a presented live session ends", async () => {
    await using e = await consoleEnv();
    const planted = `umbra_session=${"A".repeat(43)}`;
    const s1 = await signIn(e.url, e.t, e.accountId, planted);
    expect(s1.cookie).not.toBe(planted);
    const s2 = await signIn(e.url, e.t, e.accountId, s1.cookie);
    expect(s2.cookie).not.toBe(s1.cookie);
    expect([(await session(e.url, s1)).status, (await session(e.url, s2)).status]).toEqual([401, 200]);
  });

  test("no cookie, a malformed or unknown cookie: 401 invalid_session with no-store", async () => {
    await using e = await consoleEnv();
    for (const cookie of [undefined, "umbra_session=", "umbra_session=nope", `umbra_session=${"b".repeat(43)}`, "other=1"]) {
      const r = await get(e.url, "/console/api/session", cookie);
      expect([r.status, r.headers.get("cache-control"), ((await r.json()) as { error: { code: string } }).error.code]).toEqual([
        401,
        "no-store",
        "invalid_session",
      ]);
    }
  });

  test("CSRF: sign-out without or with a wrong x-csrf-token is 403 csrf_failed; with it, 204", async () => {
    await using e = await consoleEnv();
    const s = await signIn(e.url, e.t, e.accountId);
    const other = await signIn(e.url, e.t, e.accountId);
    const csrf = await csrfOf(e.url, s);
    for (const path of ["/console/api/sign-out", "/console/api/sign-out-everywhere"]) {
      for (const wrong of [undefined, "", "x", await csrfOf(e.url, other), `${csrf}x`]) {
        const r = await post(e.url, path, s, wrong);
        expect([r.status, r.headers.get("cache-control"), ((await r.json()) as { error: { code: string } }).error]).toEqual([
          403,
          "no-store",
          expect.objectContaining({ code: "csrf_failed", type: "permission_error" }),
        ]);
      }
    }
    expect((await session(e.url, s)).status).toBe(200);
    const out = await post(e.url, "/console/api/sign-out", s, csrf);
    expect([out.status, cookieAttributes(out.headers.get("set-cookie") ?? "")]).toEqual([
      204,
      ["umbra_session", "path=/", "max-age=0", "httponly", "samesite=lax"],
    ]);
    expect([(await session(e.url, s)).status, (await session(e.url, other)).status]).toEqual([401, 200]);
  });

  test("any state-changing /console/api/ request without x-csrf-token is 403 before routing", async () => {
    await using e = await consoleEnv();
    const s = await signIn(e.url, e.t, e.accountId);
    for (const [method, path] of [
      ["POST", "/console/api/keys"],
      ["DELETE", "/console/api/keys/key_1"],
      ["PUT", "/console/api/anything"],
      ["PATCH", "/console/api/anything"],
    ] as const) {
      const r = await fetch(`${e.url}${path}`, { method, headers: { cookie: s.cookie } });
      expect([method, r.status, r.headers.get("cache-control"), ((await r.json()) as { error: { code: string } }).error.code]).toEqual([
        method,
        403,
        "no-store",
        "csrf_failed",
      ]);
    }
    // With a header the route decides (here: no such route).
    const routed = await fetch(`${e.url}/console/api/anything`, { method: "POST", headers: { cookie: s.cookie, "x-csrf-token": "x" } });
    expect(routed.status).toBe(404);
  });

  test("sign-out everywhere ends every session of the account, and only of that account", async () => {
    await using e = await consoleEnv();
    const b = await e.t.app.admin.createAccount({ name: "Bob" });
    const [a1, a2, a3, b1] = [
      await signIn(e.url, e.t, e.accountId),
      await signIn(e.url, e.t, e.accountId),
      await signIn(e.url, e.t, e.accountId),
      await signIn(e.url, e.t, b.id),
    ];
    expect((await post(e.url, "/console/api/sign-out-everywhere", a1, await csrfOf(e.url, a1))).status).toBe(204);
    const statuses = await Promise.all([a1, a2, a3, b1].map(async (s) => (await session(e.url, s)).status));
    expect(statuses).toEqual([401, 401, 401, 200]);
  });

  test("idle expiry: refused 2 hours after last use; each use renews, at most once a minute", async () => {
    await using e = await consoleEnv();
    const s = await signIn(e.url, e.t, e.accountId);
    const start = e.clock.t;
    e.clock.t += 30_000;
    expect((await session(e.url, s)).body.idle_expires_at).toBe(start + SESSION_IDLE_MS);
    e.clock.t += 31_000;
    expect((await session(e.url, s)).body.idle_expires_at).toBe(e.clock.t + SESSION_IDLE_MS);
    e.clock.t += SESSION_IDLE_MS - 1;
    expect((await session(e.url, s)).status).toBe(200);
    e.clock.t += SESSION_IDLE_MS;
    expect((await session(e.url, s)).status).toBe(401);
    // Refused once is gone: the row was deleted.
    expect(await e.t.store.consoleSessions.sweep(e.clock.t + SESSION_ABSOLUTE_MS)).toBe(0);
  });

  test("absolute expiry: refused 12 hours after sign-in however often it is used", async () => {
    await using e = await consoleEnv();
    const s = await signIn(e.url, e.t, e.accountId);
    const end = e.clock.t + SESSION_ABSOLUTE_MS;
    while (e.clock.t + SESSION_IDLE_MS / 2 < end) {
      e.clock.t += SESSION_IDLE_MS / 2;
      expect((await session(e.url, s)).status).toBe(200);
    }
    expect((await session(e.url, s)).body.idle_expires_at).toBe(end);
    e.clock.t = end;
    expect((await session(e.url, s)).status).toBe(401);
  });

  test("another coordinator on the same database accepts the session and its CSRF token (replicas)", async () => {
    await using e = await consoleEnv();
    const s = await signIn(e.url, e.t, e.accountId);
    const csrf = await csrfOf(e.url, s);
    const other = createApp({ config: e.t.config, store: e.t.store, clock: { now: () => e.clock.t }, logger: recordingLogger([]) });
    try {
      const ask = (method: string, path: string, headers: Record<string, string>) =>
        other.http.handle(new Request(`http://localhost${path}`, { method, headers: { cookie: s.cookie, ...headers } }));
      const seen = (await (await ask("GET", "/console/api/session", {})).json()) as { csrf_token: string };
      expect(seen.csrf_token).toBe(csrf);
      expect((await ask("POST", "/console/api/sign-out", { "x-csrf-token": csrf })).status).toBe(204);
      expect((await session(e.url, s)).status).toBe(401);
    } finally {
      other.close();
    }
  });

  test("every /console/ answer has the CSP; /console/api/ answers are no-store, errors included", async () => {
    await using e = await consoleEnv();
    for (const path of ["/console/api/session", "/console/api/nothing-here", "/console/sign-in", "/console/auth/oidc/start"]) {
      const r = await get(e.url, path);
      expect([path, r.headers.get("content-security-policy")]).toEqual([path, CONSOLE_CSP]);
      if (path.startsWith("/console/api/")) expect(r.headers.get("cache-control")).toBe("no-store");
    }
    // OpenID Connect is off here: its routes are 404.
    expect((await get(e.url, "/console/auth/oidc/start")).status).toBe(404);
  });
});

test("no session id, link token, CSRF token or cookie ever reaches the logs", async () => {
  await using e = await consoleEnv();
  const secrets: string[] = [];
  const token = await linkToken(e.t, e.accountId);
  secrets.push(token);
  await get(e.url, `/console/sign-in?token=${token}`);
  const s = await signIn(e.url, e.t, e.accountId);
  const r = await postSignIn(e.url, token);
  expect(r.status).toBe(303);
  const s2: SignedIn = { cookie: (sessionCookie(r) ?? "").split(";")[0] as string, setCookie: sessionCookie(r) ?? "", response: r };
  await postSignIn(e.url, token);
  for (const x of [s, s2]) {
    const csrf = await csrfOf(e.url, x);
    secrets.push(x.cookie.slice("umbra_session=".length), csrf, x.setCookie);
    await post(e.url, "/console/api/sign-out", x);
  }
  await post(e.url, "/console/api/sign-out-everywhere", s2, await csrfOf(e.url, s2));
  e.clock.t += SIGN_IN_LINK_TTL_MS;
  await postSignIn(e.url, await linkToken(e.t, e.accountId));
  const logs = e.t.logs.join("\n");
  expect(logs).toContain("console sign-in");
  expect(secrets.filter((x) => x.length > 0 && logs.includes(x))).toEqual([]);
});
