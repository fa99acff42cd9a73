/**
 * createApp: wires every service from its dependencies and nothing else. Tests build the app the same
 * way, with a temporary store, a fixed clock or a fake fleet.
 */
import { AdminService } from "../admin/admin-service.ts";
import { createHttpApp, type HttpApp } from "../api/http.ts";
import { type CoordinatorAttestation, createCoordinatorAttestation } from "../attestation/coordinator-attestation.ts";
import { Provisioning, type ProvisioningOptions } from "../attestation/provisioning.ts";
import { type Authenticator, authenticateProvider, createAuthenticator, providerTokenExpired } from "../auth/authenticator.ts";
import { DeviceFlow } from "../auth/device-flow.ts";
import { createJwtVerifier } from "../auth/jwt.ts";
import { AuthorityReservations } from "../billing/authority-reservations.ts";
import { Billing } from "../billing/billing.ts";
import { PricingService } from "../billing/pricing.ts";
import { Wallets } from "../billing/wallets.ts";
import { CatalogService } from "../catalog/catalog.ts";
import { type Config, publicBaseUrl } from "../config/config.ts";
import { configDigestHex } from "../config/config-digest.ts";
import { createConsoleAuth } from "../console/console-auth.ts";
import { ConsoleService } from "../console/console-service.ts";
import { SealedReplayCache } from "../crypto/consumer-replay.ts";
import { Fleet } from "../fleet/fleet.ts";
import type { FleetView } from "../fleet/fleet-view.ts";
import { ChatService } from "../inference/chat-service.ts";
import { ToolSchemas } from "../inference/tool-schemas.ts";
import { createLogger, type Logger } from "../observability/logger.ts";
import { createMetrics, type Metrics } from "../observability/metrics.ts";
import type { MoneyAuthority } from "../store/pg/money-authority.ts";
import type { ProviderTokenRecord, Store } from "../store/types.ts";
import type { AppCluster } from "./cluster-link.ts";
import { startHoldKeeper } from "./hold-keeper-link.ts";
import { type Links, needLink } from "./links.ts";
import type { AppMdm, MdmTimings } from "./mdm-link.ts";
import { evidenceHooks, type ProviderTrust, providerTrust } from "./provider-trust.ts";
import { createLimiter } from "./rate-limits.ts";

export type { ProviderTrust } from "./provider-trust.ts";

export interface Clock {
  /** Unix milliseconds. */
  now(): number;
}

const systemClock: Clock = { now: () => Date.now() };

export interface AppDeps {
  readonly config: Config;
  readonly store: Store;
  readonly clock?: Clock;
  readonly logger?: Logger;
  /** Replaces the fleet as the catalog's capacity source (tests of /v1/models metadata). */
  readonly fleet?: FleetView;
  /** DER SPKI of the key the coordinator terminates TLS with (src/tls/), bound in the attestation. */
  readonly tlsPublicKeySpki?: Uint8Array;
  /** Bound of the sealed-envelope replay cache (default SEALED_REPLAY_MAX_ENTRIES; tests fill a small one). */
  readonly sealedReplayEntries?: number;
  /** HOST_DATA of development attestation reports (tests of --config-binding host-data). */
  readonly devHostData?: Uint8Array;
  /**
   * Replicas alive now (cluster mode): each limit is divided by it while Redis is unreachable. Default:
   * this one and those whose NATS fleet digests arrive (1 outside cluster mode or while NATS is away).
   */
  readonly liveReplicas?: () => number;
  /**
   * Postgres only (the serve command gives it in cluster mode): Billing holds money through this authority
   * (several replicas) instead of Wallets, and the app runs its HoldKeeper (renewals, sweeps) until close.
   */
  readonly moneyAuthority?: MoneyAuthority;
  /** Postgres only: whether the store's read caches are in use now (its change feed delivers), for /metrics. */
  readonly cachesLive?: () => boolean;
  /** Attestation and provisioning made before the app (createFront); the app makes its own otherwise. */
  readonly front?: AppFront;
  /** MDM mode: the attestation scheduler's connection jitter and backoff (tests shorten them). */
  readonly mdmTimings?: MdmTimings;
  /** The cluster and MDM links' modules (links.ts `loadLinks`): needed when the configuration turns either on. */
  readonly links?: Links;
}

export interface App {
  readonly config: Config;
  readonly store: Store;
  readonly http: HttpApp;
  readonly admin: AdminService;
  /** The coordinator's sealing key and attestation document (GET /v1/attestation). */
  readonly attestation: CoordinatorAttestation;
  /** Secrets provisioned after start (--provisioning await) and the gate until then. */
  readonly provisioning: Provisioning;
  readonly catalog: CatalogService;
  readonly pricing: PricingService;
  readonly authenticate: Authenticator;
  /** The provider device-token check (401 unless live: unrevoked, unexpired), on the app's clock. */
  readonly authenticateProvider: (authorization: string | null) => Promise<ProviderTokenRecord>;
  readonly fleet: Fleet;
  /** Pending provider device logins (the device routes and the console's approvals share them). */
  readonly deviceFlow: DeviceFlow;
  /** The console's data operations (src/api/console-data.ts serves them behind a console session). */
  readonly console: ConsoleService;
  /** The provider trust policy (and, in development, the root that issues local providers' chains). */
  trust(): Promise<ProviderTrust>;
  readonly chat: ChatService;
  readonly wallets: Wallets;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** Cluster mode: the NATS connection and ClusterNode (cluster-link.ts). */
  readonly cluster: AppCluster | undefined;
  /** MDM mode: webhook, scheduler, enrolment, stored chains' trust (mdm-link.ts); undefined when off. */
  readonly mdm: AppMdm | undefined;
  /** Stops background work (liveness sweeps), ends provider sessions, closes the Redis and NATS clients. */
  close(): void;
  /** Resolves when every settled charge is durable and, in cluster mode, in the database (call before exiting). */
  flush(): Promise<void>;
}

/** How often live provider sessions' device tokens are checked against the store. */
const TOKEN_RECHECK_MS = 30_000;

/**
 * The coordinator's attestation and provisioning, which outlive an app: the serve command makes them
 * before the app when the store opens only with provisioned passwords (`accept`), and hands them to the
 * app it builds then; otherwise the app makes its own.
 */
export interface AppFront {
  readonly attestation: CoordinatorAttestation;
  readonly provisioning: Provisioning;
}

export function createFront(
  config: Config,
  options: Pick<AppDeps, "tlsPublicKeySpki" | "devHostData"> & {
    readonly logger: Logger;
    readonly now: () => number;
    readonly accept?: ProvisioningOptions["accept"];
  },
): AppFront {
  const { logger, now } = options;
  const attestation = createCoordinatorAttestation({
    mode: config.mode,
    source: config.attestation,
    platform: config.attestationPlatform,
    tlsPublicKeySpki: options.tlsPublicKeySpki ?? config.tlsPublicKeySpki,
    expectedMeasurement: config.expectedMeasurement,
    config: { sha256: configDigestHex(config), boundBy: config.configBinding },
    ...(options.devHostData ? { devHostData: options.devHostData } : {}),
    logger,
    now,
  });
  const awaiting = config.provisioning === "await";
  const accept = options.accept ? { accept: options.accept } : {};
  return { attestation, provisioning: new Provisioning({ mode: config.mode, awaiting, attestation, logger, now, ...accept }) };
}

/** How long a report waits for the cluster replica's journal to reach the database. */
const REPORT_JOURNAL_WAIT_MS = 2000;

/** The authority's journal flushed, or `ms` passed, whichever comes first. */
export async function settledWithin(authority: Pick<MoneyAuthority, "flushed">, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([authority.flushed(), new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

export function createApp(deps: AppDeps): App {
  const { config, store } = deps;
  const clock = deps.clock ?? systemClock;
  const now = () => clock.now();
  const logger = deps.logger ?? createLogger(config.logLevel);
  const metrics = createMetrics();
  const pricing = new PricingService(store.prices, config);
  // Built on first use (a development root costs a key generation, which the admin CLI never needs).
  let trustPromise: Promise<ProviderTrust> | undefined;
  const trust = (): Promise<ProviderTrust> => {
    if (!trustPromise) {
      trustPromise = providerTrust(config, now);
      // A refusal (e.g. the Apple root missing) surfaces in every assessment: providers earn `none`.
      trustPromise.catch(() => logger.error("provider trust policy unavailable", { reason: "trust root" }));
    }
    return trustPromise;
  };
  // MDM mode (one switch: config.mdm with config.mdmEnrolment): chains checked against the provider trust anchor.
  const mdm =
    config.mdm && config.mdmEnrolment
      ? needLink(deps.links, "mdm").startMdm(
          { mdm: config.mdm, enrolment: config.mdmEnrolment, seed: config.mdaSeed, mode: config.mode },
          {
            store,
            anchor: () => trust().then((t) => t.policy.anchor),
            now,
            logger,
            onAttested: (key) => fleet.revouch(key),
            ...(deps.mdmTimings ? { timings: deps.mdmTimings } : {}),
          },
        )
      : undefined;
  const fleet = new Fleet({
    minTrust: config.minTrust,
    maxSessionsPerToken: config.maxSessionsPerToken,
    heartbeatIntervalMs: config.providerHeartbeatMs,
    livenessTimeoutMs: config.providerLivenessMs,
    requireSealed: config.mode === "production",
    refuseUntrusted: config.mode === "production",
    // `catalog` is built below, before any provider can say hello. A store failure warns about nothing.
    modelWarnings: (ids) => catalog.servedModelWarnings(ids).catch(() => []),
    ...evidenceHooks(trust, now, mdm),
    onUsageRejected: (bound) => metrics.observeUsageRejected(bound),
    ...(mdm ? { deviceTrust: needLink(deps.links, "mdm").mdmDeviceTrust(mdm, logger) } : {}),
    logger,
    now,
  }).start();
  // Cluster mode: presence, digests and forwarded requests over NATS; it closes with the app.
  const cluster = config.cluster
    ? needLink(deps.links, "cluster").startCluster({ cluster: config.cluster, fleet, minTrust: config.minTrust, logger, now })
    : undefined;
  const catalog = new CatalogService(
    store.catalog,
    deps.fleet ?? (cluster ? needLink(deps.links, "cluster").withRemoteCapacity(fleet, cluster) : fleet),
    pricing,
  );
  const wallets = new Wallets(store.money, logger, {
    spacedAbovePerSecond: config.settlementGroupAbove,
    observeCommit: (n, seconds) => metrics.observeSettlementCommit(n, seconds),
  });
  if (deps.moneyAuthority && cluster) needLink(deps.links, "cluster").linkLeases(deps.moneyAuthority, cluster);
  const billing = new Billing(deps.moneyAuthority ? new AuthorityReservations(deps.moneyAuthority, logger) : wallets, config);
  // In process, or shared through Redis in cluster mode (--redis-url); its client closes with the app.
  const liveReplicas = deps.liveReplicas ?? cluster?.liveReplicas ?? (() => 1);
  if (cluster) {
    const cachesLive = deps.cachesLive;
    metrics.watchCluster({
      replicas: liveReplicas,
      remoteProviders: () => cluster.node?.remote.providerCount ?? 0,
      cachesLive: () => cachesLive?.(),
      ...(deps.moneyAuthority ? { leases: needLink(deps.links, "cluster").leasesOf(deps.moneyAuthority) } : {}),
    });
  }
  const limits = createLimiter({ cluster: config.cluster, now, logger, metrics, liveReplicas });
  const publicUrl = publicBaseUrl(config);
  // Console sign-in (sessions, links, OpenID Connect at the JWT issuer when --oidc-client-id is set).
  const consoleAuth = createConsoleAuth({
    store,
    now,
    logger,
    publicUrl,
    ...(config.oidc && config.jwt ? { oidc: { ...config.oidc, issuer: config.jwt.issuer, accountClaim: config.jwt.accountClaim } } : {}),
  });
  let authorityClosed: Promise<void> | undefined;
  // Reports wait for this process's journaled settlements (SQLite's journal, or the cluster replica's: at
  // most REPORT_JOURNAL_WAIT_MS, so a report during a database outage is not held until it ends).
  const settled = async () => {
    const authority = deps.moneyAuthority;
    await Promise.all([wallets.applied(), authority && settledWithin(authority, REPORT_JOURNAL_WAIT_MS)]);
  };
  const admin = new AdminService(store, now, {
    ...(publicUrl !== undefined ? { publicUrl } : {}),
    providerTokenRevoked: (id) => fleet.disconnectToken(id),
    // Cluster mode: the database's figure (every replica's holds and balance leases), not this one's memory.
    ...(deps.moneyAuthority ? {} : { reservedFor: (id: string) => wallets.reservedFor(id) }),
    accountCredited: (id) => void wallets.refresh(id),
    settled,
  });
  // A token revoked by another process (the admin CLI, another replica) is noticed within one interval,
  // or at once where the store tells of changed tokens (Postgres: every replica hears of it).
  const tokenLive = async (id: string) => {
    const record = await store.providerTokens.get(id);
    return record !== undefined && record.revokedAt === null && !providerTokenExpired(record, now());
  };
  const recheckFailed = () => logger.warn("provider token re-check failed", { reason: "store" });
  const recheck = setInterval(() => fleet.revalidateTokens(tokenLive).catch(recheckFailed), TOKEN_RECHECK_MS);
  recheck.unref?.();
  const unwatchTokens = store.onProviderTokenChange?.((changed) => {
    if (fleet.sessionsOfToken(changed) === 0) return;
    tokenLive(changed).then((live) => live || fleet.disconnectToken(changed), recheckFailed);
  });
  const { attestation, provisioning } = deps.front ?? createFront(config, { ...deps, logger, now });
  const authenticate = createAuthenticator(store, config.jwt && createJwtVerifier(config.jwt, now));
  const checkProviderToken = (authorization: string | null) => authenticateProvider(store, authorization, now());
  const chat = new ChatService({
    catalog,
    pricing,
    fleet,
    billing,
    limiter: limits.limiter,
    store,
    schemas: new ToolSchemas(),
    settings: config,
    logger,
    metrics,
    now,
    ...(cluster ? { remote: cluster.remote } : {}),
    ...(deps.moneyAuthority ? { held: (id: string) => deps.moneyAuthority?.deadlines.held(id) ?? true } : {}),
  });
  // Renewals and sweeps of this replica's holds; a hold it could not keep stops its answer.
  const keeper = deps.moneyAuthority && startHoldKeeper(deps.moneyAuthority, logger, (ids) => chat.stopUnheld(ids));
  const deviceFlow = new DeviceFlow({ now });
  const consoleService = new ConsoleService({
    store,
    admin,
    fleet,
    ...(cluster ? { remoteMachines: (id: string) => cluster.machinesOf(id) } : {}),
    deviceFlow,
    platformFeePercent: config.platformFeePercent,
    now,
    settled,
  });
  const http = createHttpApp({
    store,
    catalog,
    pricing,
    admin,
    attestation,
    chat,
    sealedReplay: new SealedReplayCache({ now, ...(deps.sealedReplayEntries ? { maxEntries: deps.sealedReplayEntries } : {}) }),
    fleet,
    ...(cluster ? { buildsOf: (id: string) => new Set([...fleet.buildsOf(id), ...cluster.buildsOf(id)]) } : {}),
    authenticate,
    deviceFlow,
    now,
    adminToken: () => config.adminToken ?? provisioning.adminToken(),
    provisioning,
    issueDevChain: (identityKey, posture) =>
      config.trustRoot === "development"
        ? trust().then((t) => {
            if (!t.devRoot) throw new Error("no development root");
            return t.devRoot.issueDeviceChain({ identityKey, posture });
          })
        : undefined,
    authenticateProvider: checkProviderToken,
    consoleSessions: consoleAuth.sessions,
    consoleService,
    // Only the operator's own setting: the derived loopback default names the configured port, which an
    // in-process server on another port does not listen on.
    ...(config.publicUrl !== undefined ? { publicUrl: config.publicUrl } : {}),
    ...(consoleAuth.oidc ? { consoleOidc: consoleAuth.oidc } : {}),
    ...(mdm ? { mdmWebhook: mdm.webhook } : {}),
    maxBodyBytes: config.maxBodyBytes,
    bodyTimeoutMs: config.bodyTimeoutMs,
    logger,
    metrics,
    ...(mdm ? { mdmEnrolment: mdm.enrolment } : {}),
  });
  return {
    config,
    store,
    http,
    admin,
    attestation,
    provisioning,
    catalog,
    pricing,
    authenticate,
    authenticateProvider: checkProviderToken,
    fleet,
    deviceFlow,
    console: consoleService,
    trust,
    chat,
    wallets,
    logger,
    metrics,
    cluster,
    mdm,
    flush: async () => {
      await Promise.all([wallets.flushed(), deps.moneyAuthority?.flushed(), authorityClosed]);
    },
    close: () => {
      clearInterval(recheck);
      consoleAuth.close();
      unwatchTokens?.();
      cluster?.close();
      mdm?.close();
      fleet.stop();
      limits.close();
      metrics.close();
      void keeper?.stop();
      // The journal applied and the leases given back; `flush` waits for it before the process exits.
      authorityClosed = deps.moneyAuthority?.close().catch((e) => logger.error("money authority not closed", { reason: String(e) }));
    },
  };
}
