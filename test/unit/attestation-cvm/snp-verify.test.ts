import "reflect-metadata";
import { beforeAll, describe, expect, test } from "bun:test";
import {
  BasicConstraintsExtension,
  Extension,
  KeyUsageFlags,
  KeyUsagesExtension,
  type X509Certificate,
  X509CertificateGenerator,
} from "@peculiar/x509";
import { DEV_ARK_NAME, DEV_ASK_NAME, DEV_VCEK_NAME, generateRsa, PSS_SHA384, vcekExtensions } from "../../../attestation/cvm/dev-chain.ts";
import {
  createDevChain,
  createSnpVerifier,
  type DevChain,
  loadAmdRoots,
  parseSnpReport,
  type SnpExpectations,
  type SnpRoot,
  type SnpVerifier,
} from "../../../attestation/cvm/index.ts";
import { checkOf, fixedClock, flipBit, MEASUREMENT, NOW, REPORT_DATA, signedReport } from "../../fixtures/attestation-cvm/helpers.ts";

const expected: SnpExpectations = { measurement: MEASUREMENT, reportData: REPORT_DATA, allowSmt: true };
const der = (c: X509Certificate) => new Uint8Array(c.rawData);
const YEAR = 365 * 24 * 3600 * 1000;

let chain: DevChain;
let verifier: SnpVerifier;
let report: Uint8Array;

beforeAll(async () => {
  chain = await createDevChain();
  verifier = createSnpVerifier({ roots: [chain.root], mode: "development", clock: fixedClock() });
  report = await signedReport(chain);
});

/** A certificate signed by `signer` (default: the chain's ASK), with VCEK defaults for everything else. */
async function issue(
  options: {
    subject?: string;
    issuer?: string;
    publicKey?: CryptoKey;
    signer?: CryptoKey;
    signingAlgorithm?: { name: string; hash?: string; saltLength?: number };
    extensions?: Extension[];
  } = {},
): Promise<X509Certificate> {
  return X509CertificateGenerator.create({
    serialNumber: "02",
    subject: options.subject ?? DEV_VCEK_NAME,
    issuer: options.issuer ?? DEV_ASK_NAME,
    notBefore: new Date("2024-01-01T00:00:00Z"),
    notAfter: new Date("2030-01-01T00:00:00Z"),
    signingAlgorithm: options.signingAlgorithm ?? PSS_SHA384,
    publicKey: options.publicKey ?? chain.vcekKeys.publicKey,
    signingKey: options.signer ?? chain.askKeys.privateKey,
    extensions: options.extensions ?? vcekExtensions(chain.tcb, chain.chipId),
  });
}

describe("valid evidence", () => {
  test("a development report verifies, with every field as signed", async () => {
    const result = await verifier.verify(report, chain.endorsements, expected);
    expect(result.report).toEqual(parseSnpReport(report));
    expect(result.chain.root).toBe(chain.root);
    expect(result.chain.vcek.subject).toBe(chain.vcek.subject);
  });

  test.each([
    ["VCEK, ASK, ARK", () => chain.endorsements],
    ["ARK, VCEK, ASK", () => [der(chain.ark), der(chain.vcek), der(chain.ask)]],
    ["VCEK and ASK (ARK from the root)", () => [der(chain.vcek), der(chain.ask)]],
    ["VCEK alone (ASK and ARK from the root)", () => [der(chain.vcek)]],
  ])("endorsements as %s", async (_label, endorsements) => {
    expect((await verifier.verify(report, endorsements(), expected)).chain.root.name).toBe("Umbra-Dev");
  });

  test("a report without SMT verifies when SMT is not allowed", async () => {
    const noSmt = await signedReport(chain, { policy: 0x20000n, platformInfo: 0n });
    expect((await verifier.verify(noSmt, chain.endorsements, { ...expected, allowSmt: false })).report.policy).toBe(0x20000n);
  });

  test("a report from the expected VMPL and at the minimum TCB verifies", async () => {
    const vmpl1 = await signedReport(chain, { vmpl: 1 });
    const result = await verifier.verify(vmpl1, chain.endorsements, { ...expected, vmpl: 1, minimumTcb: chain.tcb });
    expect(result.report.vmpl).toBe(1);
  });
});

describe("report integrity", () => {
  test.each([
    ["GUEST_SVN", 0x004],
    ["POLICY (ABI minor)", 0x008],
    ["POLICY (debug bit)", 0x00a],
    ["REPORT_DATA", 0x050],
    ["MEASUREMENT", 0x090],
    ["HOST_DATA", 0x0c0],
    ["REPORT_ID", 0x140],
    ["COMMITTED_TCB", 0x1e0],
    ["last signed byte", 0x29f],
  ])("a flipped bit in %s breaks the signature", async (_field, at) => {
    const bit = at === 0x00a ? 3 : 0; // 0x00a bit 3 = policy bit 19 (DEBUG)
    expect(await checkOf(() => verifier.verify(flipBit(report, at, bit), chain.endorsements, expected))).toBe("report_signature");
  });

  test.each([
    ["r, least significant byte", 0x2a0],
    ["r, most significant byte", 0x2a0 + 47],
    ["s, least significant byte", 0x2e8],
    ["s, most significant byte", 0x2e8 + 47],
  ])("a flipped bit in the signature (%s) is refused", async (_label, at) => {
    expect(await checkOf(() => verifier.verify(flipBit(report, at), chain.endorsements, expected))).toBe("report_signature");
  });

  test("a zero signature is refused", async () => {
    const zeroed = report.slice();
    zeroed.fill(0, 0x2a0, 0x330);
    expect(await checkOf(() => verifier.verify(zeroed, chain.endorsements, expected))).toBe("report_signature");
  });

  test("a signature by another P-384 key is refused", async () => {
    const other = (await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-384" }, false, ["sign"])) as CryptoKeyPair;
    const forged = await signedReport(chain, {}, other.privateKey);
    expect(await checkOf(() => verifier.verify(forged, chain.endorsements, expected))).toBe("report_signature");
  });

  test("a truncated report is refused before anything else", async () => {
    expect(await checkOf(() => verifier.verify(report.subarray(0, 0x49f), chain.endorsements, expected))).toBe("report_size");
  });

  test("an unknown report version is refused", async () => {
    const v5 = await signedReport(chain, { version: 5 });
    expect(await checkOf(() => verifier.verify(v5, chain.endorsements, expected))).toBe("report_version");
  });

  test("a VLEK-signed report is refused", async () => {
    const vlek = await signedReport(chain, { signingKey: 1 });
    expect(await checkOf(() => verifier.verify(vlek, chain.endorsements, expected))).toBe("signing_key");
  });
});

describe("certificate chain", () => {
  test("a VCEK not signed by the ASK is refused", async () => {
    const rogueAsk = await generateRsa();
    const vcek = await issue({ signer: rogueAsk.privateKey });
    expect(await checkOf(() => verifier.verify(report, [der(vcek), der(chain.ask), der(chain.ark)], expected))).toBe("vcek_signature");
    expect(await checkOf(() => verifier.verify(report, [der(vcek)], expected))).toBe("vcek_signature");
  });

  test("an ASK not signed by the ARK is refused", async () => {
    const other = await createDevChain({ arkKeys: chain.arkKeys, askSigner: await generateRsa() });
    const r = await signedReport(other);
    expect(await checkOf(() => verifier.verify(r, other.endorsements, expected))).toBe("ask_signature");
  });

  test("an ARK with the same subject but another key is refused, presented or not", async () => {
    const rogue = await createDevChain({ chipId: chain.chipId });
    expect(rogue.ark.subject).toBe(chain.ark.subject);
    const r = await signedReport(rogue);
    expect(await checkOf(() => verifier.verify(r, rogue.endorsements, expected))).toBe("ark_not_pinned");
    expect(await checkOf(() => verifier.verify(r, [der(rogue.vcek), der(rogue.ask)], expected))).toBe("ask_signature");
    expect(await checkOf(() => verifier.verify(r, [der(rogue.vcek)], expected))).toBe("vcek_signature");
  });

  test("a chain under the same ARK key with a re-issued ARK certificate verifies (trust is by key)", async () => {
    const sibling = await createDevChain({ arkKeys: chain.arkKeys });
    const r = await signedReport(sibling);
    expect((await verifier.verify(r, sibling.endorsements, expected)).chain.root).toBe(chain.root);
  });

  const expiredWindow = { notBefore: new Date(NOW - 3 * YEAR), notAfter: new Date(NOW - YEAR) };
  const futureWindow = { notBefore: new Date(NOW + YEAR), notAfter: new Date(NOW + 3 * YEAR) };
  describe.each([
    ["ARK", "arkValidity"],
    ["ASK", "askValidity"],
    ["VCEK", "vcekValidity"],
  ] as const)("%s validity", (_role, option) => {
    test.each([
      ["expired", expiredWindow],
      ["not yet valid", futureWindow],
    ])("%s is refused", async (_label, window) => {
      const c = await createDevChain({ [option]: window });
      const v = createSnpVerifier({ roots: [c.root], mode: "development", clock: fixedClock() });
      expect(await checkOf(async () => v.verify(await signedReport(c), c.endorsements, expected))).toBe("certificate_validity");
    });
  });

  test.each([
    ["after the chain expired", Date.parse("2045-01-01T00:00:01Z")],
    ["before the chain was valid", Date.parse("2019-12-31T23:59:59Z")],
  ])("the injected clock decides validity: %s", async (_label, now) => {
    const v = createSnpVerifier({ roots: [chain.root], mode: "development", clock: fixedClock(now) });
    expect(await checkOf(() => v.verify(report, chain.endorsements, expected))).toBe("certificate_validity");
  });

  test("no VCEK is refused", async () => {
    expect(await checkOf(() => verifier.verify(report, [], expected))).toBe("vcek_missing");
    expect(await checkOf(() => verifier.verify(report, [der(chain.ask), der(chain.ark)], expected))).toBe("vcek_missing");
  });

  test("too many or repeated certificates are refused", async () => {
    const two = [der(chain.vcek), der(chain.vcek)];
    expect(await checkOf(() => verifier.verify(report, two, expected))).toBe("endorsements_format");
    expect(await checkOf(() => verifier.verify(report, [...chain.endorsements, der(chain.vcek)], expected))).toBe("endorsements_format");
  });

  test("an endorsement that is not a certificate is refused", async () => {
    const garbage = new Uint8Array([0x30, 0x03, 0x02, 0x01, 0x00]);
    expect(await checkOf(() => verifier.verify(report, [garbage], expected))).toBe("certificate_parse");
    expect(await checkOf(() => verifier.verify(report, [der(chain.vcek).subarray(0, 200)], expected))).toBe("certificate_parse");
  });

  test("a VCEK whose issuer names another ASK is refused", async () => {
    const vcek = await issue({ issuer: "CN=SEV-Other, O=Umbra development" });
    expect(await checkOf(() => verifier.verify(report, [der(vcek), der(chain.ask), der(chain.ark)], expected))).toBe(
      "certificate_name_chain",
    );
    expect(await checkOf(() => verifier.verify(report, [der(vcek)], expected))).toBe("root_unknown");
  });

  test.each([
    ["RSASSA-PKCS1-v1_5", { name: "RSASSA-PKCS1-v1_5", hash: "SHA-384" }],
    ["RSA-PSS with SHA-256", { name: "RSA-PSS", hash: "SHA-256", saltLength: 32 }],
    ["RSA-PSS with a 32-byte salt", { name: "RSA-PSS", hash: "SHA-384", saltLength: 32 }],
  ])("a VCEK signed with %s is refused", async (_label, alg) => {
    const keys = (await crypto.subtle.generateKey(
      { name: alg.name, modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: alg.hash },
      false,
      ["sign", "verify"],
    )) as CryptoKeyPair;
    const vcek = await issue({ signer: keys.privateKey, signingAlgorithm: alg });
    expect(await checkOf(() => verifier.verify(report, [der(vcek)], expected))).toBe("certificate_signature_algorithm");
  });

  test("a VCEK marked as a CA is refused", async () => {
    const vcek = await issue({ extensions: [...vcekExtensions(chain.tcb, chain.chipId), new BasicConstraintsExtension(true, 0, true)] });
    expect(await checkOf(() => verifier.verify(report, [der(vcek)], expected))).toBe("certificate_ca_flags");
  });

  test("a VCEK allowed to sign certificates is refused", async () => {
    const ku = new KeyUsagesExtension(KeyUsageFlags.digitalSignature | KeyUsageFlags.keyCertSign, true);
    const vcek = await issue({ extensions: [...vcekExtensions(chain.tcb, chain.chipId), ku] });
    expect(await checkOf(() => verifier.verify(report, [der(vcek)], expected))).toBe("certificate_key_usage");
  });

  test("a VCEK with an unknown critical extension is refused", async () => {
    const critical = new Extension("1.3.6.1.4.1.3704.1.99", true, new Uint8Array([0x05, 0x00]));
    const vcek = await issue({ extensions: [...vcekExtensions(chain.tcb, chain.chipId), critical] });
    expect(await checkOf(() => verifier.verify(report, [der(vcek)], expected))).toBe("certificate_critical_extension");
  });

  test("an ASK that is not a CA, or may not sign certificates, is refused", async () => {
    const notCa = await issue({
      subject: DEV_ASK_NAME,
      issuer: DEV_ARK_NAME,
      publicKey: chain.askKeys.publicKey,
      signer: chain.arkKeys.privateKey,
      extensions: [new BasicConstraintsExtension(false, undefined, true), new KeyUsagesExtension(KeyUsageFlags.keyCertSign, true)],
    });
    const noCertSign = await issue({
      subject: DEV_ASK_NAME,
      issuer: DEV_ARK_NAME,
      publicKey: chain.askKeys.publicKey,
      signer: chain.arkKeys.privateKey,
      extensions: [new BasicConstraintsExtension(true, 0, true), new KeyUsagesExtension(KeyUsageFlags.digitalSignature, true)],
    });
    expect(await checkOf(() => verifier.verify(report, [der(chain.vcek), der(notCa)], expected))).toBe("certificate_ca_flags");
    expect(await checkOf(() => verifier.verify(report, [der(chain.vcek), der(noCertSign)], expected))).toBe("certificate_key_usage");
  });

  test("a root whose ARK is not self-signed is refused", async () => {
    const other = await generateRsa();
    const ark = await issue({
      subject: DEV_ARK_NAME,
      issuer: DEV_ARK_NAME,
      publicKey: chain.arkKeys.publicKey,
      signer: other.privateKey,
      extensions: [new BasicConstraintsExtension(true, undefined, true), new KeyUsagesExtension(KeyUsageFlags.keyCertSign, true)],
    });
    const root: SnpRoot = { ...chain.root, ark };
    const v = createSnpVerifier({ roots: [root], mode: "development", clock: fixedClock() });
    expect(await checkOf(() => v.verify(report, [der(chain.vcek), der(chain.ask)], expected))).toBe("ark_signature");
  });

  test("a VCEK issued for another chip is refused", async () => {
    const otherChip = await signedReport(chain, { chipId: new Uint8Array(64).fill(9) });
    expect(await checkOf(() => verifier.verify(otherChip, chain.endorsements, expected))).toBe("vcek_chip_id");
    const masked = await signedReport(chain, { chipId: new Uint8Array(64), maskChipId: true });
    expect(await checkOf(() => verifier.verify(masked, chain.endorsements, expected))).toBe("vcek_chip_id");
  });

  test("a VCEK without a hardware id is refused", async () => {
    const vcek = await issue({ extensions: vcekExtensions(chain.tcb, chain.chipId).slice(0, -1) });
    expect(await checkOf(() => verifier.verify(report, [der(vcek)], expected))).toBe("vcek_chip_id");
  });

  test.each([
    ["boot loader", { bootloader: 4 }],
    ["TEE", { tee: 1 }],
    ["SNP", { snp: 9 }],
    ["microcode", { microcode: 116 }],
  ])("a VCEK issued for another TCB (%s) is refused", async (_label, change) => {
    const r = await signedReport(chain, { reportedTcb: { ...chain.tcb, ...change } });
    expect(await checkOf(() => verifier.verify(r, chain.endorsements, expected))).toBe("vcek_tcb");
  });

  test("a VCEK without TCB extensions is refused", async () => {
    const vcek = await issue({ extensions: vcekExtensions(chain.tcb, chain.chipId).slice(-1) });
    expect(await checkOf(() => verifier.verify(report, [der(vcek)], expected))).toBe("vcek_tcb");
  });
});

describe("guest policy and measured state", () => {
  test("the debug bit is refused", async () => {
    const r = await signedReport(chain, { policy: 0x30000n | (1n << 19n) });
    expect(await checkOf(() => verifier.verify(r, chain.endorsements, expected))).toBe("policy_debug");
  });

  test("the migration agent bit is refused", async () => {
    const r = await signedReport(chain, { policy: 0x30000n | (1n << 18n) });
    expect(await checkOf(() => verifier.verify(r, chain.endorsements, expected))).toBe("policy_migration");
  });

  test.each([
    ["the policy allows SMT", { policy: 0x30000n, platformInfo: 0n }],
    ["the platform runs SMT", { policy: 0x20000n, platformInfo: 1n }],
  ])("SMT is refused when not allowed: %s", async (_label, fields) => {
    const r = await signedReport(chain, fields);
    expect(await checkOf(() => verifier.verify(r, chain.endorsements, { ...expected, allowSmt: false }))).toBe("policy_smt");
  });

  test("a report from another VMPL is refused", async () => {
    const r = await signedReport(chain, { vmpl: 2 });
    expect(await checkOf(() => verifier.verify(r, chain.endorsements, expected))).toBe("vmpl");
  });

  test.each([
    ["boot loader", { bootloader: 4 }],
    ["TEE", { tee: 1 }],
    ["SNP", { snp: 9 }],
    ["microcode", { microcode: 116 }],
  ])("a TCB below the minimum (%s) is refused", async (_label, raise) => {
    const minimumTcb = { ...chain.tcb, ...raise };
    expect(await checkOf(() => verifier.verify(report, chain.endorsements, { ...expected, minimumTcb }))).toBe("minimum_tcb");
  });

  test("another measurement is refused", async () => {
    const other = flipBit(MEASUREMENT, 47, 7);
    expect(await checkOf(() => verifier.verify(report, chain.endorsements, { ...expected, measurement: other }))).toBe("measurement");
    const short = MEASUREMENT.subarray(0, 32);
    expect(await checkOf(() => verifier.verify(report, chain.endorsements, { ...expected, measurement: short }))).toBe("measurement");
  });

  test("other report data is refused", async () => {
    const other = flipBit(REPORT_DATA, 63);
    expect(await checkOf(() => verifier.verify(report, chain.endorsements, { ...expected, reportData: other }))).toBe("report_data");
  });
});

describe("modes and platforms", () => {
  test("a production verifier refuses development roots", async () => {
    expect(await checkOf(() => createSnpVerifier({ roots: [chain.root], mode: "production" }))).toBe("dev_root_in_production");
    const relabelled: SnpRoot = { ...chain.root, name: "Milan", development: false };
    expect(await checkOf(() => createSnpVerifier({ roots: [relabelled], mode: "production" }))).toBe("dev_root_in_production");
    const amd = await loadAmdRoots();
    const flagged: SnpRoot = { ...amd[0]!, development: true };
    expect(await checkOf(() => createSnpVerifier({ roots: [...amd, flagged], mode: "production" }))).toBe("dev_root_in_production");
  });

  test("a verifier without roots cannot be made", async () => {
    expect(await checkOf(() => createSnpVerifier({ roots: [], mode: "development" }))).toBe("roots_load");
  });

  test("a production verifier refuses dev evidence, and development evidence passed off as sev-snp", async () => {
    const production = createSnpVerifier({ roots: await loadAmdRoots(), mode: "production", clock: fixedClock() });
    const dev = { platform: "dev", evidence: report, endorsements: chain.endorsements } as const;
    expect(await checkOf(() => production.verifyEvidence(dev, expected))).toBe("dev_root_in_production");
    expect(await checkOf(() => production.verifyEvidence({ ...dev, platform: "sev-snp" }, expected))).toBe("ark_not_pinned");
    expect(await checkOf(() => production.verifyEvidence({ ...dev, platform: "sev-snp", endorsements: [der(chain.vcek)] }, expected))).toBe(
      "root_unknown",
    );
  });

  test("a development verifier accepts dev evidence through verifyEvidence", async () => {
    const result = await verifier.verifyEvidence({ platform: "dev", evidence: report, endorsements: chain.endorsements }, expected);
    expect(result.chain.root.development).toBe(true);
  });

  test("TDX evidence is not verified yet", async () => {
    expect(await checkOf(() => verifier.verifyEvidence({ platform: "tdx", evidence: report, endorsements: [] }, expected))).toBe(
      "platform_unsupported",
    );
  });
});
