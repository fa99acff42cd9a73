/**
 * Coordinator configuration: parsed once from flags and `UMBRA_*` environment variables, validated, frozen.
 *
 * Precedence: flag > environment > `<NAME>_FILE` (secrets only) > default. Each setting is one entry in
 * coordinator-settings.ts; loadConfig parses the plain ones in a loop, then applies the rules below that
 * read several settings together. Production mode refuses unsafe settings instead of warning about them.
 * Nothing outside src/config reads the environment.
 */
import type { TrustLevel } from "../../attestation/provider/levels.ts";
import type { AttestationSource, ConfigBinding, Mode } from "../attestation/coordinator-attestation.ts";
import type { JwtConfig } from "../auth/jwt.ts";
import type { MdmEnrolmentConfig } from "../mdm/enrolment.ts";
import type { MdmConfig } from "../mdm/types.ts";
import type { TlsConfig } from "../tls/tls-config.ts";
import { type ClusterConfig, parseCluster } from "./cluster-config.ts";
import { CLUSTER_DERIVED } from "./cluster-settings.ts";
import { CONFIG_OPTIONS, SETTINGS, type SettingName } from "./coordinator-settings.ts";
import { readMdaSeed } from "./mda-seed.ts";
import { parseMdmEnrolment } from "./mdm-enrol-config.ts";
import { MDM_ENROL_DERIVED } from "./mdm-enrol-settings.ts";
import { MDM_DERIVED, parseMdm, requireWholeMdm } from "./mdm-settings.ts";
import {
  ConfigError,
  type Env,
  type FlagValues,
  type Options,
  parseOptions,
  parseSetting,
  parseSettings,
  readSetting,
  type SettingValues,
} from "./settings.ts";
import { isLoopbackHost, parseTls, readTlsPublicKey } from "./tls-settings.ts";

export type { ClusterConfig } from "./cluster-config.ts";
export { CONFIG_OPTIONS, SETTINGS } from "./coordinator-settings.ts";
export { ConfigError, type Env, type FlagValues } from "./settings.ts";
export { isLoopbackHost } from "./tls-settings.ts";

export type TrustRoot = "apple" | "development";

/** The console's OpenID Connect client at the JWT issuer (`clientSecret` absent: a public client). */
export interface OidcClientConfig {
  readonly clientId: string;
  readonly clientSecret?: string;
}

/** Let's Encrypt's production directory, the default of --acme-directory. */
export const LETS_ENCRYPT_DIRECTORY: string = SETTINGS.acmeDirectory.default;

/** The settings loadConfig's rules read themselves; every other entry is the Config field of its name. */
const DERIVED = [
  "listen",
  "adminToken",
  "dbPassword",
  "mode",
  "minTrust",
  "trustRoot",
  "jwtIssuer",
  "jwtAudience",
  "jwtJwksUrl",
  "jwtPublicKey",
  "jwtAccountClaim",
  "publicUrl",
  "oidcClientId",
  "oidcClientSecret",
  "defaultRpm",
  "defaultTpm",
  "attestation",
  "tlsPublicKeyFile",
  "tls",
  "tlsNames",
  "acmeDirectory",
  "acmeEmail",
  "acmeHttpPort",
  "acmeCaFile",
  "expectedMeasurement",
  "configBinding",
  "configDigest",
  "mdaSeed",
  ...CLUSTER_DERIVED,
  ...MDM_ENROL_DERIVED,
  ...MDM_DERIVED,
] as const satisfies readonly SettingName[];

/** The plain settings (their comments are in coordinator-settings.ts), then those built by the rules. */
export interface Config extends SettingValues<Omit<typeof SETTINGS, (typeof DERIVED)[number]>> {
  readonly mode: Mode;
  readonly host: string;
  readonly port: number;
  readonly adminToken?: string;
  /** The password of a postgres:// `db`, given apart from the URL (a secret: not in the digest). */
  readonly dbPassword?: string;
  readonly minTrust: TrustLevel;
  readonly trustRoot: TrustRoot;
  readonly jwt?: JwtConfig;
  /** The configured public base URL (origin and optional path, no trailing slash); see publicBaseUrl. */
  readonly publicUrl?: string;
  /** Console sign-in with OpenID Connect against the JWT issuer; absent: off. */
  readonly oidc?: OidcClientConfig;
  /** Requests and tokens per minute for keys (and JWT callers) without their own limits; null = none. */
  readonly defaultRpm: number | null;
  readonly defaultTpm: number | null;
  /** Evidence source of GET /v1/attestation; `dev` is refused in production. */
  readonly attestation: AttestationSource;
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
  /** Cluster mode (postgres:// --db, Redis and NATS together; config/cluster-settings.ts); null: one coordinator. */
  readonly cluster: ClusterConfig | null;
  /** MDM enrolment (--mdm-server-url and the MDM CA; config/mdm-enrol-config.ts); null: off, its routes 404. */
  readonly mdmEnrolment: MdmEnrolmentConfig | null;
  /** MDM mode (UMBRA_MDM_URL; config/mdm-settings.ts); null: off, /v1/mdm/webhook is 404. */
  readonly mdm: MdmConfig | null;
  /** The MDA nonces' secret key, at least 32 bytes (config/mda-seed.ts; a secret: not in the digest). */
  readonly mdaSeed?: Uint8Array;
}

/**
 * Builds the frozen configuration. `defaultMode` is `production` for `serve`, `development` for `dev`.
 * Throws ConfigError with a message naming the flag for any invalid or unsafe value.
 */
export function loadConfig(flags: FlagValues, env: Env, defaultMode: Mode = "production"): Config {
  const raw = (name: SettingName) => readSetting(SETTINGS[name], flags, env);
  const mode: Mode = parseSetting(SETTINGS.mode, raw("mode")) ?? defaultMode;
  const production = mode === "production";
  const { host, port } = parseListen(parseSetting(SETTINGS.listen, raw("listen")));
  const adminToken = raw("adminToken");
  const dbPassword = readDbPassword(raw, production);
  const trustRoot = parseSetting(SETTINGS.trustRoot, raw("trustRoot")) ?? (production ? "apple" : "development");
  const minTrust = parseSetting(SETTINGS.minTrust, raw("minTrust")) ?? (production ? "hardware" : "none");
  const attestation = parseSetting(SETTINGS.attestation, raw("attestation")) ?? (production ? "configfs-tsm" : "dev");
  const tlsPublicKeyFile = raw("tlsPublicKeyFile");
  const measurement = raw("expectedMeasurement");
  const jwt = readJwt(raw, production);
  const publicUrl = readPublicUrl(raw("publicUrl"), production);
  const oidc = readOidc(raw, jwt);
  const awaiting = parseSetting(SETTINGS.provisioning, raw("provisioning")) === "await";
  const cluster = parseCluster(raw, parseSetting(SETTINGS.db, raw("db")), production, awaiting);
  // MDM mode's own settings first (their refusals name them), then the seed it needs in production.
  const mdm = parseMdm(raw, production, isLoopbackHost);
  const mdaSeed = readMdaSeed(raw("mdaSeed"), mdm?.url, production);
  const mdmEnrolment = parseMdmEnrolment(raw, production);
  requireWholeMdm(mdm, mdmEnrolment);

  const config: Config = {
    mode,
    host,
    port,
    minTrust,
    trustRoot,
    ...parseSettings(SETTINGS, DERIVED, raw),
    defaultRpm: parseSetting(SETTINGS.defaultRpm, raw("defaultRpm")) || null,
    defaultTpm: parseSetting(SETTINGS.defaultTpm, raw("defaultTpm")) || null,
    attestation,
    tlsPublicKeySpki: tlsPublicKeyFile === undefined ? null : readTlsPublicKey(tlsPublicKeyFile),
    tls: parseTls(raw, tlsPublicKeyFile),
    expectedMeasurement: measurement === undefined ? null : parseMeasurement(measurement),
    ...readBinding(raw),
    cluster,
    mdmEnrolment,
    mdm,
    ...(adminToken !== undefined ? { adminToken } : {}),
    ...(dbPassword !== undefined ? { dbPassword } : {}),
    ...(jwt !== undefined ? { jwt } : {}),
    ...(publicUrl !== undefined ? { publicUrl } : {}),
    ...(oidc !== undefined ? { oidc } : {}),
    ...(mdaSeed !== undefined ? { mdaSeed } : {}),
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

  if (production) refuseUnsafe(config);
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

/** JWT authentication: a JWKS URL or a static key (exclusive), with issuer and audience; undefined without either. */
/**
 * `--db-password`, for a postgres:// `--db` only. Production refuses a password inside the URL: the URL
 * is bound by the configuration digest and visible to the host (command line, environment).
 */
function readDbPassword(raw: (name: SettingName) => string | undefined, production: boolean): string | undefined {
  const db = parseSetting(SETTINGS.db, raw("db"));
  const postgres = /^postgres(ql)?:\/\//i.test(db);
  const password = raw("dbPassword");
  if (password !== undefined && !postgres) throw new ConfigError("--db-password applies to a postgres:// --db only");
  if (production && postgres && URL.canParse(db) && new URL(db).password !== "") {
    throw new ConfigError(
      "production mode refuses a password inside the --db URL (it is bound to the measurement and visible to the host): give it with UMBRA_DB_PASSWORD_FILE or UMBRA_DB_PASSWORD",
    );
  }
  return password;
}

function readJwt(raw: (name: SettingName) => string | undefined, production: boolean): JwtConfig | undefined {
  const issuer = raw("jwtIssuer");
  const audience = raw("jwtAudience");
  const jwksUrl = raw("jwtJwksUrl");
  const publicKey = raw("jwtPublicKey");
  if (jwksUrl === undefined && publicKey === undefined) return undefined;
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
    if (production && url.protocol !== "https:") throw new ConfigError("--jwt-jwks-url must use https in production mode");
  }
  return Object.freeze({
    issuer,
    audience,
    accountClaim: parseSetting(SETTINGS.jwtAccountClaim, raw("jwtAccountClaim")),
    ...(jwksUrl !== undefined ? { jwksUrl } : {}),
    ...(publicKey !== undefined ? { publicKey } : {}),
  });
}

/** `--public-url`: an absolute http(s) URL without query or fragment, kept without its trailing slash. */
function readPublicUrl(value: string | undefined, production: boolean): string | undefined {
  if (value === undefined) return undefined;
  const url = URL.canParse(value) ? new URL(value) : undefined;
  if (!url || (url.protocol !== "https:" && url.protocol !== "http:") || url.search !== "" || url.hash !== "" || url.username !== "") {
    throw new ConfigError(`--public-url: '${value}' is not an http(s) URL without query, fragment or user`);
  }
  if (production && url.protocol === "http:" && !isLoopbackHost(url.hostname.replace(/^\[(.*)\]$/, "$1"))) {
    throw new ConfigError("production mode refuses an http --public-url off loopback: console cookies would cross the network in clear");
  }
  return `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
}

/** `--oidc-client-id` (and its secret): needs the JWT issuer, whose discovery document it uses. */
function readOidc(raw: (name: SettingName) => string | undefined, jwt: JwtConfig | undefined): OidcClientConfig | undefined {
  const clientId = raw("oidcClientId");
  const clientSecret = raw("oidcClientSecret");
  if (clientId === undefined) {
    if (clientSecret !== undefined) throw new ConfigError("--oidc-client-secret needs --oidc-client-id");
    return undefined;
  }
  if (jwt === undefined) throw new ConfigError("--oidc-client-id needs JWT authentication (--jwt-issuer, --jwt-audience, a key)");
  return Object.freeze({ clientId, ...(clientSecret !== undefined ? { clientSecret } : {}) });
}

/**
 * The coordinator's public base URL (console links, OpenID Connect redirect): `--public-url`, else the
 * listen address when it is a loopback one (http, or https with --tls); undefined otherwise. Never the
 * Host of a request.
 */
export function publicBaseUrl(config: Pick<Config, "publicUrl" | "host" | "port" | "tls">): string | undefined {
  if (config.publicUrl !== undefined) return config.publicUrl;
  if (!isLoopbackHost(config.host) || config.port === 0) return undefined;
  const host = config.host.includes(":") ? `[${config.host}]` : config.host;
  return `${config.tls.mode === "off" ? "http" : "https"}://${host}:${config.port}`;
}

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
function readBinding(raw: (name: SettingName) => string | undefined): { configBinding: ConfigBinding; configDigest: Uint8Array | null } {
  const digest = raw("configDigest");
  const configBinding = parseSetting(SETTINGS.configBinding, raw("configBinding")) ?? (digest === undefined ? "none" : "cmdline");
  if (configBinding === "cmdline" && digest === undefined) {
    throw new ConfigError("--config-binding cmdline needs --config-digest (the kernel command line's umbra.config=)");
  }
  if (configBinding !== "cmdline" && digest !== undefined) {
    throw new ConfigError(`--config-digest applies to --config-binding cmdline, not ${configBinding}`);
  }
  return { configBinding, configDigest: digest === undefined ? null : parseConfigDigest(digest) };
}

/** Parses argv with the config options plus a command's own; unknown flags are an error. */
export function parseFlags(argv: readonly string[], extra: Options = {}): { values: FlagValues; positionals: string[] } {
  return parseOptions(argv, { ...CONFIG_OPTIONS, ...extra });
}
