import { describe, expect, test } from "bun:test";
import { Extension, KeyUsageFlags, KeyUsagesExtension } from "@peculiar/x509";
import {
  APPLE_OID,
  AttestationError,
  appleExtensionValues,
  caExtensions,
  checkAppleDeviceClaims,
  freshnessCodeFor,
  generateSigningKeys,
  issueCertificate,
  leafKeyUsage,
  type Posture,
  parseIdentityKey,
  type SigningKeys,
  SoftwareIdentity,
  TrustAnchor,
  toExtensions,
  verifyMdaChain,
} from "../../../attestation/provider/index.ts";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const NOW = Date.parse("2026-11-21T12:00:00Z");
const now = () => NOW;
const POSTURE: Posture = { sipEnabled: true, secureBoot: "Full Security", thirdPartyKexts: false, osVersion: "15.1" };
const ROOT = "CN=Test Attestation Root CA, O=Umbra tests";
const APPLE_ROOT_NAME = "CN=Apple Enterprise Attestation Root CA, O=Apple Inc., C=US";

interface Validity {
  readonly notBefore: number;
  readonly notAfter: number;
}
const VALID: Validity = { notBefore: NOW - HOUR, notAfter: NOW + 30 * DAY };

/** Knobs for one test chain: root -> N intermediates -> leaf with the Apple device extensions. */
interface ChainSpec {
  readonly rootName?: string;
  readonly rootExtensions?: readonly Extension[];
  readonly rootValidity?: Validity;
  readonly intermediates?: number;
  readonly intermediateExtensions?: (index: number) => readonly Extension[];
  readonly intermediateValidity?: Validity;
  /** The issuer name written into the leaf (default: the intermediate's subject). */
  readonly leafIssuerName?: string;
  readonly leafValidity?: Validity;
  readonly leafKeyUsage?: Extension | null;
  readonly leafExtraExtensions?: readonly Extension[];
  /** Changes the Apple extension values before they are written (delete an OID to omit it). */
  readonly apple?: (values: Map<string, Uint8Array>) => void;
  readonly appleCritical?: ReadonlySet<string>;
}

interface TestChain {
  readonly anchor: TrustAnchor;
  readonly rootDer: Uint8Array;
  readonly rootKeys: SigningKeys;
  /** [leaf, intermediates...] as a provider sends it. */
  readonly chain: Uint8Array[];
  readonly identity: SoftwareIdentity;
}

async function buildChain(spec: ChainSpec = {}): Promise<TestChain> {
  const identity = SoftwareIdentity.generate();
  const rootName = spec.rootName ?? ROOT;
  const rootKeys = await generateSigningKeys("P-384");
  const rv = spec.rootValidity ?? { notBefore: NOW - 365 * DAY, notAfter: NOW + 20 * 365 * DAY };
  const rootDer = await issueCertificate({
    subject: rootName,
    publicKey: rootKeys.keys.publicKey,
    self: rootKeys,
    notBefore: new Date(rv.notBefore),
    notAfter: new Date(rv.notAfter),
    extensions: spec.rootExtensions ?? caExtensions(),
  });
  let issuer = { name: rootName, signing: rootKeys };
  const intermediates: Uint8Array[] = [];
  const count = spec.intermediates ?? 1;
  for (let i = 0; i < count; i++) {
    const keys = await generateSigningKeys("P-384");
    const name = `CN=Test Attestation Sub CA ${i + 1}, O=Umbra tests`;
    const v = spec.intermediateValidity ?? { notBefore: NOW - 30 * DAY, notAfter: NOW + 5 * 365 * DAY };
    intermediates.unshift(
      await issueCertificate({
        subject: name,
        publicKey: keys.keys.publicKey,
        issuer,
        notBefore: new Date(v.notBefore),
        notAfter: new Date(v.notAfter),
        extensions: spec.intermediateExtensions?.(i) ?? caExtensions(0),
      }),
    );
    issuer = { name, signing: keys };
  }
  const values = appleExtensionValues(POSTURE, freshnessCodeFor(parseIdentityKey(identity.publicKey())));
  spec.apple?.(values);
  const leafKeys = await generateSigningKeys("P-256");
  const lv = spec.leafValidity ?? VALID;
  const ku = spec.leafKeyUsage === undefined ? leafKeyUsage() : spec.leafKeyUsage;
  const leaf = await issueCertificate({
    subject: "CN=Test device",
    publicKey: leafKeys.keys.publicKey,
    issuer: { name: spec.leafIssuerName ?? issuer.name, signing: issuer.signing },
    notBefore: new Date(lv.notBefore),
    notAfter: new Date(lv.notAfter),
    extensions: [...(ku ? [ku] : []), ...toExtensions(values, spec.appleCritical), ...(spec.leafExtraExtensions ?? [])],
  });
  return { anchor: TrustAnchor.development(rootDer), rootDer, rootKeys, chain: [leaf, ...intermediates], identity };
}

async function failedCheck(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    if (e instanceof AttestationError) return e.check;
    throw e;
  }
  return "no error";
}

function verify(t: TestChain, chain: readonly Uint8Array[] = t.chain, at = NOW) {
  return verifyMdaChain(chain, { anchor: t.anchor, mode: "development", now: () => at });
}

/** Verifies the chain and judges the claims against the chain's own identity key. */
async function verifyAndJudge(t: TestChain): Promise<void> {
  const { claims } = await verify(t);
  checkAppleDeviceClaims(claims, parseIdentityKey(t.identity.publicKey()));
}

const UNKNOWN_OID = "1.3.6.1.4.1.99999.1";

describe("MDA chain", () => {
  test("a valid chain verifies and its claims decode", async () => {
    const t = await buildChain();
    const { claims, anchorSha256 } = await verify(t);
    expect({ ...claims, freshnessCode: [...claims.freshnessCode] }).toEqual({
      sipStatus: 0n,
      secureBoot: "Full Security",
      kernelExtensions: 0n,
      osVersion: "15.1",
      freshnessCode: [...freshnessCodeFor(parseIdentityKey(t.identity.publicKey()))],
      posture: POSTURE,
    });
    expect(anchorSha256).toBe(t.anchor.sha256);
    expect(() => checkAppleDeviceClaims(claims, parseIdentityKey(t.identity.publicKey(64)))).not.toThrow();
  });

  test("the anchor may be appended when it is the pinned certificate", async () => {
    const t = await buildChain();
    expect((await verify(t, [...t.chain, t.rootDer])).claims.osVersion).toBe("15.1");
  });

  test("two intermediates verify when path lengths allow", async () => {
    const t = await buildChain({ intermediates: 2, intermediateExtensions: (i) => caExtensions(i === 0 ? 1 : 0) });
    expect((await verify(t)).claims.sipStatus).toBe(0n);
  });

  describe("wrong root with the same subject name (anchor matched by key, not name)", () => {
    test("a chain issued by an impostor root fails against the real anchor", async () => {
      const real = await buildChain();
      const impostor = await buildChain();
      expect(await failedCheck(verify(real, impostor.chain))).toBe("chain_anchor");
    });

    test("appending the impostor root does not help", async () => {
      const real = await buildChain();
      const impostor = await buildChain();
      expect(await failedCheck(verify(real, [...impostor.chain, impostor.rootDer]))).toBe("chain_anchor");
    });

    test("against the pinned Apple root, in production mode", async () => {
      const impostor = await buildChain({ rootName: APPLE_ROOT_NAME });
      const check = await failedCheck(verifyMdaChain(impostor.chain, { anchor: TrustAnchor.apple(), mode: "production", now }));
      expect(check).toBe("chain_anchor");
      const appended = await failedCheck(
        verifyMdaChain([...impostor.chain, impostor.rootDer], { anchor: TrustAnchor.apple(), mode: "production", now }),
      );
      expect(appended).toBe("chain_anchor");
    });
  });

  test("production mode refuses a development anchor", async () => {
    const t = await buildChain();
    expect(await failedCheck(verifyMdaChain(t.chain, { anchor: t.anchor, mode: "production", now }))).toBe("development_root");
  });

  describe("bytes", () => {
    test("a flipped bit in the leaf's signed part fails its signature", async () => {
      const t = await buildChain();
      const leaf = Uint8Array.from(t.chain[0]!);
      const at = Buffer.from(leaf).indexOf(Buffer.from("Test device")) + 2;
      leaf[at]! ^= 0x01;
      expect(await failedCheck(verify(t, [leaf, ...t.chain.slice(1)]))).toBe("chain_signature");
    });

    test("a flipped bit in the intermediate's signed part fails against the anchor", async () => {
      const t = await buildChain();
      const sub = Uint8Array.from(t.chain[1]!);
      const at = Buffer.from(sub).indexOf(Buffer.from("Sub CA 1")) + 2;
      sub[at]! ^= 0x01;
      expect(await failedCheck(verify(t, [t.chain[0]!, sub]))).toBe("chain_anchor");
    });

    test("a flipped bit in the leaf's signature value fails", async () => {
      const t = await buildChain();
      const leaf = Uint8Array.from(t.chain[0]!);
      leaf[leaf.length - 3]! ^= 0x01;
      expect(await failedCheck(verify(t, [leaf, ...t.chain.slice(1)]))).toBe("chain_signature");
    });

    test("a truncated certificate fails to parse", async () => {
      const t = await buildChain();
      expect(await failedCheck(verify(t, [t.chain[0]!.subarray(0, -1), ...t.chain.slice(1)]))).toBe("chain_format");
    });

    test("trailing bytes after a certificate are refused", async () => {
      const t = await buildChain();
      const longer = new Uint8Array(t.chain[0]!.length + 1);
      longer.set(t.chain[0]!);
      expect(await failedCheck(verify(t, [longer, ...t.chain.slice(1)]))).toBe("chain_format");
    });

    test("a missing intermediate fails", async () => {
      const t = await buildChain();
      expect(await failedCheck(verify(t, [t.chain[0]!]))).toBe("chain_anchor");
    });

    test.each([
      ["no certificates", 0],
      ["five certificates", 5],
    ])("%s are refused", async (_, n) => {
      const t = await buildChain();
      expect(
        await failedCheck(
          verify(
            t,
            Array.from({ length: n }, () => t.chain[0]!),
          ),
        ),
      ).toBe("chain_format");
    });

    test("an issuer name that is not the intermediate's subject fails", async () => {
      const t = await buildChain({ leafIssuerName: "CN=Someone Else" });
      expect(await failedCheck(verify(t))).toBe("chain_name");
    });
  });

  describe("validity at the injected clock", () => {
    test.each([
      ["an expired leaf", { leafValidity: { notBefore: NOW - 2 * DAY, notAfter: NOW - 1 } }],
      ["a leaf not yet valid", { leafValidity: { notBefore: NOW + 1000, notAfter: NOW + DAY } }],
      ["an expired intermediate", { intermediateValidity: { notBefore: NOW - 2 * DAY, notAfter: NOW - 1 } }],
      ["an intermediate not yet valid", { intermediateValidity: { notBefore: NOW + 1000, notAfter: NOW + DAY } }],
      ["an expired root", { rootValidity: { notBefore: NOW - 2 * DAY, notAfter: NOW - 1000 } }],
    ] as const)("%s", async (_, spec) => {
      expect(await failedCheck(verify(await buildChain(spec)))).toBe("chain_validity");
    });

    test("a chain valid now is expired later by the same clock", async () => {
      const t = await buildChain();
      expect(await failedCheck(verify(t, t.chain, VALID.notAfter + 1000))).toBe("chain_validity");
    });

    test("a leaf older than the maximum certificate age fails", async () => {
      const t = await buildChain({ leafValidity: { notBefore: NOW - 31 * DAY, notAfter: NOW + DAY } });
      expect(await failedCheck(verify(t))).toBe("chain_age");
      const lenient = verifyMdaChain(t.chain, { anchor: t.anchor, mode: "development", now, maxCertificateAgeMs: 40 * DAY });
      expect(await failedCheck(lenient)).toBe("no error");
    });
  });

  describe("constraints the chain builder does not check", () => {
    test("an intermediate without the CA flag", async () => {
      const t = await buildChain({ intermediateExtensions: () => [new KeyUsagesExtension(KeyUsageFlags.keyCertSign, true)] });
      expect(await failedCheck(verify(t))).toBe("chain_ca");
    });

    test("a root without the CA flag", async () => {
      const t = await buildChain({ rootExtensions: [new KeyUsagesExtension(KeyUsageFlags.keyCertSign, true)] });
      expect(await failedCheck(verify(t))).toBe("chain_ca");
    });

    test("a leaf that is a CA", async () => {
      const t = await buildChain({ leafKeyUsage: null, leafExtraExtensions: [caExtensions()[0]!] });
      expect(await failedCheck(verify(t))).toBe("chain_ca");
    });

    test("pathLen exceeded at the first intermediate", async () => {
      const t = await buildChain({ intermediates: 2, intermediateExtensions: () => caExtensions(0) });
      expect(await failedCheck(verify(t))).toBe("chain_path_length");
    });

    test("pathLen exceeded at the root", async () => {
      const t = await buildChain({
        intermediates: 2,
        rootExtensions: caExtensions(0),
        intermediateExtensions: (i) => caExtensions(i === 0 ? 1 : 0),
      });
      expect(await failedCheck(verify(t))).toBe("chain_path_length");
    });

    test("an intermediate whose key usage lacks keyCertSign", async () => {
      const t = await buildChain({
        intermediateExtensions: () => [caExtensions()[0]!, new KeyUsagesExtension(KeyUsageFlags.digitalSignature, true)],
      });
      expect(await failedCheck(verify(t))).toBe("chain_key_usage");
    });

    test("an intermediate without key usage", async () => {
      const t = await buildChain({ intermediateExtensions: () => [caExtensions()[0]!] });
      expect(await failedCheck(verify(t))).toBe("chain_key_usage");
    });

    test("a leaf allowed to sign certificates", async () => {
      const t = await buildChain({
        leafKeyUsage: new KeyUsagesExtension(KeyUsageFlags.digitalSignature | KeyUsageFlags.keyCertSign, true),
      });
      expect(await failedCheck(verify(t))).toBe("chain_key_usage");
    });

    test.each([
      ["the leaf", { leafExtraExtensions: [new Extension(UNKNOWN_OID, true, new Uint8Array([5, 0]))] }],
      ["an intermediate", { intermediateExtensions: () => [...caExtensions(0), new Extension(UNKNOWN_OID, true, new Uint8Array([5, 0]))] }],
      [
        "the leaf (critical extended key usage, not processed here)",
        { leafExtraExtensions: [new Extension("2.5.29.37", true, new Uint8Array([0x30, 0]))] },
      ],
    ] as const)("an unknown critical extension on %s", async (_, spec) => {
      expect(await failedCheck(verify(await buildChain(spec)))).toBe("chain_critical_extension");
    });

    test("an unknown non-critical extension is ignored", async () => {
      const t = await buildChain({ leafExtraExtensions: [new Extension(UNKNOWN_OID, false, new Uint8Array([5, 0]))] });
      expect(await failedCheck(verify(t))).toBe("no error");
    });

    test("critical Apple extensions on the leaf are processed, so accepted", async () => {
      const t = await buildChain({ appleCritical: new Set([APPLE_OID.sipStatus, APPLE_OID.freshnessCode]) });
      expect(await failedCheck(verify(t))).toBe("no error");
    });

    test("a repeated extension is refused", async () => {
      const values = appleExtensionValues(POSTURE, new Uint8Array(32));
      const t = await buildChain({ leafExtraExtensions: [new Extension(APPLE_OID.sipStatus, false, values.get(APPLE_OID.sipStatus)!)] });
      expect(await failedCheck(verify(t))).toBe("chain_critical_extension");
    });
  });
});

describe("Apple device OIDs (fail closed)", () => {
  const set = (oid: string, bytes: number[] | string) => (v: Map<string, Uint8Array>) => {
    v.set(oid, typeof bytes === "string" ? new TextEncoder().encode(bytes) : Uint8Array.from(bytes));
  };
  const drop = (oid: string) => (v: Map<string, Uint8Array>) => {
    v.delete(oid);
  };

  test.each([
    ["SIP missing", drop(APPLE_OID.sipStatus), "sip"],
    ["SIP as a bare byte", set(APPLE_OID.sipStatus, [0]), "sip"],
    ["SIP as a string", set(APPLE_OID.sipStatus, "0"), "sip"],
    ["SIP as a BOOLEAN", set(APPLE_OID.sipStatus, [0x01, 0x01, 0xff]), "sip"],
    ["SIP as an empty INTEGER", set(APPLE_OID.sipStatus, [0x02, 0x00]), "sip"],
    ["SIP as a non-minimal INTEGER", set(APPLE_OID.sipStatus, [0x02, 0x02, 0x00, 0x00]), "sip"],
    ["SIP with trailing bytes", set(APPLE_OID.sipStatus, [0x02, 0x01, 0x00, 0x00]), "sip"],
    ["SIP = 1 (disabled)", set(APPLE_OID.sipStatus, [0x02, 0x01, 0x01]), "sip"],
    ["SIP = -1", set(APPLE_OID.sipStatus, [0x02, 0x01, 0xff]), "sip"],
    ["SIP = 256", set(APPLE_OID.sipStatus, [0x02, 0x02, 0x01, 0x00]), "sip"],
    ["Secure Boot missing", drop(APPLE_OID.secureBoot), "secure_boot"],
    ["Secure Boot reduced", set(APPLE_OID.secureBoot, "Reduced Security"), "secure_boot"],
    ["Secure Boot permissive", set(APPLE_OID.secureBoot, "Permissive Security"), "secure_boot"],
    ["Secure Boot in lower case", set(APPLE_OID.secureBoot, "full security"), "secure_boot"],
    ["Secure Boot with a trailing NUL", set(APPLE_OID.secureBoot, "Full Security\u0000"), "secure_boot"],
    ["Secure Boot as an INTEGER", set(APPLE_OID.secureBoot, [0x02, 0x01, 0x00]), "secure_boot"],
    [
      "Secure Boot in a truncated UTF8String",
      set(APPLE_OID.secureBoot, [0x0c, 0x0e, ...new TextEncoder().encode("Full Security")]),
      "secure_boot",
    ],
    ["kernel extensions missing", drop(APPLE_OID.kernelExtensions), "kernel_extensions"],
    ["kernel extensions allowed", set(APPLE_OID.kernelExtensions, [0x02, 0x01, 0x01]), "kernel_extensions"],
    ["kernel extensions as a string", set(APPLE_OID.kernelExtensions, "0"), "kernel_extensions"],
    ["OS version missing", drop(APPLE_OID.osVersion), "os_version"],
    ["OS version not a version", set(APPLE_OID.osVersion, "fifteen"), "os_version"],
    ["OS version empty", set(APPLE_OID.osVersion, ""), "os_version"],
    ["freshness code missing", drop(APPLE_OID.freshnessCode), "freshness_code"],
    ["freshness code of 31 bytes", set(APPLE_OID.freshnessCode, Array(31).fill(1)), "freshness_code"],
    ["freshness code for another key", set(APPLE_OID.freshnessCode, Array(32).fill(1)), "freshness_code"],
  ])("%s", async (_, apple, check) => {
    const t = await buildChain({ apple });
    expect(await failedCheck(verifyAndJudge(t))).toBe(check);
  });

  test("Secure Boot wrapped in one DER UTF8String is read through it", async () => {
    const text = new TextEncoder().encode("Full Security");
    const t = await buildChain({ apple: set(APPLE_OID.secureBoot, [0x0c, text.length, ...text]) });
    expect(await failedCheck(verifyAndJudge(t))).toBe("no error");
  });

  test("the freshness code binds the chain to one identity key", async () => {
    const t = await buildChain();
    const { claims } = await verify(t);
    let check = "no error";
    try {
      checkAppleDeviceClaims(claims, parseIdentityKey(SoftwareIdentity.generate().publicKey()));
    } catch (e) {
      check = (e as AttestationError).check;
    }
    expect(check).toBe("freshness_code");
  });

  test("a minimum OS version is enforced on the proven version", async () => {
    const t = await buildChain();
    const { claims } = await verify(t);
    expect(() => checkAppleDeviceClaims(claims, parseIdentityKey(t.identity.publicKey()), { minOsVersion: "15.1.0" })).not.toThrow();
    expect(() => checkAppleDeviceClaims(claims, parseIdentityKey(t.identity.publicKey()), { minOsVersion: "15.2" })).toThrow(
      AttestationError,
    );
  });
});
