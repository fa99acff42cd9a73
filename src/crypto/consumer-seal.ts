/**
 * Sealed transport for consumers (optional per request): the consumer seals a request body with HPKE to
 * the coordinator's attested sealing key (GET /v1/attestation, `sealing_public_key`), the coordinator opens
 * it in memory and seals the answer back under a key exported from the same HPKE context: the JSON body
 * as numbered chunks, an event stream event by event. docs/api.md documents it for clients.
 *
 * Steps (consumer, sealConsumerRequest):
 *   1. info = lp("umbra-consumer-v1") || lp(UTF-8(path))      e.g. path "/v1/chat/completions"
 *   2. enc, ciphertext, responseKey = hpkeSeal(sealing key, body bytes, info)  (seal.ts: base mode, empty
 *      AAD, responseKey = Export("umbra response", 32))
 *   3. POST path with content-type application/vnd.umbra.sealed+json and the envelope below.
 * Steps (coordinator): open the envelope with the sealing private key under the same info; any failure
 * before that is a plain 400; after it, every answer (success or error envelope) is sealed back.
 * Response chunks are chunks.ts frames under binding { responseKey, requestId: "consumer", attempt: 0 } in
 * the CONSUMER_CHUNKS suite: ChaCha20-Poly1305, nonce from seq, AAD (tag "umbra-chunk-v1") binding seq
 * and final; the last frame has final = true.
 *
 * Wire format (base64url unpadded):
 *   request envelope  { "version": 1, "enc": <32 bytes>, "ciphertext": <sealed body> }
 *   JSON answer       content-type application/vnd.umbra.sealed+json, HTTP status unchanged:
 *                     { "version": 1, "chunks": [ { "seq", "final", "ciphertext" }, ... ] }
 *                     (plaintext = the concatenated chunks = the ordinary JSON body)
 *   stream answer     text/event-stream of sealed events `data: {"seq","final":false,"ciphertext"}`; the
 *                     plaintexts, concatenated, are the bytes of the ordinary event stream (split anywhere,
 *                     at most 256 KiB per frame); the stream ends with one more frame, final = true and
 *                     empty. A stream without it was truncated.
 *
 * Invariants: the sealing private key only opens (never leaves the caller); one fresh response key per
 * request (fresh ephemeral key), so frames of one answer cannot be spliced into another; frames are opened
 * strictly in order (chunks.ts fails closed on reorder, replay, tampering and truncation).
 */
import { CanonicalBytes } from "./canonical.ts";
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
import { MalformedChunkError } from "./errors.ts";
import { AEAD_TAG_BYTES, hpkeOpen, hpkeSeal, type KemOptions, X25519_KEY_BYTES } from "./seal.ts";

export const SEALED_CONTENT_TYPE = "application/vnd.umbra.sealed+json";
export const SEALED_VERSION = 1;
export const CONSUMER_INFO_TAG = "umbra-consumer-v1";
/** The request id the response frames bind (chunks.ts AAD); fixed, since the key is per request. */
export const CONSUMER_STREAM_ID = "consumer";
const MAX_PATH_BYTES = 256;

export interface SealedEnvelope {
  readonly version: number;
  readonly enc: string;
  readonly ciphertext: string;
}

export interface SealedBody {
  readonly version: number;
  readonly chunks: readonly WireChunk[];
}

/** The outcome of reading a request envelope: bytes to open, or which field is wrong and why. */
export type EnvelopeRead =
  | { readonly ok: true; readonly enc: Uint8Array; readonly ciphertext: Uint8Array }
  | { readonly ok: false; readonly param: string; readonly message: string; readonly missing: boolean };

/** The `info` of a consumer request to `path`. @throws InvalidInputError for an empty or oversized path. */
export function consumerInfo(path: string): Uint8Array<ArrayBuffer> {
  return CanonicalBytes.tagged(CONSUMER_INFO_TAG).text("path", path, MAX_PATH_BYTES).finish();
}

/**
 * Consumer side: seal a body to the coordinator's sealing key for `path`.
 * @throws InvalidKeyError for a key that is not 32 bytes or a low-order point.
 */
export async function sealConsumerRequest(
  coordinatorKey: Uint8Array,
  body: Uint8Array,
  path: string,
  options: KemOptions = {},
): Promise<{ envelope: SealedEnvelope; opener: ConsumerResponseOpener }> {
  const sealed = await hpkeSeal(coordinatorKey, body, consumerInfo(path), options);
  return {
    envelope: { version: SEALED_VERSION, enc: toBase64url(sealed.enc), ciphertext: toBase64url(sealed.ciphertext) },
    opener: new ConsumerResponseOpener(sealed.responseKey),
  };
}

/** Coordinator side, before opening: checks the envelope's shape without throwing. */
export function readSealedEnvelope(value: unknown): EnvelopeRead {
  const fail = (param: string, message: string, missing = false) => ({ ok: false as const, param, message, missing });
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return fail("body", "a sealed body must be a JSON object with version, enc and ciphertext");
  }
  const envelope = value as Record<string, unknown>;
  if (envelope.version === undefined) return fail("version", "'version' is required", true);
  if (envelope.version !== SEALED_VERSION) return fail("version", `'version' must be ${SEALED_VERSION}`);
  for (const field of ["enc", "ciphertext"] as const) {
    if (envelope[field] === undefined) return fail(field, `'${field}' is required`, true);
    if (typeof envelope[field] !== "string") return fail(field, `'${field}' must be a base64url string`);
  }
  let enc: Uint8Array;
  let ciphertext: Uint8Array;
  try {
    enc = fromBase64url(envelope.enc as string, "enc");
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
  return { ok: true, enc, ciphertext };
}

/**
 * Coordinator side: open a consumer request.
 * @throws RequestOpenError when it does not open (wrong or rotated key, other path, tampering).
 */
export async function openConsumerRequest(
  sealingPrivateKey: Uint8Array,
  enc: Uint8Array,
  ciphertext: Uint8Array,
  path: string,
  options: KemOptions = {},
): Promise<{ plaintext: Uint8Array; sealer: ConsumerResponseSealer }> {
  const opened = await hpkeOpen(sealingPrivateKey, enc, ciphertext, consumerInfo(path), options);
  return { plaintext: opened.plaintext, sealer: new ConsumerResponseSealer(opened.responseKey) };
}

/** Coordinator side: seals one answer, either as a whole JSON body or event by event. */
export class ConsumerResponseSealer {
  private readonly sealer: ChunkSealer;

  constructor(responseKey: Uint8Array) {
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

/** Consumer side: opens the answer to one sealed request. */
export class ConsumerResponseOpener {
  private readonly opener: ChunkOpener;

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
