/**
 * Provisioning after boot (src/attestation/provisioning.ts, docs/api.md "Provisioning"): the gate before
 * (503 but health, attestation, provisioning), the operator's client (src/coordinator/provision-cli.ts)
 * against development evidence, and every refusal: a wrong measurement (nothing sent), development evidence
 * without consent, a tampered message, a message for another boot, an unknown nonce, provisioning twice.
 * The provisioned token is in memory only: not in the logs, not in the data folder.
 */
import "reflect-metadata";
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { expectMeasurement, type ProvisionOptions, provisionCoordinator } from "../../src/coordinator/provision-cli.ts";
import { toBase64url } from "../../src/crypto/encoding.ts";
import { sealProvisioning } from "../../src/crypto/provision-seal.ts";
import { type TestApp, testApp } from "../support/harness.ts";

const MEASUREMENT_HEX = "4d".repeat(48);
const MEASUREMENT = new Uint8Array(Buffer.from(MEASUREMENT_HEX, "hex"));
const TOKEN = "provisioned-admin-token-0123456789abcdef-QZX";
const AWAIT = { UMBRA_PROVISIONING: "await", UMBRA_ADMIN_TOKEN: "", UMBRA_EXPECTED_MEASUREMENT: MEASUREMENT_HEX };

/** An in-process fetch to the app that records each request's method and path. */
function via(t: TestApp, sent: string[] = []): NonNullable<ProvisionOptions["fetch"]> {
  return async (url, init) => {
    const request = new Request(url, init);
    sent.push(`${request.method} ${new URL(request.url).pathname}`);
    return t.app.http.handle(request);
  };
}

const provision = (t: TestApp, extra: Partial<ProvisionOptions> = {}, sent: string[] = []) =>
  provisionCoordinator("http://localhost", {
    expected: expectMeasurement(MEASUREMENT),
    adminToken: TOKEN,
    allowDevelopmentEvidence: true,
    fetch: via(t, sent),
    ...extra,
  });

const statusOf = async (t: TestApp, method: string, path: string, token?: string) =>
  (await t.call(method, path, token === undefined ? {} : { token })).status;

/** A message sealed by hand for `t`'s key and report, with `nonce`. */
async function handSealed(t: TestApp, nonce: string, secrets: unknown = { admin_token: TOKEN }) {
  const own = await t.app.attestation.ownReport();
  const key = (await t.app.attestation.sealingKey()).publicKey;
  return sealProvisioning(key, new TextEncoder().encode(JSON.stringify(secrets)), {
    measurement: own.measurement,
    reportData: own.reportData,
    nonce: new Uint8Array(Buffer.from(nonce, "base64url")),
  });
}

async function nonceOf(t: TestApp): Promise<string> {
  const r = await t.call("GET", "/v1/provision");
  expect(r.status).toBe(200);
  return (r.body as { nonce: string }).nonce;
}

describe("provisioning", () => {
  test("the gate: before provisioning only health, attestation and provisioning are served; after it, everything", async () => {
    await using t = await testApp({ env: AWAIT });
    const paths: [string, string][] = [
      ["GET", "/healthz"],
      ["GET", "/v1/attestation"],
      ["GET", "/readyz"],
      ["GET", "/metrics"],
      ["GET", "/v1/models"],
      ["GET", "/v1/pricing"],
      ["POST", "/v1/chat/completions"],
      ["GET", "/admin/v1/accounts"],
      ["GET", "/v1/provider/connect"],
    ];
    const before = await Promise.all(paths.map(([m, p]) => statusOf(t, m, p, TOKEN)));
    const refused = await t.call("GET", "/v1/models");
    expect([before, refused.body]).toEqual([
      [200, 200, 503, 503, 503, 503, 503, 503, 503],
      {
        error: {
          message:
            "the coordinator awaits provisioning of its secrets: only /healthz, /v1/attestation and /v1/provision are served until then",
          type: "service_unavailable",
          code: "service_unavailable",
        },
      },
    ]);
    expect(await provision(t)).toEqual({ development: true, measurement: MEASUREMENT_HEX, secrets: ["admin_token"] });
    const after = await Promise.all(paths.map(([m, p]) => statusOf(t, m, p, TOKEN)));
    // Models need a consumer key (401), chat too; the admin API takes the provisioned token.
    expect([after, await statusOf(t, "GET", "/admin/v1/accounts", "wrong-token")]).toEqual([
      [200, 200, 200, 200, 401, 200, 401, 200, 404],
      401,
    ]);
  });

  test("provisioning twice: 409, and GET /v1/provision too", async () => {
    await using t = await testApp({ env: AWAIT });
    await provision(t);
    const again = await t.call("POST", "/v1/provision", { body: await handSealed(t, toBase64url(new Uint8Array(32))) });
    expect([again.status, (again.body as { error: { code: string } }).error.code, await statusOf(t, "GET", "/v1/provision")]).toEqual([
      409,
      "conflict",
      409,
    ]);
    await expect(provision(t)).rejects.toThrow("GET /v1/provision answered 409");
  });

  test("a wrong measurement: the client refuses after reading the attestation, before sending anything", async () => {
    await using t = await testApp({ env: AWAIT });
    const sent: string[] = [];
    await expect(provision(t, { expected: expectMeasurement(new Uint8Array(48).fill(0x4e)) }, sent)).rejects.toThrow(
      "matches no published shape (given)",
    );
    expect([sent, t.app.provisioning.state]).toEqual([["GET /v1/attestation"], "awaiting"]);
  });

  test("development evidence without --allow-development-evidence: refused before sending anything", async () => {
    await using t = await testApp({ env: AWAIT });
    const sent: string[] = [];
    await expect(provision(t, { allowDevelopmentEvidence: false }, sent)).rejects.toThrow("development evidence");
    expect([sent, t.app.provisioning.state]).toEqual([["GET /v1/attestation"], "awaiting"]);
  });

  test("a tampered message is refused (400, still awaiting); the untampered one then succeeds", async () => {
    await using t = await testApp({ env: AWAIT });
    const envelope = await handSealed(t, await nonceOf(t));
    const bytes = Buffer.from(envelope.ciphertext, "base64url");
    bytes[5] = (bytes[5] ?? 0) ^ 1;
    const r = await t.call("POST", "/v1/provision", { body: { ...envelope, ciphertext: toBase64url(bytes) } });
    expect([r.status, r.body, t.app.provisioning.state]).toEqual([
      400,
      {
        error: {
          message: "the provisioning message does not open for this coordinator (sealed for another boot or nonce, or altered)",
          type: "invalid_request_error",
          code: "invalid_value",
          param: "ciphertext",
        },
      },
      "awaiting",
    ]);
    expect((await t.call("POST", "/v1/provision", { body: envelope })).status).toBe(200);
  });

  test("a message replayed to another boot is refused: its nonce is unknown there, and with a fresh nonce it does not open", async () => {
    await using first = await testApp({ env: AWAIT });
    await using second = await testApp({ env: AWAIT });
    const message = await handSealed(first, await nonceOf(first));
    const replayed = await second.call("POST", "/v1/provision", { body: message });
    const renonced = await second.call("POST", "/v1/provision", { body: { ...message, nonce: await nonceOf(second) } });
    const params = [replayed, renonced].map((r) => [r.status, (r.body as { error: { param: string } }).error.param]);
    expect([params, second.app.provisioning.state]).toEqual([
      [
        [400, "nonce"],
        [400, "ciphertext"],
      ],
      "awaiting",
    ]);
  });

  test("a nonce this coordinator did not issue is refused", async () => {
    await using t = await testApp({ env: AWAIT });
    await nonceOf(t);
    const r = await t.call("POST", "/v1/provision", { body: await handSealed(t, toBase64url(new Uint8Array(32).fill(9))) });
    expect([r.status, (r.body as { error: { param: string } }).error.param]).toEqual([400, "nonce"]);
  });

  test("bad secrets are refused by name, never quoting a value", async () => {
    await using t = await testApp({ env: AWAIT });
    const unknown = await t.call("POST", "/v1/provision", {
      body: await handSealed(t, await nonceOf(t), { admin_token: TOKEN, ssh_key: TOKEN }),
    });
    const missing = await t.call("POST", "/v1/provision", { body: await handSealed(t, await nonceOf(t), {}) });
    // A password this coordinator (SQLite) would not use: refused, not silently dropped.
    const unused = await t.call("POST", "/v1/provision", {
      body: await handSealed(t, await nonceOf(t), { admin_token: TOKEN, db_password: TOKEN }),
    });
    const messages = [unknown, missing, unused].map((r) => (r.body as { error: { message: string; param: string } }).error);
    expect([unknown.status, missing.status, unused.status, messages, JSON.stringify(messages).includes(TOKEN)]).toEqual([
      400,
      400,
      400,
      [
        { message: "unknown secret 'ssh_key'; known: admin_token, db_password, redis_password, nats_password", param: "secrets" },
        { message: "the secret 'admin_token' is required", param: "secrets.admin_token" },
        {
          message:
            "'db_password' is not used by this coordinator: only one on Postgres (cluster mode) awaiting provisioning opens its connections with provisioned passwords",
          param: "secrets.db_password",
        },
      ].map((e) => expect.objectContaining(e)),
      false,
    ]);
    // Still awaiting: a good message provisions.
    expect((await provision(t)).secrets).toEqual(["admin_token"]);
  });

  test("provisioning off: 404, and nothing is gated", async () => {
    await using t = await testApp();
    expect([
      await statusOf(t, "GET", "/v1/provision"),
      await statusOf(t, "POST", "/v1/provision"),
      await statusOf(t, "GET", "/readyz"),
    ]).toEqual([404, 404, 200]);
  });

  test("the provisioned token is in memory only: not in the logs, not in the data folder", async () => {
    await using t = await testApp({ env: AWAIT });
    await provision(t);
    const account = await t.call("POST", "/admin/v1/accounts", { token: TOKEN, body: { name: "after provisioning" } });
    expect(account.status).toBe(200);
    await t.app.flush();
    const files = readdirSync(t.dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
    const holding = files.filter((f) => readFileSync(join(f.parentPath, f.name)).includes(TOKEN)).map((f) => f.name);
    expect([
      files.length > 0,
      holding,
      t.logs.some((line) => line.includes(TOKEN)),
      t.logs.some((l) => l.includes("coordinator provisioned")),
    ]).toEqual([true, [], false, true]);
  });
});
