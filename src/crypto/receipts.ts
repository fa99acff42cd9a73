/**
 * Provider receipts: at the end of an attempt the provider signs, with its P-256 identity key, a canonical
 * byte string that names the request, the model build, digests of the request and the response, and the
 * usage it bills. The coordinator rebuilds the same bytes from what it sent and relayed (never from
 * re-serialized JSON), verifies the signature before settling, and returns the signature and the response
 * hash to the consumer (`se_signature`, `response_hash`).
 *
 * Steps (provider, signReceipt): bytes = receiptBytes(claims); sig = ECDSA-P256-SHA256(identityKey, bytes)
 *   through WebCrypto; if s > n/2, replace s by n - s (low-S); return base64url(r || s) and hex(responseSha256).
 * Steps (coordinator, verifyReceipt): compute the digests itself (sha256 of the request plaintext it sealed,
 *   of the response content it relayed); optionally compare the provider's reported response hash in
 *   constant time; bytes = receiptBytes(claims); WebCrypto ECDSA verify.
 *
 * Wire format (all integers unsigned big-endian; lp(x) = u32(len(x)) || x; canonical.ts):
 *   receipt   = lp("umbra-receipt-v1")
 *               || lp(UTF-8(requestId))          1..512 bytes
 *               || lp(UTF-8(modelBuild))         1..512 bytes
 *               || lp(requestSha256)             32 bytes: SHA-256 of the request plaintext (seal.ts input)
 *               || lp(responseSha256)            32 bytes: SHA-256 of the response content
 *               || u64(promptTokens) || u64(cachedTokens) || u64(completionTokens)
 *   signature = 64 bytes r || s (IEEE P1363, each a 32-byte big-endian integer; WebCrypto's native form,
 *               not DER), unpadded base64url in JSON. Produced low-S; verification accepts high-S too,
 *               because foreign ECDSA signers (Secure Enclave, OpenSSL, WebCrypto) emit either half, and
 *               the malleated signature still signs the same bytes (noble's strict default would refuse
 *               half of them: STACK.md item 8). A signer whose API returns DER (Secure Enclave, OpenSSL)
 *               converts to r || s before sending; a DER signature is refused here.
 *   public key = SPKI DER, or the raw 65-byte uncompressed point 04 || X || Y, or a WebCrypto CryptoKey.
 *   responseHash = lowercase hex of responseSha256 (64 characters).
 *
 * Invariants:
 * - Usage counts are integers in [0, 2^53 - 1]; what they mean (cached <= prompt, prices) is billing's job.
 * - Digests are compared in constant time (node:crypto timingSafeEqual); lengths are public.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { p256 } from "@noble/curves/nist.js";
import { CanonicalBytes } from "./canonical.ts";
import { fromBase64url, fromHex, toBase64url, toHex } from "./encoding.ts";
import { InvalidInputError, InvalidKeyError, ReceiptMismatchError, ReceiptSignatureError } from "./errors.ts";
import { MAX_REQUEST_ID_BYTES } from "./seal.ts";

export const RECEIPT_TAG = "umbra-receipt-v1";
/** The receipt version named in response metadata; it changes with the tag. */
export const RECEIPT_VERSION = 1;
export const SHA256_BYTES = 32;
export const RECEIPT_SIGNATURE_BYTES = 64;
export const MAX_MODEL_BUILD_BYTES = 512;

const ECDSA_P256 = { name: "ECDSA", namedCurve: "P-256" } as const;
const ECDSA_SHA256 = { name: "ECDSA", hash: "SHA-256" } as const;
const P256_ORDER = p256.Point.Fn.ORDER;
const UNCOMPRESSED_POINT_BYTES = 65;

export interface ReceiptUsage {
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly completionTokens: number;
}

/** What a receipt states. Digests are raw 32-byte SHA-256 values. */
export interface ReceiptClaims {
  readonly requestId: string;
  readonly modelBuild: string;
  readonly requestSha256: Uint8Array;
  readonly responseSha256: Uint8Array;
  readonly usage: ReceiptUsage;
}

export interface SignedReceipt {
  /** base64url of the 64-byte r || s signature. */
  readonly signature: string;
  /** Lowercase hex of responseSha256. */
  readonly responseHash: string;
}

export interface VerifyReceiptOptions {
  /** The response hash the provider reported (hex); compared in constant time with claims.responseSha256. */
  readonly responseHash?: string;
}

/** SHA-256 of bytes (32 bytes). @throws InvalidInputError for a non-byte input. */
export function sha256(bytes: Uint8Array): Uint8Array {
  if (!(bytes instanceof Uint8Array)) throw new InvalidInputError("sha256 input must be bytes");
  return new Uint8Array(createHash("sha256").update(bytes).digest());
}

/**
 * The canonical receipt bytes (layout in the file header): what is signed and verified.
 * @throws InvalidInputError when a field is missing or out of range.
 */
export function receiptBytes(claims: ReceiptClaims): Uint8Array<ArrayBuffer> {
  const usage = claims.usage ?? ({} as ReceiptUsage);
  return CanonicalBytes.tagged(RECEIPT_TAG)
    .text("requestId", claims.requestId, MAX_REQUEST_ID_BYTES)
    .text("modelBuild", claims.modelBuild, MAX_MODEL_BUILD_BYTES)
    .bytes("requestSha256", claims.requestSha256, SHA256_BYTES, true)
    .bytes("responseSha256", claims.responseSha256, SHA256_BYTES, true)
    .u64("promptTokens", usage.promptTokens)
    .u64("cachedTokens", usage.cachedTokens)
    .u64("completionTokens", usage.completionTokens)
    .finish();
}

/**
 * Provider side: sign a receipt with the identity key (WebCrypto ECDSA P-256 private key, usage "sign").
 * @throws InvalidKeyError when the key is not an ECDSA P-256 private signing key.
 * @throws InvalidInputError when a claim is out of range.
 */
export async function signReceipt(identityKey: CryptoKey, claims: ReceiptClaims): Promise<SignedReceipt> {
  const bytes = receiptBytes(claims);
  if (!isP256Key(identityKey, "private", "sign")) throw new InvalidKeyError("receipt key must be an ECDSA P-256 private signing key");
  const raw = new Uint8Array(await crypto.subtle.sign(ECDSA_SHA256, identityKey, bytes));
  return { signature: toBase64url(lowS(raw)), responseHash: toHex(claims.responseSha256) };
}

/**
 * Import a provider's receipt verification key: SPKI DER, or the raw uncompressed point (04 || X || Y).
 * Import once per provider session and pass the CryptoKey to verifyReceipt.
 * @throws InvalidKeyError when the bytes are not a valid P-256 public key in either form.
 */
export async function importReceiptPublicKey(key: Uint8Array): Promise<CryptoKey> {
  if (!(key instanceof Uint8Array)) throw new InvalidKeyError("receipt public key must be bytes");
  const format = key.byteLength === UNCOMPRESSED_POINT_BYTES && key[0] === 0x04 ? "raw" : "spki";
  try {
    // A copy: WebCrypto takes an ArrayBuffer-backed view, the caller's may be shared.
    return await crypto.subtle.importKey(format, new Uint8Array(key), ECDSA_P256, true, ["verify"]);
  } catch (error) {
    throw new InvalidKeyError(`receipt public key is not a P-256 ${format === "raw" ? "point" : "SPKI key"}`, { cause: error });
  }
}

/**
 * Coordinator side: verify a receipt signature over claims the coordinator computed itself. Returns what
 * the consumer is shown (the signature as given and the response hash).
 * @throws InvalidKeyError when the public key is not a P-256 verification key (see importReceiptPublicKey).
 * @throws InvalidInputError when a claim is out of range.
 * @throws ReceiptMismatchError when options.responseHash differs from claims.responseSha256.
 * @throws ReceiptSignatureError when the signature is not 64 bytes of base64url or does not verify.
 */
export async function verifyReceipt(
  publicKey: Uint8Array | CryptoKey,
  claims: ReceiptClaims,
  signature: string,
  options: VerifyReceiptOptions = {},
): Promise<SignedReceipt> {
  const bytes = receiptBytes(claims);
  const key = publicKey instanceof Uint8Array ? await importReceiptPublicKey(publicKey) : publicKey;
  if (!isP256Key(key, "public", "verify")) throw new InvalidKeyError("receipt key must be an ECDSA P-256 public verification key");
  if (options.responseHash !== undefined) {
    let reported: Uint8Array;
    try {
      reported = fromHex(options.responseHash, "responseHash");
    } catch {
      throw new ReceiptMismatchError("reported response hash is not lowercase hex");
    }
    if (!constantTimeEqual(reported, claims.responseSha256)) throw new ReceiptMismatchError("reported response hash differs");
  }
  let raw: Uint8Array<ArrayBuffer>;
  try {
    raw = fromBase64url(signature, "signature");
  } catch {
    throw new ReceiptSignatureError("receipt signature is not base64url");
  }
  if (raw.byteLength !== RECEIPT_SIGNATURE_BYTES) {
    throw new ReceiptSignatureError(`receipt signature must be ${RECEIPT_SIGNATURE_BYTES} bytes (r || s)`);
  }
  let valid: boolean;
  try {
    valid = await crypto.subtle.verify(ECDSA_SHA256, key, raw, bytes);
  } catch (error) {
    throw new ReceiptSignatureError("receipt signature could not be verified", { cause: error });
  }
  if (!valid) throw new ReceiptSignatureError("receipt signature does not verify");
  return { signature, responseHash: toHex(claims.responseSha256) };
}

/** Constant-time equality of two byte strings (the length is not secret: unequal lengths return false at once). */
export function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && timingSafeEqual(a, b);
}

function isP256Key(key: CryptoKey, type: "private" | "public", usage: "sign" | "verify"): boolean {
  if (typeof CryptoKey === "undefined" || !(key instanceof CryptoKey)) return false;
  const algorithm = key.algorithm as { readonly name: string; readonly namedCurve?: string };
  return algorithm.name === "ECDSA" && algorithm.namedCurve === "P-256" && key.type === type && key.usages.includes(usage);
}

/** r || s with s replaced by n - s when s > n/2 (the same signature, canonical half). */
function lowS(raw: Uint8Array): Uint8Array {
  const signature = p256.Signature.fromBytes(raw, "compact");
  if (!signature.hasHighS()) return raw;
  return new p256.Signature(signature.r, P256_ORDER - signature.s).toBytes("compact");
}
