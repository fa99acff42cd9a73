/**
 * Consumer authentication (spec: Authentication 1-6): API keys, provider device tokens refused, revocation
 * at once, secrets stored only as SHA-256, and JWTs verified against a static key (PEM or JWK JSON).
 * The JWKS URL variant, which needs a socket, is in test/e2e/jwks.test.ts.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { exportJWK, exportSPKI, generateKeyPair, type JWTPayload, SignJWT } from "jose";
import { sha256Hex } from "../../src/auth/secrets.ts";
import { seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";

/** A clock in the past: a token valid at this time is expired by the wall clock, so a pass proves the app clock is used. */
const NOW_S = 1_600_000_000;
const clock = { now: () => NOW_S * 1000 + 250 };
const ISSUER = "https://id.example.test/";
const AUDIENCE = "umbra-api";
const SUBJECT = "user-42";

const ROUTES = [
  ["GET", "/v1/models"],
  ["GET", "/v1/models/org/model"],
] as const;

const UNAUTHORIZED = {
  error: { message: expect.any(String), type: "authentication_error", code: expect.stringMatching(/^invalid_(api_key|token)$/) },
};

interface Ctx {
  readonly apiKey: string;
  readonly providerToken: string;
}

async function keyed(): Promise<TestApp & Ctx & { accountId: string; keyId: string }> {
  const t = await testApp();
  await seedCatalog(t);
  const seed = await seedAccount(t);
  const provider = await t.app.admin.createProviderToken({ account_id: seed.accountId });
  return Object.assign(t, { ...seed, providerToken: provider.token });
}

/** Each case gives the Authorization header (undefined: none) from a valid key and a provider token. */
const REFUSED: [string, (c: Ctx) => string | undefined][] = [
  ["no Authorization header", () => undefined],
  ["an empty Authorization header", () => ""],
  ["Bearer with no credential", () => "Bearer "],
  ["a Basic scheme", () => `Basic ${btoa("user:password")}`],
  ["a valid key under another scheme", (c) => `Token ${c.apiKey}`],
  ["a valid key with no scheme", (c) => c.apiKey],
  ["an unknown sk-umbra- key", () => `Bearer sk-umbra-${"A".repeat(43)}`],
  ["a valid key with one character changed", (c) => `Bearer ${c.apiKey.slice(0, -1)}${c.apiKey.endsWith("A") ? "B" : "A"}`],
  ["a valid key with a suffix", (c) => `Bearer ${c.apiKey}x`],
  ["the bare prefix", () => "Bearer sk-umbra-"],
  ["a provider device token", (c) => `Bearer ${c.providerToken}`],
  ["a garbage credential", () => "Bearer not-a-key"],
  ["a JWT-shaped credential while JWT is not configured", () => "Bearer eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ1c2VyLTQyIn0.c2ln"],
];

describe.each(ROUTES)("%s %s", (method, path) => {
  test("a valid API key is accepted", async () => {
    await using t = await keyed();
    const r = await t.call(method, path, { token: t.apiKey });
    expect(r.status).toBe(200);
  });

  test.each(REFUSED)("%s -> 401 envelope", async (_, header) => {
    await using t = await keyed();
    const authorization = header(t);
    const r = await t.call(method, path, { headers: authorization === undefined ? {} : { authorization } });
    expect(r.status).toBe(401);
    expect(r.headers.get("content-type")).toStartWith("application/json");
    expect(r.body).toEqual(UNAUTHORIZED);
    expect(JSON.stringify(r.body)).not.toContain(t.apiKey);
    expect(JSON.stringify(r.body)).not.toContain(t.providerToken);
  });

  test("a revoked key stops working on the very next request; the account's other key still works", async () => {
    await using t = await keyed();
    const other = await t.app.admin.createKey({ account_id: t.accountId });
    expect((await t.call(method, path, { token: t.apiKey })).status).toBe(200);
    const revoked = await t.admin("DELETE", `/keys/${t.keyId}`);
    expect(revoked.status).toBe(200);
    const r = await t.call(method, path, { token: t.apiKey });
    expect(r.status).toBe(401);
    expect(r.body).toEqual({ error: { message: expect.any(String), type: "authentication_error", code: "invalid_api_key" } });
    expect((await t.call(method, path, { token: other.key })).status).toBe(200);
  });
});

describe("guard order", () => {
  test("authentication is checked before parameters: a bad include_builds without a credential is 401, not 400", async () => {
    await using t = await keyed();
    expect((await t.call("GET", "/v1/models?include_builds=2")).status).toBe(401);
    expect((await t.call("GET", "/v1/models/no/such-model")).status).toBe(401);
    expect((await t.call("GET", "/v1/models?include_builds=2", { token: t.apiKey })).status).toBe(400);
  });
});

describe("API keys as secrets", () => {
  test("start with sk-umbra- and carry at least 256 random bits; every key differs", async () => {
    await using t = await testApp();
    const { accountId } = await seedAccount(t);
    const keys: string[] = [];
    for (let i = 0; i < 8; i++) {
      const r = await t.admin("POST", "/keys", { account_id: accountId });
      expect(r.status).toBe(200);
      keys.push((r.body as { key: string }).key);
    }
    for (const key of keys) {
      expect(key).toMatch(/^sk-umbra-[A-Za-z0-9_-]{43,}$/);
      expect(Buffer.from(key.slice("sk-umbra-".length), "base64url").length).toBeGreaterThanOrEqual(32);
    }
    expect(new Set(keys).size).toBe(keys.length);
    // Not one shared prefix beyond sk-umbra-: the random part starts right after it.
    expect(new Set(keys.map((k) => k.slice(0, 12))).size).toBeGreaterThan(1);
  });

  test("the store holds only the SHA-256: the key text is nowhere in the database files or the logs", async () => {
    await using t = await testApp();
    const { accountId } = await seedAccount(t);
    const created = await t.admin("POST", "/keys", { account_id: accountId, name: "secret-check" });
    const key = (created.body as { key: string; hint: string }).key;
    const provider = await t.admin("POST", "/provider-tokens", { account_id: accountId });
    const providerToken = (provider.body as { token: string }).token;
    expect((await t.call("GET", "/v1/models", { token: key })).status).toBe(200);

    const record = await t.store.keys.findByHash(sha256Hex(key));
    expect(record?.keyHash).toBe(sha256Hex(key));
    expect((created.body as { hint: string }).hint).toBe(`sk-umbra-...${key.slice(-4)}`);

    const files = [t.config.db, `${t.config.db}-wal`, `${t.config.db}-journal`].filter((f) => existsSync(f));
    const bytes = Buffer.concat(files.map((f) => readFileSync(f)));
    expect(bytes.length).toBeGreaterThan(0);
    // The check can fail: the hash itself is found in the same bytes.
    expect(bytes.includes(sha256Hex(key))).toBe(true);
    for (const secret of [key, providerToken]) {
      const random = secret.replace(/^(sk-umbra-|umbra-pt-)/, "");
      expect(bytes.includes(secret)).toBe(false);
      // Everything but the 4-character hint must be absent too.
      expect(bytes.includes(random.slice(0, -4))).toBe(false);
      expect(t.logs.join("\n")).not.toContain(random.slice(0, -4));
    }
  });
});

interface KeyFormat {
  readonly alg: "ES256" | "RS256";
  readonly format: "pem" | "jwk";
}

interface Signer {
  /** What UMBRA_JWT_PUBLIC_KEY holds. */
  readonly material: string;
  sign(payload?: JWTPayload, header?: Record<string, unknown>): Promise<string>;
  /** Same algorithm, another key pair. */
  signOther(payload?: JWTPayload): Promise<string>;
}

function claims(over: JWTPayload = {}): JWTPayload {
  return { iss: ISSUER, aud: AUDIENCE, sub: SUBJECT, iat: NOW_S, exp: NOW_S + 300, ...over };
}

function without(payload: JWTPayload, name: string): JWTPayload {
  const copy = { ...payload };
  delete copy[name];
  return copy;
}

async function signer({ alg, format }: KeyFormat): Promise<Signer> {
  const mine = await generateKeyPair(alg);
  const other = await generateKeyPair(alg);
  const material = format === "pem" ? await exportSPKI(mine.publicKey) : JSON.stringify(await exportJWK(mine.publicKey));
  return {
    material,
    sign: (payload = claims(), header = {}) =>
      new SignJWT(payload).setProtectedHeader({ alg, typ: "JWT", ...header }).sign(mine.privateKey),
    signOther: (payload = claims()) => new SignJWT(payload).setProtectedHeader({ alg }).sign(other.privateKey),
  };
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");

async function jwtApp(material: string, env: Record<string, string> = {}): Promise<TestApp> {
  const t = await testApp({
    clock,
    env: { UMBRA_JWT_PUBLIC_KEY: material, UMBRA_JWT_ISSUER: ISSUER, UMBRA_JWT_AUDIENCE: AUDIENCE, ...env },
  });
  await seedCatalog(t);
  await t.app.admin.createAccount({ name: "jwt user", jwt_subject: SUBJECT });
  await t.app.admin.createAccount({ name: "another user", jwt_subject: "user-43" });
  return t;
}

const FORMATS: KeyFormat[] = [
  { alg: "ES256", format: "pem" },
  { alg: "ES256", format: "jwk" },
  { alg: "RS256", format: "pem" },
  { alg: "RS256", format: "jwk" },
];

describe.each(FORMATS)("JWT with a static $alg key as $format", (format) => {
  let s: Signer;
  beforeAll(async () => {
    s = await signer(format);
  });

  test.each(ROUTES)("a valid token for a linked account -> 200 on %s %s", async (method, path) => {
    await using t = await jwtApp(s.material);
    const r = await t.call(method, path, { token: await s.sign() });
    expect(r.status).toBe(200);
  });

  test("the token resolves to the linked account, with no key restrictions", async () => {
    await using t = await jwtApp(s.material);
    const account = await t.store.accounts.findBySubject(SUBJECT);
    expect(await t.app.authenticate(`Bearer ${await s.sign()}`)).toEqual({
      kind: "jwt",
      accountId: account?.id ?? "missing",
      keyId: null,
      allowedModels: null,
      spendCap: null,
      rpm: null,
      tpm: null,
      selfRouteOnly: false,
      linkMachines: true,
    });
  });

  test("an audience array that contains the audience is accepted", async () => {
    await using t = await jwtApp(s.material);
    const r = await t.call("GET", "/v1/models", { token: await s.sign(claims({ aud: ["other", AUDIENCE] })) });
    expect(r.status).toBe(200);
  });

  const refused: [string, () => Promise<string>][] = [
    ["wrong issuer", () => s.sign(claims({ iss: "https://evil.example.test/" }))],
    ["no issuer", () => s.sign(without(claims(), "iss"))],
    ["wrong audience", () => s.sign(claims({ aud: "another-api" }))],
    ["no audience", () => s.sign(without(claims(), "aud"))],
    ["expired a minute ago by the app clock", () => s.sign(claims({ iat: NOW_S - 600, exp: NOW_S - 60 }))],
    ["not valid before an hour from now", () => s.sign(claims({ nbf: NOW_S + 3600 }))],
    ["no exp", () => s.sign(without(claims(), "exp"))],
    ["signed by another key of the same algorithm", () => s.signOther()],
    ["alg none", async () => `${b64({ alg: "none", typ: "JWT" })}.${b64(claims())}.`],
    [
      "HS256 keyed with the public key text",
      () => new SignJWT(claims()).setProtectedHeader({ alg: "HS256" }).sign(new TextEncoder().encode(s.material)),
    ],
    [
      "payload swapped after signing",
      async () => {
        const [header, , signature] = (await s.sign()).split(".");
        return `${header}.${b64(claims({ sub: "user-43" }))}.${signature}`;
      },
    ],
    [
      "header alg switched to another algorithm after signing",
      async () => {
        const [, payload, signature] = (await s.sign()).split(".");
        return `${b64({ alg: format.alg === "ES256" ? "ES384" : "PS256" })}.${payload}.${signature}`;
      },
    ],
    ["signature removed", async () => `${(await s.sign()).split(".").slice(0, 2).join(".")}.`],
    ["a subject with no linked account", () => s.sign(claims({ sub: "user-unlinked" }))],
    ["no subject", () => s.sign(without(claims(), "sub"))],
    ["a numeric subject", () => s.sign(claims({ sub: 42 as unknown as string }))],
  ];

  test.each(refused)("%s -> 401", async (_, make) => {
    await using t = await jwtApp(s.material);
    const token = await make();
    for (const [method, path] of ROUTES) {
      const r = await t.call(method, path, { token });
      expect(r.status).toBe(401);
      expect(r.body).toEqual({ error: { message: expect.any(String), type: "authentication_error", code: "invalid_token" } });
    }
  });
});

describe("UMBRA_JWT_ACCOUNT_CLAIM", () => {
  const CLAIM = "https://umbra.example.test/account";
  let s: Signer;
  beforeAll(async () => {
    s = await signer({ alg: "ES256", format: "pem" });
  });

  test("the configured claim names the account; sub is ignored", async () => {
    await using t = await jwtApp(s.material, { UMBRA_JWT_ACCOUNT_CLAIM: CLAIM });
    const r = await t.call("GET", "/v1/models/org/model", { token: await s.sign(claims({ sub: "someone-else", [CLAIM]: SUBJECT })) });
    expect(r.status).toBe(200);
    const principal = await t.app.authenticate(`Bearer ${await s.sign(claims({ sub: "user-43", [CLAIM]: SUBJECT }))}`);
    expect(principal.accountId).toBe((await t.store.accounts.findBySubject(SUBJECT))?.id ?? "missing");
  });

  test.each([
    ["only sub names the account", claims()],
    ["the claim names no linked account", claims({ [CLAIM]: "user-unlinked" })],
    ["the claim is not a string", claims({ [CLAIM]: 42 })],
    ["the claim is empty", claims({ [CLAIM]: "" })],
  ])("%s -> 401", async (_, payload) => {
    await using t = await jwtApp(s.material, { UMBRA_JWT_ACCOUNT_CLAIM: CLAIM });
    const r = await t.call("GET", "/v1/models", { token: await s.sign(payload) });
    expect(r.status).toBe(401);
    expect(r.body).toEqual({ error: { message: expect.any(String), type: "authentication_error", code: "invalid_token" } });
  });
});

describe("JWT and API keys together", () => {
  test("API keys keep working when JWT is configured, and a provider token is still refused", async () => {
    const s = await signer({ alg: "ES256", format: "pem" });
    await using t = await jwtApp(s.material);
    const { accountId, apiKey } = await seedAccount(t);
    const provider = await t.app.admin.createProviderToken({ account_id: accountId });
    expect((await t.call("GET", "/v1/models", { token: apiKey })).status).toBe(200);
    expect((await t.call("GET", "/v1/models", { token: await s.sign() })).status).toBe(200);
    expect((await t.call("GET", "/v1/models", { token: provider.token })).status).toBe(401);
  });
});
