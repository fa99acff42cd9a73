/**
 * Every coordinator setting, one entry each: flag, environment twin, kind, default, bounds, help, secret.
 * docs/operations.md lists the same table (test/unit/docs/operations-settings.test.ts holds them together).
 *
 * loadConfig (config.ts) parses every entry by itself unless it is one of the few its explicit rules read
 * (DERIVED there): a plain entry becomes the Config field of the same name, so a new setting is one entry.
 * Entries without a default whose default depends on the mode or on another setting say so in a comment.
 */
import { TRUST_LEVELS } from "../../attestation/provider/levels.ts";
import { LOG_LEVELS } from "../observability/logger.ts";
import { CLUSTER_SETTINGS } from "./cluster-settings.ts";
import { MDM_ENROL_SETTINGS } from "./mdm-enrol-settings.ts";
import { MDM_SETTINGS } from "./mdm-settings.ts";
import { type Options, optionsOf, type SettingTable } from "./settings.ts";

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

export const SETTINGS = {
  listen: { flag: "listen", env: "UMBRA_LISTEN", kind: "string", default: "127.0.0.1:8080", help: "host:port to listen on" },
  db: { flag: "db", env: "UMBRA_DB", kind: "string", default: "./data/umbra.db", help: "SQLite database path, or a postgres:// URL" },
  dbPassword: {
    flag: "db-password",
    env: "UMBRA_DB_PASSWORD",
    kind: "string",
    secret: true,
    help: "password of a postgres:// --db, kept out of the URL, the command line and the configuration digest",
  },
  adminToken: { flag: "admin-token", env: "UMBRA_ADMIN_TOKEN", kind: "string", secret: true, help: "bearer token for /admin/v1" },
  // Default: the command's (`production` for serve, `development` for dev).
  mode: { flag: "mode", env: "UMBRA_MODE", kind: "enum", values: ["production", "development"], help: "production or development" },
  // Default: hardware in production, none in development.
  minTrust: { flag: "min-trust", env: "UMBRA_MIN_TRUST", kind: "enum", values: TRUST_LEVELS, help: "routing floor" },
  // Default: apple in production, development in development.
  trustRoot: {
    flag: "trust-root",
    env: "UMBRA_TRUST_ROOT",
    kind: "enum",
    values: ["apple", "development"],
    help: "attestation trust root",
  },
  logLevel: {
    flag: "log-level",
    env: "UMBRA_LOG_LEVEL",
    kind: "enum",
    values: LOG_LEVELS,
    default: "info",
    help: "error, warn, info or debug",
  },
  maxBodyBytes: {
    flag: "max-body-bytes",
    env: "UMBRA_MAX_BODY_BYTES",
    kind: "int",
    default: 4 * 1024 * 1024,
    min: 1024,
    max: 1 << 30,
    help: "largest accepted request body",
  },
  /** The time a client has to send a whole request body (then 504 and the connection closed). */
  bodyTimeoutMs: {
    flag: "body-timeout-ms",
    env: "UMBRA_BODY_TIMEOUT_MS",
    kind: "int",
    default: MINUTE_MS,
    min: 100,
    max: HOUR_MS,
    help: "time a client has to send a whole request body",
  },
  /** Micro-USD per million tokens, for models without a stored price. */
  fallbackInputPrice: {
    flag: "fallback-input-price",
    env: "UMBRA_FALLBACK_INPUT_PRICE",
    kind: "int",
    default: 500_000,
    min: 0,
    max: 1e12,
    help: "micro-USD per million input tokens",
  },
  fallbackOutputPrice: {
    flag: "fallback-output-price",
    env: "UMBRA_FALLBACK_OUTPUT_PRICE",
    kind: "int",
    default: 1_500_000,
    min: 0,
    max: 1e12,
    help: "micro-USD per million output tokens",
  },
  /** Cache-read rate = input rate less this percentage when no explicit rate is stored. */
  cacheReadDiscountPercent: {
    flag: "cache-read-discount",
    env: "UMBRA_CACHE_READ_DISCOUNT",
    kind: "int",
    default: 50,
    min: 0,
    max: 100,
    help: "percent off the input rate for cached tokens",
  },
  jwtIssuer: { flag: "jwt-issuer", env: "UMBRA_JWT_ISSUER", kind: "string", help: "expected JWT iss" },
  jwtAudience: { flag: "jwt-audience", env: "UMBRA_JWT_AUDIENCE", kind: "string", help: "expected JWT aud" },
  jwtJwksUrl: { flag: "jwt-jwks-url", env: "UMBRA_JWT_JWKS_URL", kind: "string", help: "identity provider JWKS URL" },
  jwtPublicKey: {
    flag: "jwt-public-key",
    env: "UMBRA_JWT_PUBLIC_KEY",
    kind: "string",
    secret: true,
    help: "static JWT verification key (PEM or JWK JSON)",
  },
  jwtAccountClaim: {
    flag: "jwt-account-claim",
    env: "UMBRA_JWT_ACCOUNT_CLAIM",
    kind: "string",
    default: "sub",
    help: "claim that names the account (default sub)",
  },
  // Default: http(s)://<listen address> when it is a loopback address, else none (config.ts publicBaseUrl).
  publicUrl: { flag: "public-url", env: "UMBRA_PUBLIC_URL", kind: "string", help: "public base URL (console links, OIDC redirect)" },
  oidcClientId: { flag: "oidc-client-id", env: "UMBRA_OIDC_CLIENT_ID", kind: "string", help: "console OIDC client id (off unset)" },
  oidcClientSecret: { flag: "oidc-client-secret", env: "UMBRA_OIDC_CLIENT_SECRET", kind: "string", secret: true, help: "its secret" },
  /** Output budget when a request names none (spec: server default). */
  defaultMaxTokens: {
    flag: "default-max-tokens",
    env: "UMBRA_DEFAULT_MAX_TOKENS",
    kind: "int",
    default: 4096,
    min: 1,
    max: 10_000_000,
    help: "output budget when a request names none",
  },
  /** Time for the first content to arrive, over all failover attempts (then 429). */
  firstContentTimeoutMs: {
    flag: "first-content-timeout-ms",
    env: "UMBRA_FIRST_CONTENT_TIMEOUT_MS",
    kind: "int",
    default: 30_000,
    min: 10,
    max: HOUR_MS,
    help: "deadline for first content",
  },
  /** Time for a provider to acknowledge an inference before the request moves on. */
  acceptTimeoutMs: {
    flag: "accept-timeout-ms",
    env: "UMBRA_ACCEPT_TIMEOUT_MS",
    kind: "int",
    default: 5_000,
    min: 10,
    max: HOUR_MS,
    help: "deadline for a provider to accept",
  },
  /** Time for the whole answer (then 504, or an in-band timeout error after commit). */
  requestTimeoutMs: {
    flag: "request-timeout-ms",
    env: "UMBRA_REQUEST_TIMEOUT_MS",
    kind: "int",
    default: 10 * MINUTE_MS,
    min: 10,
    max: DAY_MS,
    help: "deadline for the whole answer",
  },
  /** Providers tried for one request before first content. */
  maxAttempts: {
    flag: "max-attempts",
    env: "UMBRA_MAX_ATTEMPTS",
    kind: "int",
    default: 3,
    min: 1,
    max: 16,
    help: "providers tried before first content",
  },
  providerHeartbeatMs: {
    flag: "provider-heartbeat-ms",
    env: "UMBRA_PROVIDER_HEARTBEAT_MS",
    kind: "int",
    default: 5_000,
    min: 10,
    max: 10 * MINUTE_MS,
    help: "provider heartbeat interval",
  },
  /** A provider silent for this long is disconnected and its requests fail over. */
  providerLivenessMs: {
    flag: "provider-liveness-ms",
    env: "UMBRA_PROVIDER_LIVENESS_MS",
    kind: "int",
    default: 15_000,
    min: 20,
    max: HOUR_MS,
    help: "provider liveness timeout",
  },
  // Provider connections open at once with one device token, counting those still before `welcome`;
  // the next is refused (HTTP 429 before the upgrade, or close 4029).
  maxSessionsPerToken: {
    flag: "max-sessions-per-token",
    env: "UMBRA_MAX_SESSIONS_PER_TOKEN",
    kind: "int",
    default: 4,
    min: 1,
    max: 1024,
    help: "provider connections open at once per device token",
  },
  /** The platform's share of every charge, in percent; the provider earns the rest. */
  platformFeePercent: {
    flag: "platform-fee",
    env: "UMBRA_PLATFORM_FEE",
    kind: "int",
    default: 10,
    min: 0,
    max: 100,
    help: "platform share of each charge, percent",
  },
  /** Billing and rate limits; off only in development (benchmarks compare both). */
  metering: {
    flag: "metering",
    env: "UMBRA_METERING",
    kind: "switch",
    default: "on",
    help: "billing and rate limits (off: development only)",
  },
  // On SIGTERM or SIGINT: how long answers in flight may take to finish before the providers are
  // disconnected (new requests get 503 meanwhile). 0: end them at once.
  shutdownDrainMs: {
    flag: "shutdown-drain-ms",
    env: "UMBRA_SHUTDOWN_DRAIN_MS",
    kind: "int",
    default: 10_000,
    min: 0,
    max: HOUR_MS,
    help: "on SIGTERM, time for answers in flight to finish (0 = none)",
  },
  // Settlements per second from which they are grouped (journaled and applied to the database in larger
  // commits, src/billing/settlement-writer.ts); below it each is committed at once. 0 (the default): always grouped.
  settlementGroupAbove: {
    flag: "settlement-group-above",
    env: "UMBRA_SETTLEMENT_GROUP_ABOVE",
    kind: "int",
    default: 0,
    min: 0,
    max: 1_000_000_000,
    help: "settlements per second from which they are grouped (0 = always)",
  },
  // SQLite WAL checkpoints: `worker` (a Worker of their own: src/store/sqlite/checkpointer.ts) or `inline` (diagnosis).
  sqliteCheckpoints: {
    flag: "sqlite-checkpoints",
    env: "UMBRA_SQLITE_CHECKPOINTS",
    kind: "enum",
    values: ["worker", "inline"],
    default: "worker",
    help: "SQLite WAL checkpoints: worker (off the event loop) or inline",
  },
  // Config: null for 0 (no limit).
  defaultRpm: {
    flag: "default-rpm",
    env: "UMBRA_DEFAULT_RPM",
    kind: "int",
    default: 0,
    min: 0,
    max: 1_000_000_000,
    help: "requests per minute for keys without a limit (0 = none)",
  },
  defaultTpm: {
    flag: "default-tpm",
    env: "UMBRA_DEFAULT_TPM",
    kind: "int",
    default: 0,
    min: 0,
    max: 1_000_000_000_000,
    help: "tokens per minute for keys without a limit (0 = none)",
  },
  /** How often an attested provider is challenged, and how long it has to answer. */
  challengeIntervalMs: {
    flag: "challenge-interval-ms",
    env: "UMBRA_CHALLENGE_INTERVAL_MS",
    kind: "int",
    default: 5 * MINUTE_MS,
    min: 20,
    max: DAY_MS,
    help: "provider challenge interval",
  },
  challengeTimeoutMs: {
    flag: "challenge-timeout-ms",
    env: "UMBRA_CHALLENGE_TIMEOUT_MS",
    kind: "int",
    default: 30_000,
    min: 10,
    max: HOUR_MS,
    help: "time to answer a challenge",
  },
  /** Requests that may wait for a free provider slot, per model; beyond it 429 capacity_exhausted. */
  maxQueuedPerModel: {
    flag: "max-queued-per-model",
    env: "UMBRA_MAX_QUEUED_PER_MODEL",
    kind: "int",
    default: 64,
    min: 0,
    max: 1_000_000,
    help: "requests waiting for a slot, per model",
  },
  // Default: configfs-tsm in production, dev in development.
  attestation: {
    flag: "attestation",
    env: "UMBRA_ATTESTATION",
    kind: "enum",
    values: ["dev", "configfs-tsm", "none"],
    help: "coordinator evidence source: dev, configfs-tsm or none",
  },
  /** The confidential-VM platform configfs-tsm must report (its kernel provider is checked against it). */
  attestationPlatform: {
    flag: "attestation-platform",
    env: "UMBRA_ATTESTATION_PLATFORM",
    kind: "enum",
    values: ["sev-snp", "tdx"],
    default: "sev-snp",
    help: "platform configfs-tsm must report",
  },
  tlsPublicKeyFile: {
    flag: "tls-public-key-file",
    env: "UMBRA_TLS_PUBLIC_KEY_FILE",
    kind: "string",
    help: "PEM certificate or public key of the TLS endpoint (bound in the report data)",
  },
  tls: {
    flag: "tls",
    env: "UMBRA_TLS",
    kind: "enum",
    values: ["off", "self-signed", "acme"],
    default: "off",
    help: "TLS in the coordinator: off, self-signed or acme (key made in memory at start)",
  },
  // The default applies to self-signed; acme requires names.
  tlsNames: {
    flag: "tls-names",
    env: "UMBRA_TLS_NAMES",
    kind: "string",
    default: "localhost",
    help: "comma-separated names the certificate covers",
  },
  acmeDirectory: {
    flag: "acme-directory",
    env: "UMBRA_ACME_DIRECTORY",
    kind: "string",
    default: "https://acme-v02.api.letsencrypt.org/directory",
    help: "ACME directory URL",
  },
  acmeEmail: { flag: "acme-email", env: "UMBRA_ACME_EMAIL", kind: "string", help: "contact address for the ACME account" },
  acmeHttpPort: {
    flag: "acme-http-port",
    env: "UMBRA_ACME_HTTP_PORT",
    kind: "int",
    default: 80,
    min: 0,
    max: 65535,
    help: "plain-HTTP port for HTTP-01 challenges",
  },
  acmeCaFile: {
    flag: "acme-ca-file",
    env: "UMBRA_ACME_CA_FILE",
    kind: "string",
    help: "PEM CA certificates for the ACME directory's HTTPS",
  },
  expectedMeasurement: {
    flag: "expected-measurement",
    env: "UMBRA_EXPECTED_MEASUREMENT",
    kind: "string",
    help: "the build's expected launch measurement, 96 hex digits",
  },
  // Configuration binding and provisioning (issue 19 point 5; docs/operations.md "Configuration binding").
  // Default: cmdline with --config-digest, else none.
  configBinding: {
    flag: "config-binding",
    env: "UMBRA_CONFIG_BINDING",
    kind: "enum",
    values: ["none", "cmdline", "host-data"],
    help: "where the configuration digest is bound: none, cmdline (--config-digest) or host-data (the report's HOST_DATA)",
  },
  configDigest: {
    flag: "config-digest",
    env: "UMBRA_CONFIG_DIGEST",
    kind: "string",
    help: "the bound configuration digest (the kernel's umbra.config=), 64 hex digits",
  },
  /** `await`: no secret from the host; served: health, attestation and provisioning only, until provisioned. */
  provisioning: {
    flag: "provisioning",
    env: "UMBRA_PROVISIONING",
    kind: "enum",
    values: ["off", "await"],
    default: "off",
    help: "await: secrets are provisioned after start through the attested channel (POST /v1/provision)",
  },
  // Several replicas (issue 21; docs/operations.md "Running several replicas"): config/cluster-settings.ts.
  ...CLUSTER_SETTINGS,
  // MDM enrolment (issue 23; docs/operations.md): config/mdm-enrol-settings.ts.
  ...MDM_ENROL_SETTINGS,
  // MDM enrolment through NanoMDM (issue 23), the MDA seed with it: config/mdm-settings.ts.
  ...MDM_SETTINGS,
} as const satisfies SettingTable;

export type SettingName = keyof typeof SETTINGS;

/** parseArgs option descriptors for every setting; CLIs merge these with their own. */
export const CONFIG_OPTIONS: Options = optionsOf(SETTINGS);
