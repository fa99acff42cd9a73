/**
 * Provider receipts: at the end of an attempt the provider signs, with its P-256 identity key, a canonical
 * byte string that names the request, the model build, digests of the request and the response, and the
 * usage it bills. The coordinator rebuilds the same bytes from what it sent and relayed (never from
 * re-serialized JSON), verifies the signature before settling, and returns the signature and the response
 * hash to the consumer (`se_signature`, `response_hash`).
 *
 * Steps (provider, src/provider/attempts.ts): bytes = receiptBytes(claims); signature = the identity key's
 *   DER ECDSA P-256 over SHA-256(bytes) (src/provider/identity.ts: software key or Secure Enclave helper).
 * Steps (coordinator, src/fleet/session.ts): compute both digests itself (the request plaintext it sealed,
 *   the response content it relayed), rebuild the bytes and verify with the identity key verified at hello
 *   (attestation/'s verifyIdentitySignature: strict DER, high-S accepted, STACK.md item 8).
 *
 * Wire format (all integers unsigned big-endian; lp(x) = u32(len(x)) || x; canonical.ts):
 *   receipt   = lp("umbra-receipt-v1")
 *               || lp(UTF-8(requestId))          1..512 bytes
 *               || lp(UTF-8(modelBuild))         1..512 bytes
 *               || lp(requestSha256)             32 bytes: SHA-256 of the request plaintext (seal.ts input)
 *               || lp(responseSha256)            32 bytes: SHA-256 of the response content
 *               || u64(promptTokens) || u64(cachedTokens) || u64(completionTokens)
 *   signature = DER ECDSA P-256 over SHA-256(receipt) by the provider's identity key; unpadded base64url in
 *               JSON (`receipt.signature` on the wire, `se_signature` to the consumer).
 *   responseHash = lowercase hex of responseSha256 (64 characters).
 *
 * Invariants:
 * - Usage counts are integers in [0, 2^53 - 1]; what they mean (cached <= prompt, prices) is billing's job.
 */
import { CanonicalBytes } from "./canonical.ts";
import { InvalidInputError } from "./errors.ts";
import { MAX_REQUEST_ID_BYTES } from "./seal.ts";

export const RECEIPT_TAG = "umbra-receipt-v1";
/** The receipt version named in response metadata; it changes with the tag. */
export const RECEIPT_VERSION = 1;
export const SHA256_BYTES = 32;
export const MAX_MODEL_BUILD_BYTES = 512;

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

/** SHA-256 of bytes (32 bytes). @throws InvalidInputError for a non-byte input. */
export function sha256(bytes: Uint8Array): Uint8Array {
  if (!(bytes instanceof Uint8Array)) throw new InvalidInputError("sha256 input must be bytes");
  return new Uint8Array(Bun.CryptoHasher.hash("sha256", bytes));
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
