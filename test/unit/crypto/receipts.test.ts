/**
 * Provider receipts (src/crypto/receipts.ts): the canonical bytes and a fixed signature from an
 * independent signer (test/fixtures/crypto/receipt.json, Python cryptography / OpenSSL), both public key
 * forms, low-S output and high-S acceptance (STACK.md item 8), and a negative test for every check:
 * each tampered field, another key, malformed or DER signatures, out-of-range r and s, a reported response
 * hash that differs, and keys of the wrong kind.
 */
import { describe, expect, test } from "bun:test";
import { p256 } from "@noble/curves/nist.js";
import { fromBase64url, fromHex, toBase64url, toHex } from "../../../src/crypto/encoding.ts";
import { InvalidInputError, InvalidKeyError, ReceiptMismatchError, ReceiptSignatureError } from "../../../src/crypto/errors.ts";
import {
  constantTimeEqual,
  importReceiptPublicKey,
  type ReceiptClaims,
  receiptBytes,
  sha256,
  signReceipt,
  verifyReceipt,
} from "../../../src/crypto/receipts.ts";
import vector from "../../fixtures/crypto/receipt.json" with { type: "json" };

const claims: ReceiptClaims = {
  requestId: vector.claims.requestId,
  modelBuild: vector.claims.modelBuild,
  requestSha256: fromHex(vector.claims.requestSha256),
  responseSha256: fromHex(vector.claims.responseSha256),
  usage: vector.claims.usage,
};
const publicRaw = fromHex(vector.publicKeyRaw);
const publicSpki = fromHex(vector.publicKeySpki);
const N = p256.Point.Fn.ORDER;
const identityKey = await crypto.subtle.importKey("pkcs8", fromHex(vector.privateKeyPkcs8), { name: "ECDSA", namedCurve: "P-256" }, false, [
  "sign",
]);
const signed = { signature: vector.signatureLowS, responseHash: vector.responseHash };

function flipped(bytes: Uint8Array, bit: number): Uint8Array {
  const copy = bytes.slice();
  copy[bit >> 3]! ^= 1 << (bit & 7);
  return copy;
}

/** r || s with the given integers, base64url. */
function rs(r: bigint, s: bigint): string {
  const hex = r.toString(16).padStart(64, "0") + s.toString(16).padStart(64, "0");
  return toBase64url(fromHex(hex));
}

describe("canonical bytes and the fixed receipt (receipt.json)", () => {
  test("receiptBytes gives the golden bytes", () => {
    expect(toHex(receiptBytes(claims))).toBe(vector.bytes);
  });

  test("the response hash is SHA-256 of the response content", () => {
    expect(toHex(sha256(fromHex(vector.responseContent)))).toBe(vector.responseHash);
  });

  test.each([
    ["raw uncompressed point", () => publicRaw],
    ["SPKI DER", () => publicSpki],
  ])("the fixed signature verifies with the %s", async (_name, key) => {
    expect(await verifyReceipt(key(), claims, vector.signatureLowS)).toEqual(signed);
  });

  test("an imported CryptoKey verifies, and matches the reported response hash", async () => {
    const key = await importReceiptPublicKey(publicSpki);
    expect(await verifyReceipt(key, claims, vector.signatureLowS, { responseHash: vector.responseHash })).toEqual(signed);
  });
});

describe("low-S and high-S (STACK.md item 8)", () => {
  test("the high-S twin of the fixed signature verifies here; noble's strict default refuses it, lowS: false accepts", async () => {
    const high = fromBase64url(vector.signatureHighS);
    const bytes = receiptBytes(claims);
    expect({
      ours: await verifyReceipt(publicRaw, claims, vector.signatureHighS),
      nobleStrict: p256.verify(high, bytes, publicRaw),
      nobleLax: p256.verify(high, bytes, publicRaw, { lowS: false }),
      nobleStrictOnLow: p256.verify(fromBase64url(vector.signatureLowS), bytes, publicRaw),
    }).toEqual({
      ours: { signature: vector.signatureHighS, responseHash: vector.responseHash },
      nobleStrict: false,
      nobleLax: true,
      nobleStrictOnLow: true,
    });
  });

  test("signReceipt always emits low-S r || s (WebCrypto emits high-S about half the time)", async () => {
    const bytes = receiptBytes(claims);
    const results = await Promise.all(
      Array.from({ length: 32 }, async () => {
        const { signature } = await signReceipt(identityKey, claims);
        const raw = fromBase64url(signature);
        return raw.byteLength === 64 && p256.verify(raw, bytes, publicRaw);
      }),
    );
    expect(results.every(Boolean)).toBe(true);
  });

  test("a fresh signature verifies and returns the response hash", async () => {
    const result = await signReceipt(identityKey, claims);
    expect(result.responseHash).toBe(vector.responseHash);
    expect(await verifyReceipt(publicRaw, claims, result.signature, { responseHash: result.responseHash })).toEqual(result);
  });
});

describe("verifyReceipt refuses", () => {
  test.each([
    ["request id", { ...claims, requestId: `${claims.requestId}x` }],
    ["model build", { ...claims, modelBuild: "mlx-community/Llama-3.2-3B-Instruct-8bit@8f1c2a" }],
    ["request digest (one bit)", { ...claims, requestSha256: flipped(claims.requestSha256, 0) }],
    ["response digest (one bit)", { ...claims, responseSha256: flipped(claims.responseSha256, 255) }],
    ["prompt tokens", { ...claims, usage: { ...claims.usage, promptTokens: claims.usage.promptTokens + 1 } }],
    ["cached tokens", { ...claims, usage: { ...claims.usage, cachedTokens: claims.usage.cachedTokens - 1 } }],
    ["completion tokens", { ...claims, usage: { ...claims.usage, completionTokens: claims.usage.completionTokens + 1 } }],
    ["prompt and completion swapped", { ...claims, usage: { ...claims.usage, promptTokens: 5, completionTokens: 27 } }],
  ])("a tampered field: %s", async (_name, tampered) => {
    await expect(verifyReceipt(publicRaw, tampered, vector.signatureLowS)).rejects.toThrow(ReceiptSignatureError);
  });

  test("a receipt signed by another key", async () => {
    await expect(verifyReceipt(fromHex(vector.otherPublicKeyRaw), claims, vector.signatureLowS)).rejects.toThrow(ReceiptSignatureError);
    const other = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"]);
    const { signature } = await signReceipt(other.privateKey, claims);
    await expect(verifyReceipt(publicRaw, claims, signature)).rejects.toThrow(ReceiptSignatureError);
  });

  const raw = fromBase64url(vector.signatureLowS);
  const r = BigInt(`0x${toHex(raw.subarray(0, 32))}`);
  const s = BigInt(`0x${toHex(raw.subarray(32))}`);
  test.each([
    ["a flipped bit in r", toBase64url(flipped(raw, 100))],
    ["a flipped bit in s", toBase64url(flipped(raw, 400))],
    ["a truncated signature (63 bytes)", toBase64url(raw.subarray(0, 63))],
    ["a signature with a byte appended", toBase64url(Uint8Array.of(...raw, 0))],
    ["the DER encoding of the same signature", toBase64url(p256.Signature.fromBytes(raw, "compact").toBytes("der"))],
    ["padded base64url", `${vector.signatureLowS}=`],
    ["standard base64", Buffer.from(raw).toString("base64").replaceAll("=", "")],
    ["an empty signature", ""],
    ["r = 0", rs(0n, s)],
    ["s = 0", rs(r, 0n)],
    ["s = n", rs(r, N)],
    ["r = n", rs(N, s)],
    ["r and s swapped", rs(s, r)],
  ])("%s", async (_name, signature) => {
    await expect(verifyReceipt(publicRaw, claims, signature)).rejects.toThrow(ReceiptSignatureError);
  });

  test.each([
    ["one bit off", toHex(flipped(claims.responseSha256, 3))],
    ["uppercase hex", vector.responseHash.toUpperCase()],
    ["truncated", vector.responseHash.slice(0, 62)],
    ["empty", ""],
  ])("a reported response hash that differs: %s", async (_name, responseHash) => {
    await expect(verifyReceipt(publicRaw, claims, vector.signatureLowS, { responseHash })).rejects.toThrow(ReceiptMismatchError);
  });

  test.each([
    ["an invalid point", () => Uint8Array.of(4, ...new Uint8Array(64).fill(1))],
    ["a compressed point", () => publicRaw.subarray(0, 33).map((b, i) => (i === 0 ? 2 : b))],
    ["garbage bytes", () => new Uint8Array(91).fill(0x30)],
    ["a truncated SPKI", () => publicSpki.subarray(0, publicSpki.byteLength - 1)],
  ])("a public key that is %s", async (_name, key) => {
    await expect(verifyReceipt(key(), claims, vector.signatureLowS)).rejects.toThrow(InvalidKeyError);
  });

  test("a P-384 key, an ECDSA private key, or an ECDH key in place of the verification key", async () => {
    const p384 = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-384" }, true, ["sign", "verify"]);
    const spki384 = new Uint8Array(await crypto.subtle.exportKey("spki", p384.publicKey));
    const ecdh = await crypto.subtle.importKey("raw", publicRaw, { name: "ECDH", namedCurve: "P-256" }, true, []);
    const errors = await Promise.all(
      [spki384, p384.publicKey, identityKey, ecdh].map((key) => verifyReceipt(key, claims, vector.signatureLowS).catch((e: unknown) => e)),
    );
    expect(errors.map((e) => e instanceof InvalidKeyError)).toEqual([true, true, true, true]);
  });

  test.each([
    ["a 31-byte request digest", { ...claims, requestSha256: claims.requestSha256.subarray(1) }],
    ["a negative token count", { ...claims, usage: { ...claims.usage, cachedTokens: -1 } }],
    ["a fractional token count", { ...claims, usage: { ...claims.usage, promptTokens: 1.5 } }],
    ["a missing usage", { ...claims, usage: undefined as unknown as ReceiptClaims["usage"] }],
    ["an empty model build", { ...claims, modelBuild: "" }],
  ])("claims out of range: %s", async (_name, bad) => {
    await expect(verifyReceipt(publicRaw, bad, vector.signatureLowS)).rejects.toThrow(InvalidInputError);
    await expect(signReceipt(identityKey, bad)).rejects.toThrow(InvalidInputError);
  });
});

describe("signReceipt refuses", () => {
  test("a public key, a P-384 key or an HMAC key", async () => {
    const p384 = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-384" }, true, ["sign", "verify"]);
    const hmac = await crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-256" }, true, ["sign"]);
    const publicKey = await importReceiptPublicKey(publicRaw);
    const errors = await Promise.all([publicKey, p384.privateKey, hmac].map((key) => signReceipt(key, claims).catch((e: unknown) => e)));
    expect(errors.map((e) => e instanceof InvalidKeyError)).toEqual([true, true, true]);
  });
});

describe("constantTimeEqual", () => {
  test.each([
    ["equal", [1, 2, 3], [1, 2, 3], true],
    ["one byte differs", [1, 2, 3], [1, 2, 4], false],
    ["different lengths", [1, 2, 3], [1, 2], false],
    ["both empty", [], [], true],
  ] as const)("%s", (_name, a, b, expected) => {
    expect(constantTimeEqual(Uint8Array.from(a), Uint8Array.from(b))).toBe(expected);
  });
});
