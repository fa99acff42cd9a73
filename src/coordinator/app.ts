/**
 * createApp: wires every service from its dependencies and nothing else. Tests build the app the same
 * way, with a temporary store, a fixed clock or a fake fleet.
 */
import { AdminService } from "../admin/admin-service.ts";
import { createHttpApp, type HttpApp } from "../api/http.ts";
import { type Authenticator, createAuthenticator } from "../auth/authenticator.ts";
import { createJwtVerifier } from "../auth/jwt.ts";
import { PricingService } from "../billing/pricing.ts";
import { CatalogService } from "../catalog/catalog.ts";
import type { Config } from "../config/config.ts";
import { emptyFleet, type FleetView } from "../fleet/fleet-view.ts";
import { createLogger, type Logger } from "../observability/logger.ts";
import { createMetrics, type Metrics } from "../observability/metrics.ts";
import type { Store } from "../store/types.ts";

export interface Clock {
  /** Unix milliseconds. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export interface AppDeps {
  readonly config: Config;
  readonly store: Store;
  readonly clock?: Clock;
  readonly logger?: Logger;
  readonly fleet?: FleetView;
}

export interface App {
  readonly config: Config;
  readonly store: Store;
  readonly http: HttpApp;
  readonly admin: AdminService;
  readonly catalog: CatalogService;
  readonly pricing: PricingService;
  readonly authenticate: Authenticator;
  readonly logger: Logger;
  readonly metrics: Metrics;
}

export function createApp(deps: AppDeps): App {
  const { config, store } = deps;
  const clock = deps.clock ?? systemClock;
  const now = () => clock.now();
  const logger = deps.logger ?? createLogger(config.logLevel);
  const metrics = createMetrics();
  const pricing = new PricingService(store.prices, config);
  const catalog = new CatalogService(store.catalog, deps.fleet ?? emptyFleet, pricing);
  const admin = new AdminService(store, now);
  const authenticate = createAuthenticator(store, config.jwt && createJwtVerifier(config.jwt, now));
  const http = createHttpApp({ store, catalog, pricing, admin, authenticate, adminToken: config.adminToken, logger, metrics });
  return { config, store, http, admin, catalog, pricing, authenticate, logger, metrics };
}
