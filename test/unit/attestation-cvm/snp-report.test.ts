import { describe, expect, test } from "bun:test";
import {
  createDevChain,
  decodePolicy,
  describeSnpReport,
  devReportBody,
  encodeSnpReport,
  parseSnpReport,
  SNP_REPORT_SIZE,
  SNP_SIGNED_LENGTH,
  withSnpSignature,
} from "../../../attestation/cvm/index.ts";
import { checkOf, MEASUREMENT, REPORT_DATA, readJsonFixture, realMilanVector } from "../../fixtures/attestation-cvm/helpers.ts";

/** A report written byte by byte at the offsets of the AMD ABI table, independently of encodeSnpReport. */
function handBuiltReport(version = 3): Uint8Array {
  const b = new Uint8Array(0x4a0);
  const v = new DataView(b.buffer);
  v.setUint32(0x000, version, true);
  v.setUint32(0x004, 7, true); // GUEST_SVN
  v.setBigUint64(0x008, 0x000000000003_1f02n, true); // POLICY: ABI 31.2, SMT, reserved bit 17
  b.fill(0xf1, 0x010, 0x020); // FAMILY_ID
  b.fill(0xf2, 0x020, 0x030); // IMAGE_ID
  v.setUint32(0x030, 2, true); // VMPL
  v.setUint32(0x034, 1, true); // SIGNATURE_ALGO
  b.set([1, 2, 0, 0, 0, 0, 3, 4], 0x038); // CURRENT_TCB
  v.setBigUint64(0x040, 0x3n, true); // PLATFORM_INFO
  v.setUint32(0x048, 0b00111, true); // AUTHOR_KEY_EN, MASK_CHIP_ID, SIGNING_KEY = 1
  b.fill(0xa1, 0x050, 0x090); // REPORT_DATA
  b.fill(0xa2, 0x090, 0x0c0); // MEASUREMENT
  b.fill(0xa3, 0x0c0, 0x0e0); // HOST_DATA
  b.fill(0xa4, 0x0e0, 0x110); // ID_KEY_DIGEST
  b.fill(0xa5, 0x110, 0x140); // AUTHOR_KEY_DIGEST
  b.fill(0xa6, 0x140, 0x160); // REPORT_ID
  b.fill(0xa7, 0x160, 0x180); // REPORT_ID_MA
  b.set([5, 6, 0, 0, 0, 0, 7, 8], 0x180); // REPORTED_TCB
  b.set([0x19, 0x11, 0x01], 0x188); // CPUID fam/mod/step
  b.fill(0xa8, 0x1a0, 0x1e0); // CHIP_ID
  b.set([9, 10, 0, 0, 0, 0, 11, 12], 0x1e0); // COMMITTED_TCB
  b.set([21, 55, 1, 0, 22, 54, 1, 0], 0x1e8); // CURRENT build/minor/major, COMMITTED build/minor/major
  b.set([13, 14, 0, 0, 0, 0, 15, 16], 0x1f0); // LAUNCH_TCB
  b[0x2a0] = 0x01; // R, little-endian: least significant byte first
  b[0x2a0 + 47] = 0x02;
  b[0x2e8] = 0x03; // S
  return b;
}

const fill = (n: number, x: number) => new Uint8Array(n).fill(x);

describe("parseSnpReport", () => {
  test("reads every field at the ABI offsets", () => {
    const r = parseSnpReport(handBuiltReport());
    const expectedR = new Uint8Array(48);
    expectedR[0] = 0x02;
    expectedR[47] = 0x01;
    const expectedS = new Uint8Array(48);
    expectedS[47] = 0x03;
    expect(r).toEqual({
      version: 3,
      guestSvn: 7,
      policy: 0x31f02n,
      familyId: fill(16, 0xf1),
      imageId: fill(16, 0xf2),
      vmpl: 2,
      signatureAlgorithm: 1,
      currentTcb: { bootloader: 1, tee: 2, snp: 3, microcode: 4 },
      platformInfo: 3n,
      authorKeyEnabled: true,
      maskChipId: true,
      signingKey: 1,
      reportData: fill(64, 0xa1),
      measurement: fill(48, 0xa2),
      hostData: fill(32, 0xa3),
      idKeyDigest: fill(48, 0xa4),
      authorKeyDigest: fill(48, 0xa5),
      reportId: fill(32, 0xa6),
      reportIdMa: fill(32, 0xa7),
      reportedTcb: { bootloader: 5, tee: 6, snp: 7, microcode: 8 },
      cpuid: { family: 0x19, model: 0x11, stepping: 0x01 },
      chipId: fill(64, 0xa8),
      committedTcb: { bootloader: 9, tee: 10, snp: 11, microcode: 12 },
      currentVersion: { major: 1, minor: 55, build: 21 },
      committedVersion: { major: 1, minor: 54, build: 22 },
      launchTcb: { bootloader: 13, tee: 14, snp: 15, microcode: 16 },
      signature: { r: expectedR, s: expectedS },
      signedBytes: handBuiltReport().slice(0, 0x2a0),
    });
  });

  test("version 2 has no CPUID fields", () => {
    expect(parseSnpReport(handBuiltReport(2)).cpuid).toBeNull();
  });

  test("golden: the real Milan report parses to the stored field values", () => {
    expect(describeSnpReport(parseSnpReport(realMilanVector().report))).toEqual(readJsonFixture("milan-report.json"));
  });

  test("decodes the policy bits", () => {
    expect(decodePolicy(0x1f_0302n | (1n << 19n))).toEqual({
      abiMinor: 2,
      abiMajor: 3,
      smtAllowed: true,
      migrateMa: true,
      debug: true,
      singleSocket: true,
    });
  });

  test.each([0, 1, 0x2a0, 0x49f, 0x4a1, 0x1000])("refuses a report of %i bytes", async (size) => {
    const b = new Uint8Array(size);
    if (size >= 4) b[0] = 3;
    expect(await checkOf(() => parseSnpReport(b))).toBe("report_size");
  });

  test("refuses a truncated real report", async () => {
    expect(await checkOf(() => parseSnpReport(realMilanVector().report.subarray(0, 0x49f)))).toBe("report_size");
  });

  test.each([0, 1, 4, 5, 0xffffffff])("refuses report version %i", async (version) => {
    const b = handBuiltReport();
    new DataView(b.buffer).setUint32(0, version, true);
    expect(await checkOf(() => parseSnpReport(b))).toBe("report_version");
  });

  test.each([0, 2, 0xffffffff])("refuses signature algorithm %i", async (alg) => {
    const b = handBuiltReport();
    new DataView(b.buffer).setUint32(0x34, alg, true);
    expect(await checkOf(() => parseSnpReport(b))).toBe("signature_algorithm");
  });

  test.each([
    ["r", 0x2a0 + 48],
    ["r", 0x2a0 + 71],
    ["s", 0x2e8 + 48],
    ["s", 0x2e8 + 71],
  ])("refuses a signature %s wider than 48 bytes (byte %i set)", async (_name, at) => {
    const b = handBuiltReport();
    b[at] = 1;
    expect(await checkOf(() => parseSnpReport(b))).toBe("signature_format");
  });
});

describe("encodeSnpReport", () => {
  test("round-trips every field of a development report", async () => {
    const chain = await createDevChain();
    const body = devReportBody(chain, MEASUREMENT, REPORT_DATA, { guestSvn: 3, vmpl: 1, policy: 0x3_0000n | (1n << 20n) });
    const parsed = parseSnpReport(withSnpSignature(encodeSnpReport(body), new Uint8Array([1]), new Uint8Array([2])));
    const { signature, signedBytes, ...rest } = parsed;
    expect(rest).toEqual(body);
    expect(signature).toEqual({ r: new Uint8Array(48).fill(0, 0, 47).fill(1, 47), s: new Uint8Array(48).fill(2, 47) });
    expect(signedBytes.length).toBe(SNP_SIGNED_LENGTH);
  });

  test("re-encoding the real Milan report gives back its signed bytes", () => {
    const { report } = realMilanVector();
    const { signature: _s, signedBytes: _b, ...body } = parseSnpReport(report);
    expect(encodeSnpReport(body).subarray(0, SNP_SIGNED_LENGTH)).toEqual(report.subarray(0, SNP_SIGNED_LENGTH));
  });

  test("refuses fields of the wrong length", async () => {
    const chain = await createDevChain();
    expect(() => encodeSnpReport(devReportBody(chain, new Uint8Array(47), REPORT_DATA))).toThrow(RangeError);
    expect(() => encodeSnpReport(devReportBody(chain, MEASUREMENT, new Uint8Array(65)))).toThrow(RangeError);
    expect(() => withSnpSignature(new Uint8Array(SNP_REPORT_SIZE), new Uint8Array(49), new Uint8Array(1))).toThrow(RangeError);
  });
});
