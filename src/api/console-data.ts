/**
 * The console's data routes under /console/api (docs/api.md, "Console API"), over ConsoleService with
 * the session's account. Guard order per route: session (401) -> CSRF on every POST (403) -> the
 * request's own values (400 with `param`) -> the operation (404 for anything not the account's).
 * Sessions come from the injected ConsoleAuth (src/console/types.ts). Every answer, errors and unknown
 * /console/api paths included, carries `Cache-Control: no-store`. Query parameters are read once each
 * (a repeated one is 400); bodies are small JSON objects.
 */
import { Elysia } from "elysia";
import type { Decision } from "../auth/device-flow.ts";
import type { ConsoleService } from "../console/console-service.ts";
import type { ConsoleAuth, ConsoleSession } from "../console/types.ts";
import { Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import { type BodyLimits, parseJson, readBody } from "./body.ts";
import { errorResponse, toLoggedApiError } from "./errors.ts";

/** Console bodies are a few fields. */
const BODY_LIMIT = 16 * 1024;
const NO_STORE = { "cache-control": "no-store" } as const;

export interface ConsoleDataDeps {
  readonly console: ConsoleService;
  readonly auth: ConsoleAuth;
  readonly logger: Logger;
  readonly bodyTimeoutMs: number;
  /** The peer address of a request (the device code's wrong-guess limit); undefined in-process. */
  readonly clientAddress?: (request: Request) => string | undefined;
}

type Query = Readonly<Record<string, string>>;
type Handler = (session: ConsoleSession, query: Query) => unknown;

/** The query string as one value per name; a name given twice is 400. */
function queryOf(request: Request): Query {
  const out: Record<string, string> = {};
  for (const [name, value] of new URL(request.url).searchParams) {
    const shown = name.slice(0, 64);
    if (Object.hasOwn(out, name)) throw Errors.invalidValue(`'${shown}' must not be given more than once`, shown);
    out[name] = value;
  }
  return out;
}

/** A path parameter Elysia decoded; null (broken percent-encoding) or empty is 400. */
function named(value: string | null | undefined, param: string): string {
  if (typeof value !== "string" || value === "") throw Errors.invalidValue(`the path does not hold a valid '${param}'`, param);
  return value;
}

function noStore(response: Response): Response {
  response.headers.set("cache-control", "no-store");
  return response;
}

export function consoleDataRoutes(deps: ConsoleDataDeps) {
  const { console: service, auth, logger } = deps;
  const limits: BodyLimits = { maxBytes: BODY_LIMIT, timeoutMs: deps.bodyTimeoutMs };
  const body = async (request: Request) => parseJson(await readBody(request, limits));
  const address = (request: Request) => deps.clientAddress?.(request);

  /** Runs a handler behind the guards; its value becomes a no-store JSON answer, its error the envelope. */
  const run = async (route: string, request: Request, changes: boolean, handler: Handler): Promise<Response> => {
    try {
      const session = await auth.authenticate(request);
      if (changes) auth.requireCsrf(request, session);
      const out = await handler(session, queryOf(request));
      return out instanceof Response ? noStore(out) : Response.json(out, { headers: NO_STORE });
    } catch (error) {
      return noStore(errorResponse(toLoggedApiError(logger, error, route)));
    }
  };

  const decide = (request: Request, code: string | null | undefined, decision: Decision) =>
    run(`/console/api/device/:user_code/${decision}`, request, true, async (s) => {
      const decided = service.decideDevice(
        { accountId: s.accountId, address: address(request) },
        named(code, "user_code"),
        decision,
        await body(request),
      );
      logger.info(decision === "approve" ? "provider device login approved" : "provider device login denied", { account_id: s.accountId });
      return decided;
    });

  return new Elysia({ name: "console-data", prefix: "/console/api" })
    .get("/overview", ({ request }) =>
      run("/console/api/overview", request, false, (s, q) => service.overview(s.accountId, { days: q.days })),
    )
    .get("/keys", ({ request }) => run("/console/api/keys", request, false, (s) => service.listKeys(s.accountId)))
    .post(
      "/keys",
      ({ request }) =>
        run("/console/api/keys", request, true, async (s) => {
          const created = await service.createKey(s.accountId, await body(request));
          return Response.json(created, { status: 201 });
        }),
      { parse: "none" },
    )
    .post(
      "/keys/:id/revoke",
      ({ request, params }) =>
        run("/console/api/keys/:id/revoke", request, true, (s) => service.revokeKey(s.accountId, named(params.id, "id"))),
      { parse: "none" },
    )
    .get("/usage", ({ request }) => run("/console/api/usage", request, false, (s, q) => service.usage(s.accountId, q)))
    .get("/usage.csv", ({ request }) =>
      run("/console/api/usage.csv", request, false, async (s, q) => {
        const csv = await service.usageCsv(s.accountId, q);
        return new Response(csv, {
          headers: { "content-type": "text/csv; charset=utf-8", "content-disposition": 'attachment; filename="umbra-usage.csv"' },
        });
      }),
    )
    .get("/machines", ({ request }) => run("/console/api/machines", request, false, (s) => service.machines(s.accountId)))
    .post(
      "/machines/:id/unlink",
      ({ request, params }) =>
        run("/console/api/machines/:id/unlink", request, true, (s) => service.unlinkMachine(s.accountId, named(params.id, "id"))),
      { parse: "none" },
    )
    .get("/device/:user_code", ({ request, params }) =>
      run("/console/api/device/:user_code", request, false, (s) =>
        service.devicePreview({ accountId: s.accountId, address: address(request) }, named(params.user_code, "user_code")),
      ),
    )
    .post("/device/:user_code/approve", ({ request, params }) => decide(request, params.user_code, "approve"), { parse: "none" })
    .post("/device/:user_code/deny", ({ request, params }) => decide(request, params.user_code, "deny"), { parse: "none" })
    .all("/*", () => noStore(errorResponse(Errors.notFound("no such route"))));
}
