/**
 * Secure Enclave evidence: what a provider sends in `hello.evidence` to prove that a hardware key
 * vouches for its encryption key and posture. Alone it earns `self_signed`; with a valid Apple MDA
 * chain (mda-chain.ts) it earns `hardware` (trust.ts).
 *
 * Wire envelope (a JSON object inside the hello frame; the payload travels as base64 so the verified
 * bytes are exactly the signed bytes, never a re-serialization):
 *   {
 *     "payload":   base64 of the exact signed JSON bytes (below), at most 16 KiB,
 *     "signature": base64 of a DER ECDSA P-256 signature over SHA-256(payload) by identity_key,
 *     "mda_chain": optional, [base64 DER leaf, base64 DER intermediate, ...] (Apple MDA, leaf first)
 *   }
 *
 * Signed payload (UTF-8 JSON, exactly these fields, no repeated keys):
 *   {
 *     "kind": "umbra.secure-enclave-evidence",   domain tag: never valid as a challenge answer
 *     "version": 1,
 *     "identity_key": base64 of the P-256 public key, 64 (x||y) or 65 (0x04||x||y) bytes,
 *     "encryption_key": base64 of the 32-byte X25519 key; must equal the hello's encryption key,
 *     "timestamp": integer milliseconds since the Unix epoch; within +-2 minutes of the verifier's clock,
 *     "posture": { "sip_enabled", "secure_boot", "third_party_kexts", "os_version" } (posture.ts)
 *   }
 *
 * Steps of verifySecureEnclaveEvidence, in order: size, JSON (strict), kind and version, identity key,
 * signature over the exact bytes, encryption key, timestamp, posture. Nothing after the identity key
 * is read before the signature verifies.
 */

import { bytesEqual, decodeBase64, objectOf, onlyFields, parseSignedJson } from "./encoding.ts";
import { AttestationError, ensure } from "./errors.ts";
import { type IdentityKey, parseIdentityKey, verifyIdentitySignature } from "./identity-key.ts";
import { checkPosture, type Posture, type PosturePolicy, parsePosture } from "./posture.ts";

export const EVIDENCE_KIND = "umbra.secure-enclave-evidence";
export const EVIDENCE_VERSION = 1;
/** Largest accepted evidence timestamp distance from the verifier's clock, either direction. */
export const MAX_EVIDENCE_SKEW_MS = 120_000;
const MAX_PAYLOAD_BYTES = 16 * 1024;
/** Most certificates accepted in `mda_chain` (Apple sends a leaf and one intermediate). */
export const MAX_CHAIN_CERTIFICATES = 4;
const MAX_CERTIFICATE_BYTES = 16 * 1024;
const X25519_KEY_BYTES = 32;

const PAYLOAD_FIELDS = ["kind", "version", "identity_key", "encryption_key", "timestamp", "posture"] as const;

export interface EvidenceEnvelope {
  readonly payload: Uint8Array;
  readonly signature: Uint8Array;
  /** DER certificates, leaf first; absent when the provider sent no MDA chain. */
  readonly mdaChain?: readonly Uint8Array[];
}

export interface SecureEnclaveEvidence {
  readonly identityKey: IdentityKey;
  readonly encryptionKey: Uint8Array;
  readonly timestamp: number;
  readonly posture: Posture;
}

export interface SecureEnclaveOptions {
  /** The X25519 encryption key from the same hello frame (raw 32 bytes). */
  readonly helloEncryptionKey: Uint8Array;
  readonly now: () => number;
  readonly maxSkewMs?: number;
  readonly posturePolicy?: PosturePolicy;
}

/** Decodes the wire envelope. Throws AttestationError("encoding"). */
export function parseEvidenceEnvelope(value: unknown): EvidenceEnvelope {
  const o = objectOf(value, "encoding", "evidence");
  onlyFields(o, ["payload", "signature", "mda_chain"], "encoding", "evidence");
  const payload = decodeBase64(o.payload, "encoding", "evidence.payload");
  const signature = decodeBase64(o.signature, "encoding", "evidence.signature");
  if (o.mda_chain === undefined) return { payload, signature };
  const list = o.mda_chain;
  if (!Array.isArray(list) || list.length === 0 || list.length > MAX_CHAIN_CERTIFICATES) {
    throw new AttestationError("encoding", `evidence.mda_chain must list 1 to ${MAX_CHAIN_CERTIFICATES} certificates`);
  }
  const mdaChain = list.map((c, i) => {
    const der = decodeBase64(c, "encoding", `evidence.mda_chain[${i}]`);
    ensure(der.length <= MAX_CERTIFICATE_BYTES, "encoding", `evidence.mda_chain[${i}] is too large`);
    return der;
  });
  return { payload, signature, mdaChain };
}

/**
 * Verifies Secure Enclave evidence over the exact payload bytes received.
 * Throws AttestationError with check evidence_format, identity_key, signature, encryption_key,
 * timestamp or posture.
 */
export function verifySecureEnclaveEvidence(
  payload: Uint8Array,
  signature: Uint8Array,
  options: SecureEnclaveOptions,
): SecureEnclaveEvidence {
  ensure(payload.length <= MAX_PAYLOAD_BYTES, "evidence_format", "payload is too large");
  const o = parseSignedJson(payload, "evidence_format");
  onlyFields(o, PAYLOAD_FIELDS, "evidence_format", "payload");
  ensure(o.kind === EVIDENCE_KIND, "evidence_format", `payload kind is not ${EVIDENCE_KIND}`);
  ensure(o.version === EVIDENCE_VERSION, "evidence_format", `unsupported evidence version ${String(o.version)}`);

  const identityKey = parseIdentityKey(decodeBase64(o.identity_key, "identity_key", "identity_key"));
  verifyIdentitySignature(identityKey, payload, signature, "evidence");

  const encryptionKey = decodeBase64(o.encryption_key, "evidence_format", "encryption_key");
  ensure(encryptionKey.length === X25519_KEY_BYTES, "evidence_format", "encryption_key is not 32 bytes");
  ensure(bytesEqual(encryptionKey, options.helloEncryptionKey), "encryption_key", "evidence encryption_key differs from the hello key");

  const timestamp = o.timestamp;
  ensure(typeof timestamp === "number" && Number.isSafeInteger(timestamp), "evidence_format", "timestamp is not an integer");
  const skew = options.maxSkewMs ?? MAX_EVIDENCE_SKEW_MS;
  const now = options.now();
  ensure(Math.abs(now - timestamp) <= skew, "timestamp", `evidence timestamp is ${Math.round((now - timestamp) / 1000)} s from now`);

  const posture = parsePosture(o.posture, "evidence_format");
  checkPosture(posture, options.posturePolicy ?? {}, "posture");
  return { identityKey, encryptionKey, timestamp, posture };
}
