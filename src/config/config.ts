/**
 * Coordinator configuration: parsed once from flags and `UMBRA_*` environment variables, validated, frozen.
 *
 * Precedence: flag > environment > `<NAME>_FILE` (secrets only) > default. Production mode refuses unsafe
 * settings instead of warning about them. Nothing outside src/config reads the environment.
 */
import { createPublicKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { type ParseArgsConfig, parseArgs } from "node:util";
import { TRUST_LEVELS, type TrustLevel } from "../../attestation/provider/levels.ts";
import type { AttestationPlatform, AttestationSource, ConfigBinding, Mode } from "../attestation/coordinator-attestation.ts";
import type { ProvisioningMode } from "../attestation/provisioning.ts";
import type { JwtConfig } from "../auth/jwt.ts";
import { LOG_LEVELS, type LogLevel } from "../observability/logger.ts";
import type { AcmeConfig, TlsConfig, TlsMode } from "../tls/tls-config.ts";
import { ConfigError, type Env, enumSetting, type FlagValues, intSetting, optionsOf, readSetting, type Setting } from "./settings.ts";

export { ConfigError, type Env, type FlagValues } from "./settings.ts";

export type TrustRoot = "apple" | "development";
/** Let's Encrypt's production directory, the default of --acme-directory. */
export const LETS_ENCRYPT_DIRECTORY = "https://acme-v02.api.letsencrypt.org/directory";

export interface Config {
  readonly mode: Mode;
  readonly host: string;
  readonly port: number;
  readonly db: string;
  readonly adminToken?: string;
  readonly minTrust: TrustLevel;
  readonly trustRoot: TrustRoot;
  readonly logLevel: LogLevel;
  readonly maxBodyBytes: number;
  /** The time a client has to send a whole request body (then 504 and the connection closed). */
  readonly bodyTimeoutMs: number;
  /** Micro-USD per million tokens, for models without a stored price. */
  readonly fallbackInputPrice: number;
  readonly fallbackOutputPrice: number;
  /** Cache-read rate = input rate less this percentage when no explicit rate is stored. */
  readonly cacheReadDiscountPercent: number;
  readonly jwt?: JwtConfig;
  /** Output budget when a request names none (spec: server default). */
  readonly defaultMaxTokens: number;
  /** Time for the first content to arrive, over all failover attempts (then 429). */
  readonly firstContentTimeoutMs: number;
  /** Time for a provider to acknowledge an inference before the request moves on. */
  readonly acceptTimeoutMs: number;
  /** Time for the whole answer (then 504, or an in-band timeout error after commit). */
  readonly requestTimeoutMs: number;
  /** Providers tried for one request before first content. */
  readonly maxAttempts: number;
  readonly providerHeartbeatMs: number;
  /** A provider silent for this long is disconnected and its requests fail over. */
  readonly providerLivenessMs: number;
  /**
   * Provider connections open at once with one device token, counting those still before `welcome`;
   * the next is refused (HTTP 429 before the upgrade, or close 4029).
   */
  readonly maxSessionsPerToken: number;
  /** The platform's share of every charge, in percent; the provider earns the rest. */
  readonly platformFeePercent: number;
  /** Billing and rate limits; off only in development (benchmarks compare both). */
  readonly metering: boolean;
  /**
   * Settlements per second from which they are grouped (journaled and applied to the database in larger
   * commits, src/billing/wallets.ts); below it each is committed at once. 0 (the default): always grouped.
   */
  readonly settlementGroupAbove: number;
  /**
   * On SIGTERM or SIGINT: how long answers in flight may take to finish before the providers are
   * disconnected (new requests get 503 meanwhile). 0: end them at once.
   */
  readonly shutdownDrainMs: number;
  /** Requests and tokens per minute for keys (and JWT callers) without their own limits; null = none. */
  readonly defaultRpm: number | null;
  readonly defaultTpm: number | null;
  /** Requests that may wait for a free provider slot, per model; beyond it 429 capacity_exhausted. */
  readonly maxQueuedPerModel: number;
  /** How often an attested provider is challenged, and how long it has to answer. */
  readonly challengeIntervalMs: number;
  readonly challengeTimeoutMs: number;
  /** Evidence source of GET /v1/attestation; `dev` is refused in production. */
  readonly attestation: AttestationSource;
  /** The confidential-VM platform configfs-tsm must report (its kernel provider is checked against it). */
  readonly attestationPlatform: AttestationPlatform;
  /**
   * DER SubjectPublicKeyInfo of the TLS endpoint that fronts the coordinator (from --tls-public-key-file);
   * null when not configured: the TLS half of the report data is then 32 zero bytes.
   */
  readonly tlsPublicKeySpki: Uint8Array | null;
  /** TLS terminated by the coordinator itself (--tls); exclusive with --tls-public-key-file. */
  readonly tls: TlsConfig;
  /** The build's expected launch measurement (48 bytes), published next to the evidence; null when unknown. */
  readonly expectedMeasurement: Uint8Array | null;
  // Configuration binding and provisioning (issue 19 point 5; docs/operations.md "Configuration binding").
  /** Where the configuration's digest is bound; the coordinator refuses to start when it differs. */
  readonly configBinding: ConfigBinding;
  /** The bound digest (32 bytes) for `cmdline`: the kernel's `umbra.config=`, handed over by /init. */
  readonly configDigest: Uint8Array | null;
  /** `await`: no secret from the host; served: health, attestation and provisioning only, until provisioned. */
  readonly provisioning: ProvisioningMode;
}

/** Every setting, with its flag and environment twin. docs/operations.md lists the same table. */
export const SETTINGS = {
  listen: { flag: "listen", env: "UMBRA_LISTEN", kind: "string", help: "host:port to listen on" },
  db: { flag: "db", env: "UMBRA_DB", kind: "string", help: "SQLite database path" },
  adminToken: { flag: "admin-token", env: "UMBRA_ADMIN_TOKEN", kind: "string", secret: true, help: "bearer token for /admin/v1" },
  mode: { flag: "mode", env: "UMBRA_MODE", kind: "enum", values: ["production", "development"], help: "production or development" },
  minTrust: { flag: "min-trust", env: "UMBRA_MIN_TRUST", kind: "enum", values: TRUST_LEVELS, help: "routing floor" },
  trustRoot: {
    flag: "trust-root",
    env: "UMBRA_TRUST_ROOT",
    kind: "enum",
    values: ["apple", "development"],
    help: "attestation trust root",
  },
  logLevel: { flag: "log-level", env: "UMBRA_LOG_LEVEL", kind: "enum", values: LOG_LEVELS, help: "error, warn, info or debug" },
  maxBodyBytes: { flag: "max-body-bytes", env: "UMBRA_MAX_BODY_BYTES", kind: "int", help: "largest accepted request body" },
  bodyTimeoutMs: {
    flag: "body-timeout-ms",
    env: "UMBRA_BODY_TIMEOUT_MS",
    kind: "int",
    help: "time a client has to send a whole request body",
  },
  fallbackInputPrice: {
    flag: "fallback-input-price",
    env: "UMBRA_FALLBACK_INPUT_PRICE",
    kind: "int",
    help: "micro-USD per million input tokens",
  },
  fallbackOutputPrice: {
    flag: "fallback-output-price",
    env: "UMBRA_FALLBACK_OUTPUT_PRICE",
    kind: "int",
    help: "micro-USD per million output tokens",
  },
  cacheReadDiscountPercent: {
    flag: "cache-read-discount",
    env: "UMBRA_CACHE_READ_DISCOUNT",
    kind: "int",
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
    help: "claim that names the account (default sub)",
  },
  defaultMaxTokens: {
    flag: "default-max-tokens",
    env: "UMBRA_DEFAULT_MAX_TOKENS",
    kind: "int",
    help: "output budget when a request names none",
  },
  firstContentTimeoutMs: {
    flag: "first-content-timeout-ms",
    env: "UMBRA_FIRST_CONTENT_TIMEOUT_MS",
    kind: "int",
    help: "deadline for first content",
  },
  acceptTimeoutMs: { flag: "accept-timeout-ms", env: "UMBRA_ACCEPT_TIMEOUT_MS", kind: "int", help: "deadline for a provider to accept" },
  requestTimeoutMs: { flag: "request-timeout-ms", env: "UMBRA_REQUEST_TIMEOUT_MS", kind: "int", help: "deadline for the whole answer" },
  maxAttempts: { flag: "max-attempts", env: "UMBRA_MAX_ATTEMPTS", kind: "int", help: "providers tried before first content" },
  providerHeartbeatMs: {
    flag: "provider-heartbeat-ms",
    env: "UMBRA_PROVIDER_HEARTBEAT_MS",
    kind: "int",
    help: "provider heartbeat interval",
  },
  providerLivenessMs: { flag: "provider-liveness-ms", env: "UMBRA_PROVIDER_LIVENESS_MS", kind: "int", help: "provider liveness timeout" },
  maxSessionsPerToken: {
    flag: "max-sessions-per-token",
    env: "UMBRA_MAX_SESSIONS_PER_TOKEN",
    kind: "int",
    help: "provider connections open at once per device token",
  },
  platformFeePercent: { flag: "platform-fee", env: "UMBRA_PLATFORM_FEE", kind: "int", help: "platform share of each charge, percent" },
  metering: {
    flag: "metering",
    env: "UMBRA_METERING",
    kind: "enum",
    values: ["on", "off"],
    help: "billing and rate limits (off: development only)",
  },
  shutdownDrainMs: {
    flag: "shutdown-drain-ms",
    env: "UMBRA_SHUTDOWN_DRAIN_MS",
    kind: "int",
    help: "on SIGTERM, time for answers in flight to finish (0 = none)",
  },
  settlementGroupAbove: {
    flag: "settlement-group-above",
    env: "UMBRA_SETTLEMENT_GROUP_ABOVE",
    kind: "int",
    help: "settlements per second from which they are grouped (0 = always)",
  },
  defaultRpm: {
    flag: "default-rpm",
    env: "UMBRA_DEFAULT_RPM",
    kind: "int",
    help: "requests per minute for keys without a limit (0 = none)",
  },
  defaultTpm: { flag: "default-tpm", env: "UMBRA_DEFAULT_TPM", kind: "int", help: "tokens per minute for keys without a limit (0 = none)" },
  challengeIntervalMs: {
    flag: "challenge-interval-ms",
    env: "UMBRA_CHALLENGE_INTERVAL_MS",
    kind: "int",
    help: "provider challenge interval",
  },
  challengeTimeoutMs: { flag: "challenge-timeout-ms", env: "UMBRA_CHALLENGE_TIMEOUT_MS", kind: "int", help: "time to answer a challenge" },
  maxQueuedPerModel: {
    flag: "max-queued-per-model",
    env: "UMBRA_MAX_QUEUED_PER_MODEL",
    kind: "int",
    help: "requests waiting for a slot, per model",
  },
  attestation: {
    flag: "attestation",
    env: "UMBRA_ATTESTATION",
    kind: "enum",
    values: ["dev", "configfs-tsm", "none"],
    help: "coordinator evidence source: dev, configfs-tsm or none",
  },
  attestationPlatform: {
    flag: "attestation-platform",
    env: "UMBRA_ATTESTATION_PLATFORM",
    kind: "enum",
    values: ["sev-snp", "tdx"],
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
    help: "TLS in the coordinator: off, self-signed or acme (key made in memory at start)",
  },
  tlsNames: { flag: "tls-names", env: "UMBRA_TLS_NAMES", kind: "string", help: "comma-separated names the certificate covers" },
  acmeDirectory: { flag: "acme-directory", env: "UMBRA_ACME_DIRECTORY", kind: "string", help: "ACME directory URL" },
  acmeEmail: { flag: "acme-email", env: "UMBRA_ACME_EMAIL", kind: "string", help: "contact address for the ACME account" },
  acmeHttpPort: { flag: "acme-http-port", env: "UMBRA_ACME_HTTP_PORT", kind: "int", help: "plain-HTTP port for HTTP-01 challenges" },
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
  // Configuration binding and provisioning (issue 19 point 5).
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
  provisioning: {
    flag: "provisioning",
    env: "UMBRA_PROVISIONING",
    kind: "enum",
    values: ["off", "await"],
    help: "await: secrets are provisioned after start through the attested channel (POST /v1/provision)",
  },
} as const satisfies Record<string, Setting>;

type SettingName = keyof typeof SETTINGS;

/** parseArgs option descriptors for every setting; CLIs merge these with their own. */
export const CONFIG_OPTIONS: NonNullable<ParseArgsConfig["options"]> = optionsOf(SETTINGS);

const DEFAULTS = {
  listen: "127.0.0.1:8080",
  db: "./data/umbra.db",
  logLevel: "info",
  maxBodyBytes: 4 * 1024 * 1024,
  bodyTimeoutMs: 60_000,
  fallbackInputPrice: 500_000,
  fallbackOutputPrice: 1_500_000,
  cacheReadDiscountPercent: 50,
  defaultMaxTokens: 4096,
  firstContentTimeoutMs: 30_000,
  acceptTimeoutMs: 5_000,
  requestTimeoutMs: 600_000,
  maxAttempts: 3,
  providerHeartbeatMs: 5_000,
  providerLivenessMs: 15_000,
  maxSessionsPerToken: 4,
  platformFeePercent: 10,
  maxQueuedPerModel: 64,
  settlementGroupAbove: 0,
  shutdownDrainMs: 10_000,
  challengeIntervalMs: 300_000,
  challengeTimeoutMs: 30_000,
  tlsNames: "localhost",
  acmeHttpPort: 80,
} as const;

const raw = (name: SettingName, flags: FlagValues, env: Env) => readSetting(SETTINGS[name], flags, env);
const enumOf = <T extends string>(name: SettingName, value: string | undefined, fallback: T): T =>
  enumSetting(SETTINGS[name], value, fallback);
const intOf = (name: SettingName, value: string | undefined, fallback: number, min: number, max: number) =>
  intSetting(SETTINGS[name], value, fallback, min, max);

function parseListen(value: string): { host: string; port: number } {
  const i = value.lastIndexOf(":");
  const host = i > 0 ? value.slice(0, i).replace(/^\[(.*)\]$/, "$1") : "127.0.0.1";
  const portText = i >= 0 ? value.slice(i + 1) : value;
  const port = /^\d+$/.test(portText) ? Number(portText) : Number.NaN;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new ConfigError(`--listen: '${value}' is not host:port`);
  }
  return { host, port };
}

/**
 * The DER SubjectPublicKeyInfo of a PEM (or DER) certificate or public key file. A private key is refused:
 * the setting names what the TLS endpoint presents, and the coordinator never needs that key.
 */
function readTlsPublicKey(path: string): Uint8Array {
  const flag = `--${SETTINGS.tlsPublicKeyFile.flag}`;
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch {
    throw new ConfigError(`${flag}: cannot read ${path}`);
  }
  const text = bytes.toString("latin1");
  if (text.includes("PRIVATE KEY-----")) throw new ConfigError(`${flag}: ${path} holds a private key; give the certificate or public key`);
  const pem = text.includes("-----BEGIN ");
  const attempts = pem
    ? [() => createPublicKey(text)]
    : [
        () => createPublicKey({ key: bytes, format: "der", type: "spki" }),
        () => createPublicKey({ key: bytes, format: "der", type: "pkcs1" }),
      ];
  for (const attempt of attempts) {
    try {
      const key = attempt();
      if (key.type === "public") return new Uint8Array(key.export({ type: "spki", format: "der" }));
    } catch {}
  }
  throw new ConfigError(`${flag}: ${path} is not a PEM certificate or public key`);
}

/** 127.0.0.0/8, ::1 and localhost: the addresses plain HTTP may listen on in production. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

const DNS_NAME = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i;

/**
 * --tls and its companions. The ACME settings apply to `acme` only; names are DNS names (IP addresses
 * too for a self-signed certificate, which no public CA is asked to vouch for).
 */
function parseTls(flags: FlagValues, env: Env, tlsPublicKeyFile: string | undefined): TlsConfig {
  const mode = enumOf<TlsMode>("tls", raw("tls", flags, env), "off");
  const namesText = raw("tlsNames", flags, env);
  const acmeSettings = (["acmeDirectory", "acmeEmail", "acmeHttpPort", "acmeCaFile"] as const).filter(
    (name) => raw(name, flags, env) !== undefined,
  );
  if (mode !== "acme" && acmeSettings.length > 0) {
    throw new ConfigError(`--${SETTINGS[acmeSettings[0]!].flag} applies to --tls acme only`);
  }
  if (mode === "off") {
    if (namesText !== undefined) throw new ConfigError("--tls-names applies to --tls self-signed or acme only");
    return Object.freeze({ mode, names: Object.freeze([]) });
  }
  if (tlsPublicKeyFile !== undefined) {
    throw new ConfigError(
      `--tls-public-key-file names a TLS endpoint in front of the coordinator; with --tls ${mode} the coordinator's own key is bound`,
    );
  }
  if (mode === "acme" && namesText === undefined) throw new ConfigError("--tls acme needs --tls-names: the DNS names to certify");
  const names = (namesText ?? DEFAULTS.tlsNames)
    .split(",")
    .map((n) => n.trim().toLowerCase())
    .filter((n) => n !== "");
  if (names.length === 0) throw new ConfigError("--tls-names: no name given");
  for (const name of names) {
    const ip = isIP(name) !== 0;
    if (ip && mode === "acme") throw new ConfigError(`--tls-names: '${name}' is an IP address; --tls acme certifies DNS names`);
    if (!ip && !DNS_NAME.test(name)) throw new ConfigError(`--tls-names: '${name}' is not a DNS name`);
  }
  if (mode === "self-signed") return Object.freeze({ mode, names: Object.freeze(names) });

  const directory = raw("acmeDirectory", flags, env) ?? LETS_ENCRYPT_DIRECTORY;
  let url: URL;
  try {
    url = new URL(directory);
  } catch {
    throw new ConfigError(`--acme-directory: '${directory}' is not a URL`);
  }
  if (url.protocol !== "https:") throw new ConfigError("--acme-directory must use https");
  const email = raw("acmeEmail", flags, env);
  if (email !== undefined && !/^[^@\s]+@[^@\s]+$/.test(email)) throw new ConfigError(`--acme-email: '${email}' is not an address`);
  const caFile = raw("acmeCaFile", flags, env);
  const acme: AcmeConfig = {
    directory,
    httpPort: intOf("acmeHttpPort", raw("acmeHttpPort", flags, env), DEFAULTS.acmeHttpPort, 0, 65535),
    ...(email !== undefined ? { email } : {}),
    ...(caFile !== undefined ? { caPem: readCaFile(caFile) } : {}),
  };
  return Object.freeze({ mode, names: Object.freeze(names), acme: Object.freeze(acme) });
}

/** A PEM file of CA certificates, each parsed (a file that holds none is refused). */
function readCaFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    throw new ConfigError(`--acme-ca-file: cannot read ${path}`);
  }
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  try {
    for (const block of blocks) new X509Certificate(block);
  } catch {
    throw new ConfigError(`--acme-ca-file: ${path} holds a certificate that does not parse`);
  }
  if (blocks.length === 0) throw new ConfigError(`--acme-ca-file: ${path} holds no PEM certificate`);
  return blocks.join("\n");
}

/** 48 bytes from 96 hex digits (either case). */
function parseMeasurement(value: string): Uint8Array {
  if (!/^[0-9a-fA-F]{96}$/.test(value)) {
    throw new ConfigError(`--${SETTINGS.expectedMeasurement.flag}: expected 96 hex digits (48 bytes), got ${value.length} characters`);
  }
  return new Uint8Array(Buffer.from(value, "hex"));
}

/** 32 bytes from 64 hex digits (either case). */
function parseConfigDigest(value: string): Uint8Array {
  if (!/^[0-9a-fA-F]{64}$/.test(value)) {
    throw new ConfigError(`--${SETTINGS.configDigest.flag}: expected 64 hex digits (a SHA-256), got ${value.length} characters`);
  }
  return new Uint8Array(Buffer.from(value, "hex"));
}

/** The binding settings, checked together: a digest goes with `cmdline`; `host-data` reads it from the report. */
function readBinding(flags: FlagValues, env: Env): { configBinding: ConfigBinding; configDigest: Uint8Array | null } {
  const digest = raw("configDigest", flags, env);
  const given = raw("configBinding", flags, env);
  const configBinding = enumOf<ConfigBinding>("configBinding", given, digest === undefined ? "none" : "cmdline");
  if (configBinding === "cmdline" && digest === undefined) {
    throw new ConfigError("--config-binding cmdline needs --config-digest (the kernel command line's umbra.config=)");
  }
  if (configBinding !== "cmdline" && digest !== undefined) {
    throw new ConfigError(`--config-digest applies to --config-binding cmdline, not ${configBinding}`);
  }
  return { configBinding, configDigest: digest === undefined ? null : parseConfigDigest(digest) };
}

/**
 * Builds the frozen configuration. `defaultMode` is `production` for `serve`, `development` for `dev`.
 * Throws ConfigError with a message naming the flag for any invalid or unsafe value.
 */
export function loadConfig(flags: FlagValues, env: Env, defaultMode: Mode = "production"): Config {
  const mode = enumOf<Mode>("mode", raw("mode", flags, env), defaultMode);
  const { host, port } = parseListen(raw("listen", flags, env) ?? DEFAULTS.listen);
  const adminToken = raw("adminToken", flags, env);
  const trustRoot = enumOf<TrustRoot>("trustRoot", raw("trustRoot", flags, env), mode === "production" ? "apple" : "development");
  const minTrust = enumOf<TrustLevel>("minTrust", raw("minTrust", flags, env), mode === "production" ? "hardware" : "none");

  const attestation = enumOf<AttestationSource>(
    "attestation",
    raw("attestation", flags, env),
    mode === "production" ? "configfs-tsm" : "dev",
  );
  const tlsPublicKeyFile = raw("tlsPublicKeyFile", flags, env);
  const measurement = raw("expectedMeasurement", flags, env);

  const issuer = raw("jwtIssuer", flags, env);
  const audience = raw("jwtAudience", flags, env);
  const jwksUrl = raw("jwtJwksUrl", flags, env);
  const publicKey = raw("jwtPublicKey", flags, env);
  let jwt: JwtConfig | undefined;
  if (jwksUrl !== undefined || publicKey !== undefined) {
    if (jwksUrl !== undefined && publicKey !== undefined) {
      throw new ConfigError("--jwt-jwks-url and --jwt-public-key are exclusive: give one");
    }
    if (!issuer || !audience) throw new ConfigError("JWT authentication needs --jwt-issuer and --jwt-audience");
    if (jwksUrl !== undefined) {
      let url: URL;
      try {
        url = new URL(jwksUrl);
      } catch {
        throw new ConfigError(`--jwt-jwks-url: '${jwksUrl}' is not a URL`);
      }
      if (mode === "production" && url.protocol !== "https:") {
        throw new ConfigError("--jwt-jwks-url must use https in production mode");
      }
    }
    jwt = Object.freeze({
      issuer,
      audience,
      accountClaim: raw("jwtAccountClaim", flags, env) ?? "sub",
      ...(jwksUrl !== undefined ? { jwksUrl } : {}),
      ...(publicKey !== undefined ? { publicKey } : {}),
    });
  }

  const config: Config = {
    mode,
    host,
    port,
    db: raw("db", flags, env) ?? DEFAULTS.db,
    minTrust,
    trustRoot,
    logLevel: enumOf<LogLevel>("logLevel", raw("logLevel", flags, env), DEFAULTS.logLevel),
    maxBodyBytes: intOf("maxBodyBytes", raw("maxBodyBytes", flags, env), DEFAULTS.maxBodyBytes, 1024, 1 << 30),
    bodyTimeoutMs: intOf("bodyTimeoutMs", raw("bodyTimeoutMs", flags, env), DEFAULTS.bodyTimeoutMs, 100, 3_600_000),
    fallbackInputPrice: intOf("fallbackInputPrice", raw("fallbackInputPrice", flags, env), DEFAULTS.fallbackInputPrice, 0, 1e12),
    fallbackOutputPrice: intOf("fallbackOutputPrice", raw("fallbackOutputPrice", flags, env), DEFAULTS.fallbackOutputPrice, 0, 1e12),
    cacheReadDiscountPercent: intOf(
      "cacheReadDiscountPercent",
      raw("cacheReadDiscountPercent", flags, env),
      DEFAULTS.cacheReadDiscountPercent,
      0,
      100,
    ),
    defaultMaxTokens: intOf("defaultMaxTokens", raw("defaultMaxTokens", flags, env), DEFAULTS.defaultMaxTokens, 1, 10_000_000),
    firstContentTimeoutMs: intOf(
      "firstContentTimeoutMs",
      raw("firstContentTimeoutMs", flags, env),
      DEFAULTS.firstContentTimeoutMs,
      10,
      3_600_000,
    ),
    acceptTimeoutMs: intOf("acceptTimeoutMs", raw("acceptTimeoutMs", flags, env), DEFAULTS.acceptTimeoutMs, 10, 3_600_000),
    requestTimeoutMs: intOf("requestTimeoutMs", raw("requestTimeoutMs", flags, env), DEFAULTS.requestTimeoutMs, 10, 86_400_000),
    maxAttempts: intOf("maxAttempts", raw("maxAttempts", flags, env), DEFAULTS.maxAttempts, 1, 16),
    providerHeartbeatMs: intOf("providerHeartbeatMs", raw("providerHeartbeatMs", flags, env), DEFAULTS.providerHeartbeatMs, 10, 600_000),
    providerLivenessMs: intOf("providerLivenessMs", raw("providerLivenessMs", flags, env), DEFAULTS.providerLivenessMs, 20, 3_600_000),
    maxSessionsPerToken: intOf("maxSessionsPerToken", raw("maxSessionsPerToken", flags, env), DEFAULTS.maxSessionsPerToken, 1, 1024),
    platformFeePercent: intOf("platformFeePercent", raw("platformFeePercent", flags, env), DEFAULTS.platformFeePercent, 0, 100),
    metering: enumOf<"on" | "off">("metering", raw("metering", flags, env), "on") === "on",
    shutdownDrainMs: intOf("shutdownDrainMs", raw("shutdownDrainMs", flags, env), DEFAULTS.shutdownDrainMs, 0, 3_600_000),
    settlementGroupAbove: intOf(
      "settlementGroupAbove",
      raw("settlementGroupAbove", flags, env),
      DEFAULTS.settlementGroupAbove,
      0,
      1_000_000_000,
    ),
    defaultRpm: intOf("defaultRpm", raw("defaultRpm", flags, env), 0, 0, 1_000_000_000) || null,
    defaultTpm: intOf("defaultTpm", raw("defaultTpm", flags, env), 0, 0, 1_000_000_000_000) || null,
    maxQueuedPerModel: intOf("maxQueuedPerModel", raw("maxQueuedPerModel", flags, env), DEFAULTS.maxQueuedPerModel, 0, 1_000_000),
    challengeIntervalMs: intOf("challengeIntervalMs", raw("challengeIntervalMs", flags, env), DEFAULTS.challengeIntervalMs, 20, 86_400_000),
    challengeTimeoutMs: intOf("challengeTimeoutMs", raw("challengeTimeoutMs", flags, env), DEFAULTS.challengeTimeoutMs, 10, 3_600_000),
    attestation,
    attestationPlatform: enumOf<AttestationPlatform>("attestationPlatform", raw("attestationPlatform", flags, env), "sev-snp"),
    tlsPublicKeySpki: tlsPublicKeyFile === undefined ? null : readTlsPublicKey(tlsPublicKeyFile),
    tls: parseTls(flags, env, tlsPublicKeyFile),
    expectedMeasurement: measurement === undefined ? null : parseMeasurement(measurement),
    ...readBinding(flags, env),
    provisioning: enumOf<ProvisioningMode>("provisioning", raw("provisioning", flags, env), "off"),
    ...(adminToken !== undefined ? { adminToken } : {}),
    ...(jwt !== undefined ? { jwt } : {}),
  };
  if (config.challengeTimeoutMs >= config.challengeIntervalMs) {
    throw new ConfigError("--challenge-timeout-ms must be shorter than --challenge-interval-ms");
  }
  if (config.providerLivenessMs <= config.providerHeartbeatMs) {
    throw new ConfigError("--provider-liveness-ms must be longer than --provider-heartbeat-ms");
  }
  if (config.provisioning === "await") {
    // The host supplies flags and environment: a secret given there is known to it.
    if (config.adminToken !== undefined) {
      throw new ConfigError(
        "--provisioning await refuses an admin token from flags or environment: provision it (umbra-coordinator provision)",
      );
    }
    if (config.attestation === "none") throw new ConfigError("--provisioning await needs an attestation source (not --attestation none)");
  }

  if (mode === "production") refuseUnsafe(config);
  return Object.freeze(config);
}

function refuseUnsafe(config: Config): void {
  if (!config.metering) throw new ConfigError("production mode refuses --metering off (billing and rate limits)");
  if (config.trustRoot === "development") {
    throw new ConfigError("production mode refuses the development trust root (--trust-root development)");
  }
  if (config.minTrust === "none") {
    throw new ConfigError("production mode refuses --min-trust none (providers without verified evidence are refused in production)");
  }
  if (config.attestation === "dev") {
    throw new ConfigError("production mode refuses development attestation evidence (--attestation dev)");
  }
  // With --provisioning await it is provisioned later (at least 32 characters, src/attestation/provisioning.ts).
  if (config.provisioning !== "await" && config.adminToken === undefined) {
    throw new ConfigError("production mode needs an admin token: set UMBRA_ADMIN_TOKEN or UMBRA_ADMIN_TOKEN_FILE");
  }
  if (config.adminToken !== undefined && config.adminToken.length < 32) {
    throw new ConfigError("production mode needs an admin token of at least 32 characters");
  }
  if (config.tls.mode === "off" && !isLoopbackHost(config.host)) {
    throw new ConfigError(
      `production mode refuses plain HTTP on ${config.host}, which is not a loopback address: use --tls self-signed or --tls acme (plain HTTP is for 127.0.0.1 and ::1 only)`,
    );
  }
}

/** Parses argv with the config options plus a command's own; unknown flags are an error. */
export function parseFlags(
  argv: readonly string[],
  extra: NonNullable<ParseArgsConfig["options"]> = {},
): { values: FlagValues; positionals: string[] } {
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      options: { ...CONFIG_OPTIONS, ...extra },
      allowPositionals: true,
      strict: true,
    });
    return { values, positionals };
  } catch (e) {
    throw new ConfigError(e instanceof Error ? e.message : String(e));
  }
}
