/**
 * Session keys, coordinator -> provider: one HPKE setup per provider connection instead of one per request
 * (docs/protocol.md, "Session keys"). The provider's X25519 key is already fresh per connection and bound to
 * its identity by the evidence, so an HPKE context to it per connection protects requests as one per
 * request did; what changes is the cost: the per-request X25519 key generation and Diffie-Hellman on the
 * coordinator and the Diffie-Hellman and key import on the provider become an HMAC, an HKDF and one
 * native AES-256-GCM call, a small fraction of the CPU on each side (figures: bench/HISTORY.md).
 *
 * Steps (coordinator at welcome, openSenderSession; provider on welcome, openRecipientSession):
 *   1. info    = sessionInfo({protocolVersion, providerId})           (canonical bytes, below)
 *   2. (enc, ctx) = SetupBaseS(pkR, info) / ctx = SetupBaseR(enc, skR, info)    (seal.ts's suite)
 *   3. chain_0 = ctx.Export("umbra session", 32)                      (the session secret)
 * Per request (SessionSealer.seal / SessionOpener.open), n = 1, 2, 3, ... per session:
 *   4. chain_n    = HMAC-SHA256(key = chain_(n-1), ratchetInfo(n))     (a one-way chain; see below)
 *   5. keys       = HKDF-SHA256(IKM = chain_n, salt = "" (32 zero bytes), info = requestKeyInfo(n, binding), L = 64)
 *   6. requestKey = keys[0..32), responseKey = keys[32..64)
 *   7. ciphertext = AES-256-GCM(requestKey, nonce = 12 zero bytes, aad = "", plaintext) || 16-byte tag
 * The response chunks use responseKey exactly as with per-request HPKE (chunks.ts). Each side keeps only
 * the newest chain value (older ones are overwritten with zeros): whoever reads a process's memory later
 * cannot derive the keys of requests it already sealed or opened from what it keeps (with one HPKE setup
 * per request, the provider's private key could). JavaScript does not wipe freed memory, so the keys of
 * recent requests may linger in garbage until it is reused.
 *
 * Wire format (all integers unsigned big-endian; lp(x) = u32(len(x)) || x; canonical.ts):
 *   sessionInfo    = lp("umbra-session-v1") || u32(protocolVersion) || lp(UTF-8(providerId))
 *   ratchetInfo    = lp("umbra-session-ratchet-v1") || u64(n)
 *   requestKeyInfo = lp("umbra-session-request-v1") || u64(n) || u32(protocolVersion) || lp(UTF-8(requestId))
 *                    || u32(attempt)
 *   enc            = 32 bytes (raw X25519 ephemeral public key), sent once, in `welcome.session_enc`
 *
 * Invariants:
 * - Each request key encrypts exactly one message, so the fixed nonce never repeats under a key: n strictly
 *   increases per session on the sender (SessionSealer owns the counter) and both the chain and the HKDF
 *   info bind n; the info also binds the protocol version, the request id and the attempt.
 * - The opener refuses any n not above the last one it opened (a replayed or reordered request) and any n
 *   more than MAX_RATCHET_STEPS above it (gaps come only from requests refused before opening); a request
 *   that fails to open moves neither the counter nor the chain.
 * - Any open failure is one error, RequestOpenError, as for per-request HPKE.
 * - The chain never leaves the two objects that hold it; it dies with the connection.
 */
import { createCipheriv, createDecipheriv, hkdfSync } from "node:crypto";
import { CanonicalBytes } from "./canonical.ts";
import { InvalidInputError, InvalidKeyError, RequestOpenError } from "./errors.ts";
import {
  AEAD_TAG_BYTES,
  type HpkeOptions,
  MAX_REQUEST_ID_BYTES,
  RESPONSE_KEY_BYTES,
  type RequestBinding,
  recipientContext,
  senderContext,
} from "./seal.ts";

const SESSION_INFO_TAG = "umbra-session-v1";
const SESSION_REQUEST_TAG = "umbra-session-request-v1";
const SESSION_RATCHET_TAG = "umbra-session-ratchet-v1";
/** Most chain steps an opener takes for one request (the gap after the last request it opened). */
export const MAX_RATCHET_STEPS = 65_536;
/** HPKE exporter context of the session secret (UTF-8). */
const SESSION_EXPORT_CONTEXT = "umbra session";
const SESSION_SECRET_BYTES = 32;
/** Largest provider id the session info carries, in UTF-8 bytes. */
const MAX_PROVIDER_ID_BYTES = 512;
/** Highest request counter: the sender refuses to seal beyond it (the connection must be renewed). */
const MAX_SESSION_COUNTER = Number.MAX_SAFE_INTEGER;

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

/**
 * The HMAC input of chain step n (layout in the file header).
 * @throws InvalidInputError unless n is an integer in 1..2^53 - 1.
 */
export function ratchetInfo(n: number): Uint8Array<ArrayBuffer> {
  if (n === 0) throw new InvalidInputError("n must be at least 1");
  return CanonicalBytes.tagged(SESSION_RATCHET_TAG).u64("n", n).finish();
}

/** chain_n from chain_(n-1) (step 4). */
function ratchet(chain: Uint8Array, n: number): Uint8Array {
  return new Uint8Array(new Bun.CryptoHasher("sha256", chain).update(ratchetInfo(n)).digest());
}

/** The request and response keys of request n from chain_n (steps 5 and 6). */
function requestKeys(chain: Uint8Array, n: number, binding: RequestBinding): { requestKey: Uint8Array; responseKey: Uint8Array } {
  // Views of the one derived buffer: the request key is used at once; the response key is kept by its
  // chunk stream, which copies it.
  const keys = new Uint8Array(hkdfSync("sha256", chain, ZERO_SALT, requestKeyInfo(n, binding), 64));
  return { requestKey: keys.subarray(0, 32), responseKey: keys.subarray(32, 32 + RESPONSE_KEY_BYTES) };
}

/** What both halves of a session hold: the newest chain value and the request counter it belongs to. */
abstract class SessionHalf {
  protected last = 0;
  /** chain_last (chain_0 = the session secret); earlier values are gone. */
  protected chain: Uint8Array;

  /** @param secret the 32-byte session secret (openSenderSession / openRecipientSession); copied. */
  constructor(secret: Uint8Array) {
    if (!(secret instanceof Uint8Array) || secret.byteLength !== SESSION_SECRET_BYTES) {
      throw new InvalidKeyError(`session secret must be ${SESSION_SECRET_BYTES} bytes`);
    }
    this.chain = secret.slice();
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
    const chain = ratchet(this.chain, n);
    const { requestKey, responseKey } = requestKeys(chain, n, binding);
    this.chain.fill(0);
    this.chain = chain;
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
    if (n - this.last > MAX_RATCHET_STEPS) {
      throw new RequestOpenError(`sealed request ${n} is more than ${MAX_RATCHET_STEPS} above the last one opened (${this.last})`);
    }
    let chain = this.chain;
    for (let k = this.last + 1; k <= n; k++) {
      const next = ratchet(chain, k);
      if (chain !== this.chain) chain.fill(0); // an intermediate step of a gap
      chain = next;
    }
    const { requestKey, responseKey } = requestKeys(chain, n, binding);
    const split = ciphertext.byteLength - AEAD_TAG_BYTES;
    let plaintext: Uint8Array;
    try {
      const decipher = createDecipheriv("aes-256-gcm", requestKey, ZERO_NONCE);
      decipher.setAuthTag(ciphertext.subarray(split));
      plaintext = decipher.update(ciphertext.subarray(0, split));
      decipher.final(); // throws when the tag does not match; GCM holds nothing back
    } catch {
      chain.fill(0); // a candidate that did not open (this.chain is untouched)
      throw new RequestOpenError("sealed request did not open");
    }
    this.chain.fill(0);
    this.chain = chain;
    this.last = n;
    return { plaintext, responseKey };
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
  options: HpkeOptions = {},
): Promise<{ readonly enc: Uint8Array; readonly sealer: SessionSealer }> {
  const ctx = await senderContext(recipientPublicKey, sessionInfo(binding), options);
  const secret = new Uint8Array(await ctx.export(EXPORT_CONTEXT, SESSION_SECRET_BYTES));
  const sealer = new SessionSealer(secret);
  secret.fill(0);
  return { enc: new Uint8Array(ctx.enc), sealer };
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
  options: HpkeOptions = {},
): Promise<SessionOpener> {
  const ctx = await recipientContext(recipientPrivateKey, enc, sessionInfo(binding), options);
  const secret = new Uint8Array(await ctx.export(EXPORT_CONTEXT, SESSION_SECRET_BYTES));
  const opener = new SessionOpener(secret);
  secret.fill(0);
  return opener;
}
