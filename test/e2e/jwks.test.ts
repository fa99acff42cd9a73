/**
 * JWT verification against a JWKS URL (UMBRA_JWT_JWKS_URL): a real identity-provider stand-in served by
 * Bun.serve on port 0, the app itself called in-process.
 */
import { describe, expect, test } from "bun:test";
import { exportJWK, generateKeyPair, type JWTPayload, SignJWT } from "jose";
import { seedCatalog, testApp } from "../support/harness.ts";

const NOW_S = 1_600_000_000;
const ISSUER = "https://id.example.test/";
const AUDIENCE = "umbra-api";
const SUBJECT = "jwks-user";

const claims = (over: JWTPayload = {}): JWTPayload => ({ iss: ISSUER, aud: AUDIENCE, sub: SUBJECT, iat: NOW_S, exp: NOW_S + 300, ...over });

async function identityProvider() {
  const signing = await generateKeyPair("ES256");
  const rsa = await generateKeyPair("RS256");
  const stranger = await generateKeyPair("ES256");
  const jwks = {
    keys: [
      { ...(await exportJWK(signing.publicKey)), kid: "es-1", alg: "ES256", use: "sig" },
      { ...(await exportJWK(rsa.publicKey)), kid: "rs-1", alg: "RS256", use: "sig" },
    ],
  };
  let fetches = 0;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: (request) => {
      if (new URL(request.url).pathname !== "/.well-known/jwks.json") return new Response("not found", { status: 404 });
      fetches++;
      return Response.json(jwks);
    },
  });
  return {
    server,
    url: `http://127.0.0.1:${server.port}/.well-known/jwks.json`,
    fetches: () => fetches,
    es: (payload = claims(), kid = "es-1") => new SignJWT(payload).setProtectedHeader({ alg: "ES256", kid }).sign(signing.privateKey),
    rs: (payload = claims()) => new SignJWT(payload).setProtectedHeader({ alg: "RS256", kid: "rs-1" }).sign(rsa.privateKey),
    stranger: (kid: string) => new SignJWT(claims()).setProtectedHeader({ alg: "ES256", kid }).sign(stranger.privateKey),
  };
}

async function setup() {
  const idp = await identityProvider();
  try {
    const t = await testApp({
      clock: { now: () => NOW_S * 1000 },
      env: { UMBRA_JWT_JWKS_URL: idp.url, UMBRA_JWT_ISSUER: ISSUER, UMBRA_JWT_AUDIENCE: AUDIENCE },
    });
    await seedCatalog(t);
    await t.app.admin.createAccount({ name: "jwks user", jwt_subject: SUBJECT });
    return {
      idp,
      t,
      async [Symbol.asyncDispose]() {
        try {
          await t[Symbol.asyncDispose]();
        } finally {
          await idp.server.stop(true);
        }
      },
    };
  } catch (e) {
    await idp.server.stop(true);
    throw e;
  }
}

const UNAUTHORIZED = { error: { message: expect.any(String), type: "authentication_error", code: "invalid_token" } };

describe("JWT through a JWKS URL", () => {
  test("a token signed by a key in the set -> 200; a token whose kid is unknown -> 401", async () => {
    await using env = await setup();
    const { t, idp } = env;
    const ok = await t.call("GET", "/v1/models/org/model", { token: await idp.es() });
    expect(ok.status).toBe(200);
    expect((ok.body as { id: string }).id).toBe("org/model");
    expect(idp.fetches()).toBeGreaterThanOrEqual(1);

    const unknownKid = await t.call("GET", "/v1/models", { token: await idp.es(claims(), "es-unknown") });
    expect(unknownKid.status).toBe(401);
    expect(unknownKid.body).toEqual(UNAUTHORIZED);
  });

  test("either key of the set verifies its own tokens", async () => {
    await using env = await setup();
    const { t, idp } = env;
    expect((await t.call("GET", "/v1/models", { token: await idp.rs() })).status).toBe(200);
    expect((await t.call("GET", "/v1/models", { token: await idp.es() })).status).toBe(200);
  });

  test("a key outside the set that claims a kid from the set -> 401", async () => {
    await using env = await setup();
    const { t, idp } = env;
    const r = await t.call("GET", "/v1/models", { token: await idp.stranger("es-1") });
    expect(r.status).toBe(401);
    expect(r.body).toEqual(UNAUTHORIZED);
  });

  test("issuer, audience and expiry are still checked", async () => {
    await using env = await setup();
    const { t, idp } = env;
    for (const payload of [claims({ iss: "https://evil.example.test/" }), claims({ aud: "other" }), claims({ exp: NOW_S - 60 })]) {
      const r = await t.call("GET", "/v1/models", { token: await idp.es(payload) });
      expect(r.status).toBe(401);
      expect(r.body).toEqual(UNAUTHORIZED);
    }
  });

  test("an unreachable JWKS URL refuses tokens with 401, not 500", async () => {
    const idp = await identityProvider();
    const url = idp.url;
    await idp.server.stop(true);
    await using t = await testApp({
      clock: { now: () => NOW_S * 1000 },
      env: { UMBRA_JWT_JWKS_URL: url, UMBRA_JWT_ISSUER: ISSUER, UMBRA_JWT_AUDIENCE: AUDIENCE },
    });
    await t.app.admin.createAccount({ name: "jwks user", jwt_subject: SUBJECT });
    const r = await t.call("GET", "/v1/models", { token: await idp.es() });
    expect(r.status).toBe(401);
    expect(r.body).toEqual(UNAUTHORIZED);
  });
});
