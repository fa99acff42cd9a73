import "reflect-metadata";
import { describe, expect, test } from "bun:test";
import { generateKeyPairSync } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { X509Certificate } from "@peculiar/x509";
import { ConfigError, LETS_ENCRYPT_DIRECTORY, loadConfig, parseFlags } from "../../../src/config/config.ts";
import { tempDir } from "../../support/harness.ts";

const STRONG = "x".repeat(40);

describe("loadConfig", () => {
  test("development defaults", () => {
    expect(loadConfig({}, {}, "development")).toEqual({
      mode: "development",
      host: "127.0.0.1",
      port: 8080,
      db: "./data/umbra.db",
      minTrust: "none",
      trustRoot: "development",
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
      metering: true,
      defaultRpm: null,
      defaultTpm: null,
      maxQueuedPerModel: 64,
      settlementGroupAbove: 0,
      sqliteCheckpoints: "worker",
      shutdownDrainMs: 10_000,
      challengeIntervalMs: 300_000,
      challengeTimeoutMs: 30_000,
      attestation: "dev",
      attestationPlatform: "sev-snp",
      tlsPublicKeySpki: null,
      tls: { mode: "off", names: [] },
      expectedMeasurement: null,
      configBinding: "none",
      configDigest: null,
      provisioning: "off",
      reusePort: false,
      cluster: null,
      mdmEnrolment: null,
      mdm: null,
    });
  });

  test("production defaults with an admin token", () => {
    const c = loadConfig({}, { UMBRA_ADMIN_TOKEN: STRONG });
    expect([c.mode, c.minTrust, c.trustRoot, c.adminToken, c.attestation]).toEqual([
      "production",
      "hardware",
      "apple",
      STRONG,
      "configfs-tsm",
    ]);
  });

  test("the result is frozen", () => {
    const c = loadConfig({}, {}, "development");
    expect(Object.isFrozen(c)).toBe(true);
  });

  test("a flag beats the environment, which beats the default", () => {
    const env = { UMBRA_LISTEN: "0.0.0.0:9000", UMBRA_LOG_LEVEL: "debug", UMBRA_BODY_TIMEOUT_MS: "5000" };
    const c = loadConfig({ listen: "127.0.0.1:7000", "body-timeout-ms": "2500" }, env, "development");
    expect([c.host, c.port, c.logLevel, c.bodyTimeoutMs]).toEqual(["127.0.0.1", 7000, "debug", 2500]);
  });

  test("--max-sessions-per-token and its environment twin", () => {
    const env = { UMBRA_MAX_SESSIONS_PER_TOKEN: "8" };
    expect([
      loadConfig({}, env, "development").maxSessionsPerToken,
      loadConfig({ "max-sessions-per-token": "2" }, env, "development").maxSessionsPerToken,
    ]).toEqual([8, 2]);
  });

  test("secrets come from *_FILE", () => {
    using dir = tempDir();
    const file = join(dir.path, "token");
    writeFileSync(file, `${STRONG}\n`);
    expect(loadConfig({}, { UMBRA_ADMIN_TOKEN_FILE: file }).adminToken).toBe(STRONG);
  });

  test("an unreadable *_FILE is refused by name", () => {
    expect(() => loadConfig({}, { UMBRA_ADMIN_TOKEN_FILE: "/nonexistent/token" })).toThrow("UMBRA_ADMIN_TOKEN_FILE");
  });

  test("IPv6 listen addresses", () => {
    const c = loadConfig({ listen: "[::1]:0" }, {}, "development");
    expect([c.host, c.port]).toEqual(["::1", 0]);
  });

  describe("production refuses unsafe settings", () => {
    test.each([
      ["no admin token", {}, "admin token"],
      ["a short admin token", { UMBRA_ADMIN_TOKEN: "short" }, "at least 32"],
      ["the development trust root", { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_TRUST_ROOT: "development" }, "development trust root"],
      ["metering off", { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_METERING: "off" }, "--metering off"],
      ["development attestation evidence", { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_ATTESTATION: "dev" }, "--attestation dev"],
      ["a routing floor of none", { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_MIN_TRUST: "none" }, "--min-trust none"],
      [
        "a plain-http JWKS URL",
        { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_JWT_JWKS_URL: "http://idp.example/jwks", UMBRA_JWT_ISSUER: "i", UMBRA_JWT_AUDIENCE: "a" },
        "https",
      ],
      ["plain HTTP on every address", { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_LISTEN: "0.0.0.0:8080" }, "refuses plain HTTP on 0.0.0.0"],
      ["plain HTTP on a public IPv6 address", { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_LISTEN: "[2001:db8::1]:8080" }, "refuses plain HTTP"],
      [
        "a password inside the database URL",
        { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_DB: "postgres://umbra:hunter2@db.internal/umbra" },
        "refuses a password inside the --db URL",
      ],
    ])("%s", (_, env, message) => {
      expect(() => loadConfig({}, env)).toThrow(message);
    });
  });

  describe("--db-password", () => {
    test("a postgres:// database takes its password apart from the URL; development accepts one inside it", () => {
      const pg = { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_DB: "postgres://umbra@db.internal/umbra", UMBRA_DB_PASSWORD: "hunter2" };
      const dev = loadConfig({}, { UMBRA_DB: "postgres://umbra:inline@127.0.0.1/umbra" }, "development");
      expect([loadConfig({}, pg).dbPassword, dev.dbPassword, dev.db]).toEqual([
        "hunter2",
        undefined,
        "postgres://umbra:inline@127.0.0.1/umbra",
      ]);
    });

    test("a SQLite database has no password", () => {
      expect(() => loadConfig({}, { UMBRA_DB_PASSWORD: "hunter2" }, "development")).toThrow(
        "--db-password applies to a postgres:// --db only",
      );
    });
  });

  describe("--tls", () => {
    test("plain HTTP on loopback stays allowed in production", () => {
      const hosts = ["127.0.0.1:8080", "[::1]:8080", "localhost:8080", "127.0.0.2:0"].map(
        (listen) => loadConfig({ listen }, { UMBRA_ADMIN_TOKEN: STRONG }).tls.mode,
      );
      expect(hosts).toEqual(["off", "off", "off", "off"]);
    });

    test("self-signed on any address, names defaulting to localhost", () => {
      const c = loadConfig({ listen: "0.0.0.0:443", tls: "self-signed" }, { UMBRA_ADMIN_TOKEN: STRONG });
      const named = loadConfig({}, { UMBRA_TLS: "self-signed", UMBRA_TLS_NAMES: "Umbra.Example, 10.0.0.5" }, "development");
      expect([c.tls, named.tls]).toEqual([
        { mode: "self-signed", names: ["localhost"] },
        { mode: "self-signed", names: ["umbra.example", "10.0.0.5"] },
      ]);
    });

    test("acme with its settings and their environment twins", () => {
      using dir = tempDir();
      const ca = join(dir.path, "ca.pem");
      writeFileSync(ca, readFileSync(join(import.meta.dir, "../../fixtures/attestation-cvm/milan-vcek.pem")));
      const c = loadConfig(
        { tls: "acme", "tls-names": "umbra.example", "acme-email": "ops@umbra.example" },
        { UMBRA_ACME_DIRECTORY: "https://acme.internal/dir", UMBRA_ACME_HTTP_PORT: "8081", UMBRA_ACME_CA_FILE: ca },
        "development",
      );
      const defaults = loadConfig({ tls: "acme", "tls-names": "umbra.example" }, {}, "development");
      expect([
        { ...c.tls, acme: { ...c.tls.acme, caPem: c.tls.acme?.caPem?.startsWith("-----BEGIN CERTIFICATE-----") } },
        defaults.tls,
      ]).toEqual([
        {
          mode: "acme",
          names: ["umbra.example"],
          acme: { directory: "https://acme.internal/dir", email: "ops@umbra.example", httpPort: 8081, caPem: true },
        },
        { mode: "acme", names: ["umbra.example"], acme: { directory: LETS_ENCRYPT_DIRECTORY, httpPort: 80 } },
      ]);
    });

    test.each([
      [{ tls: "acme" }, "--tls acme needs --tls-names"],
      [{ tls: "acme", "tls-names": "10.0.0.5" }, "is an IP address"],
      [{ tls: "self-signed", "tls-names": "not a name" }, "is not a DNS name"],
      [{ tls: "self-signed", "tls-names": " , " }, "no name given"],
      [{ "tls-names": "umbra.example" }, "--tls-names applies to"],
      [{ tls: "self-signed", "acme-email": "a@b.c" }, "--acme-email applies to --tls acme only"],
      [{ tls: "acme", "tls-names": "u.example", "acme-directory": "http://acme.example/dir" }, "--acme-directory must use https"],
      [{ tls: "acme", "tls-names": "u.example", "acme-http-port": "99999" }, "--acme-http-port"],
      [{ tls: "acme", "tls-names": "u.example", "acme-ca-file": "/nonexistent/ca.pem" }, "--acme-ca-file: cannot read"],
      [{ tls: "tls13" }, "--tls"],
    ])("%p is refused: %s", (flags, message) => {
      expect(() => loadConfig(flags, {}, "development")).toThrow(message);
    });

    test("a TLS endpoint in front and the coordinator's own key are exclusive", () => {
      using dir = tempDir();
      const file = join(dir.path, "tls.pem");
      const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      writeFileSync(file, publicKey.export({ type: "spki", format: "pem" }));
      expect(() => loadConfig({ tls: "self-signed", "tls-public-key-file": file }, {}, "development")).toThrow(
        "--tls-public-key-file names a TLS endpoint in front of the coordinator",
      );
    });
  });

  describe("invalid values name their flag", () => {
    test.each([
      [{ UMBRA_LISTEN: "nonsense:port" }, "--listen"],
      [{ UMBRA_LISTEN: "127.0.0.1:70000" }, "--listen"],
      [{ UMBRA_LOG_LEVEL: "verbose" }, "--log-level"],
      [{ UMBRA_MIN_TRUST: "some" }, "--min-trust"],
      [{ UMBRA_MODE: "staging" }, "--mode"],
      [{ UMBRA_MAX_BODY_BYTES: "-5" }, "--max-body-bytes"],
      [{ UMBRA_MAX_BODY_BYTES: "12" }, "--max-body-bytes"],
      [{ UMBRA_BODY_TIMEOUT_MS: "50" }, "--body-timeout-ms"],
      [{ UMBRA_BODY_TIMEOUT_MS: "soon" }, "--body-timeout-ms"],
      [{ UMBRA_CACHE_READ_DISCOUNT: "101" }, "--cache-read-discount"],
      [{ UMBRA_MAX_ATTEMPTS: "0" }, "--max-attempts"],
      [{ UMBRA_MAX_SESSIONS_PER_TOKEN: "0" }, "--max-sessions-per-token"],
      [{ UMBRA_MAX_SESSIONS_PER_TOKEN: "1025" }, "--max-sessions-per-token"],
      [{ UMBRA_MAX_SESSIONS_PER_TOKEN: "two" }, "--max-sessions-per-token"],
      [{ UMBRA_PLATFORM_FEE: "101" }, "--platform-fee"],
      [{ UMBRA_CHALLENGE_INTERVAL_MS: "1000", UMBRA_CHALLENGE_TIMEOUT_MS: "1000" }, "--challenge-timeout-ms"],
      [{ UMBRA_METERING: "maybe" }, "--metering"],
      [{ UMBRA_PROVIDER_HEARTBEAT_MS: "5000", UMBRA_PROVIDER_LIVENESS_MS: "5000" }, "--provider-liveness-ms"],
      [{ UMBRA_FALLBACK_INPUT_PRICE: "1.5" }, "--fallback-input-price"],
      [{ UMBRA_JWT_PUBLIC_KEY: "k" }, "--jwt-issuer"],
      [{ UMBRA_ATTESTATION: "tpm" }, "--attestation"],
      [{ UMBRA_ATTESTATION_PLATFORM: "sgx" }, "--attestation-platform"],
      [{ UMBRA_EXPECTED_MEASUREMENT: "abcd" }, "--expected-measurement"],
      [{ UMBRA_EXPECTED_MEASUREMENT: "zz".repeat(48) }, "--expected-measurement"],
      [{ UMBRA_EXPECTED_MEASUREMENT: "ab".repeat(49) }, "--expected-measurement"],
      [{ UMBRA_TLS_PUBLIC_KEY_FILE: "/nonexistent/tls.pem" }, "--tls-public-key-file"],
      [{ UMBRA_JWT_PUBLIC_KEY: "k", UMBRA_JWT_JWKS_URL: "https://x/j", UMBRA_JWT_ISSUER: "i", UMBRA_JWT_AUDIENCE: "a" }, "exclusive"],
    ])("%p", (env, message) => {
      expect(() => loadConfig({}, env, "development")).toThrow(message);
      expect(() => loadConfig({}, env, "development")).toThrow(ConfigError);
    });
  });

  test("JWT settings", () => {
    const c = loadConfig({}, { UMBRA_JWT_PUBLIC_KEY: "pem", UMBRA_JWT_ISSUER: "https://idp", UMBRA_JWT_AUDIENCE: "umbra" }, "development");
    expect(c.jwt).toEqual({ issuer: "https://idp", audience: "umbra", publicKey: "pem", accountClaim: "sub" });
  });
});

describe("coordinator attestation settings", () => {
  test("production accepts configfs-tsm and none; a flag beats the environment", () => {
    const env = { UMBRA_ADMIN_TOKEN: STRONG, UMBRA_ATTESTATION: "configfs-tsm" };
    expect([loadConfig({}, env).attestation, loadConfig(parseFlags(["--attestation", "none"]).values, env).attestation]).toEqual([
      "configfs-tsm",
      "none",
    ]);
    expect(loadConfig({}, { ...env, UMBRA_ATTESTATION_PLATFORM: "tdx" }).attestationPlatform).toBe("tdx");
  });

  test("the expected measurement: 96 hex digits in either case, kept as 48 bytes", () => {
    const c = loadConfig({}, { UMBRA_EXPECTED_MEASUREMENT: `${"AB".repeat(24)}${"0f".repeat(24)}` }, "development");
    expect(c.expectedMeasurement).toEqual(new Uint8Array([...new Array(24).fill(0xab), ...new Array(24).fill(0x0f)]));
  });

  describe("the TLS public key file", () => {
    // A real certificate, and the SubjectPublicKeyInfo DER that @peculiar/x509 reads out of it.
    const certPem = readFileSync(join(import.meta.dir, "../../fixtures/attestation-cvm/milan-vcek.pem"), "utf8");
    const spki = new Uint8Array(new X509Certificate(certPem).publicKey.rawData);
    const spkiPem = `-----BEGIN PUBLIC KEY-----\n${Buffer.from(spki).toString("base64")}\n-----END PUBLIC KEY-----\n`;

    test.each([
      ["a PEM certificate", certPem],
      ["a PEM public key", spkiPem],
      ["a DER public key", Buffer.from(spki)],
    ])("%s gives the key's SubjectPublicKeyInfo", (_, content) => {
      using dir = tempDir();
      const file = join(dir.path, "tls");
      writeFileSync(file, content);
      expect(loadConfig({ "tls-public-key-file": file }, {}, "development").tlsPublicKeySpki).toEqual(spki);
    });

    test.each([
      [
        "a private key",
        generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ type: "pkcs8", format: "pem" }),
        "private key",
      ],
      ["text that is no key", "hello\n", "not a PEM certificate or public key"],
      ["a broken PEM", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a PEM certificate or public key"],
    ])("%s is refused", (_, content, message) => {
      using dir = tempDir();
      const file = join(dir.path, "tls");
      writeFileSync(file, content);
      expect(() => loadConfig({}, { UMBRA_TLS_PUBLIC_KEY_FILE: file }, "development")).toThrow(message);
      expect(() => loadConfig({}, { UMBRA_TLS_PUBLIC_KEY_FILE: file }, "development")).toThrow(ConfigError);
    });
  });
});

describe("parseFlags", () => {
  test("unknown flags are an error", () => {
    expect(() => parseFlags(["--no-such-flag"])).toThrow(ConfigError);
  });

  test("config flags and positionals", () => {
    expect(parseFlags(["--db", "/tmp/x.db", "accounts", "list"])).toEqual({
      values: { db: "/tmp/x.db" },
      positionals: ["accounts", "list"],
    });
  });
});
