import { describe, expect, test } from "bun:test";
import { createPrivateKey, generateKeyPairSync, sign as nodeSign } from "node:crypto";
import { p256 } from "@noble/curves/nist.js";
import {
  AttestationError,
  buildEvidence,
  decodeBase64,
  encodeBase64,
  type Posture,
  parseEvidenceEnvelope,
  parseIdentityKey,
  SoftwareIdentity,
  verifySecureEnclaveEvidence,
} from "../../../attestation/provider/index.ts";
import { lowSDer } from "../../../attestation/provider/software-identity.ts";
import golden from "../../fixtures/attestation/evidence-v1.json";

const NOW = Date.parse("2026-11-21T12:00:00Z");
const now = () => NOW;
const POSTURE: Posture = { sipEnabled: true, secureBoot: "Full Security", thirdPartyKexts: false, osVersion: "15.1" };
const ENCRYPTION_KEY = new Uint8Array(32).fill(7);

/** The check an AttestationError names, or "no error". */
function failedCheck(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    if (e instanceof AttestationError) return e.check;
    throw e;
  }
  return "no error";
}

function evidence(overrides: Partial<Parameters<typeof buildEvidence>[0]> = {}) {
  return buildEvidence({
    identity: SoftwareIdentity.generate(),
    encryptionKey: ENCRYPTION_KEY,
    posture: POSTURE,
    timestamp: NOW,
    ...overrides,
  });
}

function verify(payload: Uint8Array, signature: Uint8Array, helloEncryptionKey: Uint8Array = ENCRYPTION_KEY) {
  return verifySecureEnclaveEvidence(payload, signature, { helloEncryptionKey, now });
}

/** Signs arbitrary payload bytes (for payloads the builder would never produce). */
function signed(identity: SoftwareIdentity, fields: Record<string, unknown>): { payload: Uint8Array; signature: Uint8Array } {
  const payload = new TextEncoder().encode(JSON.stringify(fields));
  return { payload, signature: identity.sign(payload) };
}

function payloadFields(identity: SoftwareIdentity, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    kind: "umbra.secure-enclave-evidence",
    version: 1,
    identity_key: encodeBase64(identity.publicKey()),
    encryption_key: encodeBase64(ENCRYPTION_KEY),
    timestamp: NOW,
    posture: { sip_enabled: true, secure_boot: "Full Security", third_party_kexts: false, os_version: "15.1" },
    ...extra,
  };
}

describe("Secure Enclave evidence", () => {
  test.each([64, 65] as const)("verifies with a %d-byte identity key", (keyForm) => {
    const identity = SoftwareIdentity.generate();
    const { payload, signature } = evidence({ identity, keyForm });
    const result = verify(payload, signature);
    expect({
      form: result.identityKey.form,
      point: result.identityKey.point,
      posture: result.posture,
      timestamp: result.timestamp,
    }).toEqual({
      form: keyForm,
      point: identity.publicKey(65),
      posture: POSTURE,
      timestamp: NOW,
    });
  });

  test("both key forms give the same key id", () => {
    const identity = SoftwareIdentity.generate();
    expect(parseIdentityKey(identity.publicKey(64)).id).toBe(parseIdentityKey(identity.publicKey(65)).id);
  });

  test("golden vector: pretty-printed payload, other key order, high-S signature, verified over the exact bytes", () => {
    const payload = decodeBase64(golden.pretty_high_s.payload_b64, "encoding", "payload");
    const signature = decodeBase64(golden.pretty_high_s.signature_b64, "encoding", "signature");
    const key = Buffer.from(golden.identity_key_65_hex, "hex");
    // noble's default (lowS: true) refuses this signature; the verifier must not.
    expect(p256.verify(signature, payload, key, { format: "der" })).toBe(false);
    const result = verifySecureEnclaveEvidence(payload, signature, {
      helloEncryptionKey: decodeBase64(golden.encryption_key_b64, "encoding", "key"),
      now: () => golden.now,
    });
    expect([result.identityKey.form, result.timestamp, result.posture.osVersion]).toEqual([64, golden.now - 5000, "15.1.1"]);
    // Re-serializing the parsed JSON changes the bytes, and the signature no longer matches them.
    const reserialized = new TextEncoder().encode(JSON.stringify(JSON.parse(new TextDecoder().decode(payload))));
    expect(failedCheck(() => verify(reserialized, signature, decodeBase64(golden.encryption_key_b64, "encoding", "key")))).toBe(
      "signature",
    );
  });

  test("a high-S signature made here verifies too", () => {
    const identity = SoftwareIdentity.generate();
    const { payload, signature } = evidence({ identity });
    const sig = p256.Signature.fromBytes(signature, "der");
    const high = new p256.Signature(sig.r, p256.Point.CURVE().n - sig.s);
    expect(high.hasHighS()).toBe(true);
    expect(verify(payload, high.toBytes("der")).identityKey.id).toBe(parseIdentityKey(identity.publicKey()).id);
  });

  test("a flipped bit in a signed value fails the signature", () => {
    const { payload, signature } = evidence();
    const text = new TextDecoder().decode(payload);
    const at = text.indexOf('"os_version":"15.1"') + '"os_version":"15.'.length;
    const tampered = Uint8Array.from(payload);
    tampered[at]! ^= 0x01; // "15.1" -> "15.0": still valid JSON and a valid posture
    expect(failedCheck(() => verify(tampered, signature))).toBe("signature");
  });

  test("a flipped bit in the signature fails", () => {
    const { payload, signature } = evidence();
    const tampered = Uint8Array.from(signature);
    tampered[tampered.length - 1]! ^= 0x01;
    expect(failedCheck(() => verify(payload, tampered))).toBe("signature");
  });

  test.each([
    ["payload", "evidence_format"],
    ["signature", "signature"],
  ] as const)("a truncated %s fails", (which, check) => {
    const { payload, signature } = evidence();
    expect(
      failedCheck(() => (which === "payload" ? verify(payload.subarray(0, -1), signature) : verify(payload, signature.subarray(0, -1)))),
    ).toBe(check);
  });

  test("a signature by another key than the one named fails", () => {
    const named = SoftwareIdentity.generate();
    const { payload } = evidence({ identity: named });
    expect(failedCheck(() => verify(payload, SoftwareIdentity.generate().sign(payload)))).toBe("signature");
  });

  test("a trailing byte after the signature fails (strict DER)", () => {
    const { payload, signature } = evidence();
    const longer = new Uint8Array(signature.length + 1);
    longer.set(signature);
    expect(failedCheck(() => verify(payload, longer))).toBe("signature");
  });

  test.each([
    ["2 minutes old", -120_000, "no error"],
    ["2 minutes ahead", 120_000, "no error"],
    ["older than 2 minutes", -120_001, "timestamp"],
    ["more than 2 minutes ahead", 120_001, "timestamp"],
  ])("timestamp %s", (_, offset, check) => {
    const { payload, signature } = evidence({ timestamp: NOW + offset });
    expect(failedCheck(() => verify(payload, signature))).toBe(check);
  });

  test("the encryption key must equal the hello key", () => {
    const { payload, signature } = evidence();
    const other = Uint8Array.from(ENCRYPTION_KEY);
    other[31]! ^= 0x80;
    expect(failedCheck(() => verify(payload, signature, other))).toBe("encryption_key");
  });

  test.each([
    ["SIP disabled", { sipEnabled: false }],
    ["reduced security", { secureBoot: "Reduced Security" }],
    ["permissive security", { secureBoot: "Permissive Security" }],
    ["third-party kexts", { thirdPartyKexts: true }],
  ] as const)("posture below policy: %s", (_, change) => {
    const { payload, signature } = evidence({ posture: { ...POSTURE, ...change } });
    expect(failedCheck(() => verify(payload, signature))).toBe("posture");
  });

  test("a minimum OS version is enforced", () => {
    const { payload, signature } = evidence();
    const check = failedCheck(() =>
      verifySecureEnclaveEvidence(payload, signature, { helloEncryptionKey: ENCRYPTION_KEY, now, posturePolicy: { minOsVersion: "15.2" } }),
    );
    expect(check).toBe("posture");
  });

  test.each([
    ["an unknown field", { extra: 1 }],
    ["another kind (a challenge answer)", { kind: "umbra.challenge-response" }],
    ["another version", { version: 2 }],
    ["a fractional timestamp", { timestamp: NOW + 0.5 }],
    ["a string timestamp", { timestamp: String(NOW) }],
    ["a short encryption key", { encryption_key: encodeBase64(new Uint8Array(31)) }],
    [
      "a posture with an unknown field",
      { posture: { sip_enabled: true, secure_boot: "Full Security", third_party_kexts: false, os_version: "15.1", x: 1 } },
    ],
    ["a posture with a missing field", { posture: { sip_enabled: true, secure_boot: "Full Security", third_party_kexts: false } }],
    [
      "an unknown secure boot string",
      { posture: { sip_enabled: true, secure_boot: "full", third_party_kexts: false, os_version: "15.1" } },
    ],
    [
      "a malformed OS version",
      { posture: { sip_enabled: true, secure_boot: "Full Security", third_party_kexts: false, os_version: "15.1-beta" } },
    ],
  ])("refuses %s", (_, extra) => {
    const identity = SoftwareIdentity.generate();
    const { payload, signature } = signed(identity, payloadFields(identity, extra));
    expect(failedCheck(() => verify(payload, signature))).toBe("evidence_format");
  });

  test("refuses a repeated key, even though the signature covers it", () => {
    const identity = SoftwareIdentity.generate();
    const json = JSON.stringify(payloadFields(identity)).replace('"timestamp":', `"timestamp":${NOW},"timestamp":`);
    const payload = new TextEncoder().encode(json);
    expect(failedCheck(() => verify(payload, identity.sign(payload)))).toBe("evidence_format");
  });

  test("refuses bytes that are not UTF-8", () => {
    const identity = SoftwareIdentity.generate();
    const payload = new Uint8Array([0x7b, 0xff, 0x7d]);
    expect(failedCheck(() => verify(payload, identity.sign(payload)))).toBe("evidence_format");
  });

  test.each([
    ["33 bytes (compressed)", (id: SoftwareIdentity) => p256.Point.fromBytes(id.publicKey()).toBytes(true)],
    ["65 bytes without 0x04", (id: SoftwareIdentity) => Uint8Array.from([0x05, ...id.publicKey(64)])],
    ["63 bytes", (id: SoftwareIdentity) => id.publicKey(64).subarray(1)],
    ["a point off the curve", (id: SoftwareIdentity) => Uint8Array.from(id.publicKey(64)).map((b, i) => (i === 63 ? b ^ 1 : b))],
  ])("refuses an identity key of %s", (_, key) => {
    const identity = SoftwareIdentity.generate();
    const { payload, signature } = signed(identity, payloadFields(identity, { identity_key: encodeBase64(key(identity)) }));
    expect(failedCheck(() => verify(payload, signature))).toBe("identity_key");
  });
});

describe("evidence envelope", () => {
  test("decodes payload, signature and chain", () => {
    const { payload, signature } = evidence();
    const wire = { payload: encodeBase64(payload), signature: encodeBase64(signature), mda_chain: [encodeBase64(new Uint8Array([1, 2]))] };
    expect(parseEvidenceEnvelope(wire)).toEqual({ payload, signature, mdaChain: [new Uint8Array([1, 2])] });
  });

  test.each([
    ["not an object", "evidence"],
    ["no payload", { signature: "AA==" }],
    ["non-canonical base64", { payload: "AB==", signature: "AA==" }],
    ["base64 without padding", { payload: "AA", signature: "AA==" }],
    ["URL-safe base64", { payload: "-_8=", signature: "AA==" }],
    ["an unknown field", { payload: "AA==", signature: "AA==", extra: true }],
    ["an empty chain", { payload: "AA==", signature: "AA==", mda_chain: [] }],
    ["five certificates", { payload: "AA==", signature: "AA==", mda_chain: ["AA==", "AA==", "AA==", "AA==", "AA=="] }],
    ["a chain entry that is not base64", { payload: "AA==", signature: "AA==", mda_chain: [42] }],
  ])("refuses %s", (_, wire) => {
    expect(failedCheck(() => parseEvidenceEnvelope(wire))).toBe("encoding");
  });
});

describe("SoftwareIdentity.sign", () => {
  test("signs through node:crypto yet always returns low-S DER that strict verifiers accept", () => {
    const identity = SoftwareIdentity.generate();
    const message = new TextEncoder().encode("umbra receipt bytes");
    const signatures = Array.from({ length: 64 }, () => identity.sign(message));
    for (const der of signatures) {
      expect(p256.Signature.fromBytes(der, "der").hasHighS()).toBe(false);
      expect(p256.verify(der, message, identity.publicKey(65), { prehash: true, format: "der", lowS: true })).toBe(true);
    }
    // Randomized (node:crypto), not RFC 6979: the 64 signatures differ.
    expect(new Set(signatures.map((s) => Buffer.from(s).toString("hex"))).size).toBe(64);
  });

  // lowSDer rewrites the DER bytes itself (no big-number objects per signature); noble's normalization is
  // the reference it must equal.
  const nobleLowS = (der: Uint8Array) => {
    const sig = p256.Signature.fromBytes(der, "der");
    return (sig.hasHighS() ? new p256.Signature(sig.r, p256.Point.Fn.ORDER - sig.s) : sig).toBytes("der");
  };
  const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

  test("lowSDer equals noble's low-S form for random signatures, high and low", () => {
    const key = createPrivateKey({
      key: generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ format: "pem", type: "pkcs8" }),
    });
    let high = 0;
    for (let i = 0; i < 400; i++) {
      const der = new Uint8Array(nodeSign("sha256", Uint8Array.of(i & 0xff, i >> 8), { key, dsaEncoding: "der" }));
      if (p256.Signature.fromBytes(der, "der").hasHighS()) high++;
      expect(hex(lowSDer(der))).toBe(hex(nobleLowS(der)));
    }
    expect(high).toBeGreaterThan(100); // both branches ran many times
  });

  test.each([
    ["s = n - 1 (becomes 1)", p256.Point.Fn.ORDER - 1n],
    ["s = n/2 + 1 (becomes n/2)", p256.Point.Fn.ORDER / 2n + 1n],
    ["s = n/2 (kept)", p256.Point.Fn.ORDER / 2n],
    ["s = n - 2^200 (becomes a short integer)", p256.Point.Fn.ORDER - 2n ** 200n],
    ["s = n - 2^255 + 1 (becomes one with its top bit set)", p256.Point.Fn.ORDER - 2n ** 255n + 1n],
    ["s = 1 (kept, one byte)", 1n],
    ["s = 2^255 (high, 33 bytes in DER)", 2n ** 255n],
  ])("lowSDer on %s", (_name, sValue) => {
    for (const r of [1n, 2n ** 255n + 7n, p256.Point.Fn.ORDER - 3n]) {
      const der = new p256.Signature(r, sValue).toBytes("der");
      expect(hex(lowSDer(der))).toBe(hex(nobleLowS(der)));
    }
  });
});
