import { beforeAll, describe, expect, test } from "bun:test";
import {
  buildAttestationDocument,
  buildReportData,
  type CvmCheck,
  createDevSource,
  createSnpVerifier,
  type DevSource,
  decodeAttestationDocument,
  loadAmdRoots,
  parseSnpReport,
  REPORT_DATA_LAYOUT,
  type SnpVerifier,
  verifyAttestationDocument,
} from "../../../attestation/cvm/index.ts";
import { checkOf, fixedClock, MEASUREMENT, REPORT_DATA } from "../../fixtures/attestation-cvm/helpers.ts";

const binding = { tlsPublicKeySpki: new Uint8Array([0x30, 0x59, 1, 2, 3]), sealingPublicKey: new Uint8Array(32).fill(7) };
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

let source: DevSource;
let verifier: SnpVerifier;
beforeAll(async () => {
  source = await createDevSource({ measurement: MEASUREMENT });
  verifier = createSnpVerifier({ roots: source.roots, mode: "development", clock: fixedClock() });
});

describe("development source", () => {
  test("is flagged as development, and so is its root", () => {
    expect({ platform: source.platform, development: source.development, roots: source.roots.map((r) => r.development) }).toEqual({
      platform: "dev",
      development: true,
      roots: [true],
    });
  });

  test("reports the requested report data and the configured measurement, verifiable with its roots", async () => {
    const ev = await source.get(REPORT_DATA);
    const report = parseSnpReport(ev.evidence);
    expect({
      platform: ev.platform,
      reportData: report.reportData,
      measurement: report.measurement,
      debug: report.policy & (1n << 19n),
    }).toEqual({
      platform: "dev",
      reportData: REPORT_DATA,
      measurement: MEASUREMENT,
      debug: 0n,
    });
    const result = await verifier.verifyEvidence(ev, { measurement: MEASUREMENT, reportData: REPORT_DATA, allowSmt: true });
    expect(result.chain.root.development).toBe(true);
  });

  test("each report has a fresh report id", async () => {
    const a = parseSnpReport((await source.get(REPORT_DATA)).evidence);
    const b = parseSnpReport((await source.get(REPORT_DATA)).evidence);
    expect(hex(a.reportId)).not.toBe(hex(b.reportId));
  });

  test("refuses report data that is not 64 bytes, and a measurement that is not 48", async () => {
    expect(await checkOf(() => source.get(new Uint8Array(32)))).toBe("report_data_length");
    await expect(createDevSource({ measurement: new Uint8Array(32) })).rejects.toThrow(RangeError);
  });

  test("is refused by a production verifier", async () => {
    const production = createSnpVerifier({ roots: await loadAmdRoots(), mode: "production", clock: fixedClock() });
    const ev = await source.get(REPORT_DATA);
    expect(await checkOf(() => production.verifyEvidence(ev, { measurement: MEASUREMENT, reportData: REPORT_DATA, allowSmt: true }))).toBe(
      "dev_root_in_production",
    );
  });
});

describe("attestation document (GET /v1/attestation body)", () => {
  test("carries platform, evidence, endorsements, the report data and what it binds", async () => {
    const doc = await buildAttestationDocument(source, binding, MEASUREMENT);
    const rd = buildReportData(binding);
    expect({ ...doc, evidence: typeof doc.evidence }).toEqual({
      platform: "dev",
      evidence: "string",
      endorsements: source.chain.endorsements.map((c) => Buffer.from(c).toString("base64")),
      report_data: {
        hex: hex(rd),
        layout: REPORT_DATA_LAYOUT,
        tls_public_key_sha256: hex(rd.subarray(0, 32)),
        sealing_key_sha256: hex(rd.subarray(32)),
      },
      expected_measurement: hex(MEASUREMENT),
    });
    expect(parseSnpReport(new Uint8Array(Buffer.from(doc.evidence, "base64"))).reportData).toEqual(rd);
  });

  test("a client verifies it against the keys it saw, through JSON", async () => {
    const doc = JSON.parse(JSON.stringify(await buildAttestationDocument(source, binding, null)));
    const result = await verifyAttestationDocument(doc, binding, verifier, { measurement: MEASUREMENT, allowSmt: true });
    expect(result.report.measurement).toEqual(MEASUREMENT);
  });

  test("a client that saw another TLS key refuses it", async () => {
    const doc = await buildAttestationDocument(source, binding, null);
    const other = { ...binding, tlsPublicKeySpki: new Uint8Array([0x30, 0x59, 9]) };
    expect(await checkOf(() => verifyAttestationDocument(doc, other, verifier, { measurement: MEASUREMENT, allowSmt: true }))).toBe(
      "report_data",
    );
  });

  test("published report data that the report does not carry is refused", async () => {
    const doc = await buildAttestationDocument(source, binding, null);
    const otherSource = await createDevSource({ measurement: MEASUREMENT, chain: source.chain });
    const swapped = { ...doc, evidence: Buffer.from((await otherSource.get(REPORT_DATA)).evidence).toString("base64") };
    expect(await checkOf(() => verifyAttestationDocument(swapped, binding, verifier, { measurement: MEASUREMENT, allowSmt: true }))).toBe(
      "report_data",
    );
  });

  test("the client's own measurement decides, not the one the document states", async () => {
    const doc = await buildAttestationDocument(source, binding, MEASUREMENT);
    const mine = new Uint8Array(48).fill(1);
    expect(await checkOf(() => verifyAttestationDocument(doc, binding, verifier, { measurement: mine, allowSmt: true }))).toBe(
      "measurement",
    );
  });

  test.each([
    ["not an object", null, "document_format"],
    ["unknown platform", { platform: "sgx" }, "platform_unsupported"],
    ["endorsements not a list", { platform: "dev", endorsements: "x", report_data: { hex: "00".repeat(64) } }, "document_format"],
    ["short report data", { platform: "dev", endorsements: [], report_data: { hex: "00".repeat(63) }, evidence: "" }, "document_format"],
    [
      "evidence not base64",
      { platform: "dev", endorsements: [], report_data: { hex: "00".repeat(64) }, evidence: "%%" },
      "document_format",
    ],
  ] as [string, unknown, CvmCheck][])("refuses a malformed document: %s", async (_label, doc, check) => {
    expect(await checkOf(() => decodeAttestationDocument(doc))).toBe(check);
  });
});
