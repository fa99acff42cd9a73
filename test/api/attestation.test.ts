/**
 * GET /v1/attestation (docs/api.md): the coordinator's attestation document, verified the way a client does
 * it (the library's verifier, with report data computed here from the keys, independently of the server),
 * tamper tests, and the 503 answer of a host that cannot attest.
 */
import "reflect-metadata";
import { describe, expect, test } from "bun:test";
import { createHash, generateKeyPairSync } from "node:crypto";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { X509Certificate } from "@peculiar/x509";
import {
  CONFIGFS_TSM_ROOT,
  type CvmCheck,
  createSnpVerifier,
  decodeAttestationDocument,
  loadAmdRoots,
  REPORT_DATA_LAYOUT,
  type SnpRoot,
  type SnpVerification,
  verifyAttestationDocument,
} from "../../attestation/cvm/index.ts";
import { verifyCoordinator } from "../../docs/examples/verify-attestation.ts";
import { MAX_AGE_MS } from "../../src/attestation/coordinator-attestation.ts";
import { ConfigError } from "../../src/config/config.ts";
import { configDigestHex } from "../../src/config/config-digest.ts";
import { checkOf, fixedClock, flipBit } from "../fixtures/attestation-cvm/helpers.ts";
import { type TestApp, tempDir, testApp } from "../support/harness.ts";

/** The answer as a client reads it (snake_case JSON). */
interface Answer {
  platform: string;
  evidence: string;
  endorsements: string[];
  report_data: { hex: string; layout: string; tls_public_key_sha256: string; sealing_key_sha256: string };
  expected_measurement: string | null;
  sealing_public_key: string;
  tls_public_key_bound: boolean;
  development: boolean;
  development_root?: { name: string; ark: string; ask: string };
  config?: { sha256: string; bound_by: string };
}

const MEASUREMENT_HEX = "4d".repeat(48);
const sha256 = (bytes: Uint8Array) => new Uint8Array(createHash("sha256").update(bytes).digest());
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
const fromB64 = (text: string) => new Uint8Array(Buffer.from(text, "base64"));

/** A fresh P-256 public key as PEM in `dir`, and its SubjectPublicKeyInfo DER. */
function tlsKeyFile(dir: string, name = "tls.pem"): { path: string; spki: Uint8Array } {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const path = join(dir, name);
  writeFileSync(path, publicKey.export({ type: "spki", format: "pem" }));
  return { path, spki: new Uint8Array(publicKey.export({ type: "spki", format: "der" })) };
}

/** The development root the answer names (development only: it proves nothing about hardware). */
function developmentRoot(doc: Answer): SnpRoot {
  const root = doc.development_root;
  if (!root) throw new Error("the answer carries no development root");
  return { name: root.name, ark: new X509Certificate(fromB64(root.ark)), ask: new X509Certificate(fromB64(root.ask)), development: true };
}

/**
 * Verifies like a client: report data = SHA-256(TLS SPKI the client saw, or 32 zero bytes when none is bound)
 * || SHA-256(the sealing key), then the library's verifier in development mode.
 */
async function verify(doc: Answer, tlsSpki: Uint8Array | null, measurementHex: string): Promise<SnpVerification> {
  const verifier = createSnpVerifier({ roots: [developmentRoot(doc)], mode: "development", clock: fixedClock() });
  const sealingPublicKey = new Uint8Array(Buffer.from(doc.sealing_public_key, "base64url"));
  const expected = { measurement: new Uint8Array(Buffer.from(measurementHex, "hex")), allowSmt: true };
  if (tlsSpki !== null) return verifyAttestationDocument(doc, { tlsPublicKeySpki: tlsSpki, sealingPublicKey }, verifier, expected);
  const reportData = new Uint8Array(64);
  reportData.set(sha256(sealingPublicKey), 32);
  const decoded = decodeAttestationDocument(doc);
  expect(hex(decoded.reportData)).toBe(hex(reportData));
  return verifier.verifyEvidence(decoded, { ...expected, reportData });
}

async function fetchAnswer(t: TestApp): Promise<Answer> {
  const r = await t.call("GET", "/v1/attestation");
  expect(r.status).toBe(200);
  return r.body as Answer;
}

describe("GET /v1/attestation in development", () => {
  test("answers the dev document, binding the TLS key file and the sealing key; it verifies", async () => {
    using dir = tempDir();
    const tls = tlsKeyFile(dir.path);
    await using t = await testApp({ env: { UMBRA_TLS_PUBLIC_KEY_FILE: tls.path, UMBRA_EXPECTED_MEASUREMENT: MEASUREMENT_HEX } });
    const doc = await fetchAnswer(t);
    const sealing = (await t.app.attestation.sealingKey()).publicKey;
    const b64 = expect.stringMatching(/^[A-Za-z0-9+/]+={0,2}$/);
    expect(doc).toEqual({
      platform: "dev",
      evidence: b64,
      endorsements: [b64, b64, b64],
      report_data: {
        hex: hex(sha256(tls.spki)) + hex(sha256(sealing)),
        layout: REPORT_DATA_LAYOUT,
        tls_public_key_sha256: hex(sha256(tls.spki)),
        sealing_key_sha256: hex(sha256(sealing)),
      },
      expected_measurement: MEASUREMENT_HEX,
      sealing_public_key: Buffer.from(sealing).toString("base64url"),
      tls_public_key_bound: true,
      development: true,
      development_root: { name: "Umbra-Dev", ark: b64, ask: b64 },
      config: { sha256: configDigestHex(t.config), bound_by: "none" },
    });
    const verified = await verify(doc, tls.spki, MEASUREMENT_HEX);
    expect([hex(verified.report.reportData), hex(verified.report.measurement)]).toEqual([doc.report_data.hex, MEASUREMENT_HEX]);
  });

  test("without a TLS key the TLS half is 32 zero bytes, says so, and verifies against no TLS key", async () => {
    using dir = tempDir();
    await using t = await testApp();
    const doc = await fetchAnswer(t);
    expect([doc.tls_public_key_bound, doc.report_data.tls_public_key_sha256, doc.expected_measurement]).toEqual([
      false,
      "0".repeat(64),
      null,
    ]);
    await verify(doc, null, "00".repeat(48));
    // A client that did see a TLS key finds it unbound.
    expect(await checkOf(() => verify(doc, tlsKeyFile(dir.path).spki, "00".repeat(48)))).toBe("report_data");
  });

  test("a production verifier refuses the development document", async () => {
    await using t = await testApp();
    const doc = await fetchAnswer(t);
    const verifier = createSnpVerifier({ roots: await loadAmdRoots(), mode: "production", clock: fixedClock() });
    const check = await checkOf(() =>
      verifier.verifyEvidence(decodeAttestationDocument(doc), {
        measurement: new Uint8Array(48),
        reportData: fromB64(doc.evidence).subarray(0x50, 0x90),
        allowSmt: true,
      }),
    );
    expect(check).toBe("dev_root_in_production");
  });

  describe("tampering makes verification fail", () => {
    const flip = (b64: string, index: (length: number) => number) => {
      const bytes = fromB64(b64);
      return Buffer.from(flipBit(bytes, index(bytes.length))).toString("base64");
    };
    const cases: [string, (doc: Answer, otherKey: Uint8Array) => Answer, CvmCheck][] = [
      ["a bit of the evidence (measurement field)", (d) => ({ ...d, evidence: flip(d.evidence, () => 0x90) }), "report_signature"],
      ["a bit of the evidence (report data field)", (d) => ({ ...d, evidence: flip(d.evidence, () => 0x50) }), "report_signature"],
      [
        "the published report data",
        (d) => ({
          ...d,
          report_data: { ...d.report_data, hex: `${d.report_data.hex.slice(0, 127)}${d.report_data.hex.endsWith("0") ? "1" : "0"}` },
        }),
        "report_data",
      ],
      ["the sealing key", (d, other) => ({ ...d, sealing_public_key: Buffer.from(other).toString("base64url") }), "report_data"],
      [
        "a bit of the VCEK signature",
        (d) => ({ ...d, endorsements: [flip(d.endorsements[0]!, (n) => n - 1), ...d.endorsements.slice(1)] }),
        "vcek_signature",
      ],
    ];

    test.each(cases)("%s", async (_, tamper, check) => {
      using dir = tempDir();
      const tls = tlsKeyFile(dir.path);
      await using t = await testApp({ env: { UMBRA_TLS_PUBLIC_KEY_FILE: tls.path } });
      const doc = await fetchAnswer(t);
      await verify(doc, tls.spki, "00".repeat(48));
      expect(await checkOf(() => verify(tamper(doc, new Uint8Array(32).fill(9)), tls.spki, "00".repeat(48)))).toBe(check);
    });

    test("another TLS key than the one bound", async () => {
      using dir = tempDir();
      const tls = tlsKeyFile(dir.path);
      await using t = await testApp({ env: { UMBRA_TLS_PUBLIC_KEY_FILE: tls.path } });
      const doc = await fetchAnswer(t);
      expect(await checkOf(() => verify(doc, tlsKeyFile(dir.path, "other.pem").spki, "00".repeat(48)))).toBe("report_data");
    });

    test("another measurement than the one reported", async () => {
      await using t = await testApp({ env: { UMBRA_EXPECTED_MEASUREMENT: MEASUREMENT_HEX } });
      expect(await checkOf(async () => verify(await fetchAnswer(t), null, "00".repeat(48)))).toBe("measurement");
    });
  });

  test("needs no credential: with none, garbage or an unknown key the answer is the same 200", async () => {
    await using t = await testApp();
    const answers = [];
    for (const authorization of [
      undefined,
      "Bearer garbage",
      "Bearer sk-umbra-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
      "Basic dXNlcjpwYXNz",
    ]) {
      const r = await t.call("GET", "/v1/attestation", { headers: authorization ? { authorization } : {} });
      expect([r.status, r.headers.get("content-type")?.split(";")[0]]).toEqual([200, "application/json"]);
      answers.push(r.body);
    }
    expect(answers.slice(1)).toEqual([answers[0], answers[0], answers[0]]);
  });

  test("evidence is cached, and asked again once older than the maximum age; the sealing key stays", async () => {
    let now = Date.parse("2026-06-01T00:00:00Z");
    await using t = await testApp({ clock: { now: () => now } });
    const first = await fetchAnswer(t);
    now += MAX_AGE_MS - 1;
    expect(await fetchAnswer(t)).toEqual(first);
    now += 1;
    const second = await fetchAnswer(t);
    expect(second.evidence).not.toBe(first.evidence);
    expect([second.sealing_public_key, second.report_data]).toEqual([first.sealing_public_key, first.report_data]);
    await verify(second, null, "00".repeat(48));
  });
});

describe("docs/examples/verify-attestation.ts, against the app in-process", () => {
  const inProcess = (t: TestApp, edit: (doc: Answer) => Answer = (d) => d) => ({
    fetch: async (url: string) => {
      const r = await t.app.http.handle(new Request(url));
      if (r.status !== 200) return r;
      return Response.json(edit((await r.json()) as Answer));
    },
    now: fixedClock().now,
  });

  test("verifies the development answer, binding the TLS key it is given", async () => {
    using dir = tempDir();
    const tls = tlsKeyFile(dir.path);
    await using t = await testApp({ env: { UMBRA_TLS_PUBLIC_KEY_FILE: tls.path } });
    const result = await verifyCoordinator("http://localhost", { ...inProcess(t), tlsPublicKeySpki: tls.spki });
    const sealing = (await t.app.attestation.sealingKey()).publicKey;
    expect([result.platform, result.development, result.tlsPublicKeyBound, result.sealingPublicKey, result.reportData]).toEqual([
      "dev",
      true,
      true,
      Buffer.from(sealing).toString("base64url"),
      hex(sha256(tls.spki)) + hex(sha256(sealing)),
    ]);
  });

  test("refuses to skip a bound TLS key, a swapped sealing key, and a 503", async () => {
    using dir = tempDir();
    const tls = tlsKeyFile(dir.path);
    await using t = await testApp({ env: { UMBRA_TLS_PUBLIC_KEY_FILE: tls.path } });
    await expect(verifyCoordinator("http://localhost", inProcess(t))).rejects.toThrow("--tls-public-key");
    const swapped = inProcess(t, (d) => ({ ...d, sealing_public_key: Buffer.from(new Uint8Array(32).fill(9)).toString("base64url") }));
    expect(await checkOf(() => verifyCoordinator("http://localhost", { ...swapped, tlsPublicKeySpki: tls.spki }))).toBe("report_data");
    await using none = await testApp({ env: { UMBRA_ATTESTATION: "none" } });
    await expect(verifyCoordinator("http://localhost", inProcess(none))).rejects.toThrow("answered 503");
  });
});

describe("a host that cannot attest", () => {
  const unavailable = (detail: string) => ({
    error: {
      message: `coordinator attestation is not available on this host (${detail})`,
      type: "service_unavailable",
      code: "service_unavailable",
    },
  });

  test.each([
    ["production, --attestation none", { UMBRA_MODE: "production", UMBRA_ATTESTATION: "none" }, "--attestation none"],
    ["development, --attestation none", { UMBRA_ATTESTATION: "none" }, "--attestation none"],
  ])("%s: 503 envelope, and the server still serves", async (_, env, detail) => {
    await using t = await testApp({ env });
    const r = await t.call("GET", "/v1/attestation");
    expect({ status: r.status, body: r.body }).toEqual({ status: 503, body: unavailable(detail) });
    expect((await t.call("GET", "/v1/pricing")).status).toBe(200);
  });

  test.skipIf(existsSync(CONFIGFS_TSM_ROOT))(
    "production default (configfs-tsm) without the kernel interface: 503 envelope, logged at start",
    async () => {
      await using t = await testApp({ env: { UMBRA_MODE: "production" } });
      expect(t.config.attestation).toBe("configfs-tsm");
      const r = await t.call("GET", "/v1/attestation");
      expect({ status: r.status, body: r.body }).toEqual({ status: 503, body: unavailable("configfs_tsm_unavailable") });
      const warnings = t.logs
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((l) => l.msg === "coordinator attestation unavailable");
      expect(warnings.map((l) => [l.level, l.reason])).toEqual([["warn", "configfs_tsm_unavailable"]]);
      expect((await t.call("GET", "/healthz")).status).toBe(200);
    },
  );

  test("production refuses development evidence at start", async () => {
    await expect(testApp({ env: { UMBRA_MODE: "production", UMBRA_ATTESTATION: "dev" } })).rejects.toThrow(ConfigError);
  });
});
