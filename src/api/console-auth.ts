/**
 * The console's sign-in and session routes (issue 22; docs/api.md "Console sign-in"):
 *
 *   GET  /console/sign-in?token=T            static page (no script) whose form POSTs the token
 *   POST /console/sign-in                    form field `token`: consumes the link -> new session, 303 /console/
 *   GET  /console/auth/oidc/start            302 to the identity provider (404 when OIDC is off)
 *   GET  /console/auth/oidc/callback         checks the answer -> new session, 303 /console/
 *   GET  /console/api/session                session -> account, CSRF token, expiries
 *   POST /console/api/sign-out               session + CSRF -> 204, this session ended
 *   POST /console/api/sign-out-everywhere    session + CSRF -> 204, every session of the account ended
 *
 * Sign-in never keeps a presented cookie (a fresh id; the presented session is ended). Pages: the CSP,
 * `no-store`, `Referrer-Policy: no-referrer` (the token is in the URL); a cross-site POST is refused.
 */
import { Elysia } from "elysia";
import { consumeSignInLink, isSignInToken, SIGN_IN_PATH } from "../auth/sign-in-links.ts";
import { CONSOLE_CSP, CONSOLE_HEADERS } from "../console/assets.ts";
import type { ConsoleOidc } from "../console/oidc.ts";
import { OIDC_CALLBACK_PATH, OIDC_START_PATH, OidcRefused } from "../console/oidc.ts";
import { type ConsoleSessions, CSRF_HEADER } from "../console/sessions.ts";
import { Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import type { Store } from "../store/types.ts";
import { readBody } from "./body.ts";
import { errorResponse } from "./errors.ts";

/**
 * Every /console answer, errors and refusals included: the console's security headers (CSP where the
 * route set none, nosniff, no-referrer); `no-store` on every /console/api/ answer.
 */
export function applyConsoleHeaders(url: string, response: Response): Response {
  if (!url.includes("/console")) return response;
  const pathname = new URL(url).pathname;
  if (pathname !== "/console" && !pathname.startsWith("/console/")) return response;
  // A copy of the headers: a response's own may be immutable (one passed through from a fetch).
  const headers = new Headers(response.headers);
  for (const [name, value] of Object.entries(CONSOLE_HEADERS)) if (!headers.has(name)) headers.set(name, value);
  if (pathname.startsWith("/console/api/")) headers.set("cache-control", "no-store");
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * The safety net under every state-changing /console/api/ route: a request without any `x-csrf-token`
 * is refused (403 `csrf_failed`) before routing, so a route that forgot `requireCsrf` still cannot be
 * driven by a cross-site form (which cannot set the header). Each route still checks the value.
 */
export function refuseWithoutCsrfHeader(request: Request): Response | undefined {
  if (SAFE_METHODS.has(request.method) || !request.url.includes("/console/api/")) return undefined;
  if (!new URL(request.url).pathname.startsWith("/console/api/") || request.headers.has(CSRF_HEADER)) return undefined;
  const refused = errorResponse(
    Errors.csrfFailed(`this request needs the session's CSRF token in '${CSRF_HEADER}' (GET /console/api/session)`),
  );
  return applyConsoleHeaders(request.url, refused);
}

export interface ConsoleAuthDeps {
  readonly sessions: ConsoleSessions;
  /** Absent: OpenID Connect sign-in is off. */
  readonly oidc?: ConsoleOidc;
  readonly store: Pick<Store, "accounts" | "signInLinks" | "consoleSessions">;
  /** Unix ms. */
  readonly now: () => number;
  readonly logger: Logger;
  readonly bodyTimeoutMs: number;
}

const FORM_LIMIT = 4096;

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] as string);

/** A static page: no script, no inline style (the CSP allows neither). */
function page(status: number, title: string, body: string, extra: Record<string, string> = {}): Response {
  const html = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><link rel="icon" href="data:,"><title>${escapeHtml(title)} · Umbra console</title></head>
<body><main><h1>${escapeHtml(title)}</h1>
${body}
</main></body></html>
`;
  return new Response(html, {
    status,
    headers: {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      "content-security-policy": CONSOLE_CSP,
      "referrer-policy": "no-referrer",
      "x-content-type-options": "nosniff",
      ...extra,
    },
  });
}

const ASK_OPERATOR = '<p>Ask your operator for a new sign-in link, or sign in from <a href="/console/">the console</a>.</p>';

function signInForm(token: string): Response {
  return page(
    200,
    "Sign in to the Umbra console",
    `<p>This single-use link signs you in to your account's console. It is valid for 15 minutes.</p>
<form method="post" action="${SIGN_IN_PATH}"><input type="hidden" name="token" value="${escapeHtml(token)}">
<button type="submit">Sign in</button></form>`,
  );
}

/** 303 to the console with the new session's cookie (and any other cookie to clear). */
function signedIn(cookies: readonly string[]): Response {
  const headers = new Headers({ location: "/console/", "cache-control": "no-store", "referrer-policy": "no-referrer" });
  for (const c of cookies) headers.append("set-cookie", c);
  return new Response(null, { status: 303, headers });
}

export function consoleAuthRoutes(deps: ConsoleAuthDeps) {
  const { sessions, oidc, logger } = deps;
  /** A new session for the account, after ending the one the browser presented (if any): no fixation. */
  const newSession = async (request: Request, accountId: string, method: "link" | "oidc", clear: readonly string[] = []) => {
    await sessions.endPresented(request);
    const made = await sessions.create(accountId);
    if (!made) return page(400, "Sign-in failed", ASK_OPERATOR, Object.fromEntries(clear.map((c) => ["set-cookie", c])));
    logger.info("console sign-in", { account_id: accountId, reason: method });
    return signedIn([made.setCookie, ...clear]);
  };

  return new Elysia({ name: "console-auth" })
    .get(SIGN_IN_PATH, ({ query }) => {
      const token = typeof query.token === "string" ? query.token : "";
      if (!isSignInToken(token)) return page(400, "No sign-in link", `<p>This address does not hold a sign-in link.</p>${ASK_OPERATOR}`);
      return signInForm(token);
    })
    .post(
      SIGN_IN_PATH,
      async ({ request }) => {
        if (request.headers.get("sec-fetch-site") === "cross-site") {
          logger.info("console sign-in refused", { reason: "cross-site" });
          return page(
            403,
            "Sign-in refused",
            `<p>Sign-in links must be opened directly, not submitted by another site.</p>${ASK_OPERATOR}`,
          );
        }
        const bytes = await readBody(request, { maxBytes: FORM_LIMIT, timeoutMs: deps.bodyTimeoutMs });
        const token = new URLSearchParams(new TextDecoder().decode(bytes)).get("token") ?? "";
        const accountId = await consumeSignInLink(deps.store, token, deps.now());
        if (accountId === undefined) {
          logger.info("console sign-in refused", { reason: "link used, expired or unknown" });
          return page(400, "This sign-in link cannot be used", `<p>It was already used, or it has expired.</p>${ASK_OPERATOR}`);
        }
        return newSession(request, accountId, "link");
      },
      { parse: "none" },
    )
    .get(OIDC_START_PATH, async () => {
      if (!oidc) throw Errors.notFound("OpenID Connect sign-in is not configured");
      try {
        const { location, setCookie } = await oidc.start();
        return new Response(null, { status: 302, headers: { location, "set-cookie": setCookie, "cache-control": "no-store" } });
      } catch (e) {
        logger.warn("console sign-in refused", { reason: e instanceof OidcRefused ? e.reason : "provider" });
        return page(503, "Sign-in unavailable", "<p>The identity provider cannot be reached right now. Try again shortly.</p>");
      }
    })
    .get(OIDC_CALLBACK_PATH, async ({ request }) => {
      if (!oidc) throw Errors.notFound("OpenID Connect sign-in is not configured");
      const clear = oidc.clearFlowCookie();
      let accountId: string;
      try {
        accountId = await oidc.finish(new URL(request.url).search, request.headers.get("cookie"));
      } catch (e) {
        const reason = e instanceof OidcRefused ? e.reason : "provider";
        logger.info("console sign-in refused", { reason });
        const text =
          reason === "account"
            ? "<p>No account is linked to this identity. Ask your operator to link it.</p>"
            : `<p>The sign-in did not complete. <a href="${OIDC_START_PATH}">Try again</a>.</p>`;
        return page(400, "Sign-in failed", text, { "set-cookie": clear });
      }
      return newSession(request, accountId, "oidc", [clear]);
    })
    .get("/console/api/session", async ({ request }) => {
      const session = await sessions.authenticate(request);
      const account = await deps.store.accounts.get(session.accountId);
      if (!account) throw Errors.invalidSession("no console session: sign in again");
      return {
        account: { id: account.id, name: account.name },
        csrf_token: session.csrfToken,
        expires_at: session.expiresAt,
        idle_expires_at: session.idleExpiresAt,
      };
    })
    .post(
      "/console/api/sign-out",
      async ({ request }) => {
        const session = await sessions.authenticate(request);
        sessions.requireCsrf(request, session);
        await sessions.signOut(session);
        return new Response(null, { status: 204, headers: { "set-cookie": sessions.clearCookie() } });
      },
      { parse: "none" },
    )
    .post(
      "/console/api/sign-out-everywhere",
      async ({ request }) => {
        const session = await sessions.authenticate(request);
        sessions.requireCsrf(request, session);
        const count = await sessions.signOutEverywhere(session);
        logger.info("console sessions ended", { account_id: session.accountId, count });
        return new Response(null, { status: 204, headers: { "set-cookie": sessions.clearCookie() } });
      },
      { parse: "none" },
    );
}
