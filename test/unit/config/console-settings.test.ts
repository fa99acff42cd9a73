/**
 * The console's settings (src/config/config.ts): `--public-url` checked and normalized (production
 * refuses http off loopback), its loopback default from `--listen`, `--oidc-client-id` needing JWT
 * authentication, and the client secret kept out of the configuration digest.
 */
import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig, publicBaseUrl } from "../../../src/config/config.ts";
import { configCanonicalBytes } from "../../../src/config/config-digest.ts";

const dev = (env: Record<string, string>) => loadConfig({}, env, "development");
const JWT = { UMBRA_JWT_ISSUER: "https://id.example", UMBRA_JWT_AUDIENCE: "api", UMBRA_JWT_JWKS_URL: "https://id.example/jwks" };

describe("--public-url", () => {
  test.each([
    ["https://umbra.example.com/", "https://umbra.example.com"],
    ["https://umbra.example.com/gateway//", "https://umbra.example.com/gateway"],
    ["http://127.0.0.1:8080", "http://127.0.0.1:8080"],
  ])("%s is kept as %s", (given, kept) => {
    expect(dev({ UMBRA_PUBLIC_URL: given }).publicUrl).toBe(kept);
  });

  test.each([
    "umbra.example.com",
    "ftp://umbra.example.com",
    "https://umbra.example.com/?a=1",
    "https://u:p@umbra.example.com",
    "https://x/#f",
  ])("%s is refused", (given) => {
    expect(() => dev({ UMBRA_PUBLIC_URL: given })).toThrow(ConfigError);
  });

  test("production refuses http off loopback, accepts it on loopback", () => {
    const base = { UMBRA_ADMIN_TOKEN: "a".repeat(32), UMBRA_ATTESTATION: "none" };
    expect(() => loadConfig({}, { ...base, UMBRA_PUBLIC_URL: "http://umbra.example.com" }, "production")).toThrow(
      "production mode refuses an http --public-url off loopback",
    );
    expect(loadConfig({}, { ...base, UMBRA_PUBLIC_URL: "http://localhost:8080" }, "production").publicUrl).toBe("http://localhost:8080");
  });

  test("default: the listen address when it is loopback with a fixed port, else none", () => {
    expect(publicBaseUrl(dev({}))).toBe("http://127.0.0.1:8080");
    expect(publicBaseUrl(dev({ UMBRA_LISTEN: "[::1]:9000" }))).toBe("http://[::1]:9000");
    expect(publicBaseUrl(dev({ UMBRA_LISTEN: "127.0.0.1:0" }))).toBeUndefined();
    expect(publicBaseUrl(dev({ UMBRA_LISTEN: "0.0.0.0:8080" }))).toBeUndefined();
    expect(publicBaseUrl(dev({ UMBRA_LISTEN: "0.0.0.0:8080", UMBRA_PUBLIC_URL: "https://u.example" }))).toBe("https://u.example");
  });
});

describe("--oidc-client-id", () => {
  test("needs JWT authentication; the secret needs the id", () => {
    expect(() => dev({ UMBRA_OIDC_CLIENT_ID: "console" })).toThrow("--oidc-client-id needs JWT authentication");
    expect(() => dev({ ...JWT, UMBRA_OIDC_CLIENT_SECRET: "s" })).toThrow("--oidc-client-secret needs --oidc-client-id");
    expect(dev({ ...JWT, UMBRA_OIDC_CLIENT_ID: "console" }).oidc).toEqual({ clientId: "console" });
  });

  test("the client secret is not in the configuration digest; the client id is", () => {
    const a = dev({ ...JWT, UMBRA_OIDC_CLIENT_ID: "console", UMBRA_OIDC_CLIENT_SECRET: "secret-one" });
    const b = dev({ ...JWT, UMBRA_OIDC_CLIENT_ID: "console", UMBRA_OIDC_CLIENT_SECRET: "secret-two" });
    const c = dev({ ...JWT, UMBRA_OIDC_CLIENT_ID: "other", UMBRA_OIDC_CLIENT_SECRET: "secret-one" });
    expect(Buffer.from(configCanonicalBytes(a)).equals(Buffer.from(configCanonicalBytes(b)))).toBe(true);
    expect(Buffer.from(configCanonicalBytes(a)).equals(Buffer.from(configCanonicalBytes(c)))).toBe(false);
    expect(Buffer.from(configCanonicalBytes(a)).includes("secret-one")).toBe(false);
  });
});
