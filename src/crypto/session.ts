/**
 * Session keys, coordinator -> provider: one HPKE setup per provider connection instead of one per request
 * (docs/protocol.md, "Session keys"). The provider's X25519 key is already fresh per connection and bound to
 * its identity by the evidence, so an HPKE context to it per connection protects requests exactly as one
 * per request did; what changes is the cost: the per-request X25519 key generation and Diffie-Hellman on
 * the coordinator and the Diffie-Hellman and key import on the provider (~120-140 us of CPU on each side)
 * become one HKDF and one native AES-256-GCM call (~5 us).
 *
 * Steps (coordinator at welcome, openSenderSession; provider on welcome, openRecipientSession):
 *   1. info    = sessionInfo({protocolVersion, providerId})           (canonical bytes, below)
 *   2. (enc, ctx) = SetupBaseS(pkR, info) / ctx = SetupBaseR(enc, skR, info)    (seal.ts's suite)
 *   3. secret  = ctx.Export("umbra session", 32)
 * Per request (SessionSealer.seal / SessionOpener.open), n = 1, 2, 3, ... per session:
 *   4. keys       = HKDF-SHA256(IKM = secret, salt = "" (32 zero bytes), info = requestKeyInfo(n, binding), L = 64)
 *   5. requestKey = keys[0..32), responseKey = keys[32..64)
 *   6. ciphertext = AES-256-GCM(requestKey, nonce = 12 zero bytes, aad = "", plaintext) || 16-byte tag
 * The response chunks use responseKey exactly as with per-request HPKE (chunks.ts).
 *
 * Wire format (all integers unsigned big-endian; lp(x) = u32(len(x)) || x; canonical.ts):
 *   sessionInfo    = lp("umbra-session-v1") || u32(protocolVersion) || lp(UTF-8(providerId))
 *   requestKeyInfo = lp("umbra-session-request-v1") || u64(n) || u32(protocolVersion) || lp(UTF-8(requestId))
 *                    || u32(attempt)
 *   enc            = 32 bytes (raw X25519 ephemeral public key), sent once, in `welcome.session_enc`
 *
 * Invariants:
 * - Each request key encrypts exactly one message, so the fixed nonce never repeats under a key: n strictly
 *   increases per session on the sender (SessionSealer owns the counter) and the HKDF info binds n, the
 *   protocol version, the request id and the attempt.
 * - The opener refuses any n not above the last one it opened (a replayed or reordered request); a request
 *   that fails to open does not move the counter.
 * - Any open failure is one error, RequestOpenError, as for per-request HPKE.
 * - The session secret never leaves the two objects that hold it; it dies with the connection.
 */
import { createCipheriv, createDecipheriv, hkdfSync } from "node:crypto";
import { CanonicalBytes } from "./canonical.ts";
import { InvalidInputError, InvalidKeyError, RequestOpenError } from "./errors.ts";
import {
  AEAD_TAG_BYTES,
  type KemOptions,
  MAX_REQUEST_ID_BYTES,
  RESPONSE_KEY_BYTES,
  type RequestBinding,
  recipientContext,
  senderContext,
} from "./seal.ts";

export const SESSION_INFO_TAG = "umbra-session-v1";
export const SESSION_REQUEST_TAG = "umbra-session-request-v1";
/** HPKE exporter context of the session secret (UTF-8). */
export const SESSION_EXPORT_CONTEXT = "umbra session";
export const SESSION_SECRET_BYTES = 32;
/** Largest provider id the session info carries, in UTF-8 bytes. */
export const MAX_PROVIDER_ID_BYTES = 512;
/** Highest request counter: the sender refuses to seal beyond it (the connection must be renewed). */
export const MAX_SESSION_COUNTER = Number.MAX_SAFE_INTEGER;

const EXPORT_CONTEXT = new TextEncoder().encode(SESSION_EXPORT_CONTEXT);
const ZERO_NONCE = Buffer.alloc(12);
const ZERO_SALT = Buffer.alloc(0);

/** What the session's `info` binds. */
export interface SessionBinding {
  readonly protocolVersion: number;
  readonly providerId: string;
}

export interface SealedSessionRequest {
  /** The request counter to send with the ciphertext. */
  readonly n: number;
  readonly ciphertext: Uint8Array;
  /** 32 bytes: the key of the response chunks. Secret. */
  readonly responseKey: Uint8Array;
}

export interface OpenedSessionRequest {
  readonly plaintext: Uint8Array;
  readonly responseKey: Uint8Array;
}

/**
 * The canonical `info` of a session (layout in the file header).
 * @throws InvalidInputError when a field is out of range.
 */
export function sessionInfo(binding: SessionBinding): Uint8Array<ArrayBuffer> {
  return CanonicalBytes.tagged(SESSION_INFO_TAG)
    .u32("protocolVersion", binding.protocolVersion)
    .text("providerId", binding.providerId, MAX_PROVIDER_ID_BYTES)
    .finish();
}

/**
 * The HKDF `info` of request n (layout in the file header).
 * @throws InvalidInputError when a field is out of range (n must be 1..MAX_SESSION_COUNTER).
 */
export function requestKeyInfo(n: number, binding: RequestBinding): Uint8Array<ArrayBuffer> {
  if (n === 0) throw new InvalidInputError("n must be at least 1");
  return CanonicalBytes.tagged(SESSION_REQUEST_TAG)
    .u64("n", n)
    .u32("protocolVersion", binding.protocolVersion)
    .text("requestId", binding.requestId, MAX_REQUEST_ID_BYTES)
    .u32("attempt", binding.attempt)
    .finish();
}

/** The request and response keys of request n (steps 4 and 5). */
function requestKeys(secret: Uint8Array, n: number, binding: RequestBinding): { requestKey: Buffer; responseKey: Uint8Array } {
  const keys = Buffer.from(hkdfSync("sha256", secret, ZERO_SALT, requestKeyInfo(n, binding), 64));
  return { requestKey: keys.subarray(0, 32), responseKey: new Uint8Array(keys.subarray(32, 32 + RESPONSE_KEY_BYTES)) };
}

/** What both halves of a session hold: the secret and the last request counter used. */
abstract class SessionHalf {
  protected last = 0;

  /** @param secret the 32-byte session secret (openSenderSession / openRecipientSession). */
  constructor(protected readonly secret: Uint8Array) {
    if (!(secret instanceof Uint8Array) || secret.byteLength !== SESSION_SECRET_BYTES) {
      throw new InvalidKeyError(`session secret must be ${SESSION_SECRET_BYTES} bytes`);
    }
  }

  /** The last n sealed (sender) or opened (recipient); 0 before the first. */
  get counter(): number {
    return this.last;
  }
}

/** The coordinator's half of a session: seals each request under the next counter value. */
export class SessionSealer extends SessionHalf {
  /**
   * Seals one request under n = the previous n + 1 (synchronous: the caller sends frames in n order).
   * @throws InvalidInputError when the plaintext is not bytes, the binding is out of range or the counter
   *   is exhausted.
   */
  seal(plaintext: Uint8Array, binding: RequestBinding): SealedSessionRequest {
    if (!(plaintext instanceof Uint8Array)) throw new InvalidInputError("plaintext must be bytes");
    if (this.last >= MAX_SESSION_COUNTER) throw new InvalidInputError("session request counter exhausted");
    const n = this.last + 1;
    const { requestKey, responseKey } = requestKeys(this.secret, n, binding);
    this.last = n;
    const cipher = createCipheriv("aes-256-gcm", requestKey, ZERO_NONCE);
    const body = cipher.update(plaintext);
    cipher.final();
    const tag = cipher.getAuthTag();
    const ciphertext = new Uint8Array(body.byteLength + AEAD_TAG_BYTES);
    ciphertext.set(body, 0);
    ciphertext.set(tag, body.byteLength);
    return { n, ciphertext, responseKey };
  }
}

/** The provider's half of a session: opens requests whose counter is above the last one opened. */
export class SessionOpener extends SessionHalf {
  /**
   * Opens request n and returns its plaintext and response key.
   * @throws InvalidInputError when n is not an integer in 1..MAX_SESSION_COUNTER, the ciphertext is shorter
   *   than the tag or the binding is out of range.
   * @throws RequestOpenError when n is not above the last n opened (replay or reorder), or the request does
   *   not open (tampered, another session, another binding).
   */
  open(n: number, ciphertext: Uint8Array, binding: RequestBinding): OpenedSessionRequest {
    if (!Number.isSafeInteger(n) || n < 1) throw new InvalidInputError("n must be an integer in [1, 2^53 - 1]");
    if (!(ciphertext instanceof Uint8Array) || ciphertext.byteLength < AEAD_TAG_BYTES) {
      throw new InvalidInputError(`ciphertext must be at least ${AEAD_TAG_BYTES} bytes`);
    }
    if (n <= this.last) throw new RequestOpenError(`sealed request ${n} is not above the last one opened (${this.last})`);
    const { requestKey, responseKey } = requestKeys(this.secret, n, binding);
    const split = ciphertext.byteLength - AEAD_TAG_BYTES;
    let plaintext: Buffer;
    try {
      const decipher = createDecipheriv("aes-256-gcm", requestKey, ZERO_NONCE);
      decipher.setAuthTag(ciphertext.subarray(split));
      plaintext = Buffer.concat([decipher.update(ciphertext.subarray(0, split)), decipher.final()]);
    } catch {
      throw new RequestOpenError("sealed request did not open");
    }
    this.last = n;
    return { plaintext: new Uint8Array(plaintext.buffer, plaintext.byteOffset, plaintext.byteLength), responseKey };
  }
}

/**
 * Coordinator side: one HPKE setup to the provider's connection key; returns `enc` for the welcome and the
 * sealer of the session's requests.
 * @throws InvalidKeyError when the key is not 32 bytes or is a low-order point.
 * @throws InvalidInputError when the binding is out of range.
 */
export async function openSenderSession(
  recipientPublicKey: Uint8Array,
  binding: SessionBinding,
  options: KemOptions = {},
): Promise<{ readonly enc: Uint8Array; readonly sealer: SessionSealer }> {
  const ctx = await senderContext(recipientPublicKey, sessionInfo(binding), options);
  const secret = new Uint8Array(await ctx.export(EXPORT_CONTEXT, SESSION_SECRET_BYTES));
  return { enc: new Uint8Array(ctx.enc), sealer: new SessionSealer(secret) };
}

/**
 * Provider side: the recipient half of openSenderSession.
 * @throws InvalidKeyError when the private key is not 32 bytes or cannot be imported.
 * @throws InvalidInputError when enc is not 32 bytes or the binding is out of range.
 * @throws RequestOpenError when the context cannot be set up (a low-order enc).
 */
export async function openRecipientSession(
  recipientPrivateKey: Uint8Array,
  enc: Uint8Array,
  binding: SessionBinding,
  options: KemOptions = {},
): Promise<SessionOpener> {
  const ctx = await recipientContext(recipientPrivateKey, enc, sessionInfo(binding), options);
  return new SessionOpener(new Uint8Array(await ctx.export(EXPORT_CONTEXT, SESSION_SECRET_BYTES)));
}
