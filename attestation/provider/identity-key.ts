/**
 * The provider's identity key: a P-256 key held by the Mac's Secure Enclave, which signs the evidence
 * blob, challenge answers and receipts.
 *
 * Wire forms (both accepted, both mean the same key):
 *   64 bytes: x || y (CryptoKit `rawRepresentation`), big-endian coordinates of 32 bytes each;
 *   65 bytes: 0x04 || x || y (SEC 1 uncompressed point, CryptoKit `x963Representation`).
 * Compressed points and every other length are refused. The point must lie on the curve.
 *
 * Canonical form: the 65-byte uncompressed point. The key id and the MDA freshness code are both
 * SHA-256 of the canonical form, whichever form was sent.
 *
 * Signatures: ECDSA P-256 over SHA-256 of the exact message bytes, DER-encoded (X9.62
 * Ecdsa-Sig-Value, strict DER). High-S signatures are accepted (the Secure Enclave, WebCrypto and
 * OpenSSL produce them half of the time; ECDSA malleability does not matter here because nothing is
 * keyed by the signature bytes; STACK.md item 8). Verified with node:crypto, which accepts either half.
 * verifyIdentitySignatureThen is the same check through node:crypto's callback form, which runs the
 * verification on the runtime's thread pool: the coordinator's receipt check per answer (issue 25; the
 * event loop pays ~5 us against ~48, bench/receipt-verify.ts).
 */
import { createPublicKey, type KeyObject, verify } from "node:crypto";
import { p256 } from "@noble/curves/nist.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { toHex } from "./encoding.ts";
import { AttestationError } from "./errors.ts";

export interface IdentityKey {
  /** The canonical 65-byte uncompressed point. */
  readonly point: Uint8Array;
  /** The form the key arrived in. */
  readonly form: 64 | 65;
  /** Hex SHA-256 of the canonical point (equal to the expected MDA freshness code). */
  readonly id: string;
}

/** Parses a 64- or 65-byte P-256 public key. Throws AttestationError("identity_key"). */
export function parseIdentityKey(bytes: Uint8Array): IdentityKey {
  let point: Uint8Array;
  if (bytes.length === 64) {
    point = new Uint8Array(65);
    point[0] = 0x04;
    point.set(bytes, 1);
  } else if (bytes.length === 65 && bytes[0] === 0x04) {
    point = Uint8Array.from(bytes);
  } else {
    throw new AttestationError("identity_key", `a P-256 identity key is 64 or 65 bytes (0x04 first), got ${bytes.length}`);
  }
  try {
    const p = p256.Point.fromBytes(point);
    p.assertValidity();
    if (p.is0()) throw new Error("identity point");
  } catch {
    throw new AttestationError("identity_key", "the identity key is not a point on P-256");
  }
  return { point, form: bytes.length === 64 ? 64 : 65, id: toHex(sha256(point)) };
}

/** SHA-256 of the canonical 65-byte point: the value Apple's freshness code OID must carry. */
export function freshnessCodeFor(key: IdentityKey): Uint8Array {
  return sha256(key.point);
}

/**
 * Verifies a DER ECDSA P-256 signature over SHA-256(message) by `key`, high-S accepted.
 * Throws AttestationError("signature") when it does not verify or is not strict DER.
 */
export function verifyIdentitySignature(key: IdentityKey, message: Uint8Array, derSignature: Uint8Array, what: string): void {
  let ok = false;
  try {
    ok = verify("sha256", message, verifyKey(key), derSignature);
  } catch {
    ok = false;
  }
  if (!ok) throw signatureRefused(what);
}

/**
 * verifyIdentitySignature off the event loop (node:crypto's callback form, on the runtime's thread pool):
 * the same key object, encoding and verdict. `done` gets undefined when the signature verifies, else the
 * same AttestationError; it is called once, after the verdict, never synchronously. A callback, not a
 * promise: the caller makes the one promise it needs (sealed-channel.ts).
 */
export function verifyIdentitySignatureThen(
  key: IdentityKey,
  message: Uint8Array,
  derSignature: Uint8Array,
  what: string,
  done: (refused: AttestationError | undefined) => void,
): void {
  try {
    verify("sha256", message, verifyKey(key), derSignature, (error, ok) => {
      done(error === null && ok === true ? undefined : signatureRefused(what));
    });
  } catch {
    queueMicrotask(() => done(signatureRefused(what)));
  }
}

function signatureRefused(what: string): AttestationError {
  return new AttestationError("signature", `${what} signature does not verify with the identity key`);
}

/** SubjectPublicKeyInfo DER prefix of an uncompressed P-256 point (id-ecPublicKey, prime256v1). */
const P256_SPKI_PREFIX = Buffer.from("3059301306072a8648ce3d020106082a8648ce3d030107034200", "hex");
type VerifyKey = { readonly key: KeyObject; readonly dsaEncoding: "der" };
const verifyKeys = new WeakMap<IdentityKey, VerifyKey>();

/**
 * node:crypto's verify options for an identity key (the runtime's key object, DER signatures), made once
 * per parsed key. Verification goes through node:crypto (BoringSSL in Bun: strict DER, either half of s),
 * many times faster than the pure-JS verifier (figures: bench/HISTORY.md): the coordinator verifies one
 * receipt per request.
 */
function verifyKey(key: IdentityKey): VerifyKey {
  let options = verifyKeys.get(key);
  if (options === undefined) {
    const object = createPublicKey({ key: Buffer.concat([P256_SPKI_PREFIX, key.point]), format: "der", type: "spki" });
    options = { key: object, dsaEncoding: "der" };
    verifyKeys.set(key, options);
  }
  return options;
}
