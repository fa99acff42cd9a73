/**
 * The HTTP surface in one place: route table and guard order.
 *
 *   GET  /healthz /readyz /metrics                 no auth
 *   GET  /v1/pricing                               no auth
 *   GET  /v1/attestation                           no auth (503 when this host cannot attest)
 *   GET  /v1/providers/attestation                 no auth (public keys, trust levels, posture)
 *   POST /v1/provider/dev-chain                    provider device token; development trust only
 *   GET  /v1/models, /v1/models/{id...}            consumer auth (API key or JWT)
 *   POST /v1/chat/completions                      consumer auth
 *   GET  /v1/provider/connect (WebSocket)          provider device token (provider-socket.ts, wired in server.ts)
 *   *    /admin/v1/...                             admin token
 *
 * Guard order per consumer route: auth -> handler. The chat handler then applies, in order: validation,
 * model and allowlist, rate limit (429), reservation (402), admission and dispatch (chat-service.ts).
 * `handle` wraps Elysia to time every request under its route template for /metrics.
 */
import { Elysia } from "elysia";
import type { AdminService } from "../admin/admin-service.ts";
import type { CoordinatorAttestation } from "../attestation/coordinator-attestation.ts";
import type { Authenticator } from "../auth/authenticator.ts";
import type { PricingService } from "../billing/pricing.ts";
import type { CatalogService } from "../catalog/catalog.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { ChatService } from "../inference/chat-service.ts";
import type { Logger } from "../observability/logger.ts";
import type { Metrics } from "../observability/metrics.ts";
import type { Store } from "../store/types.ts";
import { adminRoutes } from "./admin.ts";
import { attestationRoutes, type DevChainDeps } from "./attestation.ts";
import { chatRoutes } from "./chat.ts";
import { errorHandling } from "./errors.ts";
import { healthRoutes } from "./health.ts";
import { modelRoutes } from "./models.ts";
import { pricingRoutes } from "./pricing.ts";

export interface HttpDeps {
  readonly store: Store;
  readonly catalog: CatalogService;
  readonly pricing: PricingService;
  readonly admin: AdminService;
  readonly attestation: CoordinatorAttestation;
  readonly issueDevChain: DevChainDeps["issueDevChain"];
  readonly providerTokenValid: DevChainDeps["providerTokenValid"];
  readonly chat: ChatService;
  readonly fleet: Fleet;
  readonly authenticate: Authenticator;
  readonly adminToken: string | undefined;
  readonly maxBodyBytes: number;
  readonly logger: Logger;
  readonly metrics: Metrics;
}

export interface HttpApp {
  /** Handles one request (tests call this in-process; the server calls it per request). */
  handle(request: Request): Promise<Response>;
}

export function createHttpApp(deps: HttpDeps): HttpApp {
  const routes = new WeakMap<Request, string>();
  const app = new Elysia({ name: "umbra" })
    .use(errorHandling(deps.logger))
    .onTransform({ as: "global" }, ({ request, route }) => {
      routes.set(request, route);
    })
    .use(healthRoutes(deps))
    .use(pricingRoutes(deps))
    .use(attestationRoutes(deps))
    .use(modelRoutes(deps))
    .use(chatRoutes(deps))
    .use(adminRoutes(deps));

  return {
    async handle(request) {
      const started = performance.now();
      const response = await app.handle(request);
      deps.metrics.observeHttp(request.method, routes.get(request) ?? "unmatched", response.status, (performance.now() - started) / 1000);
      return response;
    },
  };
}
