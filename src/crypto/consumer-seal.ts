/**
 * Sealed transport for consumers (optional per request), version 2: the consumer seals a request body with
 * HPKE to the coordinator's attested sealing key (GET /v1/attestation, `sealing_public_key`), bound to the
 * path, the bearer credential it sends and the time it sealed; the coordinator opens it in memory and seals
 * the answer back under a key of its own per answer: the JSON body as numbered chunks, an event stream event
 * by event. docs/api.md documents it for clients. Version 1 (no credential, no time) is refused.
 *
 * Steps (consumer, sealConsumerRequest):
 *   1. info = consumerInfo({path, credential, timestamp})                         (canonical bytes, below)
 *   2. enc, ciphertext, exported = hpkeSeal(sealing key, body bytes, info)  (seal.ts: base mode, empty AAD,
 *      exported = Export("umbra response", 32))
 *   3. POST path with content-type application/vnd.umbra.sealed+json, `Authorization: Bearer <credential>`
 *      and the envelope below; keep `exported` to open the answer.
 * Steps (coordinator): read the envelope (any failure: a plain 400); refuse a timestamp more than
 * SEALED_WINDOW_SECONDS from its clock and an `enc` already accepted (consumer-replay.ts), before opening;
 * open with the sealing private key under the info rebuilt from the path, the bearer that authenticated and
 * the envelope's timestamp (a different one of any of the three does not open); record `enc`. Then every
 * answer (success or error envelope) is sealed back:
 *   4. response_nonce = 32 random bytes, chosen per answer, sent as header x-umbra-response-nonce
 *   5. response_key   = HKDF-SHA256(IKM = exported, salt = response_nonce, info = lp("umbra-consumer-response-v2"), L = 32)
 * Response chunks are chunks.ts frames under binding { response_key, requestId: "consumer", attempt: 0 } in
 * the CONSUMER_CHUNKS suite: ChaCha20-Poly1305, nonce from seq, AAD (tag "umbra-chunk-v1") binding seq
 * and final; the last frame has final = true.
 *
 * Wire format (integers unsigned big-endian; lp(x) = u32(len(x)) || x; base64url unpadded):
 *   info              lp("umbra-consumer-v2") || lp(UTF-8(path)) || lp(SHA-256(UTF-8(credential))) || u64(timestamp)
 *                     path e.g. "/v1/chat/completions"; credential = the bearer exactly as sent after
 *                     "Bearer "; timestamp = unix seconds
 *   request envelope  { "version": 2, "timestamp": <integer>, "enc": <32 bytes>, "ciphertext": <sealed body> }
 *   JSON answer       content-type application/vnd.umbra.sealed+json, HTTP status unchanged, header
 *                     x-umbra-response-nonce: <32 bytes>:
 *                     { "version": 2, "chunks": [ { "seq", "final", "ciphertext" }, ... ] }
 *                     (plaintext = the concatenated chunks = the ordinary JSON body)
 *   stream answer     text/event-stream, same header, of sealed events `data: {"seq","final":false,"ciphertext"}`;
 *                     the plaintexts, concatenated, are the bytes of the ordinary event stream (split anywhere,
 *                     at most 256 KiB per frame); the stream ends with one more frame, final = true and
 *                     empty. A stream without it was truncated.
 *
 * Invariants: the sealing private key only opens (never leaves the caller); a request opens only for the
 * credential, path and second it was sealed for; each answer has its own response_nonce and so its own
 * response_key, even if one request were opened twice, so no two answers share a (key, chunk nonce) pair
 * and frames of one answer cannot be spliced into another; frames are opened strictly in order (chunks.ts
 * fails closed on reorder, replay, tampering and truncation).
 */
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { randomBytes } from "@noble/hashes/utils.js";
import { CanonicalBytes, checkedInteger } from "./canonical.ts";
import {
  ChunkOpener,
  ChunkSealer,
  CONSUMER_CHUNKS,
  chunkFromWire,
  chunkToWire,
  MAX_CHUNK_PLAINTEXT_BYTES,
  type WireChunk,
} from "./chunks.ts";
import { fromBase64url, toBase64url } from "./encoding.ts";
import { InvalidInputError, MalformedChunkError } from "./errors.ts";
import { AEAD_TAG_BYTES, type HpkeOptions, hpkeOpen, hpkeSeal, RESPONSE_KEY_BYTES, X25519_KEY_BYTES } from "./seal.ts";

export const SEALED_CONTENT_TYPE = "application/vnd.umbra.sealed+json";
const SEALED_VERSION = 2;
/** The envelope version that is refused by name (no credential or time binding). */
const RETIRED_SEALED_VERSION = 1;
const CONSUMER_INFO_TAG = "umbra-consumer-v2";
const CONSUMER_RESPONSE_TAG = "umbra-consumer-response-v2";
/** The response header that carries an answer's response_nonce (base64url, 32 bytes). */
export const RESPONSE_NONCE_HEADER = "x-umbra-response-nonce";
const RESPONSE_NONCE_BYTES = 32;
/** The request id the response frames bind (chunks.ts AAD); fixed, since the key is per answer. */
const CONSUMER_STREAM_ID = "consumer";
const MAX_PATH_BYTES = 256;
const DIGEST_BYTES = 32;

/** What a request's `info` binds: both sides must use the same three values. */
export interface ConsumerBinding {
  /** The request path, e.g. "/v1/chat/completions". */
  readonly path: string;
  /** The bearer credential exactly as sent after "Bearer " (an API key or a JWT). */
  readonly credential: string;
  /** When the consumer sealed, unix seconds (the envelope's `timestamp`). */
  readonly timestamp: number;
}

export interface SealedEnvelope {
  readonly version: number;
  readonly timestamp: number;
  readonly enc: string;
  readonly ciphertext: string;
}

export interface SealedBody {
  readonly version: number;
  readonly chunks: readonly WireChunk[];
}

/** The outcome of reading a request envelope: what to open, or which field is wrong and why. */
export type EnvelopeRead =
  | {
      readonly ok: true;
      readonly timestamp: number;
      readonly enc: Uint8Array;
      /** `enc` as sent (canonical base64url, so one spelling per value): the replay cache's key. */
      readonly encText: string;
      readonly ciphertext: Uint8Array;
    }
  | {
      readonly ok: false;
      readonly param: string;
      readonly message: string;
      /** missing: a field is absent; retired: version 1; invalid: anything else. */
      readonly problem: "missing" | "invalid" | "retired";
    };

/**
 * The `info` of a consumer request (layout in the file header).
 * @throws InvalidInputError for an empty or oversized path, an empty credential or a timestamp that is
 *   not an integer in [0, 2^53 - 1].
 */
export function consumerInfo(binding: ConsumerBinding): Uint8Array<ArrayBuffer> {
  if (typeof binding.credential !== "string" || binding.credential.length === 0) {
    throw new InvalidInputError("credential must be a non-empty string");
  }
  return CanonicalBytes.tagged(CONSUMER_INFO_TAG)
    .text("path", binding.path, MAX_PATH_BYTES)
    .bytes("credential", sha256(new TextEncoder().encode(binding.credential)), DIGEST_BYTES, true)
    .u64("timestamp", binding.timestamp)
    .finish();
}

/**
 * The key of one answer: HKDF-SHA256 of the request's exported secret, salted with the answer's nonce.
 * @throws InvalidInputError unless both are 32 bytes.
 */
export function consumerResponseKey(exported: Uint8Array, responseNonce: Uint8Array): Uint8Array {
  if (!(exported instanceof Uint8Array) || exported.byteLength !== RESPONSE_KEY_BYTES) {
    throw new InvalidInputError(`the exported secret must be ${RESPONSE_KEY_BYTES} bytes`);
  }
  if (!(responseNonce instanceof Uint8Array) || responseNonce.byteLength !== RESPONSE_NONCE_BYTES) {
    throw new InvalidInputError(`the response nonce must be ${RESPONSE_NONCE_BYTES} bytes`);
  }
  return hkdf(sha256, exported, responseNonce, CanonicalBytes.tagged(CONSUMER_RESPONSE_TAG).finish(), RESPONSE_KEY_BYTES);
}

/**
 * Consumer side: seal a body to the coordinator's sealing key for a binding.
 * @throws InvalidKeyError for a key that is not 32 bytes or a low-order point.
 * @throws InvalidInputError for a binding out of range (consumerInfo).
 */
export async function sealConsumerRequest(
  coordinatorKey: Uint8Array,
  body: Uint8Array,
  binding: ConsumerBinding,
  options: HpkeOptions = {},
): Promise<{ envelope: SealedEnvelope; answers: ConsumerAnswers }> {
  const sealed = await hpkeSeal(coordinatorKey, body, consumerInfo(binding), options);
  return {
    envelope: {
      version: SEALED_VERSION,
      timestamp: binding.timestamp,
      enc: toBase64url(sealed.enc),
      ciphertext: toBase64url(sealed.ciphertext),
    },
    answers: new ConsumerAnswers(sealed.responseKey),
  };
}

/** Coordinator side, before opening: checks the envelope's shape without throwing. */
export function readSealedEnvelope(value: unknown): EnvelopeRead {
  const fail = (param: string, message: string, problem: "missing" | "invalid" | "retired" = "invalid") => ({
    ok: false as const,
    param,
    message,
    problem,
  });
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return fail("body", "a sealed body must be a JSON object with version, timestamp, enc and ciphertext");
  }
  const envelope = value as Record<string, unknown>;
  if (envelope.version === undefined) return fail("version", "'version' is required", "missing");
  if (envelope.version === RETIRED_SEALED_VERSION) {
    return fail(
      "version",
      `sealed envelope version ${RETIRED_SEALED_VERSION} is no longer accepted: seal with version ${SEALED_VERSION} (docs/api.md, "Sealed transport")`,
      "retired",
    );
  }
  if (envelope.version !== SEALED_VERSION) return fail("version", `'version' must be ${SEALED_VERSION}`);
  if (envelope.timestamp === undefined) return fail("timestamp", "'timestamp' is required", "missing");
  const timestamp = envelope.timestamp;
  if (typeof timestamp !== "number" || !Number.isSafeInteger(timestamp) || timestamp < 0) {
    return fail("timestamp", "'timestamp' must be an integer number of seconds since the Unix epoch");
  }
  for (const field of ["enc", "ciphertext"] as const) {
    if (envelope[field] === undefined) return fail(field, `'${field}' is required`, "missing");
    if (typeof envelope[field] !== "string") return fail(field, `'${field}' must be a base64url string`);
  }
  const encText = envelope.enc as string;
  let enc: Uint8Array;
  let ciphertext: Uint8Array;
  try {
    enc = fromBase64url(encText, "enc");
  } catch {
    return fail("enc", "'enc' is not base64url");
  }
  if (enc.byteLength !== X25519_KEY_BYTES) return fail("enc", `'enc' must be ${X25519_KEY_BYTES} bytes`);
  try {
    ciphertext = fromBase64url(envelope.ciphertext as string, "ciphertext");
  } catch {
    return fail("ciphertext", "'ciphertext' is not base64url");
  }
  if (ciphertext.byteLength < AEAD_TAG_BYTES) return fail("ciphertext", "'ciphertext' is shorter than its authentication tag");
  return { ok: true, timestamp: checkedInteger("timestamp", timestamp, Number.MAX_SAFE_INTEGER), enc, encText, ciphertext };
}

/**
 * Coordinator side: open a consumer request. Call once per accepted request; each `sealer` it returns
 * (one per answer) picks its own response nonce.
 * @throws RequestOpenError when it does not open (wrong or rotated key, another path, credential or
 *   timestamp, tampering).
 * @throws InvalidInputError for a binding out of range (consumerInfo).
 */
export async function openConsumerRequest(
  sealingPrivateKey: Uint8Array,
  enc: Uint8Array,
  ciphertext: Uint8Array,
  binding: ConsumerBinding,
  options: HpkeOptions = {},
): Promise<{ plaintext: Uint8Array; sealer: ConsumerResponseSealer }> {
  const opened = await hpkeOpen(sealingPrivateKey, enc, ciphertext, consumerInfo(binding), options);
  return { plaintext: opened.plaintext, sealer: new ConsumerResponseSealer(opened.responseKey) };
}

/** Coordinator side: seals one answer, either as a whole JSON body or event by event, under its own key. */
export class ConsumerResponseSealer {
  /** The answer's response_nonce, base64url: send it as the RESPONSE_NONCE_HEADER header. */
  readonly responseNonce: string;
  private readonly sealer: ChunkSealer;

  /**
   * @param exported the request's exported secret (32 bytes).
   * @param nonce the answer's response_nonce; fresh random bytes unless given (golden vectors).
   * @throws InvalidInputError unless both are 32 bytes.
   */
  constructor(exported: Uint8Array, nonce: Uint8Array = randomBytes(RESPONSE_NONCE_BYTES)) {
    const responseKey = consumerResponseKey(exported, nonce);
    this.responseNonce = toBase64url(nonce);
    this.sealer = new ChunkSealer({ responseKey, requestId: CONSUMER_STREAM_ID, attempt: 0, suite: CONSUMER_CHUNKS });
  }

  /** The whole answer as the sealed JSON body (split into chunks of at most MAX_CHUNK_PLAINTEXT_BYTES). */
  body(plaintext: Uint8Array): SealedBody {
    const chunks: WireChunk[] = [];
    let offset = 0;
    do {
      const end = Math.min(offset + MAX_CHUNK_PLAINTEXT_BYTES, plaintext.byteLength);
      chunks.push(chunkToWire(this.sealer.seal(plaintext.subarray(offset, end), end === plaintext.byteLength)));
      offset = end;
    } while (offset < plaintext.byteLength);
    return { version: SEALED_VERSION, chunks };
  }

  /**
   * A piece of the ordinary event stream (SSE bytes, any split) as sealed events: one `data:` event per
   * frame of at most MAX_CHUNK_PLAINTEXT_BYTES.
   */
  stream(bytes: Uint8Array): string {
    let out = "";
    for (let offset = 0; offset < bytes.byteLength; offset += MAX_CHUNK_PLAINTEXT_BYTES) {
      const frame = this.sealer.seal(bytes.subarray(offset, offset + MAX_CHUNK_PLAINTEXT_BYTES), false);
      out += `data: ${JSON.stringify(chunkToWire(frame))}\n\n`;
    }
    return out;
  }

  /** The closing event of a stream: the final frame, empty. */
  end(): string {
    return `data: ${JSON.stringify(chunkToWire(this.sealer.seal(new Uint8Array(0), true)))}\n\n`;
  }
}

/** Consumer side: the secret of one sealed request, from which each answer's opener is made. */
class ConsumerAnswers {
  constructor(private readonly exported: Uint8Array) {}

  /**
   * The opener of the answer that carried `responseNonce` (the RESPONSE_NONCE_HEADER header, base64url).
   * @throws InvalidInputError when the nonce is missing, not base64url or not 32 bytes.
   */
  opener(responseNonce: string | null | undefined): ConsumerResponseOpener {
    if (typeof responseNonce !== "string") throw new InvalidInputError(`a sealed answer carries ${RESPONSE_NONCE_HEADER}`);
    return new ConsumerResponseOpener(consumerResponseKey(this.exported, fromBase64url(responseNonce, RESPONSE_NONCE_HEADER)));
  }
}

/** Consumer side: opens one answer to a sealed request. */
class ConsumerResponseOpener {
  private readonly opener: ChunkOpener;

  /** @param responseKey the answer's key (consumerResponseKey), not the exported secret. */
  constructor(responseKey: Uint8Array) {
    this.opener = new ChunkOpener({ responseKey, requestId: CONSUMER_STREAM_ID, attempt: 0, suite: CONSUMER_CHUNKS });
  }

  /**
   * The plaintext of a sealed JSON body.
   * @throws a CryptoError (chunks.ts) for a malformed, reordered, replayed, tampered or truncated body.
   */
  body(value: unknown): Uint8Array {
    const chunks = (value as Partial<SealedBody> | null)?.chunks;
    if (!Array.isArray(chunks)) throw new MalformedChunkError("a sealed body carries a chunks array");
    const parts = chunks.map((chunk) => this.opener.open(chunkFromWire(chunk)));
    this.opener.finish();
    return Buffer.concat(parts);
  }

  /**
   * The plaintext of one sealed event's data: bytes of the ordinary event stream (feed them to an SSE
   * parser), or null for the final, empty frame.
   * @throws a CryptoError as body().
   */
  stream(data: string): Uint8Array | null {
    let frame: unknown;
    try {
      frame = JSON.parse(data);
    } catch {
      throw new MalformedChunkError("a sealed event is not JSON");
    }
    const plaintext = this.opener.open(chunkFromWire(frame));
    return this.opener.finished ? null : plaintext;
  }

  /** Call when the stream ended. @throws TruncatedStreamError when the final frame never came. */
  finish(): void {
    this.opener.finish();
  }
}
