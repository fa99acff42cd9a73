/**
 * Provider receipts (src/crypto/receipts.ts): the canonical bytes against a fixed vector from an
 * independent implementation (test/fixtures/crypto/receipt.json, Python cryptography / OpenSSL), its
 * signature verified as the coordinator does (attestation/'s DER check with the identity key), and a
 * negative test for every field the bytes bind.
 */
import { describe, expect, test } from "bun:test";
import { p256 } from "@noble/curves/nist.js";
import { parseIdentityKey, SoftwareIdentity, verifyIdentitySignature } from "../../../attestation/src/index.ts";
import { fromBase64url, fromHex, toHex } from "../../../src/crypto/encoding.ts";
import { InvalidInputError } from "../../../src/crypto/errors.ts";
import { type ReceiptClaims, receiptBytes, sha256 } from "../../../src/crypto/receipts.ts";
import vector from "../../fixtures/crypto/receipt.json" with { type: "json" };

const claims: ReceiptClaims = {
  requestId: vector.claims.requestId,
  modelBuild: vector.claims.modelBuild,
  requestSha256: fromHex(vector.claims.requestSha256),
  responseSha256: fromHex(vector.claims.responseSha256),
  usage: vector.claims.usage,
};
const key = parseIdentityKey(fromHex(vector.publicKeyRaw));
/** The vector's r || s signature in the DER form receipts carry. */
const der = p256.Signature.fromBytes(fromBase64url(vector.signatureLowS), "compact").toBytes("der");

describe("receipt bytes (receipt.json)", () => {
  test("receiptBytes gives the golden bytes", () => {
    expect(toHex(receiptBytes(claims))).toBe(vector.bytes);
  });

  test("the response hash is SHA-256 of the response content", () => {
    expect(toHex(sha256(fromHex(vector.responseContent)))).toBe(vector.responseHash);
  });

  test("the independent signer's signature verifies over the bytes, as the coordinator checks it", () => {
    expect(() => verifyIdentitySignature(key, receiptBytes(claims), der, "receipt")).not.toThrow();
  });

  test.each<[string, Partial<ReceiptClaims>]>([
    ["request id", { requestId: `${claims.requestId}x` }],
    ["model build", { modelBuild: `${claims.modelBuild}x` }],
    ["request digest", { requestSha256: sha256(new Uint8Array(1)) }],
    ["response digest", { responseSha256: sha256(new Uint8Array(1)) }],
    ["prompt tokens", { usage: { ...claims.usage, promptTokens: claims.usage.promptTokens + 1 } }],
    ["cached tokens", { usage: { ...claims.usage, cachedTokens: claims.usage.cachedTokens + 1 } }],
    ["completion tokens", { usage: { ...claims.usage, completionTokens: claims.usage.completionTokens + 1 } }],
  ])("another %s does not verify", (_, change) => {
    expect(() => verifyIdentitySignature(key, receiptBytes({ ...claims, ...change }), der, "receipt")).toThrow();
  });

  test("a receipt signed by another identity key does not verify", () => {
    const other = SoftwareIdentity.generate().sign(receiptBytes(claims));
    expect(() => verifyIdentitySignature(key, receiptBytes(claims), other, "receipt")).toThrow();
  });

  test.each<[string, Partial<ReceiptClaims>]>([
    ["an empty request id", { requestId: "" }],
    ["a 513-byte model build", { modelBuild: "m".repeat(513) }],
    ["a 31-byte digest", { requestSha256: new Uint8Array(31) }],
    ["a negative count", { usage: { ...claims.usage, promptTokens: -1 } }],
    ["a fractional count", { usage: { ...claims.usage, completionTokens: 1.5 } }],
    ["a count above 2^53 - 1", { usage: { ...claims.usage, cachedTokens: 2 ** 53 } }],
  ])("%s is refused", (_, change) => {
    expect(() => receiptBytes({ ...claims, ...change })).toThrow(InvalidInputError);
  });

  test("sha256 refuses a non-byte input", () => {
    expect(() => sha256("text" as unknown as Uint8Array)).toThrow(InvalidInputError);
  });
});
