/**
 * Typed errors of the crypto module (src/crypto/*). Every check in seal.ts, chunks.ts, receipts.ts,
 * canonical.ts and encoding.ts throws one of these classes, never a bare Error or a library error.
 *
 * Invariants:
 * - One class per failure kind, each with a fixed `code` from the closed set CryptoErrorCode, so callers
 *   branch on `instanceof` or `code`, never on message text.
 * - Messages name a field, a length or a sequence number; they never quote plaintext, keys or ciphertext.
 * - Authentication failures are deliberately coarse: an AEAD cannot tell a flipped bit from a wrong key or
 *   a wrong binding, so RequestOpenError and ChunkAuthenticationError cover all three.
 *
 * Mapping to the HTTP vocabulary (DESIGN.md section 5) is the caller's job: a CryptoError caused by a
 * provider's frames is that provider's fault (502 invalid_provider_output before commit, an in-band error
 * after); one caused by our own inputs is a 500.
 */

export type CryptoErrorCode =
  | "invalid_key"
  | "invalid_input"
  | "request_open_failed"
  | "chunk_malformed"
  | "chunk_plaintext"
  | "chunk_oversized"
  | "chunk_reordered"
  | "chunk_replayed"
  | "chunk_after_final"
  | "chunk_truncated"
  | "chunk_auth_failed";

export abstract class CryptoError extends Error {
  abstract readonly code: CryptoErrorCode;
}

/** A key of the wrong length, form or curve, a low-order X25519 point, or a key without the needed usage. */
export class InvalidKeyError extends CryptoError {
  override readonly name = "InvalidKeyError";
  readonly code = "invalid_key";
}

/** An argument outside its documented domain: a length, an integer range, ill-formed text, bad encoding. */
export class InvalidInputError extends CryptoError {
  override readonly name = "InvalidInputError";
  readonly code = "invalid_input";
}

/** HPKE open failed: tampered enc or ciphertext, wrong recipient key, or a binding that differs from the sender's. */
export class RequestOpenError extends CryptoError {
  override readonly name = "RequestOpenError";
  readonly code = "request_open_failed";
}

/** A chunk frame whose seq or final flag is not of the documented type and range. */
export class MalformedChunkError extends CryptoError {
  override readonly name = "MalformedChunkError";
  readonly code = "chunk_malformed";
}

/** A chunk frame that carries no ciphertext (plaintext content, or fewer bytes than the 16-byte tag). */
export class PlaintextChunkError extends CryptoError {
  override readonly name = "PlaintextChunkError";
  readonly code = "chunk_plaintext";
}

/** A chunk larger than MAX_CHUNK_PLAINTEXT_BYTES (sealing) or its ciphertext bound (opening). */
export class OversizedChunkError extends CryptoError {
  override readonly name = "OversizedChunkError";
  readonly code = "chunk_oversized";
}

/** A chunk whose seq is ahead of the next expected one (a gap, or frames out of order). */
export class ReorderedChunkError extends CryptoError {
  override readonly name = "ReorderedChunkError";
  readonly code = "chunk_reordered";
}

/** A chunk whose seq was already accepted (replay). */
export class ReplayedChunkError extends CryptoError {
  override readonly name = "ReplayedChunkError";
  readonly code = "chunk_replayed";
}

/** A chunk sealed or opened after the final one. */
export class ChunkAfterFinalError extends CryptoError {
  override readonly name = "ChunkAfterFinalError";
  readonly code = "chunk_after_final";
}

/** The stream ended (finish()) without a final chunk: truncation. */
export class TruncatedStreamError extends CryptoError {
  override readonly name = "TruncatedStreamError";
  readonly code = "chunk_truncated";
}

/** AEAD authentication failed: tampered ciphertext, seq, final flag or binding, or the wrong response key. */
export class ChunkAuthenticationError extends CryptoError {
  override readonly name = "ChunkAuthenticationError";
  readonly code = "chunk_auth_failed";
}
