/**
 * The admin HTTP API under /admin/v1: the twin of `umbra-coordinator admin`, through the same
 * AdminService. Guarded by `Authorization: Bearer <admin token>` (constant-time compare); with no admin
 * token configured (or provisioned yet) every admin route answers 401. The token is read per request: a
 * provisioned one (src/attestation/provisioning.ts) arrives after start.
 */
import { timingSafeEqual } from "node:crypto";
import { Elysia } from "elysia";
import type { AdminService } from "../admin/admin-service.ts";
import { bearer } from "../auth/authenticator.ts";
import { sha256Hex } from "../auth/secrets.ts";
import { Errors } from "../errors/api-error.ts";
import { pathId, readJsonBody } from "./body.ts";

/** Admin bodies are small; this bound is independent of the chat body limit. */
const ADMIN_BODY_LIMIT = 256 * 1024;

function adminGuard(adminToken: () => string | undefined) {
  let cached: { token: string; digest: Buffer } | undefined;
  const expectedDigest = (): Buffer | undefined => {
    const token = adminToken();
    if (token === undefined) return undefined;
    if (cached?.token !== token) cached = { token, digest: Buffer.from(sha256Hex(token), "hex") };
    return cached.digest;
  };
  return new Elysia({ name: "admin-auth" }).onBeforeHandle({ as: "scoped" }, ({ request }) => {
    const expected = expectedDigest();
    const given = bearer(request.headers.get("authorization"));
    if (expected === undefined) throw Errors.invalidToken("the admin API is disabled: no admin token is configured");
    if (given === undefined || !timingSafeEqual(Buffer.from(sha256Hex(given), "hex"), expected)) {
      throw Errors.invalidToken("invalid admin token");
    }
  });
}

const id = (raw: string | undefined, param: string): string => {
  const decoded = pathId(raw);
  if (decoded === undefined) throw Errors.invalidValue(`the path does not hold a valid '${param}'`, param);
  return decoded;
};
/**
 * A named path parameter, already percent-decoded by Elysia. Elysia hands over null (despite its
 * `string` type) when the encoding is broken, e.g. `/keys/%`: refuse that as a bad value, not a 500.
 */
const named = (value: string | null | undefined, param: string): string => {
  if (typeof value !== "string" || value === "") throw Errors.invalidValue(`the path does not hold a valid '${param}'`, param);
  return value;
};
const noParse = { parse: "none" } as const;

export function adminRoutes(deps: { admin: AdminService; adminToken: () => string | undefined; bodyTimeoutMs: number }) {
  const { admin } = deps;
  const limits = { maxBytes: ADMIN_BODY_LIMIT, timeoutMs: deps.bodyTimeoutMs };
  const body = (request: Request) => readJsonBody(request, limits);
  return new Elysia({ name: "admin", prefix: "/admin/v1" })
    .use(adminGuard(deps.adminToken))
    .post("/accounts", async ({ request }) => admin.createAccount(await body(request)), noParse)
    .get("/accounts", () => admin.listAccounts())
    .get("/accounts/:id", ({ params }) => admin.getAccount(named(params.id, "id")))
    .get("/accounts/:id/ledger", ({ params, query }) => admin.accountLedger(named(params.id, "id"), { limit: query.limit }))
    .get("/accounts/:id/usage", ({ params, query }) =>
      admin.accountUsage(named(params.id, "id"), { since: query.since, until: query.until }),
    )
    .post("/accounts/:id/sign-in-links", ({ params }) => admin.createSignInLink(named(params.id, "id")))
    .post("/accounts/:id/credit", async ({ params, request }) => admin.creditAccount(named(params.id, "id"), await body(request)), noParse)
    .post("/keys", async ({ request }) => admin.createKey(await body(request)), noParse)
    .get("/keys", ({ query }) => admin.listKeys(query.account_id))
    .delete("/keys/:id", ({ params }) => admin.revokeKey(named(params.id, "id")))
    .post("/provider-tokens", async ({ request }) => admin.createProviderToken(await body(request)), noParse)
    .get("/provider-tokens", ({ query }) => admin.listProviderTokens(query.account_id))
    .delete("/provider-tokens/:id", ({ params }) => admin.revokeProviderToken(named(params.id, "id")))
    .get("/models", () => admin.listBuilds())
    .put("/models/*", async ({ params, request }) => admin.upsertModel(id(params["*"], "id"), await body(request)), noParse)
    .get("/aliases", () => admin.listAliases())
    .put("/aliases/*", async ({ params, request }) => admin.setAlias(id(params["*"], "alias"), await body(request)), noParse)
    .delete("/aliases/*", ({ params }) => admin.deleteAlias(id(params["*"], "alias")))
    .get("/prices", () => admin.listPrices())
    .put("/prices/*", async ({ params, request }) => admin.setPrice(id(params["*"], "model"), await body(request)), noParse)
    .delete("/prices/*", ({ params }) => admin.clearPrice(id(params["*"], "model")));
}
