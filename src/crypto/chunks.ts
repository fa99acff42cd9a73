/**
 * Response chunk framing, provider -> coordinator: each chunk of the answer is sealed with an AEAD under
 * the response key both sides derived for the request (session keys, session.ts; or the request's own HPKE
 * context, seal.ts), numbered, with a final flag, so that reordering, replay, truncation and tampering are all detected by the coordinator.
 *
 * Two suites share the framing (ChunkSuite):
 *   PROVIDER_CHUNKS  the provider hop: AES-256-GCM (node:crypto, native), AAD tag "umbra-chunk-v2". One
 *                    open per relayed chunk on the coordinator's hot path, far cheaper than the pure-JS
 *                    ChaCha20-Poly1305 it replaced (figures: bench/HISTORY.md, stream relay).
 *   CONSUMER_CHUNKS  the consumer sealed transport (consumer-seal.ts, docs/api.md): ChaCha20-Poly1305
 *                    (@noble/ciphers), AAD tag "umbra-chunk-v1", unchanged for clients.
 *
 * Steps (provider, ChunkSealer.seal): seq = number of chunks sealed so far (0, 1, 2, ...);
 *   ciphertext = AEAD(key = responseKey, nonce = chunkNonce(seq),
 *                     aad = chunkAad(requestId, attempt, seq, final, suite), plaintext)
 * Steps (coordinator, ChunkOpener.open): refuse anything after the final chunk; check the frame's shape and
 * size; require seq == the next expected seq (lower: replay, higher: reordered); decrypt with the same
 * nonce and AAD; after the last frame, finish() throws unless the final chunk was seen (truncation).
 *
 * Wire format (all integers unsigned big-endian; lp(x) = u32(len(x)) || x; canonical.ts):
 *   nonce      = 12 bytes: 00 00 00 00 || u64(seq)          e.g. seq 1 -> 000000000000000000000001
 *   aad        = lp(suite tag) || lp(UTF-8(requestId)) || u32(attempt) || u64(seq) || u8(final ? 1 : 0)
 *   ciphertext = encrypted plaintext (same length) || 16-byte tag (GCM or Poly1305)
 *   frame      = { seq, final, ciphertext } in memory; { seq, final, ciphertext: base64url } in JSON
 *                (chunkToWire / chunkFromWire)
 *
 * Invariants:
 * - The response key is unique per attempt (a fresh request counter under the session's secret, or a fresh
 *   HPKE ephemeral key) and, on the consumer transport, per answer (a fresh random response nonce in its
 *   derivation, consumer-seal.ts), and seq strictly increases under it,
 *   so no (key, nonce) pair is ever used twice. seq is at most 2^53 - 1.
 * - seq and final are authenticated twice over (nonce and AAD); request id and attempt through the AAD.
 * - A chunk's plaintext is at most MAX_CHUNK_PLAINTEXT_BYTES; the final chunk may be empty.
 * - Fail closed: the first violation an opener sees is final; every later open() or finish() throws the
 *   same error. A sealer refuses to seal after its final chunk.
 */
import { createCipheriv, createDecipheriv, createSecretKey, type KeyObject } from "node:crypto";
import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import { CanonicalBytes, writeU64 } from "./canonical.ts";
import { fromBase64url, toBase64url } from "./encoding.ts";
import {
  ChunkAfterFinalError,
  ChunkAuthenticationError,
  type CryptoError,
  InvalidInputError,
  InvalidKeyError,
  MalformedChunkError,
  OversizedChunkError,
  PlaintextChunkError,
  ReorderedChunkError,
  ReplayedChunkError,
  TruncatedStreamError,
} from "./errors.ts";
import { AEAD_TAG_BYTES, MAX_REQUEST_ID_BYTES, RESPONSE_KEY_BYTES } from "./seal.ts";

/** An AEAD and the AAD tag that names the construction. */
export interface ChunkSuite {
  readonly tag: string;
  readonly aead: "aes-256-gcm" | "chacha20-poly1305";
}

/** The provider hop (the default). */
const PROVIDER_CHUNKS: ChunkSuite = Object.freeze({ tag: "umbra-chunk-v2", aead: "aes-256-gcm" });
/** The consumer sealed transport. */
export const CONSUMER_CHUNKS: ChunkSuite = Object.freeze({ tag: "umbra-chunk-v1", aead: "chacha20-poly1305" });
const CHUNK_NONCE_BYTES = 12;
const GCM_OPTIONS = Object.freeze({ authTagLength: AEAD_TAG_BYTES });
/** Largest chunk plaintext: 256 KiB (its base64url ciphertext stays well under the 1 MiB frame limit). */
export const MAX_CHUNK_PLAINTEXT_BYTES = 256 * 1024;
export const MAX_CHUNK_CIPHERTEXT_BYTES = MAX_CHUNK_PLAINTEXT_BYTES + AEAD_TAG_BYTES;
const MAX_CHUNK_SEQ = Number.MAX_SAFE_INTEGER;

/** The stream a chunk belongs to: the response key of one attempt and the ids it binds. */
export interface ChunkBinding {
  readonly responseKey: Uint8Array;
  readonly requestId: string;
  readonly attempt: number;
  /** PROVIDER_CHUNKS when absent. */
  readonly suite?: ChunkSuite;
}

export interface ChunkFrame {
  readonly seq: number;
  readonly final: boolean;
  readonly ciphertext: Uint8Array;
}

/** A chunk frame as carried in JSON: the ciphertext in unpadded base64url. */
export interface WireChunk {
  readonly seq: number;
  readonly final: boolean;
  readonly ciphertext: string;
}

/**
 * The 12-byte nonce of chunk `seq`: four zero bytes, then seq as a big-endian u64.
 * @throws InvalidInputError unless seq is an integer in [0, 2^53 - 1].
 */
export function chunkNonce(seq: number): Uint8Array {
  const nonce = new Uint8Array(CHUNK_NONCE_BYTES);
  writeU64(nonce, 4, checkedSeq(seq));
  return nonce;
}

/**
 * The AAD of a chunk (layout in the file header).
 * @throws InvalidInputError when a field is out of range.
 */
export function chunkAad(
  requestId: string,
  attempt: number,
  seq: number,
  final: boolean,
  suite: ChunkSuite = PROVIDER_CHUNKS,
): Uint8Array<ArrayBuffer> {
  return CanonicalBytes.tagged(suite.tag)
    .text("requestId", requestId, MAX_REQUEST_ID_BYTES)
    .u32("attempt", attempt)
    .u64("seq", seq)
    .flag("final", final)
    .finish();
}

/**
 * Shared by sealer and opener: the key, and the nonce and AAD buffers of the stream, rewritten in place
 * for each chunk (the AEAD copies both before the call returns), so a chunk costs the cipher and its
 * output, not a nonce, an AAD and a cipher wrapper each.
 */
class ChunkStream {
  protected readonly key: Uint8Array;
  private readonly gcmKey: KeyObject | undefined;
  private readonly nonce = new Uint8Array(CHUNK_NONCE_BYTES);
  /** aadPrefix || u64(seq) || u8(final): the prefix is fixed for the stream. */
  private readonly aad: Uint8Array;
  protected seq = 0;
  protected ended = false;

  constructor(binding: ChunkBinding) {
    if (!(binding.responseKey instanceof Uint8Array) || binding.responseKey.byteLength !== RESPONSE_KEY_BYTES) {
      throw new InvalidKeyError(`response key must be ${RESPONSE_KEY_BYTES} bytes`);
    }
    const suite = binding.suite ?? PROVIDER_CHUNKS;
    this.key = binding.responseKey.slice();
    this.gcmKey = suite.aead === "aes-256-gcm" ? createSecretKey(this.key) : undefined;
    // Chunk 0's AAD; bind() rewrites its last 9 bytes (seq and final) for each chunk.
    this.aad = CanonicalBytes.tagged(suite.tag)
      .text("requestId", binding.requestId, MAX_REQUEST_ID_BYTES)
      .u32("attempt", binding.attempt)
      .u64("seq", 0)
      .flag("final", false)
      .finish();
  }

  /** Sequence number of the next chunk. */
  get nextSeq(): number {
    return this.seq;
  }

  /** True once the final chunk has been sealed (sealer) or opened (opener). */
  get finished(): boolean {
    return this.ended;
  }

  /** Points the nonce and the AAD at chunk `seq` (layouts in the file header). */
  private bind(seq: number, final: boolean): void {
    writeU64(this.nonce, 4, seq);
    writeU64(this.aad, this.aad.byteLength - 9, seq);
    this.aad[this.aad.byteLength - 1] = final ? 1 : 0;
  }

  /** ciphertext || tag of chunk `seq`. */
  protected encrypt(seq: number, final: boolean, plaintext: Uint8Array): Uint8Array {
    this.bind(seq, final);
    if (!this.gcmKey) return chacha20poly1305(this.key, this.nonce, this.aad).encrypt(plaintext);
    const c = createCipheriv("aes-256-gcm", this.gcmKey, this.nonce, GCM_OPTIONS);
    c.setAAD(this.aad);
    const body = c.update(plaintext);
    c.final(); // GCM holds nothing back: the whole ciphertext came out of update
    const out = new Uint8Array(body.byteLength + AEAD_TAG_BYTES);
    out.set(body, 0);
    out.set(c.getAuthTag(), body.byteLength);
    return out;
  }

  /** The plaintext of chunk `seq`; throws when authentication fails. */
  protected decrypt(seq: number, final: boolean, ciphertext: Uint8Array): Uint8Array {
    this.bind(seq, final);
    if (!this.gcmKey) return chacha20poly1305(this.key, this.nonce, this.aad).decrypt(ciphertext);
    const end = ciphertext.byteLength - AEAD_TAG_BYTES;
    const d = createDecipheriv("aes-256-gcm", this.gcmKey, this.nonce, GCM_OPTIONS);
    d.setAAD(this.aad);
    d.setAuthTag(ciphertext.subarray(end));
    const body = d.update(ciphertext.subarray(0, end));
    d.final(); // throws when the tag does not match; GCM holds nothing back
    return body;
  }
}

/** Provider side: seals the chunks of one attempt, numbering them from 0. */
export class ChunkSealer extends ChunkStream {
  /**
   * Seal the next chunk; `final` marks the last one (it may be empty).
   * @throws ChunkAfterFinalError after the final chunk.
   * @throws OversizedChunkError when plaintext exceeds MAX_CHUNK_PLAINTEXT_BYTES.
   * @throws InvalidInputError when plaintext is not bytes, final is not a boolean, or seq would overflow.
   */
  seal(plaintext: Uint8Array, final: boolean): ChunkFrame {
    if (this.ended) throw new ChunkAfterFinalError("the final chunk was already sealed");
    if (!(plaintext instanceof Uint8Array)) throw new InvalidInputError("chunk plaintext must be bytes");
    if (typeof final !== "boolean") throw new InvalidInputError("final must be a boolean");
    if (plaintext.byteLength > MAX_CHUNK_PLAINTEXT_BYTES) {
      throw new OversizedChunkError(`chunk plaintext exceeds ${MAX_CHUNK_PLAINTEXT_BYTES} bytes`);
    }
    const seq = checkedSeq(this.seq);
    const ciphertext = this.encrypt(seq, final, plaintext);
    this.seq = seq + 1;
    this.ended = final;
    return { seq, final, ciphertext };
  }
}

/** Coordinator side: opens the chunks of one attempt in order and checks the stream is complete. */
export class ChunkOpener extends ChunkStream {
  private failure: CryptoError | undefined;

  /**
   * Open the next frame and return its plaintext.
   * @throws ChunkAfterFinalError for any frame after the final one.
   * @throws PlaintextChunkError when the frame carries no ciphertext bytes, or fewer than the 16-byte tag.
   * @throws MalformedChunkError when seq is not an integer in [0, 2^53 - 1] or final is not a boolean.
   * @throws OversizedChunkError when the ciphertext exceeds MAX_CHUNK_CIPHERTEXT_BYTES.
   * @throws ReplayedChunkError when seq is below the next expected one.
   * @throws ReorderedChunkError when seq is above the next expected one.
   * @throws ChunkAuthenticationError when authentication fails (tampering, wrong key, wrong binding).
   * After any of these, every later call throws the same error.
   */
  open(frame: ChunkFrame): Uint8Array {
    if (this.failure !== undefined) throw this.failure;
    try {
      return this.openChecked(frame);
    } catch (error) {
      this.failure = error as CryptoError;
      throw error;
    }
  }

  /**
   * Call when the provider says the stream is over (or it ended): checks the final chunk was opened.
   * @throws TruncatedStreamError when no final chunk was seen; the stored error after a violation.
   */
  finish(): void {
    if (this.failure !== undefined) throw this.failure;
    if (!this.ended) {
      this.failure = new TruncatedStreamError(`stream ended after ${this.seq} chunks without a final chunk`);
      throw this.failure;
    }
  }

  private openChecked(frame: ChunkFrame): Uint8Array {
    if (this.ended) throw new ChunkAfterFinalError("frame received after the final chunk");
    if (typeof frame !== "object" || frame === null) throw new MalformedChunkError("chunk frame must be an object");
    const { seq, final, ciphertext } = frame;
    checkFrameFields(seq, final, ciphertext);
    if (seq < this.seq) throw new ReplayedChunkError(`chunk ${seq} was already received (next is ${this.seq})`);
    if (seq > this.seq) throw new ReorderedChunkError(`chunk ${seq} received, expected ${this.seq}`);
    let plaintext: Uint8Array;
    try {
      plaintext = this.decrypt(seq, final, ciphertext);
    } catch {
      throw new ChunkAuthenticationError(`chunk ${seq} failed authentication`);
    }
    this.seq = seq + 1;
    this.ended = final;
    return plaintext;
  }
}

/** In-memory frame -> JSON form. */
export function chunkToWire(frame: ChunkFrame): WireChunk {
  return { seq: frame.seq, final: frame.final, ciphertext: toBase64url(frame.ciphertext) };
}

/**
 * JSON form -> in-memory frame, with the same shape checks as ChunkOpener.open (which still checks order
 * and authenticity).
 * @throws PlaintextChunkError when there is no base64url ciphertext (e.g. a plaintext `delta` instead).
 * @throws MalformedChunkError when seq or final is missing or mistyped.
 * @throws OversizedChunkError when the ciphertext exceeds MAX_CHUNK_CIPHERTEXT_BYTES.
 */
export function chunkFromWire(value: unknown): ChunkFrame {
  if (typeof value !== "object" || value === null) throw new MalformedChunkError("chunk frame must be an object");
  const wire = value as Partial<Record<keyof WireChunk, unknown>>;
  if (typeof wire.ciphertext !== "string") throw new PlaintextChunkError("chunk frame carries no ciphertext");
  // Bound the text before decoding it: 4 base64url characters per 3 bytes.
  if (wire.ciphertext.length > Math.ceil((MAX_CHUNK_CIPHERTEXT_BYTES * 4) / 3)) {
    throw new OversizedChunkError(`chunk ciphertext exceeds ${MAX_CHUNK_CIPHERTEXT_BYTES} bytes`);
  }
  let ciphertext: Uint8Array;
  try {
    ciphertext = fromBase64url(wire.ciphertext, "ciphertext");
  } catch {
    throw new PlaintextChunkError("chunk ciphertext is not base64url");
  }
  checkFrameFields(wire.seq, wire.final, ciphertext);
  return { seq: wire.seq as number, final: wire.final as boolean, ciphertext };
}

/** The shape checks of a frame's fields (layout and limits in the file header); throws the matching CryptoError. */
function checkFrameFields(seq: unknown, final: unknown, ciphertext: unknown): void {
  if (!(ciphertext instanceof Uint8Array)) throw new PlaintextChunkError("chunk frame carries no ciphertext bytes");
  if (ciphertext.byteLength < AEAD_TAG_BYTES) throw new PlaintextChunkError("chunk ciphertext is shorter than its tag");
  if (ciphertext.byteLength > MAX_CHUNK_CIPHERTEXT_BYTES) {
    throw new OversizedChunkError(`chunk ciphertext exceeds ${MAX_CHUNK_CIPHERTEXT_BYTES} bytes`);
  }
  if (typeof seq !== "number" || !Number.isInteger(seq) || seq < 0 || seq > MAX_CHUNK_SEQ) {
    throw new MalformedChunkError("chunk seq must be an integer in [0, 2^53 - 1]");
  }
  if (typeof final !== "boolean") throw new MalformedChunkError("chunk final must be a boolean");
}

function checkedSeq(seq: number): number {
  if (!Number.isInteger(seq) || seq < 0 || seq > MAX_CHUNK_SEQ) {
    throw new InvalidInputError("chunk seq must be an integer in [0, 2^53 - 1]");
  }
  return seq;
}
