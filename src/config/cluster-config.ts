/**
 * Cluster mode's settings and their rules (docs/operations.md "Running several replicas"): several
 * coordinators share a postgres:// `--db` (money, keys), Redis (`--redis-url`: rate-limit state) and NATS
 * (`--nats-url`: presence, forwarded requests). All three or none: a partial set is refused naming what
 * is missing; Postgres alone stays one coordinator. Passwords are secrets apart from the URLs (not in the
 * configuration digest); production refuses one inside a URL, plaintext Redis or NATS off loopback, and
 * NATS without credentials off loopback. The prefix and the replica id become Redis keys and NATS subject
 * tokens: letters, digits, `_` and `-`. The replica id defaults to one generated per process; the hold
 * lease (`--hold-ttl-ms`) is the same for every replica (in the digest); `--settlement-journal` is each replica's own.
 */
import { randomBytes } from "node:crypto";
import type { RedisClientKind } from "../limits/redis-client.ts";
import { CLUSTER_DERIVED, CLUSTER_SETTINGS, type ClusterSettingName } from "./cluster-settings.ts";
import { ConfigError, parseSetting } from "./settings.ts";
import { isLoopbackHost } from "./tls-settings.ts";

export interface ClusterConfig {
  readonly redisUrl: string;
  /** A secret: not in the configuration digest. */
  readonly redisPassword?: string;
  readonly redisClient: RedisClientKind;
  readonly redisTimeoutMs: number;
  /** The NATS servers, each nats:// or tls://. */
  readonly natsServers: readonly string[];
  /** With a user in the URL its password, else a token. A secret: not in the configuration digest. */
  readonly natsPassword?: string;
  /** TLS to every NATS server (--nats-tls, or any tls:// server): the client's `tls` option. */
  readonly natsTls: boolean;
  /** Redis key prefix and NATS subject prefix. */
  readonly prefix: string;
  /** This replica's name; per process, so not in the configuration digest. */
  readonly replicaId: string;
  /** The lease of a money hold (ms): renewed every third, swept by any replica once expired. */
  readonly holdTtlMs: number;
  /** This replica's settlement journal (a local file path); none: each settlement waits for its commit. Per replica. */
  readonly settlementJournal?: string;
}

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** A replica id made at start: `r-` and 12 hex digits. */
export const generatedReplicaId = (): string => `r-${randomBytes(6).toString("hex")}`;

type Read = (name: ClusterSettingName | "db") => string | undefined;

/**
 * Cluster mode's settings, or null without them; `db` is the parsed --db. Throws ConfigError.
 * `passwordsLater` (--provisioning await): Redis and NATS passwords may still arrive by provisioning.
 */
export function parseCluster(raw: Read, db: string, production: boolean, passwordsLater = false): ClusterConfig | null {
  const redisText = raw("redisUrl");
  const natsText = raw("natsUrl");
  const postgres = /^postgres(ql)?:\/\//i.test(db);
  if (redisText === undefined && natsText === undefined) {
    const given = CLUSTER_DERIVED.find((name) => raw(name) !== undefined);
    if (given) throw new ConfigError(`--${CLUSTER_SETTINGS[given].flag} applies to cluster mode (--redis-url and --nats-url) only`);
    return null;
  }
  const missing = [
    ...(postgres ? [] : ["--db postgres://... (UMBRA_DB)"]),
    ...(redisText === undefined ? ["--redis-url (UMBRA_REDIS_URL)"] : []),
    ...(natsText === undefined ? ["--nats-url (UMBRA_NATS_URL)"] : []),
  ];
  if (missing.length > 0 || redisText === undefined || natsText === undefined) {
    throw new ConfigError(`cluster mode needs a postgres:// --db, --redis-url and --nats-url together; missing: ${missing.join(", ")}`);
  }
  const redis = parseUrl("redis-url", redisText, ["redis:", "rediss:"]);
  const nats = natsText.split(",").map((s) => parseUrl("nats-url", s.trim(), ["nats:", "tls:"]));
  // nats.js takes TLS for the connection, not per server, and ignores the scheme: one tls:// asks it of all.
  const natsTls = parseSetting(CLUSTER_SETTINGS.natsTls, raw("natsTls")) || nats.some((u) => u.protocol === "tls:");
  const journal = raw("settlementJournal");
  if (journal !== undefined && journal.trim() === "") throw new ConfigError("--settlement-journal: give a file path");
  const redisPassword = raw("redisPassword");
  const natsPassword = raw("natsPassword");
  const prefix = parseName("clusterPrefix", parseSetting(CLUSTER_SETTINGS.clusterPrefix, raw("clusterPrefix")));
  const given = raw("replicaId");
  const replicaId = given === undefined ? generatedReplicaId() : parseName("replicaId", given);
  if (production) {
    for (const [flag, url] of [["redis-url", redis], ...nats.map((u) => ["nats-url", u] as const)] as const) {
      if (url.password !== "") {
        throw new ConfigError(
          `production mode refuses a password inside --${flag} (it is bound to the measurement and visible to the host): give it with UMBRA_${flag === "redis-url" ? "REDIS" : "NATS"}_PASSWORD_FILE`,
        );
      }
    }
    if (redis.protocol === "redis:" && !loopback(redis)) {
      throw new ConfigError(`production mode refuses plaintext Redis on ${hostOf(redis)}, which is not a loopback address: use rediss://`);
    }
    for (const url of nats.filter((u) => !loopback(u))) {
      if (!natsTls) {
        throw new ConfigError(
          `production mode refuses plaintext NATS on ${hostOf(url)}, which is not a loopback address: use tls:// or --nats-tls on`,
        );
      }
    }
  }
  const cluster: ClusterConfig = Object.freeze({
    redisUrl: redisText,
    redisClient: parseSetting(CLUSTER_SETTINGS.redisClient, raw("redisClient")),
    redisTimeoutMs: parseSetting(CLUSTER_SETTINGS.redisTimeoutMs, raw("redisTimeoutMs")),
    natsServers: Object.freeze(nats.map((u) => u.href)),
    natsTls,
    prefix,
    replicaId,
    holdTtlMs: parseSetting(CLUSTER_SETTINGS.holdTtlMs, raw("holdTtlMs")),
    ...(redisPassword !== undefined ? { redisPassword } : {}),
    ...(natsPassword !== undefined ? { natsPassword } : {}),
    ...(journal !== undefined ? { settlementJournal: journal } : {}),
  });
  // Provisioned passwords are checked once they arrive (the serve command calls it again then).
  if (production && !passwordsLater) requireClusterCredentials(cluster);
  return cluster;
}

/**
 * Production: Redis and NATS off loopback need credentials (whoever reaches an unauthenticated Redis can
 * rewrite every key's limits; NATS carries forwarded requests). Throws ConfigError naming the setting.
 */
export function requireClusterCredentials(cluster: ClusterConfig): void {
  const redis = new URL(cluster.redisUrl);
  if (!loopback(redis) && cluster.redisPassword === undefined) {
    throw new ConfigError(`production mode needs Redis credentials off loopback (${hostOf(redis)}): set UMBRA_REDIS_PASSWORD_FILE`);
  }
  for (const url of cluster.natsServers.map((s) => new URL(s)).filter((u) => !loopback(u))) {
    if (cluster.natsPassword === undefined) {
      throw new ConfigError(`production mode needs NATS credentials off loopback (${hostOf(url)}): set UMBRA_NATS_PASSWORD_FILE`);
    }
  }
}

function parseUrl(flag: string, text: string, schemes: readonly string[]): URL {
  const url = URL.canParse(text) ? new URL(text) : undefined;
  if (url === undefined || !schemes.includes(url.protocol) || url.hostname === "") {
    throw new ConfigError(`--${flag}: '${redactedText(text)}' is not a ${schemes.map((s) => `${s}//`).join(" or ")} URL`);
  }
  return url;
}

/** A URL's text without what follows `:` in its user part (never print a password). */
const redactedText = (text: string) => text.replace(/\/\/([^/@:]*):[^/@]*@/, "//$1:***@");

function parseName(name: "clusterPrefix" | "replicaId", value: string): string {
  if (!NAME.test(value)) throw new ConfigError(`--${CLUSTER_SETTINGS[name].flag}: '${value}' must be 1 to 64 letters, digits, _ or -`);
  return value;
}

const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, "$1");
const loopback = (url: URL) => isLoopbackHost(hostOf(url));
