/**
 * Provider device login (OAuth 2.0 Device Authorization Grant, RFC 8628) and the provider's self view
 * (GET /v1/provider/me): the routes of docs/api.md, "Provider device login", over the state in
 * src/auth/device-flow.ts. POST /v1/provider/device/token answers and fails in OAuth's format (RFC 6749
 * section 5), never the consumer envelope; the other routes use the envelope.
 *
 * Account-holder auth (preview, approve): a JWT, or an API key created with `link_machines`; any other
 * key is 403 before the code is even looked up (requireLinkMachines). The approval page (GET /device) is
 * static, pins its script and style by hash in the CSP, and writes what the API answers (the machine name
 * the tool sent) with textContent only, never as HTML. Codes and tokens are never logged; log lines
 * carry the account id and the decision only.
 */
import { createHash } from "node:crypto";
import { Elysia } from "elysia";
import { type AdminService, MAX_PROVIDER_TOKEN_LIFETIME_SECONDS } from "../admin/admin-service.ts";
import { type Authenticator, type Principal, requireLinkMachines } from "../auth/authenticator.ts";
import type { DeviceFlow } from "../auth/device-flow.ts";
import { reportedMachine } from "../auth/device-report.ts";
import { ApiError, Errors } from "../errors/api-error.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { Logger } from "../observability/logger.ts";
import type { ProviderTokenRecord, Store } from "../store/types.ts";
import { type JsonObject, objectBody, optionalInt, optionalString, requiredString } from "../validation/fields.ts";
import { type BodyLimits, parseJson, readBody } from "./body.ts";

export const CLIENT_ID = "umbra-provider";
const DEVICE_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code";
/** Every body here is a few fields. */
const BODY_LIMIT = 8 * 1024;
const NO_STORE = { "cache-control": "no-store", pragma: "no-cache" } as const;
const DAY_MS = 86_400_000;

export interface DeviceDeps {
  readonly deviceFlow: DeviceFlow;
  readonly admin: AdminService;
  readonly authenticate: Authenticator;
  /** The provider device-token check (401 unless unrevoked and unexpired). */
  readonly authenticateProvider: (authorization: string | null) => Promise<ProviderTokenRecord>;
  readonly store: Store;
  readonly fleet: Fleet;
  readonly logger: Logger;
  /** Unix ms (for "today"). */
  readonly now: () => number;
  /** The peer address of a request; undefined for in-process calls. */
  readonly clientAddress: (request: Request) => string | undefined;
  readonly bodyTimeoutMs: number;
  /** The configured public base URL; the verification URI is built on it when set, else on the request's origin. */
  readonly publicUrl?: string;
}

/** RFC 6749 section 5.2 and RFC 8628 section 3.5 error codes. */
type OAuthError =
  | "invalid_request"
  | "invalid_client"
  | "unsupported_grant_type"
  | "invalid_grant"
  | "authorization_pending"
  | "slow_down"
  | "access_denied"
  | "expired_token";

/** An OAuth error answer. `description` must stay within RFC 6749's character set (no `"` or `\`). */
function oauthError(error: OAuthError, description: string): Response {
  return Response.json({ error, error_description: description }, { status: 400, headers: NO_STORE });
}

/**
 * A JSON object or an application/x-www-form-urlencoded body (RFC 8628 section 3.1), as fields. Throws
 * 413 request_too_large, 400 invalid_json, or 400 invalid_value for a form field given twice.
 */
async function readFields(request: Request, limits: BodyLimits): Promise<JsonObject> {
  const bytes = await readBody(request, limits);
  const type = request.headers.get("content-type")?.split(";")[0]?.trim().toLowerCase();
  if (type !== "application/x-www-form-urlencoded") return objectBody(parseJson(bytes));
  const fields = new Map<string, string>();
  for (const [name, value] of new URLSearchParams(new TextDecoder().decode(bytes))) {
    const shown = name.slice(0, 64);
    if (fields.has(name)) throw Errors.invalidValue(`'${shown}' must not be given more than once`, shown);
    fields.set(name, value);
  }
  return Object.fromEntries(fields);
}

/** Where people open the approval page: the request's own origin (https when a proxy says so). */
function publicBase(request: Request): string {
  const url = new URL(request.url);
  const forwarded = request.headers.get("x-forwarded-proto")?.split(",")[0]?.trim().toLowerCase();
  return `${forwarded === "https" ? "https:" : url.protocol}//${url.host}`;
}

function requireClient(fields: JsonObject, required: boolean): boolean {
  const given = required ? requiredString(fields, "client_id", { max: 64 }) : optionalString(fields, "client_id", { max: 64 });
  return given === undefined || given === CLIENT_ID;
}

async function token(deps: DeviceDeps, limits: BodyLimits, request: Request): Promise<Response> {
  let deviceCode: string;
  try {
    const fields = await readFields(request, limits);
    const grantType = requiredString(fields, "grant_type", { max: 128 });
    if (grantType !== DEVICE_GRANT_TYPE) return oauthError("unsupported_grant_type", `grant_type must be ${DEVICE_GRANT_TYPE}`);
    if (!requireClient(fields, false)) return oauthError("invalid_client", `unknown client_id: this endpoint serves ${CLIENT_ID}`);
    deviceCode = requiredString(fields, "device_code", { max: 128 });
  } catch (e) {
    if (e instanceof ApiError && e.status < 500) return oauthError("invalid_request", e.message);
    throw e;
  }
  const result = deps.deviceFlow.poll(deviceCode);
  switch (result.status) {
    case "authorization_pending":
      return oauthError("authorization_pending", "the account holder has not approved this login yet");
    case "slow_down":
      return oauthError("slow_down", `polling too fast: wait at least ${result.interval} seconds between polls`);
    case "access_denied":
      return oauthError("access_denied", "the account holder denied this login");
    case "expired_token":
      return oauthError("expired_token", "the device code expired: start the login again");
    case "invalid_grant":
      return oauthError("invalid_grant", "unknown device code, or its token was already delivered");
    case "approved": {
      let created: Awaited<ReturnType<AdminService["createProviderToken"]>>;
      try {
        created = await deps.admin.createProviderToken({
          account_id: result.accountId,
          ...(result.machineName === null ? {} : { name: result.machineName }),
          ...(result.tokenExpiresInSeconds === null ? {} : { expires_in_seconds: result.tokenExpiresInSeconds }),
        });
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) return oauthError("invalid_grant", "the approving account no longer exists");
        throw e;
      }
      deps.logger.info("provider device login completed", { account_id: result.accountId });
      // RFC 6749 section 5.1: `expires_in`, the token's lifetime in seconds, only when it expires.
      return Response.json(
        {
          access_token: created.token,
          token_type: "Bearer",
          account_id: result.accountId,
          token_id: created.id,
          ...(result.tokenExpiresInSeconds === null ? {} : { expires_in: result.tokenExpiresInSeconds }),
        },
        { headers: NO_STORE },
      );
    }
  }
}

async function me(deps: DeviceDeps, request: Request) {
  const record = await deps.authenticateProvider(request.headers.get("authorization"));
  const now = deps.now();
  const [account, total, today] = await Promise.all([
    deps.store.accounts.get(record.accountId),
    deps.store.accounts.earnings(record.accountId),
    deps.store.accounts.earnings(record.accountId, now - (now % DAY_MS)),
  ]);
  const machines = deps.fleet
    .list()
    .filter((s) => s.identity.accountId === record.accountId && s.ready)
    .sort((a, b) => a.connectedAt - b.connectedAt || (a.id < b.id ? -1 : 1))
    .map((s) => ({
      provider_id: s.id,
      trust_level: s.trust,
      models: [...s.models.keys()],
      active: s.active,
      connected_at: Math.floor(s.connectedAt / 1000),
    }));
  return Response.json(
    {
      account_id: record.accountId,
      token_id: record.id,
      token_expires_at: record.expiresAt === null ? null : Math.floor(record.expiresAt / 1000),
      earnings: { total_micro_usd: total, today_micro_usd: today },
      balance_micro_usd: account?.balance ?? 0,
      machines,
    },
    { headers: NO_STORE },
  );
}

const PAGE_STYLE = `body{font:16px system-ui,sans-serif;max-width:30rem;margin:3rem auto;padding:0 1rem}
label{display:block;margin:1rem 0 .3rem}input,select{width:100%;padding:.5rem;font:inherit;box-sizing:border-box}
button{margin:1rem .5rem 0 0;padding:.5rem 1.2rem;font:inherit}#out{margin-top:1.5rem;white-space:pre-wrap}
#request{margin-top:1.5rem;padding:.5rem 1rem;border:1px solid #888}`;

// Everything the API answers is written with textContent: the machine name is the tool's text, never HTML.
const PAGE_SCRIPT = `const $ = (id) => document.getElementById(id);
$("code").value = new URLSearchParams(location.search).get("user_code") ?? "";
const say = (text) => { $("out").textContent = text; };
const hide = () => { $("request").hidden = true; };
$("code").addEventListener("input", hide);
$("key").addEventListener("input", hide);
async function call(method, path, body) {
  const headers = { authorization: "Bearer " + $("key").value.trim() };
  if (body) headers["content-type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined });
  return { ok: r.ok, status: r.status, body: await r.json() };
}
const refused = (r) => "Refused: " + (r.body.error?.message ?? "status " + r.status);
async function check() {
  hide();
  say("Looking up the code...");
  try {
    const r = await call("GET", "/v1/provider/device/preview?user_code=" + encodeURIComponent($("code").value));
    if (!r.ok) return say(refused(r));
    const at = new Date(r.body.requested_at * 1000);
    const minutes = Math.max(0, Math.round((Date.now() - at.getTime()) / 60000));
    $("machine").textContent = r.body.machine_name ?? "(the tool sent no name)";
    $("models").textContent = r.body.models?.length ? r.body.models.join(", ") : "(none reported)";
    $("trust").textContent = r.body.trust_level ?? "(none reported)";
    $("when").textContent = at.toLocaleString() + " (" + minutes + " min ago)";
    $("request").hidden = false;
    say("Approve only if this is your machine and you just ran umbra-provider login on it.");
  } catch {
    say("Could not reach the coordinator.");
  }
}
async function send(decision) {
  say("Sending...");
  const body = { user_code: $("code").value, decision };
  if (decision === "approve" && $("life").value !== "") body.token_expires_in_seconds = Number($("life").value);
  try {
    const r = await call("POST", "/v1/provider/device/approve", body);
    if (!r.ok) return say(refused(r));
    hide();
    $("key").value = "";
    if (decision === "deny") say("Denied: the machine was not linked.");
    else say("Approved: machine " + (r.body.machine_name ?? "(unnamed)") + " is linked to account " + r.body.account_id + ".");
  } catch {
    say("Could not reach the coordinator.");
  }
}
$("check").addEventListener("click", check);
$("approve").addEventListener("click", () => send("approve"));
$("deny").addEventListener("click", () => send("deny"));`;

const cspHash = (text: string) => `'sha256-${createHash("sha256").update(text).digest("base64")}'`;

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Link a provider machine</title><style>${PAGE_STYLE}</style></head>
<body><h1>Link a provider machine</h1>
<p>Approve only a code that <code>umbra-provider login</code> showed on a machine you control: the machine
will serve requests for your account, including your self-routed ones.</p>
<label for="code">Code</label><input id="code" autocomplete="off" spellcheck="false" placeholder="BCDF-GHJK">
<label for="key">Your JWT, or an API key allowed to link machines (sent only to this coordinator)</label>
<input id="key" type="password" autocomplete="off">
<button id="check" type="button">Show the request</button>
<div id="request" hidden><p>Machine: <strong id="machine"></strong><br>Code requested: <span id="when"></span><br>
Models: <span id="models"></span><br>Trust level: <span id="trust"></span><br>
<small>Models and trust are what the machine reported; they are verified when it connects.</small></p>
<label for="life">The machine's token</label><select id="life"><option value="">does not expire</option>
<option value="2592000">expires in 30 days</option><option value="7776000">expires in 90 days</option>
<option value="31536000">expires in 1 year</option></select>
<button id="approve" type="button">Approve</button><button id="deny" type="button">Deny</button></div>
<p id="out" role="status"></p>
<script>${PAGE_SCRIPT}</script></body></html>
`;

const PAGE_HEADERS = {
  "content-type": "text/html; charset=utf-8",
  "content-security-policy": [
    "default-src 'none'",
    `script-src ${cspHash(PAGE_SCRIPT)}`,
    `style-src ${cspHash(PAGE_STYLE)}`,
    "connect-src 'self'",
    "form-action 'none'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join("; "),
  "x-frame-options": "DENY",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store",
} as const;

/** The caller as an account holder who may link machines: 401 for a bad credential, 403 for a key without the permission. */
async function accountHolder(deps: DeviceDeps, request: Request): Promise<Principal> {
  const principal = await deps.authenticate(request.headers.get("authorization"));
  requireLinkMachines(principal);
  return principal;
}

/** The wrong-code budget's subject: the API key, or the account for a JWT. */
const credentialOf = (principal: Principal) => principal.keyId ?? `jwt:${principal.accountId}`;

export function deviceRoutes(deps: DeviceDeps) {
  const limits: BodyLimits = { maxBytes: BODY_LIMIT, timeoutMs: deps.bodyTimeoutMs };
  return new Elysia({ name: "device" })
    .post(
      "/v1/provider/device/code",
      async ({ request }) => {
        const fields = await readFields(request, limits);
        if (!requireClient(fields, true)) throw Errors.invalidValue(`unknown 'client_id': this endpoint serves ${CLIENT_ID}`, "client_id");
        const started = deps.deviceFlow.start({
          address: deps.clientAddress(request),
          ...reportedMachine(fields),
        });
        // The console's approval page: sign in there (if need be), check the machine, decide.
        const uri = `${deps.publicUrl ?? publicBase(request)}/console/device`;
        return Response.json(
          {
            device_code: started.deviceCode,
            user_code: started.userCode,
            verification_uri: uri,
            verification_uri_complete: `${uri}?user_code=${started.userCode}`,
            expires_in: started.expiresIn,
            interval: started.interval,
          },
          { headers: NO_STORE },
        );
      },
      { parse: "none" },
    )
    .post("/v1/provider/device/token", ({ request }) => token(deps, limits, request), { parse: "none" })
    .get("/v1/provider/device/preview", async ({ request }) => {
      const principal = await accountHolder(deps, request);
      const given = new URL(request.url).searchParams.getAll("user_code");
      if (given.length > 1) throw Errors.invalidValue("'user_code' must not be given more than once", "user_code");
      const userCode = requiredString({ user_code: given[0] }, "user_code", { max: 32 });
      const login = deps.deviceFlow.preview({ userCode, credential: credentialOf(principal), address: deps.clientAddress(request) });
      return Response.json(
        {
          user_code: login.userCode,
          machine_name: login.machineName,
          models: login.models,
          trust_level: login.trustLevel,
          requested_at: Math.floor(login.requestedAt / 1000),
          expires_at: Math.floor(login.expiresAt / 1000),
        },
        { headers: NO_STORE },
      );
    })
    .post(
      "/v1/provider/device/approve",
      async ({ request }) => {
        const principal = await accountHolder(deps, request);
        const body = objectBody(parseJson(await readBody(request, limits)), ["user_code", "decision", "token_expires_in_seconds"]);
        const userCode = requiredString(body, "user_code", { max: 32 });
        const decision = requiredString(body, "decision", { max: 16 });
        if (decision !== "approve" && decision !== "deny") throw Errors.invalidValue("'decision' must be 'approve' or 'deny'", "decision");
        const lifetime = optionalInt(body, "token_expires_in_seconds", 1, MAX_PROVIDER_TOKEN_LIFETIME_SECONDS) ?? null;
        if (lifetime !== null && decision !== "approve") {
          throw Errors.invalidValue("'token_expires_in_seconds' is only for an approval", "token_expires_in_seconds");
        }
        const decided = deps.deviceFlow.decide({
          userCode,
          decision,
          accountId: principal.accountId,
          tokenExpiresInSeconds: lifetime,
          credential: credentialOf(principal),
          address: deps.clientAddress(request),
        });
        deps.logger.info(decision === "approve" ? "provider device login approved" : "provider device login denied", {
          account_id: principal.accountId,
        });
        return {
          user_code: decided.userCode,
          decision: decided.decision,
          account_id: decided.accountId,
          machine_name: decided.machineName,
          token_expires_in_seconds: decided.tokenExpiresInSeconds,
        };
      },
      { parse: "none" },
    )
    .get("/device", () => new Response(PAGE, { headers: PAGE_HEADERS }))
    .get("/v1/provider/me", ({ request }) => me(deps, request));
}
