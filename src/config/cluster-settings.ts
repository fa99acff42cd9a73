/**
 * Cluster mode's setting entries (issue 21; docs/operations.md "Running several replicas"): Redis, NATS,
 * the key/subject prefix, the replica id, the hold lease, the settlement journal, and --reuse-port. Their rules, read together, are in
 * config/cluster-config.ts; coordinator-settings.ts includes this table in SETTINGS.
 */
import { REDIS_CLIENTS, REDIS_TIMEOUT_MS } from "../limits/redis-client.ts";
import type { SettingTable } from "./settings.ts";

export const CLUSTER_SETTINGS = {
  redisUrl: { flag: "redis-url", env: "UMBRA_REDIS_URL", kind: "string", help: "Redis for shared rate limits (cluster mode)" },
  redisPassword: { flag: "redis-password", env: "UMBRA_REDIS_PASSWORD", kind: "string", secret: true, help: "Redis password" },
  redisClient: {
    flag: "redis-client",
    env: "UMBRA_REDIS_CLIENT",
    kind: "enum",
    values: REDIS_CLIENTS,
    default: "bun",
    help: "Redis client",
  },
  redisTimeoutMs: {
    flag: "redis-timeout-ms",
    env: "UMBRA_REDIS_TIMEOUT_MS",
    kind: "int",
    default: REDIS_TIMEOUT_MS,
    min: 10,
    max: 60_000,
    help: "bound on one Redis call, then rate limits go local",
  },
  natsUrl: { flag: "nats-url", env: "UMBRA_NATS_URL", kind: "string", help: "NATS servers, comma-separated (cluster mode)" },
  natsPassword: { flag: "nats-password", env: "UMBRA_NATS_PASSWORD", kind: "string", secret: true, help: "NATS password or token" },
  natsTls: { flag: "nats-tls", env: "UMBRA_NATS_TLS", kind: "switch", default: "off", help: "TLS to nats:// servers" },
  clusterPrefix: { flag: "cluster-prefix", env: "UMBRA_CLUSTER_PREFIX", kind: "string", default: "umbra", help: "key/subject prefix" },
  // Default: generated per process (printed at start).
  replicaId: { flag: "replica-id", env: "UMBRA_REPLICA_ID", kind: "string", help: "this replica's name" },
  holdTtlMs: {
    flag: "hold-ttl-ms",
    env: "UMBRA_HOLD_TTL_MS",
    kind: "int",
    default: 30_000,
    min: 3000,
    max: 600_000,
    help: "lease of a request's money hold: renewed every third, swept once expired",
  },
  settlementJournal: {
    flag: "settlement-journal",
    env: "UMBRA_SETTLEMENT_JOURNAL",
    kind: "string",
    help: "this replica's settlement journal (a local path): settlements applied in batches behind it",
  },
  reusePort: { flag: "reuse-port", env: "UMBRA_REUSE_PORT", kind: "switch", default: "off", help: "share --listen's port" },
} as const satisfies SettingTable;

export type ClusterSettingName = keyof typeof CLUSTER_SETTINGS;

/** The cluster settings loadConfig leaves to parseCluster (all but reusePort, a plain setting). */
export const CLUSTER_DERIVED = [
  "redisUrl",
  "redisPassword",
  "redisClient",
  "redisTimeoutMs",
  "natsUrl",
  "natsPassword",
  "natsTls",
  "clusterPrefix",
  "replicaId",
  "holdTtlMs",
  "settlementJournal",
] as const satisfies readonly ClusterSettingName[];
