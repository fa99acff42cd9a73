/**
 * The signing side of the formats in secure-enclave.ts and challenge.ts, with a P-256 identity key
 * held in memory. Used by development providers (evidence issued under a DevelopmentRoot) and by
 * tests; a production provider signs the same bytes with its Secure Enclave key instead.
 *
 * Builders serialize once and sign those exact bytes; the verifier never sees anything else.
 */
import { createPrivateKey, type KeyObject, sign as nodeSign } from "node:crypto";
import { p256 } from "@noble/curves/nist.js";
import { CHALLENGE_RESPONSE_KIND, CHALLENGE_VERSION, type Challenge } from "./challenge.ts";
import { encodeBase64 } from "./encoding.ts";
import { type Posture, postureJson } from "./posture.ts";
import { EVIDENCE_KIND, EVIDENCE_VERSION } from "./secure-enclave.ts";

export class SoftwareIdentity {
  /** The same key for node:crypto, built on first use. */
  private keyObject: KeyObject | undefined;

  private constructor(private readonly secretKey: Uint8Array) {}

  static generate(): SoftwareIdentity {
    return new SoftwareIdentity(p256.utils.randomSecretKey());
  }

  static fromSecretKey(secretKey: Uint8Array): SoftwareIdentity {
    if (!p256.utils.isValidSecretKey(secretKey)) throw new RangeError("not a P-256 secret key");
    return new SoftwareIdentity(Uint8Array.from(secretKey));
  }

  /** The public key: 65 bytes 0x04||x||y, or 64 bytes x||y. */
  publicKey(form: 64 | 65 = 65): Uint8Array {
    const point = p256.getPublicKey(this.secretKey, false);
    return form === 65 ? point : point.subarray(1);
  }

  /**
   * DER ECDSA P-256 signature over SHA-256(message), low-S. Signed through node:crypto (once per answer on
   * a development provider, many times faster than noble's pure-JS signing; bench/HISTORY.md), then
   * normalized to low-S, as noble produced before: verifiers that insist on low-S accept it.
   */
  sign(message: Uint8Array): Uint8Array {
    this.keyObject ??= createPrivateKey({ key: this.jwk(), format: "jwk" });
    return lowSDer(nodeSign("sha256", message, { key: this.keyObject, dsaEncoding: "der" }));
  }

  private jwk() {
    const point = this.publicKey(65);
    const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64url");
    return { kty: "EC", crv: "P-256", d: b64(this.secretKey), x: b64(point.subarray(1, 33)), y: b64(point.subarray(33)) };
  }
}

/** The P-256 group order n, and n / 2 rounded down, as 32 big-endian bytes. */
const ORDER = Buffer.from("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551", "hex");
const HALF_ORDER = Buffer.from("7fffffff800000007fffffffffffffffde737d56d38bcf4279dce5617e3192a8", "hex");

/**
 * A DER ECDSA P-256 signature with s replaced by n - s when s > n/2 (the same signature, low-S form),
 * on the bytes: SEQUENCE { INTEGER r, INTEGER s }, each INTEGER minimal two's complement (a 0x00 first
 * when the top bit is set). The signer's own output, so its shape is trusted; a high s is re-encoded.
 */
export function lowSDer(der: Uint8Array): Uint8Array {
  const rLength = der[3] as number;
  const sAt = 4 + rLength + 2;
  const sLength = der[sAt - 1] as number;
  const s = new Uint8Array(32);
  const sBytes = der.subarray(sAt, sAt + sLength);
  const significant = sBytes.subarray(sBytes.length > 32 ? sBytes.length - 32 : 0);
  s.set(significant, 32 - significant.length);
  if (Buffer.compare(s, HALF_ORDER) <= 0) return new Uint8Array(der.buffer, der.byteOffset, der.byteLength);
  // n - s, byte by byte with a borrow (s < n, so no borrow is left).
  let borrow = 0;
  for (let i = 31; i >= 0; i--) {
    const d = (ORDER[i] as number) - (s[i] as number) - borrow;
    s[i] = d & 0xff;
    borrow = d < 0 ? 1 : 0;
  }
  let first = 0;
  while (first < 31 && s[first] === 0) first++;
  const pad = (s[first] as number) >= 0x80 ? 1 : 0;
  const low = 32 - first + pad;
  const r = der.subarray(2, 4 + rLength); // 02 len r
  const out = new Uint8Array(2 + r.length + 2 + low);
  out[0] = 0x30;
  out[1] = r.length + 2 + low;
  out.set(r, 2);
  out[2 + r.length] = 0x02;
  out[3 + r.length] = low;
  out.set(s.subarray(first), 4 + r.length + pad);
  return out;
}

export interface EvidenceRequest {
  readonly identity: SoftwareIdentity;
  /** Raw 32-byte X25519 public key, the same one the hello frame carries. */
  readonly encryptionKey: Uint8Array;
  readonly posture: Posture;
  readonly timestamp: number;
  readonly keyForm?: 64 | 65;
  /** DER certificates, leaf first. */
  readonly mdaChain?: readonly Uint8Array[];
}

/** The exact evidence bytes an identity key signs (any signer: software here, a Secure Enclave elsewhere). */
export function evidencePayload(request: {
  readonly identityKey: Uint8Array;
  readonly encryptionKey: Uint8Array;
  readonly posture: Posture;
  readonly timestamp: number;
}): Uint8Array {
  return new TextEncoder().encode(
    JSON.stringify({
      kind: EVIDENCE_KIND,
      version: EVIDENCE_VERSION,
      identity_key: encodeBase64(request.identityKey),
      encryption_key: encodeBase64(request.encryptionKey),
      timestamp: request.timestamp,
      posture: postureJson(request.posture),
    }),
  );
}

/** The hello frame's `evidence` value from signed evidence bytes and the device chain (DER, leaf first). */
export function evidenceWire(payload: Uint8Array, signature: Uint8Array, mdaChain?: readonly Uint8Array[]): Record<string, unknown> {
  const wire: Record<string, unknown> = { payload: encodeBase64(payload), signature: encodeBase64(signature) };
  if (mdaChain) wire.mda_chain = mdaChain.map(encodeBase64);
  return wire;
}

/** The exact challenge-answer bytes an identity key signs. */
export function challengeResponsePayload(challenge: Challenge, posture: Posture): Uint8Array {
  return new TextEncoder().encode(
    JSON.stringify({
      kind: CHALLENGE_RESPONSE_KIND,
      version: CHALLENGE_VERSION,
      nonce: encodeBase64(challenge.nonce),
      timestamp: challenge.timestamp,
      posture: postureJson(posture),
    }),
  );
}

/** Builds signed evidence; `wire` is the hello frame's `evidence` value. */
export function buildEvidence(request: EvidenceRequest): { payload: Uint8Array; signature: Uint8Array; wire: Record<string, unknown> } {
  const payload = evidencePayload({ ...request, identityKey: request.identity.publicKey(request.keyForm ?? 65) });
  const signature = request.identity.sign(payload);
  return { payload, signature, wire: evidenceWire(payload, signature, request.mdaChain) };
}

/** Signs an answer to `challenge`; `wire` is the challenge_response frame without `type`. */
export function answerChallenge(
  identity: SoftwareIdentity,
  challenge: Challenge,
  posture: Posture,
): { payload: Uint8Array; signature: Uint8Array; wire: Record<string, unknown> } {
  const payload = challengeResponsePayload(challenge, posture);
  const signature = identity.sign(payload);
  return { payload, signature, wire: { payload: encodeBase64(payload), signature: encodeBase64(signature) } };
}
