/**
 * The one real Apple Enterprise Attestation leaf published (brandonweeks/nanoca, copied in
 * test/fixtures/attestation/nanoca-apple-leaf.pem): it decodes to the values Apple put in it, it binds
 * no key of ours (mda_freshness), and the simulated Mac's leaves (test/support/apple-leaf.ts) encode
 * the same values into the same extension bytes. Its intermediate (Apple Enterprise Attestation Sub CA
 * 1) is not published, so no real chain verifies end to end here: the first real capture will be that
 * fixture (docs/security.md).
 */
import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { X509Certificate } from "@peculiar/x509";
import {
  AttestationError,
  checkMdaLeaf,
  DevelopmentRoot,
  decodeMdaLeaf,
  freshnessCodeFor,
  leafExtensions,
  mdaEpoch,
  mdaNonce,
  parseIdentityKey,
  pemToDer,
  SoftwareIdentity,
  TrustAnchor,
  verifyMdaAnswer,
} from "../../../attestation/provider/index.ts";
import { issueAppleLeaf } from "../../support/apple-leaf.ts";

const PEM = readFileSync(join(import.meta.dir, "..", "..", "fixtures", "attestation", "nanoca-apple-leaf.pem"), "utf8");
const DER = pemToDer(PEM);
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
const SERIAL = "TMWFWWWP67";
const UDID = "00006030-000651690A84001C";
const FRESHNESS = "9ff219c2831313c8190b63e9dd8f80aa0a4a9737a58daa931da8abde2f2d5d62";
const NOT_BEFORE = Date.parse("2025-07-13T09:38:07Z");
const INSIDE = Date.parse("2025-07-20T00:00:00Z");

function check(run: () => unknown): string {
  try {
    run();
  } catch (e) {
    if (e instanceof AttestationError) return e.check;
    throw e;
  }
  return "no error";
}

describe("the real Apple leaf (nanoca)", () => {
  test("its bytes are the published ones", () => {
    expect(createHash("sha256").update(DER).digest("hex")).toBe("6c25bfd9aa09f209892b8b4808ab44803045f5bc2e2c172f7e6c7832c38292c2");
  });

  test("its shape: P-384, ecdsa-with-SHA384, Sub CA 1, 91 days, no AKI, SKI or EKU", () => {
    const cert = new X509Certificate(DER);
    expect({
      issuer: cert.issuer,
      notBefore: cert.notBefore.toISOString(),
      notAfter: cert.notAfter.toISOString(),
      signature: cert.signatureAlgorithm as unknown,
      key: cert.publicKey.algorithm as unknown,
      extensions: cert.extensions.map((e) => [e.type, e.critical]),
    }).toEqual({
      issuer: "CN=Apple Enterprise Attestation Sub CA 1, O=Apple Inc., C=US",
      notBefore: "2025-07-13T09:38:07.000Z",
      notAfter: "2025-10-12T09:38:07.000Z",
      signature: { name: "ECDSA", hash: { name: "SHA-384" } },
      key: { name: "ECDSA", namedCurve: "P-384" },
      extensions: [
        ["2.5.29.19", true],
        ["2.5.29.15", true],
        ["1.2.840.113635.100.8.10.2", false],
        ["1.2.840.113635.100.8.10.3", false],
        ["1.2.840.113635.100.8.10.1", false],
        ["1.2.840.113635.100.8.9.4", false],
        ["1.2.840.113635.100.8.13.2", false],
        ["1.2.840.113635.100.8.13.1", false],
        ["1.2.840.113635.100.8.13.3", false],
        ["1.2.840.113635.100.8.9.1", false],
        ["1.2.840.113635.100.8.9.2", false],
        ["1.2.840.113635.100.8.11.1", false],
      ],
    });
  });

  test("it decodes to the values of the research notes (section 5.1)", () => {
    const ext = leafExtensions(DER);
    const fields = decodeMdaLeaf(ext);
    expect({ ...fields, freshnessCode: fields.freshnessCode && hex(fields.freshnessCode) }).toEqual({
      freshnessCode: FRESHNESS,
      sipStatus: 0n,
      secureBoot: "Full Security",
      kernelExtensions: 0n,
      osVersion: "15.5",
      serialNumber: SERIAL,
      udid: UDID,
    });
    const raw = (oid: string) => hex(ext.get(`1.2.840.113635.100.8.${oid}`) ?? new Uint8Array());
    const ascii = (s: string) => Buffer.from(s).toString("hex");
    expect([raw("13.1"), raw("13.3"), raw("13.2"), raw("9.4"), raw("10.2"), raw("10.3")]).toEqual([
      "020100",
      "020100",
      ascii("Full Security"),
      ascii("J514sAP"),
      ascii("15.5"),
      ascii("15.5"),
    ]);
  });

  test("its freshness code binds no key of ours: mda_freshness for any key, seed and accepted epoch", () => {
    const answer = { serialNumber: SERIAL, provisioningUdid: UDID, enrolmentSerial: SERIAL };
    for (let i = 0; i < 10; i++) {
      const key = SoftwareIdentity.generate().publicKey(65);
      const seed = crypto.getRandomValues(new Uint8Array(32));
      expect(check(() => checkMdaLeaf(leafExtensions(DER), NOT_BEFORE, answer, key, { seed, now: () => INSIDE }))).toBe("mda_freshness");
      expect(hex(freshnessCodeFor(parseIdentityKey(key)))).not.toBe(FRESHNESS);
    }
  });

  test("without its intermediate it stops at chain_anchor against the pinned Apple root", async () => {
    const key = SoftwareIdentity.generate().publicKey(65);
    const run = verifyMdaAnswer(
      { chain: [DER], serialNumber: SERIAL, provisioningUdid: UDID, enrolmentSerial: SERIAL, identityKey: key },
      { seed: new Uint8Array(32), anchor: TrustAnchor.apple(), mode: "production", now: () => INSIDE },
    );
    await expect(run).rejects.toThrow(AttestationError);
    await run.catch((e: AttestationError) => expect(e.check).toBe("chain_anchor"));
  });
});

describe("the simulated Mac's leaves match the real one", () => {
  test("the same values give the same extensions, byte for byte, in the same order", async () => {
    const root = await DevelopmentRoot.generate(() => NOT_BEFORE);
    const [leaf] = await issueAppleLeaf(root, {
      nonce: Buffer.from(FRESHNESS, "hex"),
      serialNumber: SERIAL,
      udid: UDID,
      osVersion: "15.5",
      hardwareModel: "J514sAP",
    });
    const shape = (der: Uint8Array) => {
      const cert = new X509Certificate(der);
      return {
        extensions: cert.extensions.map((e) => [e.type, e.critical, hex(new Uint8Array(e.value))]),
        signature: cert.signatureAlgorithm,
        key: cert.publicKey.algorithm,
        validDays: (cert.notAfter.getTime() - cert.notBefore.getTime()) / 86_400_000,
      };
    };
    expect(shape(leaf!)).toEqual(shape(DER));
  });

  test("a leaf with our nonce decodes like the real one", async () => {
    const root = await DevelopmentRoot.generate(() => INSIDE);
    const key = SoftwareIdentity.generate().publicKey(65);
    const nonce = mdaNonce(new Uint8Array(32).fill(1), mdaEpoch(INSIDE), key);
    const [leaf] = await issueAppleLeaf(root, { nonce });
    expect(decodeMdaLeaf(leafExtensions(leaf!)).freshnessCode).toEqual(nonce);
  });
});
