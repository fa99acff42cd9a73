/**
 * Cluster mode's settings (src/config/cluster-settings.ts): all three engines or none, each missing one
 * named; Postgres alone stays one coordinator; secrets apart from the URLs; production's TLS and
 * credential rules off loopback; names fit for keys and subjects; the replica id generated per process.
 */
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../../src/config/config.ts";
import { withProvisionedPasswords } from "../../../src/coordinator/boot.ts";
import { tempDir } from "../../support/harness.ts";

const STRONG = "x".repeat(40);
const PG = "postgres://umbra@db.internal:5432/umbra";
const CLUSTER = { UMBRA_DB: PG, UMBRA_REDIS_URL: "redis://127.0.0.1:6379", UMBRA_NATS_URL: "nats://127.0.0.1:4222" };
const dev = (env: Record<string, string>) => loadConfig({}, env, "development");
const prod = (env: Record<string, string>) => loadConfig({}, { UMBRA_ADMIN_TOKEN: STRONG, ...env });

describe("cluster mode", () => {
  test("all three: the cluster's settings with their defaults and a generated replica id", () => {
    const c = dev(CLUSTER).cluster;
    expect({ ...c, replicaId: /^r-[0-9a-f]{12}$/.test(c?.replicaId ?? "") }).toEqual({
      redisUrl: "redis://127.0.0.1:6379",
      redisClient: "bun",
      redisTimeoutMs: 500,
      natsServers: ["nats://127.0.0.1:4222"],
      natsTls: false,
      prefix: "umbra",
      replicaId: true,
      holdTtlMs: 30_000,
    });
    expect(dev(CLUSTER).cluster?.replicaId).not.toBe(c?.replicaId);
  });

  test("every cluster setting, by flag or environment", () => {
    const c = loadConfig(
      { "redis-client": "ioredis", "replica-id": "east-1", "nats-tls": "on" },
      {
        ...CLUSTER,
        UMBRA_REDIS_URL: "rediss://cache.internal:6380/2",
        UMBRA_NATS_URL: "tls://n1.internal:4222, nats://n2.internal:4222",
        UMBRA_REDIS_TIMEOUT_MS: "250",
        UMBRA_CLUSTER_PREFIX: "umbra-eu",
        UMBRA_HOLD_TTL_MS: "5000",
        UMBRA_SETTLEMENT_JOURNAL: "/var/lib/umbra/settlements",
        UMBRA_REDIS_PASSWORD: "r-secret",
        UMBRA_NATS_PASSWORD: "n-secret",
      },
      "development",
    ).cluster;
    expect(c).toEqual({
      redisUrl: "rediss://cache.internal:6380/2",
      redisPassword: "r-secret",
      redisClient: "ioredis",
      redisTimeoutMs: 250,
      natsServers: ["tls://n1.internal:4222", "nats://n2.internal:4222"],
      natsPassword: "n-secret",
      natsTls: true,
      prefix: "umbra-eu",
      replicaId: "east-1",
      holdTtlMs: 5000,
      settlementJournal: "/var/lib/umbra/settlements",
    });
  });

  test("one tls:// server asks TLS of every server (the client takes it per connection)", () => {
    expect([
      dev({ ...CLUSTER, UMBRA_NATS_URL: "nats://127.0.0.1:4222,tls://127.0.0.1:4223" }).cluster?.natsTls,
      dev({ ...CLUSTER, UMBRA_NATS_URL: "nats://127.0.0.1:4222,nats://127.0.0.1:4223" }).cluster?.natsTls,
    ]).toEqual([true, false]);
  });

  test("passwords come from *_FILE too", () => {
    using dir = tempDir();
    const file = join(dir.path, "redis");
    writeFileSync(file, "from-file\n");
    expect(dev({ ...CLUSTER, UMBRA_REDIS_PASSWORD_FILE: file }).cluster?.redisPassword).toBe("from-file");
  });

  test("a postgres:// database alone is one coordinator, not cluster mode", () => {
    expect(dev({ UMBRA_DB: PG }).cluster).toBeNull();
  });

  test.each([
    [{ UMBRA_REDIS_URL: CLUSTER.UMBRA_REDIS_URL }, "missing: --db postgres://... (UMBRA_DB), --nats-url (UMBRA_NATS_URL)"],
    [{ UMBRA_NATS_URL: CLUSTER.UMBRA_NATS_URL }, "missing: --db postgres://... (UMBRA_DB), --redis-url (UMBRA_REDIS_URL)"],
    [{ UMBRA_DB: PG, UMBRA_REDIS_URL: CLUSTER.UMBRA_REDIS_URL }, "missing: --nats-url (UMBRA_NATS_URL)"],
    [{ UMBRA_DB: PG, UMBRA_NATS_URL: CLUSTER.UMBRA_NATS_URL }, "missing: --redis-url (UMBRA_REDIS_URL)"],
    [{ ...CLUSTER, UMBRA_DB: "/data/umbra.db" }, "missing: --db postgres://... (UMBRA_DB)"],
  ])("a partial set is refused naming what is missing: %p", (env, message) => {
    expect(() => dev(env)).toThrow(ConfigError);
    expect(() => dev(env)).toThrow(`cluster mode needs a postgres:// --db, --redis-url and --nats-url together; ${message}`);
  });

  test.each([
    ["UMBRA_REDIS_PASSWORD", "pw", "--redis-password"],
    ["UMBRA_NATS_PASSWORD", "pw", "--nats-password"],
    ["UMBRA_REDIS_CLIENT", "ioredis", "--redis-client"],
    ["UMBRA_REDIS_TIMEOUT_MS", "100", "--redis-timeout-ms"],
    ["UMBRA_NATS_TLS", "on", "--nats-tls"],
    ["UMBRA_CLUSTER_PREFIX", "umbra", "--cluster-prefix"],
    ["UMBRA_REPLICA_ID", "a", "--replica-id"],
    ["UMBRA_HOLD_TTL_MS", "5000", "--hold-ttl-ms"],
    ["UMBRA_SETTLEMENT_JOURNAL", "/tmp/j", "--settlement-journal"],
  ])("%s without cluster mode is refused", (name, value, flag) => {
    expect(() => dev({ UMBRA_DB: PG, [name]: value })).toThrow(`${flag} applies to cluster mode (--redis-url and --nats-url) only`);
  });

  test.each([
    [{ UMBRA_REDIS_URL: "http://cache:6379" }, "--redis-url: 'http://cache:6379' is not a redis:// or rediss:// URL"],
    [{ UMBRA_REDIS_URL: "cache:6379" }, "--redis-url"],
    [{ UMBRA_REDIS_URL: "http://u:hunter2@cache:6379" }, "--redis-url: 'http://u:***@cache:6379' is not"],
    [{ UMBRA_NATS_URL: "nats://a:4222,ws://b:80" }, "--nats-url: 'ws://b:80' is not a nats:// or tls:// URL"],
    [{ UMBRA_REDIS_CLIENT: "hiredis" }, "--redis-client"],
    [{ UMBRA_REDIS_TIMEOUT_MS: "5" }, "--redis-timeout-ms"],
    [{ UMBRA_CLUSTER_PREFIX: "umbra.eu" }, "--cluster-prefix: 'umbra.eu' must be 1 to 64 letters, digits, _ or -"],
    [{ UMBRA_REPLICA_ID: "a b" }, "--replica-id"],
    [{ UMBRA_REPLICA_ID: "x".repeat(65) }, "--replica-id"],
    [{ UMBRA_HOLD_TTL_MS: "2999" }, "--hold-ttl-ms"],
    [{ UMBRA_HOLD_TTL_MS: "600001" }, "--hold-ttl-ms"],
    [{ UMBRA_SETTLEMENT_JOURNAL: " " }, "--settlement-journal: give a file path"],
  ])("bad values name their flag: %p", (env, message) => {
    expect(() => dev({ ...CLUSTER, ...env })).toThrow(message);
    expect(() => dev({ ...CLUSTER, ...env })).toThrow(ConfigError);
  });

  describe("production", () => {
    const remote = {
      UMBRA_DB: PG,
      UMBRA_REDIS_URL: "rediss://cache.internal:6380",
      UMBRA_REDIS_PASSWORD: "r-secret",
      UMBRA_NATS_URL: "tls://nats.internal:4222",
      UMBRA_NATS_PASSWORD: "n-secret",
    };

    test("TLS and credentials off loopback are accepted; so is plaintext on loopback", () => {
      expect([
        prod(remote).cluster?.natsTls,
        prod({ ...remote, UMBRA_NATS_URL: "nats://nats.internal:4222", UMBRA_NATS_TLS: "on" }).cluster?.natsTls,
      ]).toEqual([true, true]);
      expect(prod(CLUSTER).cluster?.natsTls).toBe(false);
      expect(prod({ ...remote, UMBRA_NATS_URL: "tls://nats.internal:4222,nats://10.0.0.9:4222" }).cluster?.natsTls).toBe(true);
    });

    test.each([
      [{ UMBRA_REDIS_URL: "redis://cache.internal:6379" }, "production mode refuses plaintext Redis on cache.internal"],
      [{ UMBRA_NATS_URL: "nats://nats.internal:4222" }, "production mode refuses plaintext NATS on nats.internal"],
      [{ UMBRA_NATS_URL: "nats://127.0.0.1:4222,nats://10.0.0.9:4222" }, "production mode refuses plaintext NATS on 10.0.0.9"],
      [{ UMBRA_NATS_PASSWORD: "" }, "production mode needs NATS credentials off loopback (nats.internal)"],
      [{ UMBRA_REDIS_PASSWORD: "" }, "production mode needs Redis credentials off loopback (cache.internal)"],
      [{ UMBRA_REDIS_URL: "rediss://:hunter2@cache.internal:6380" }, "production mode refuses a password inside --redis-url"],
      [{ UMBRA_NATS_URL: "tls://u:hunter2@nats.internal:4222" }, "production mode refuses a password inside --nats-url"],
    ])("refused: %p", (env, message) => {
      expect(() => prod({ ...remote, ...env })).toThrow(message);
    });

    test("--provisioning await: Redis and NATS passwords may come by provisioning, and are checked when they do", () => {
      const { UMBRA_REDIS_PASSWORD: _r, UMBRA_NATS_PASSWORD: _n, ...withoutPasswords } = remote;
      const config = loadConfig({}, { ...withoutPasswords, UMBRA_PROVISIONING: "await" });
      expect([config.cluster?.redisPassword, config.cluster?.natsPassword]).toEqual([undefined, undefined]);
      expect(() => withProvisionedPasswords(config, { adminToken: STRONG, redisPassword: "r" })).toThrow(
        "production mode needs NATS credentials off loopback (nats.internal)",
      );
      const provisioned = withProvisionedPasswords(config, { adminToken: STRONG, redisPassword: "r", natsPassword: "n", dbPassword: "d" });
      expect([provisioned.cluster?.redisPassword, provisioned.cluster?.natsPassword, provisioned.dbPassword]).toEqual(["r", "n", "d"]);
    });

    test("no message repeats a password", () => {
      let message = "";
      try {
        prod({ ...remote, UMBRA_REDIS_URL: "rediss://:hunter2@cache.internal:6380" });
      } catch (e) {
        message = String(e);
      }
      expect([message.length > 0, message.includes("hunter2")]).toEqual([true, false]);
    });
  });
});

describe("--reuse-port", () => {
  test("off by default; on by flag or environment, with or without cluster mode", () => {
    expect([
      dev({}).reusePort,
      dev({ UMBRA_REUSE_PORT: "on" }).reusePort,
      loadConfig({ "reuse-port": "on" }, CLUSTER, "development").reusePort,
    ]).toEqual([false, true, true]);
  });
});
