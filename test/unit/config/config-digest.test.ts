/**
 * The configuration digest (src/config/config-digest.ts): one digest per effective configuration, every
 * non-secret setting covered, the secrets and the binding's own settings not; the binding settings' checks.
 */
import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../../../src/config/config.ts";
import { CONFIG_DIGEST_TAG, configCanonicalBytes, configDigestHex } from "../../../src/config/config-digest.ts";

const BASE = { UMBRA_DB: "/data/umbra.db" };
const digestOf = (env: Record<string, string>, flags: Record<string, string> = {}) =>
  configDigestHex(loadConfig(flags, { ...BASE, ...env }, "development"));

describe("config digest", () => {
  test("one effective configuration, one digest: flag or environment, default given or not", () => {
    expect([
      digestOf({}, { "max-attempts": "3" }),
      digestOf({ UMBRA_MAX_ATTEMPTS: "3" }),
      digestOf({ UMBRA_LISTEN: "127.0.0.1:8080" }),
    ]).toEqual([digestOf({}), digestOf({}), digestOf({})]);
  });

  test.each([
    ["UMBRA_LISTEN", "0.0.0.0:8080"],
    ["UMBRA_DB", "/data/other.db"],
    ["UMBRA_MIN_TRUST", "hardware"],
    ["UMBRA_PLATFORM_FEE", "11"],
    ["UMBRA_METERING", "off"],
    ["UMBRA_LOG_LEVEL", "debug"],
    ["UMBRA_EXPECTED_MEASUREMENT", "4d".repeat(48)],
    ["UMBRA_PROVISIONING", "await"],
    ["UMBRA_DEFAULT_RPM", "60"],
  ])("a change of %s changes the digest", (name, value) => {
    expect(digestOf({ [name]: value })).not.toBe(digestOf({}));
  });

  test("the JWT settings (its public verification key too) are covered", () => {
    const jwt = { UMBRA_JWT_ISSUER: "iss", UMBRA_JWT_AUDIENCE: "aud", UMBRA_JWT_PUBLIC_KEY: '{"kty":"OKP"}' };
    expect(new Set([digestOf({}), digestOf(jwt), digestOf({ ...jwt, UMBRA_JWT_PUBLIC_KEY: '{"kty":"EC"}' })]).size).toBe(3);
  });

  test("the database password (a secret) is not covered; the database URL is", () => {
    const pg = { UMBRA_DB: "postgres://umbra@db.internal:5432/umbra" };
    expect([digestOf({ ...pg, UMBRA_DB_PASSWORD: "first-password" }), digestOf({ ...pg, UMBRA_DB_PASSWORD: "second-password" })]).toEqual([
      digestOf(pg),
      digestOf(pg),
    ]);
    expect(digestOf(pg)).not.toBe(digestOf({}));
  });

  test("the admin token (a secret) and the binding's own settings are not covered", () => {
    expect([
      digestOf({ UMBRA_ADMIN_TOKEN: "a".repeat(40) }),
      digestOf({ UMBRA_ADMIN_TOKEN: "b".repeat(40) }),
      digestOf({ UMBRA_CONFIG_DIGEST: "ab".repeat(32) }),
      digestOf({ UMBRA_CONFIG_BINDING: "host-data" }),
    ]).toEqual([digestOf({}), digestOf({}), digestOf({}), digestOf({})]);
  });

  test("the canonical bytes start with the domain tag and hold no secret", () => {
    const token = "secret-admin-token-0123456789abcdef-xyz";
    const bytes = configCanonicalBytes(loadConfig({}, { ...BASE, UMBRA_ADMIN_TOKEN: token }, "development"));
    const text = Buffer.from(bytes).toString("latin1");
    expect([text.slice(4, 4 + CONFIG_DIGEST_TAG.length), text.includes(token), text.includes("adminToken")]).toEqual([
      CONFIG_DIGEST_TAG,
      false,
      false,
    ]);
  });
});

describe("binding and provisioning settings", () => {
  const load =
    (env: Record<string, string>, mode: "production" | "development" = "development") =>
    () =>
      loadConfig({}, env, mode);

  test("a digest alone means cmdline; host-data needs none", () => {
    const c = loadConfig({}, { UMBRA_CONFIG_DIGEST: "AB".repeat(32) }, "development");
    const h = loadConfig({}, { UMBRA_CONFIG_BINDING: "host-data" }, "development");
    expect([c.configBinding, Buffer.from(c.configDigest ?? []).toString("hex"), h.configBinding, h.configDigest]).toEqual([
      "cmdline",
      "ab".repeat(32),
      "host-data",
      null,
    ]);
  });

  test.each([
    [{ UMBRA_CONFIG_BINDING: "cmdline" }, "--config-binding cmdline needs --config-digest"],
    [{ UMBRA_CONFIG_BINDING: "host-data", UMBRA_CONFIG_DIGEST: "ab".repeat(32) }, "--config-digest applies to --config-binding cmdline"],
    [{ UMBRA_CONFIG_DIGEST: "ab" }, "--config-digest: expected 64 hex digits"],
    [{ UMBRA_PROVISIONING: "await", UMBRA_ADMIN_TOKEN: "x".repeat(40) }, "--provisioning await refuses an admin token"],
    [{ UMBRA_PROVISIONING: "await", UMBRA_ATTESTATION: "none" }, "--provisioning await needs an attestation source"],
  ])("refused: %p", (env, message) => {
    expect(load(env)).toThrow(ConfigError);
    expect(load(env)).toThrow(message);
  });

  test("production with --provisioning await starts without an admin token; without it, it needs one", () => {
    expect(loadConfig({}, { UMBRA_PROVISIONING: "await" }).provisioning).toBe("await");
    expect(load({}, "production")).toThrow("production mode needs an admin token");
  });
});

describe("cluster settings in the digest", () => {
  const cluster = {
    UMBRA_DB: "postgres://umbra@db.internal/umbra",
    UMBRA_REDIS_URL: "redis://127.0.0.1:6379",
    UMBRA_NATS_URL: "nats://127.0.0.1:4222",
  };

  test("the passwords, the replica id and its journal are not covered: every replica of a deployment has one digest", () => {
    expect([
      digestOf({
        ...cluster,
        UMBRA_REDIS_PASSWORD: "a",
        UMBRA_NATS_PASSWORD: "b",
        UMBRA_REPLICA_ID: "east-1",
        UMBRA_SETTLEMENT_JOURNAL: "/j/1",
      }),
      digestOf({
        ...cluster,
        UMBRA_REDIS_PASSWORD: "c",
        UMBRA_NATS_PASSWORD: "d",
        UMBRA_REPLICA_ID: "east-2",
        UMBRA_SETTLEMENT_JOURNAL: "/j/2",
      }),
      digestOf(cluster),
    ]).toEqual([digestOf(cluster), digestOf(cluster), digestOf(cluster)]);
  });

  test.each([
    ["UMBRA_REDIS_URL", "redis://127.0.0.1:6380"],
    ["UMBRA_NATS_URL", "nats://127.0.0.1:4223"],
    ["UMBRA_CLUSTER_PREFIX", "other"],
    ["UMBRA_REDIS_CLIENT", "ioredis"],
    ["UMBRA_NATS_TLS", "on"],
    ["UMBRA_HOLD_TTL_MS", "5000"],
  ])("a change of %s changes it", (name, value) => {
    expect(digestOf({ ...cluster, [name]: value })).not.toBe(digestOf(cluster));
  });

  test("the canonical bytes hold neither password", () => {
    const bytes = configCanonicalBytes(
      loadConfig({}, { ...cluster, UMBRA_REDIS_PASSWORD: "redis-pw-xyz", UMBRA_NATS_PASSWORD: "nats-pw-xyz" }, "development"),
    );
    const text = Buffer.from(bytes).toString("latin1");
    expect([text.includes("redis-pw-xyz"), text.includes("nats-pw-xyz"), text.includes("cluster.natsServers")]).toEqual([
      false,
      false,
      true,
    ]);
  });
});
