/**
 * The HTTP surface in one place: the route table (on `createHttpApp`) and the guard order.
 *
 * First gate, before every route (the provider WebSocket too: `gate`, called by server.ts): while the
 * coordinator awaits provisioning (--provisioning await), only /healthz, /v1/attestation and
 * /v1/provision are served; everything else is 503 service_unavailable.
 * Guard order per consumer route: auth -> handler. The chat handler then applies, in order: validation,
 * model and allowlist, rate limit (429), reservation (402), admission and dispatch (chat-service.ts).
 * Before any route, a Host header that is not a host name is 400 invalid_value, logged without its value.
 */
import { Elysia } from "elysia";
import type { AdminService } from "../admin/admin-service.ts";
import type { CoordinatorAttestation } from "../attestation/coordinator-attestation.ts";
import type { Provisioning } from "../attestation/provisioning.ts";
import type { Authenticator } from "../auth/authenticator.ts";
import type { DeviceFlow } from "../auth/device-flow.ts";
import type { PricingService } from "../billing/pricing.ts";
import type { CatalogService } from "../catalog/catalog.ts";
import type { ConsoleOptions } from "../console/assets.ts";
import type { ConsoleService } from "../console/console-service.ts";
import type { ConsoleOidc } from "../console/oidc.ts";
import type { ConsoleSessions } from "../console/sessions.ts";
import type { SealedReplayCache } from "../crypto/consumer-replay.ts";
import { Errors } from "../errors/api-error.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { ChatService } from "../inference/chat-service.ts";
import type { EnrolmentService } from "../mdm/enrolment.ts";
import type { MdmWebhook } from "../mdm/webhook.ts";
import type { Logger } from "../observability/logger.ts";
import type { Metrics } from "../observability/metrics.ts";
import type { Store } from "../store/types.ts";
import { adminRoutes } from "./admin.ts";
import { attestationRoutes, type DevChainDeps } from "./attestation.ts";
import { CHAT_PATH, chatHandler, chatRoutes } from "./chat.ts";
import type { Connection } from "./connection.ts";
import { consoleAssetRoutes } from "./console-assets.ts";
import { applyConsoleHeaders, consoleAuthRoutes, refuseWithoutCsrfHeader } from "./console-auth.ts";
import { consoleDataRoutes } from "./console-data.ts";
import { type DeviceDeps, deviceRoutes } from "./device.ts";
import { errorHandling, errorResponse, toLoggedApiError } from "./errors.ts";
import { healthRoutes } from "./health.ts";
import { mdmEnrolRoutes } from "./mdm-enrol.ts";
import { mdmWebhookRoutes } from "./mdm-webhook.ts";
import { modelRoutes } from "./models.ts";
import { openApiRoutes } from "./openapi.ts";
import { pricingRoutes } from "./pricing.ts";
import { providerModelRoutes } from "./provider-models.ts";
import { provisioningRoutes } from "./provisioning.ts";

export interface HttpDeps {
  readonly store: Store;
  readonly catalog: CatalogService;
  readonly pricing: PricingService;
  readonly admin: AdminService;
  readonly attestation: CoordinatorAttestation;
  readonly issueDevChain: DevChainDeps["issueDevChain"];
  /** The device-token check; also serves the development chain route. */
  readonly authenticateProvider: DeviceDeps["authenticateProvider"];
  readonly chat: ChatService;
  /** Freshness and single use of sealed consumer envelopes (the chat route). */
  readonly sealedReplay: SealedReplayCache;
  readonly fleet: Fleet;
  /** The builds an account's own machines serve (self-route-only keys' /v1/models); the fleet's unless given. */
  readonly buildsOf?: (accountId: string) => ReadonlySet<string>;
  readonly authenticate: Authenticator;
  readonly deviceFlow: DeviceFlow;
  /** Console sessions (the console's routes authenticate and check CSRF through it: ConsoleAuth). */
  readonly consoleSessions: ConsoleSessions;
  /** Console sign-in with OpenID Connect; absent: off. */
  readonly consoleOidc?: ConsoleOidc;
  /** The console's data operations (overview, keys, usage, machines, device approval). */
  readonly consoleService: ConsoleService;
  /** `--public-url` when set (links shown to people: the device login's verification URI). */
  readonly publicUrl?: string;
  /** Unix ms. */
  readonly now: () => number;
  /** The admin token: from the configuration, or provisioned (read per request). */
  readonly adminToken: () => string | undefined;
  /** The provisioning state, its routes and the gate. */
  readonly provisioning: Provisioning;
  readonly maxBodyBytes: number;
  /** The time a client has to send a whole request body (BodyLimits.timeoutMs). */
  readonly bodyTimeoutMs: number;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** NanoMDM's webhook receiver: MDM mode only (UMBRA_MDM_URL); absent, /v1/mdm/webhook is 404. */
  readonly mdmWebhook?: MdmWebhook;
  /** The console's sign-in methods and asset table (console-assets.ts); the built table by default. */
  readonly consoleAssets?: ConsoleOptions;
  /** MDM enrolment (profiles for provider machines); absent: its routes are not mounted (404). */
  readonly mdmEnrolment?: EnrolmentService;
}

export interface HttpApp {
  /**
   * Handles one request (tests call this in-process; the server calls it per request with its connection).
   * Times every request under its route template for /metrics, and remembers the connection for the
   * routes that ask for it: the peer address for the device login's limits (asked for lazily), the chat
   * route's body-read hook.
   */
  handle(request: Request, connection?: Connection): Promise<Response>;
  /** The provisioning gate for a request handled outside `handle` (the WebSocket upgrade): its 503, or undefined. */
  gate(request: Request): Response | undefined;
}

/** The path of a request URL without parsing the whole URL (hot path). */
export function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  const q = url.indexOf("?", start);
  return q < 0 ? url.slice(start) : url.slice(start, q);
}

const AWAITING =
  "the coordinator awaits provisioning of its secrets: only /healthz, /v1/attestation and /v1/provision are served until then";

/**
 * Wires every route: the route table.
 *
 *   GET  /healthz /readyz /metrics                 no auth
 *   GET  /v1/pricing                               no auth
 *   GET  /v1/openapi.json                          no auth; the consumer API's OpenAPI 3.1 document (openapi.ts)
 *   GET  /v1/attestation                           no auth (503 when this host cannot attest)
 *   GET  /v1/provision, POST /v1/provision         no auth; secrets sealed to the attested key (provisioning.ts)
 *   GET  /v1/providers/attestation                 no auth (public keys, trust levels, posture)
 *   POST /v1/provider/dev-chain                    provider device token; development trust only
 *   POST /v1/provider/device/code, .../token       no auth; device login (RFC 8628), rate limited (device.ts)
 *   GET  /v1/provider/device/preview               account-holder auth (JWT, or key with link_machines) -> wrong-code limit
 *   POST /v1/provider/device/approve               account-holder auth -> wrong-code limit -> decision
 *   GET  /device                                   no auth; the approval page
 *   GET  /v1/provider/me                           provider device token
 *   GET  /v1/provider/models                       provider device token; builds and their aliases (provider-models.ts)
 *   POST /v1/provider/enroll/challenge, /enroll    provider device token; MDM enrolment profile (mdm-enrol.ts), only
 *   GET  /v1/provider/enroll/status                when MDM enrolment is configured (404 otherwise)
 *   GET  /v1/models, /v1/models/{id...}            consumer auth (API key or JWT)
 *   POST /v1/chat/completions                      consumer auth
 *   GET  /v1/provider/connect (WebSocket)          provider device token (provider-socket.ts, wired in server.ts)
 *   POST /v1/mdm/webhook                           NanoMDM's HMAC signature; MDM mode only (mdm-webhook.ts)
 *   *    /admin/v1/...                             admin token
 *   GET/POST /console/sign-in, /console/auth/oidc/*  no auth; console sign-in -> session cookie (console-auth.ts)
 *   *    /console/api/session, sign-out[-everywhere] console session (+ CSRF token on POST)
 * Every /console/ answer gets the console's CSP unless its route set one; every /console/api/ one `no-store`;
 * a state-changing /console/api/ request without `x-csrf-token` is 403 before routing (console-auth.ts).
 *   GET  /console, /console/*, /console/assets/*   no auth; the console's shell and assets (console-assets.ts)
 */
export function createHttpApp(deps: HttpDeps): HttpApp {
  // Per request in flight, removed when its handling ends. Plain maps, not WeakMaps: a WeakMap entry per
  // request costs every young-generation collection weak-reference work until the request dies.
  const routes = new Map<Request, string>();
  const connections = new Map<Request, Connection>();
  // standardHostname off: Elysia otherwise assumes "http://" plus at least 4 host characters and cuts the
  // path wrongly for a short Host (`http://api/v1/...`, a container name on port 80): every route 404s.
  const chatDeps = { ...deps, connection: (request: Request) => connections.get(request) };
  const chat = chatHandler(chatDeps);
  const app = new Elysia({ name: "umbra", handler: { standardHostname: false } })
    .use(errorHandling(deps.logger))
    .onTransform({ as: "global" }, ({ request, route }) => {
      routes.set(request, route);
    })
    .use(healthRoutes(deps))
    .use(pricingRoutes(deps))
    .use(openApiRoutes())
    .use(attestationRoutes(deps))
    .use(provisioningRoutes(deps))
    .use(modelRoutes(deps))
    .use(chatRoutes(chatDeps))
    .use(deviceRoutes({ ...deps, clientAddress: (request) => connections.get(request)?.address() }))
    .use(providerModelRoutes(deps))
    .use(
      deps.mdmEnrolment
        ? mdmEnrolRoutes({
            enrolment: deps.mdmEnrolment,
            authenticateProvider: deps.authenticateProvider,
            bodyTimeoutMs: deps.bodyTimeoutMs,
          })
        : new Elysia({ name: "mdm-enrol-off" }),
    )
    .use(deps.mdmWebhook ? mdmWebhookRoutes({ webhook: deps.mdmWebhook, bodyTimeoutMs: deps.bodyTimeoutMs }) : new Elysia())
    .use(adminRoutes(deps))
    .use(
      consoleAuthRoutes({
        sessions: deps.consoleSessions,
        ...(deps.consoleOidc ? { oidc: deps.consoleOidc } : {}),
        store: deps.store,
        now: deps.now,
        logger: deps.logger,
        bodyTimeoutMs: deps.bodyTimeoutMs,
      }),
    )
    .use(
      consoleDataRoutes({
        console: deps.consoleService,
        auth: deps.consoleSessions,
        logger: deps.logger,
        bodyTimeoutMs: deps.bodyTimeoutMs,
        clientAddress: (request) => connections.get(request)?.address(),
      }),
    )
    .use(consoleAssetRoutes({ ...deps.consoleAssets, oidc: deps.consoleOidc !== undefined }));

  // Bun's request URL is normalized already (dot segments resolved), so pathOf reads the path URL would.
  const refusedAt = (path: string): Response | undefined =>
    deps.provisioning.refuses(path) ? errorResponse(Errors.serviceUnavailable(AWAITING)) : undefined;

  return {
    gate: (request) => refusedAt(pathOf(request.url)),
    async handle(request, connection) {
      const started = performance.now();
      if (!URL.canParse(request.url)) {
        // A space, slash, `@` ... in the Host header, or none at all (HTTP/1.0): Bun then gives a bare
        // path, which Elysia would route wrongly by its length.
        const missing = request.headers.get("host") === null;
        deps.logger.info(missing ? "request refused: no Host header" : "request refused: invalid Host header", {
          method: request.method,
          status: 400,
        });
        deps.metrics.observeHttp(request.method, "unmatched", 400, (performance.now() - started) / 1000);
        return errorResponse(Errors.invalidValue(missing ? "a Host header is required" : "the Host header is not a valid host name"));
      }
      const path = pathOf(request.url);
      const refused = refusedAt(path) ?? refuseWithoutCsrfHeader(request);
      if (refused !== undefined) {
        deps.metrics.observeHttp(request.method, "unmatched", refused.status, (performance.now() - started) / 1000);
        return applyConsoleHeaders(request.url, refused);
      }
      if (connection !== undefined) connections.set(request, connection);
      if (request.method === "POST" && path === CHAT_PATH) {
        // The hot path without the router: the same auth, handler and error boundary as its route.
        let response: Response;
        try {
          // No await for an API key the store answers from memory: an await is a promise and a turn.
          const authenticating = deps.authenticate(request.headers.get("authorization"));
          response = await chat(request, authenticating instanceof Promise ? await authenticating : authenticating);
        } catch (error) {
          response = errorResponse(toLoggedApiError(deps.logger, error, CHAT_PATH));
        } finally {
          connections.delete(request);
        }
        deps.metrics.observeHttp(request.method, CHAT_PATH, response.status, (performance.now() - started) / 1000);
        return response;
      }
      try {
        const response = applyConsoleHeaders(request.url, await app.handle(request));
        deps.metrics.observeHttp(request.method, routes.get(request) ?? "unmatched", response.status, (performance.now() - started) / 1000);
        return response;
      } finally {
        connections.delete(request);
        routes.delete(request);
      }
    },
  };
}
