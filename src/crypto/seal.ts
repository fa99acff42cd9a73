/**
 * Request sealing, coordinator -> provider: HPKE (RFC 9180) base mode with DHKEM(X25519, HKDF-SHA256),
 * HKDF-SHA256 and ChaCha20-Poly1305, through @hpke/core (not hand-rolled), plus the response key both
 * sides derive from the same HPKE context for the response chunks (chunks.ts).
 *
 * Steps (coordinator, sealRequest):
 *   1. info = requestInfo(binding)                          (canonical bytes, below)
 *   2. (enc, ctx) = SetupBaseS(pkR, info)                    (fresh ephemeral X25519 key per call)
 *   3. ciphertext = ctx.Seal(aad = "", plaintext)            (first and only message: sequence number 0)
 *   4. responseKey = ctx.Export("umbra response", 32)
 * Steps (provider, openRequest): ctx = SetupBaseR(enc, skR, info); plaintext = ctx.Open("", ciphertext);
 * responseKey = ctx.Export("umbra response", 32). Both sides hold the same responseKey only if enc, the
 * key pair and all three binding fields match.
 *
 * Wire format (all integers unsigned big-endian; lp(x) = u32(len(x)) || x; canonical.ts):
 *   info       = lp("umbra-request-v1") || u32(protocolVersion) || lp(UTF-8(requestId)) || u32(attempt)
 *                e.g. version 1, "req_1", attempt 0 ->
 *                00000010 756d6272612d726571756573742d7631 00000001 00000005 7265715f31 00000000
 *   enc        = 32 bytes, the raw X25519 ephemeral public key (RFC 7748 u-coordinate, little-endian)
 *   ciphertext = ChaCha20-Poly1305 output: plaintext length + 16-byte tag
 *   keys       = raw 32-byte X25519 public and private keys; base64url (encoding.ts) in JSON frames
 *
 * Invariants:
 * - requestId: well-formed Unicode, 1..MAX_REQUEST_ID_BYTES UTF-8 bytes; protocolVersion and attempt: u32.
 * - A fresh ephemeral key per call, so (responseKey, chunk nonce) pairs never repeat across attempts.
 * - Low-order recipient keys (all-zero shared secret, RFC 9180 section 7.1.4) are refused by every suite.
 * - Any open failure (tampered enc or ciphertext, wrong recipient key, different binding) is one error,
 *   RequestOpenError: the AEAD cannot tell them apart, and the caller must not either.
 *
 * Suite: @hpke/core's CipherSuite with its key schedule, Encap/Decap and context logic, @hpke/chacha20poly1305
 * as the AEAD, and node:crypto X25519 (BoringSSL in Bun) and HKDF-SHA256 plugged into the library's extension
 * points (Dhkem base class with DhkemPrimitives, HkdfSha256 subclass; hpke-native.ts): synchronous, where
 * @hpke/core's own WebCrypto suite makes about 20 async calls per seal, each a round trip through Bun's
 * thread pool, and so seals and opens several times slower (bench/crypto.ts; figures: bench/HISTORY.md,
 * per-request crypto). HpkeOptions.suite takes another CipherSuite of the same algorithms: the WebCrypto
 * and pure-JS (noble) suites live in test/support/hpke-suites.ts, outside the production import graph, for
 * the RFC 9180 vectors, byte-for-byte cross-checks and the benchmark.
 */
import { Chacha20Poly1305 } from "@hpke/chacha20poly1305";
import { CipherSuite } from "@hpke/core";
import { x25519 } from "@noble/curves/ed25519.js";
import { CanonicalBytes } from "./canonical.ts";
import { InvalidInputError, InvalidKeyError, RequestOpenError } from "./errors.ts";
import { NativeDhkemX25519HkdfSha256, NativeHkdfSha256 } from "./hpke-native.ts";

const REQUEST_INFO_TAG = "umbra-request-v1";
/** HPKE exporter context of the response key (UTF-8). */
const RESPONSE_EXPORT_CONTEXT = "umbra response";
export const RESPONSE_KEY_BYTES = 32;
export const X25519_KEY_BYTES = 32;
/** ChaCha20-Poly1305 tag length: every ciphertext is at least this long. */
export const AEAD_TAG_BYTES = 16;
/** Upper bound on the UTF-8 length of a request id (the protocol allows 128 characters: at most 512 bytes). */
export const MAX_REQUEST_ID_BYTES = 512;

/** What `info` binds: both sides must pass the same three values. */
export interface RequestBinding {
  readonly protocolVersion: number;
  readonly requestId: string;
  readonly attempt: number;
}

export interface SealedRequest {
  /** 32-byte encapsulated ephemeral public key. */
  readonly enc: Uint8Array;
  readonly ciphertext: Uint8Array;
  /** 32 bytes: the key of the response chunks (chunks.ts). Secret. */
  readonly responseKey: Uint8Array;
}

export interface OpenedRequest {
  readonly plaintext: Uint8Array;
  readonly responseKey: Uint8Array;
}

export interface X25519KeyPair {
  readonly publicKey: Uint8Array;
  readonly privateKey: Uint8Array;
}

export interface HpkeOptions {
  /** The HPKE suite; HPKE_SUITE (native) when absent. Same algorithms, same bytes (tests and bench only). */
  readonly suite?: CipherSuite;
}

const EXPORT_CONTEXT = new TextEncoder().encode(RESPONSE_EXPORT_CONTEXT);
const EMPTY = new Uint8Array(0);

/** The production suite (stateless): node:crypto KEM and KDF under @hpke/core, see the file header. */
export const HPKE_SUITE = new CipherSuite({
  kem: new NativeDhkemX25519HkdfSha256(),
  kdf: new NativeHkdfSha256(),
  aead: new Chacha20Poly1305(),
});

/** @throws InvalidInputError when `options.suite` is given and is not a CipherSuite. */
function suiteOf(options: HpkeOptions): CipherSuite {
  if (options.suite === undefined) return HPKE_SUITE;
  if (!(options.suite instanceof CipherSuite)) throw new InvalidInputError("suite must be an HPKE CipherSuite");
  return options.suite;
}

/**
 * The canonical `info` bytes of a binding (layout in the file header).
 * @throws InvalidInputError when a field is out of range (see RequestBinding invariants).
 */
export function requestInfo(binding: RequestBinding): Uint8Array<ArrayBuffer> {
  return CanonicalBytes.tagged(REQUEST_INFO_TAG)
    .u32("protocolVersion", binding.protocolVersion)
    .text("requestId", binding.requestId, MAX_REQUEST_ID_BYTES)
    .u32("attempt", binding.attempt)
    .finish();
}

/**
 * Coordinator side: seal a request to a provider's X25519 public key.
 * @throws InvalidKeyError when the key is not 32 bytes or is a low-order point.
 * @throws InvalidInputError when the plaintext is not bytes or the binding is out of range.
 */
export async function sealRequest(
  recipientPublicKey: Uint8Array,
  plaintext: Uint8Array,
  binding: RequestBinding,
  options: HpkeOptions = {},
): Promise<SealedRequest> {
  return hpkeSeal(recipientPublicKey, plaintext, requestInfo(binding), options);
}

/**
 * Single-shot HPKE seal (base mode, empty AAD) under any `info`, plus the 32-byte response key exported
 * from the same context. sealRequest binds the provider hop; consumer-seal.ts the consumer transport.
 * @throws InvalidKeyError when the key is not 32 bytes or is a low-order point.
 * @throws InvalidInputError when the plaintext is not bytes.
 */
export async function hpkeSeal(
  recipientPublicKey: Uint8Array,
  plaintext: Uint8Array,
  info: Uint8Array<ArrayBuffer>,
  options: HpkeOptions = {},
): Promise<SealedRequest> {
  if (!(plaintext instanceof Uint8Array)) throw new InvalidInputError("plaintext must be bytes");
  const ctx = await senderContext(recipientPublicKey, info, options);
  // The first message of a fresh context: Seal and Export have no failure mode left here.
  const ciphertext = new Uint8Array(await ctx.seal(plaintext, EMPTY));
  const responseKey = new Uint8Array(await ctx.export(EXPORT_CONTEXT, RESPONSE_KEY_BYTES));
  return { enc: new Uint8Array(ctx.enc), ciphertext, responseKey };
}

/**
 * Provider side: open a sealed request with the provider's X25519 private key and derive the response key.
 * @throws InvalidKeyError when the private key is not 32 bytes or cannot be imported.
 * @throws InvalidInputError when enc is not 32 bytes, the ciphertext is shorter than the tag, or the
 *   binding is out of range.
 * @throws RequestOpenError when the request does not open: tampered enc or ciphertext, wrong key, or a
 *   binding other than the sender's.
 */
export async function openRequest(
  recipientPrivateKey: Uint8Array,
  enc: Uint8Array,
  ciphertext: Uint8Array,
  binding: RequestBinding,
  options: HpkeOptions = {},
): Promise<OpenedRequest> {
  return hpkeOpen(recipientPrivateKey, enc, ciphertext, requestInfo(binding), options);
}

/**
 * The recipient side of hpkeSeal: open under `info` and export the response key.
 * @throws InvalidKeyError, InvalidInputError, RequestOpenError as openRequest.
 */
export async function hpkeOpen(
  recipientPrivateKey: Uint8Array,
  enc: Uint8Array,
  ciphertext: Uint8Array,
  info: Uint8Array<ArrayBuffer>,
  options: HpkeOptions = {},
): Promise<OpenedRequest> {
  checkKey(recipientPrivateKey, "recipient private key");
  if (!(ciphertext instanceof Uint8Array) || ciphertext.byteLength < AEAD_TAG_BYTES) {
    throw new InvalidInputError(`ciphertext must be at least ${AEAD_TAG_BYTES} bytes`);
  }
  const ctx = await recipientContext(recipientPrivateKey, enc, info, options);
  try {
    const plaintext = new Uint8Array(await ctx.open(ciphertext, EMPTY));
    const responseKey = new Uint8Array(await ctx.export(EXPORT_CONTEXT, RESPONSE_KEY_BYTES));
    return { plaintext, responseKey };
  } catch {
    throw new RequestOpenError("sealed request did not open");
  }
}

export type HpkeSenderContext = Awaited<ReturnType<CipherSuite["createSenderContext"]>>;
export type HpkeRecipientContext = Awaited<ReturnType<CipherSuite["createRecipientContext"]>>;

/**
 * HPKE SetupBaseS to a raw X25519 public key under `info` (a fresh ephemeral key; `ctx.enc` is its public
 * half). Used for one request (hpkeSeal) or one provider connection (session.ts).
 * @throws InvalidKeyError when the key is not 32 bytes or is a low-order point.
 */
export async function senderContext(
  recipientPublicKey: Uint8Array,
  info: Uint8Array<ArrayBuffer>,
  options: HpkeOptions = {},
): Promise<HpkeSenderContext> {
  checkKey(recipientPublicKey, "recipient public key");
  const suite = suiteOf(options);
  let pkR: CryptoKey;
  try {
    pkR = await suite.kem.deserializePublicKey(recipientPublicKey);
  } catch (error) {
    throw new InvalidKeyError("recipient public key rejected", { cause: error });
  }
  try {
    return await suite.createSenderContext({ recipientPublicKey: pkR, info });
  } catch (error) {
    // Encap fails on an all-zero shared secret, i.e. a low-order recipient key.
    throw new InvalidKeyError("recipient public key rejected (low-order point)", { cause: error });
  }
}

/**
 * HPKE SetupBaseR with a raw X25519 private key, `enc` and `info`: the recipient half of senderContext.
 * @throws InvalidKeyError when the private key is not 32 bytes or cannot be imported.
 * @throws InvalidInputError when enc is not 32 bytes.
 * @throws RequestOpenError when the context cannot be set up (a low-order enc).
 */
export async function recipientContext(
  recipientPrivateKey: Uint8Array,
  enc: Uint8Array,
  info: Uint8Array<ArrayBuffer>,
  options: HpkeOptions = {},
): Promise<HpkeRecipientContext> {
  checkKey(recipientPrivateKey, "recipient private key");
  if (!(enc instanceof Uint8Array) || enc.byteLength !== X25519_KEY_BYTES) {
    throw new InvalidInputError(`enc must be ${X25519_KEY_BYTES} bytes`);
  }
  const suite = suiteOf(options);
  let skR: CryptoKey;
  try {
    skR = await suite.kem.deserializePrivateKey(recipientPrivateKey);
  } catch (error) {
    throw new InvalidKeyError("recipient private key rejected", { cause: error });
  }
  try {
    return await suite.createRecipientContext({ recipientKey: skR, enc, info });
  } catch {
    throw new RequestOpenError("sealed request did not open");
  }
}

/**
 * A fresh X25519 key pair in raw form (32-byte public and private keys), from the runtime's CSPRNG.
 * @throws InvalidKeyError if the runtime cannot generate X25519 keys.
 */
export async function generateX25519KeyPair(options: HpkeOptions = {}): Promise<X25519KeyPair> {
  const suite = suiteOf(options);
  try {
    const pair = await suite.kem.generateKeyPair();
    const publicKey = new Uint8Array(await suite.kem.serializePublicKey(pair.publicKey));
    const privateKey = new Uint8Array(await suite.kem.serializePrivateKey(pair.privateKey));
    return { publicKey, privateKey };
  } catch (error) {
    throw new InvalidKeyError("X25519 key generation failed", { cause: error });
  }
}

/**
 * The raw public key of a raw X25519 private key (RFC 7748: X25519(sk, 9)), e.g. for a provider that
 * stored only its private key.
 * @throws InvalidKeyError when the private key is not 32 bytes.
 */
export function x25519PublicKey(privateKey: Uint8Array): Uint8Array {
  checkKey(privateKey, "private key");
  return x25519.getPublicKey(privateKey);
}

function checkKey(key: Uint8Array, what: string): void {
  if (!(key instanceof Uint8Array) || key.byteLength !== X25519_KEY_BYTES) {
    throw new InvalidKeyError(`${what} must be ${X25519_KEY_BYTES} raw bytes`);
  }
}
