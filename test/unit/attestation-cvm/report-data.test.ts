import { describe, expect, test } from "bun:test";
import { buildReportData, checkReportData, describeReportData } from "../../../attestation/cvm/index.ts";
import { checkOf, flipBit, readJsonFixture } from "../../fixtures/attestation-cvm/helpers.ts";

interface Golden {
  tls_public_key_spki_der: string;
  sealing_public_key: string;
  report_data: string;
  tls_public_key_sha256: string;
  sealing_key_sha256: string;
}

const golden = readJsonFixture<Golden>("report-data.json");
const fromHex = (h: string) => new Uint8Array(Buffer.from(h, "hex"));
const binding = { tlsPublicKeySpki: fromHex(golden.tls_public_key_spki_der), sealingPublicKey: fromHex(golden.sealing_public_key) };

describe("report data", () => {
  test("golden: SHA-256(TLS SPKI) || SHA-256(sealing key)", () => {
    const rd = buildReportData(binding);
    expect({ hex: Buffer.from(rd).toString("hex"), ...describeReportData(rd) }).toEqual({
      hex: golden.report_data,
      tls_public_key_sha256: golden.tls_public_key_sha256,
      sealing_key_sha256: golden.sealing_key_sha256,
    });
  });

  test("checks the keys it binds", () => {
    expect(() => checkReportData(fromHex(golden.report_data), binding)).not.toThrow();
  });

  test.each([
    ["another TLS key", { ...binding, tlsPublicKeySpki: flipBit(binding.tlsPublicKeySpki, 30) }],
    ["another sealing key", { ...binding, sealingPublicKey: flipBit(binding.sealingPublicKey, 0) }],
    ["the keys swapped", { tlsPublicKeySpki: binding.sealingPublicKey, sealingPublicKey: binding.tlsPublicKeySpki }],
  ])("refuses %s", async (_label, other) => {
    expect(await checkOf(() => checkReportData(fromHex(golden.report_data), other))).toBe("report_data");
  });

  test.each([0, 32, 63])("refuses report data with a flipped bit at byte %i", async (at) => {
    expect(await checkOf(() => checkReportData(flipBit(fromHex(golden.report_data), at), binding))).toBe("report_data");
  });

  test("refuses report data of another length, and empty keys", async () => {
    expect(await checkOf(() => checkReportData(fromHex(golden.report_data).subarray(0, 63), binding))).toBe("report_data_length");
    expect(await checkOf(() => describeReportData(new Uint8Array(65)))).toBe("report_data_length");
    expect(await checkOf(() => buildReportData({ ...binding, tlsPublicKeySpki: new Uint8Array(0) }))).toBe("report_data");
    expect(await checkOf(() => buildReportData({ ...binding, sealingPublicKey: new Uint8Array(0) }))).toBe("report_data");
  });
});
