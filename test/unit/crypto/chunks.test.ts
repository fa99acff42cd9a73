/**
 * Response chunk framing (src/crypto/chunks.ts): nonce and AAD golden bytes, @noble/ciphers against
 * RFC 8439, fixed chunk streams of both suites (test/fixtures/crypto/chunks.json: the provider hop,
 * AES-256-GCM; consumer-chunks.json: the consumer transport, ChaCha20-Poly1305; both from an independent
 * Python implementation) under the response key of the request vector, the JSON wire form, the HPKE -> chunk
 * hand-off, and a negative test for every check: reordered, replayed, truncated, after final, plaintext,
 * tampered, wrong key or binding, oversized, malformed, and fail-closed behaviour after a violation.
 */
import { describe, expect, test } from "bun:test";
import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import {
  type ChunkBinding,
  type ChunkFrame,
  ChunkOpener,
  ChunkSealer,
  CONSUMER_CHUNKS,
  chunkAad,
  chunkFromWire,
  chunkNonce,
  chunkToWire,
  MAX_CHUNK_CIPHERTEXT_BYTES,
  MAX_CHUNK_PLAINTEXT_BYTES,
} from "../../../src/crypto/chunks.ts";
import { fromHex, toBase64url, toHex } from "../../../src/crypto/encoding.ts";
import {
  ChunkAfterFinalError,
  ChunkAuthenticationError,
  InvalidInputError,
  InvalidKeyError,
  MalformedChunkError,
  OversizedChunkError,
  PlaintextChunkError,
  ReorderedChunkError,
  ReplayedChunkError,
  TruncatedStreamError,
} from "../../../src/crypto/errors.ts";
import { generateX25519KeyPair, openRequest, sealRequest } from "../../../src/crypto/seal.ts";
import vector from "../../fixtures/crypto/chunks.json" with { type: "json" };
import consumerVector from "../../fixtures/crypto/consumer-chunks.json" with { type: "json" };
import rfc from "../../fixtures/crypto/rfc8439_aead.json" with { type: "json" };

const binding: ChunkBinding = { responseKey: fromHex(vector.responseKey), requestId: vector.requestId, attempt: vector.attempt };
const frames: ChunkFrame[] = vector.stream.map((c) => ({ seq: c.seq, final: c.final, ciphertext: fromHex(c.ciphertext) }));
const plaintexts = vector.stream.map((c) => fromHex(c.plaintext));
const [f0, f1, f2, f3] = frames as [ChunkFrame, ChunkFrame, ChunkFrame, ChunkFrame];
const utf8 = (text: string) => new TextEncoder().encode(text);

function flipped(bytes: Uint8Array, bit: number): Uint8Array {
  const copy = bytes.slice();
  copy[bit >> 3]! ^= 1 << (bit & 7);
  return copy;
}

function thrown(call: () => unknown): unknown {
  try {
    call();
  } catch (error) {
    return error;
  }
  return undefined;
}

/** Opens frames in order; returns the plaintexts, or the error class name of the first failure. */
function run(opener: ChunkOpener, sequence: ChunkFrame[]): string[] {
  const out: string[] = [];
  for (const frame of sequence) {
    try {
      out.push(toHex(opener.open(frame)));
    } catch (error) {
      out.push((error as Error).name);
      break;
    }
  }
  return out;
}

describe("nonce and AAD", () => {
  test.each(vector.nonces)("nonce of seq $seq", ({ seq, nonce }) => {
    expect(toHex(chunkNonce(seq))).toBe(nonce);
  });

  test.each(vector.aads)("AAD of $requestId attempt $attempt seq $seq final $final", ({ requestId, attempt, seq, final, aad }) => {
    expect(toHex(chunkAad(requestId, attempt, seq, final))).toBe(aad);
  });

  test.each([-1, 0.5, 2 ** 53])("refuses seq %p", (seq) => {
    expect(() => chunkNonce(seq)).toThrow(InvalidInputError);
    expect(() => chunkAad("req", 0, seq, false)).toThrow(InvalidInputError);
  });
});

test("@noble/ciphers ChaCha20-Poly1305 matches RFC 8439 section 2.8.2", () => {
  const sealed = chacha20poly1305(fromHex(rfc.key), fromHex(rfc.nonce), fromHex(rfc.aad)).encrypt(fromHex(rfc.plaintext));
  expect(toHex(sealed)).toBe(rfc.ciphertext);
});

describe("the fixed stream (chunks.json)", () => {
  test("the sealer produces exactly the golden frames", () => {
    const sealer = new ChunkSealer(binding);
    const sealed = vector.stream.map((c) => sealer.seal(fromHex(c.plaintext), c.final));
    expect(sealed).toEqual(frames);
    expect([sealer.nextSeq, sealer.finished]).toEqual([4, true]);
  });

  test("each golden ciphertext is AES-256-GCM under the documented nonce and AAD", () => {
    for (const c of vector.stream) {
      expect(toHex(chunkNonce(c.seq))).toBe(c.nonce);
      expect(toHex(chunkAad(vector.requestId, vector.attempt, c.seq, c.final))).toBe(c.aad);
    }
  });

  test("the opener returns the plaintexts and finishes", () => {
    const opener = new ChunkOpener(binding);
    expect(frames.map((f) => opener.open(f))).toEqual(plaintexts);
    expect(() => opener.finish()).not.toThrow();
    expect([opener.nextSeq, opener.finished]).toEqual([4, true]);
  });

  test("the JSON wire form round-trips", () => {
    const wire = frames.map(chunkToWire);
    expect(wire[0]).toEqual({ seq: 0, final: false, ciphertext: toBase64url(f0.ciphertext) });
    expect(JSON.parse(JSON.stringify(wire)).map(chunkFromWire)).toEqual(frames);
  });
});

describe("the consumer suite's fixed stream (consumer-chunks.json)", () => {
  const consumer: ChunkBinding = { ...binding, suite: CONSUMER_CHUNKS };
  const consumerFrames = consumerVector.stream.map((c) => ({ seq: c.seq, final: c.final, ciphertext: fromHex(c.ciphertext) }));

  test.each(consumerVector.aads)("AAD of $requestId attempt $attempt seq $seq final $final", ({ requestId, attempt, seq, final, aad }) => {
    expect(toHex(chunkAad(requestId, attempt, seq, final, CONSUMER_CHUNKS))).toBe(aad);
  });

  test("the sealer produces exactly the golden frames and the opener returns the plaintexts", () => {
    const sealer = new ChunkSealer(consumer);
    expect(consumerVector.stream.map((c) => sealer.seal(fromHex(c.plaintext), c.final))).toEqual(consumerFrames);
    const opener = new ChunkOpener(consumer);
    expect(consumerFrames.map((f) => opener.open(f))).toEqual(consumerVector.stream.map((c) => fromHex(c.plaintext)));
    opener.finish();
  });

  test("the two suites do not open each other's frames", () => {
    expect(thrown(() => new ChunkOpener(consumer).open(f0))).toBeInstanceOf(ChunkAuthenticationError);
    expect(thrown(() => new ChunkOpener(binding).open(consumerFrames[0] as ChunkFrame))).toBeInstanceOf(ChunkAuthenticationError);
  });
});

test("HPKE hand-off: the provider's chunks open with the coordinator's response key", async () => {
  const keys = await generateX25519KeyPair();
  const ids = { protocolVersion: 1, requestId: "req_handoff", attempt: 1 };
  const sealed = await sealRequest(keys.publicKey, utf8("{}"), ids);
  const { responseKey } = await openRequest(keys.privateKey, sealed.enc, sealed.ciphertext, ids);
  const sealer = new ChunkSealer({ responseKey, requestId: ids.requestId, attempt: ids.attempt });
  const opener = new ChunkOpener({ responseKey: sealed.responseKey, requestId: ids.requestId, attempt: ids.attempt });
  const texts = ["a", "bc", ""];
  const out = texts.map((t, i) => opener.open(sealer.seal(utf8(t), i === texts.length - 1)));
  opener.finish();
  expect(out).toEqual(texts.map(utf8));
});

describe("the opener refuses", () => {
  test.each([
    ["a gap (0, 2)", [f0, f2], [toHex(plaintexts[0]!), ReorderedChunkError.name]],
    ["a swap (0, 2, 1)", [f0, f2, f1], [toHex(plaintexts[0]!), ReorderedChunkError.name]],
    ["a stream that starts at 1", [f1], [ReorderedChunkError.name]],
    ["a replayed chunk (0, 1, 1)", [f0, f1, f1], [toHex(plaintexts[0]!), toHex(plaintexts[1]!), ReplayedChunkError.name]],
    ["a replayed first chunk (0, 0)", [f0, f0], [toHex(plaintexts[0]!), ReplayedChunkError.name]],
    ["the final chunk replayed", [f0, f1, f2, f3, f3], [...plaintexts.map(toHex), ChunkAfterFinalError.name]],
  ] as const)("%s", (_name, sequence, expected) => {
    expect(run(new ChunkOpener(binding), [...sequence])).toEqual([...expected]);
  });

  test("truncation: finish() without the final chunk", () => {
    const opener = new ChunkOpener(binding);
    opener.open(f0);
    opener.open(f1);
    opener.open(f2);
    expect(() => opener.finish()).toThrow(TruncatedStreamError);
  });

  test("truncation: finish() with no chunk at all", () => {
    expect(() => new ChunkOpener(binding).finish()).toThrow(TruncatedStreamError);
  });

  test("a new, validly sealed frame after the final one", () => {
    // A provider that keeps sealing past its final chunk (its own sealer refuses; forge the frame).
    const seq = 4;
    const ciphertext = chacha20poly1305(
      binding.responseKey,
      chunkNonce(seq),
      chunkAad(vector.requestId, vector.attempt, seq, false),
    ).encrypt(utf8("more"));
    expect(run(new ChunkOpener(binding), [...frames, { seq, final: false, ciphertext }]).at(-1)).toBe(ChunkAfterFinalError.name);
  });

  test.each([
    ["no ciphertext field", { seq: 0, final: false }],
    ["a string ciphertext", { seq: 0, final: false, ciphertext: "Hello" }],
    ["a plaintext delta instead", { seq: 0, final: false, delta: { content: "Hello" } }],
    ["a ciphertext shorter than the tag", { seq: 0, final: false, ciphertext: f0.ciphertext.subarray(0, 15) }],
    ["an empty ciphertext", { seq: 0, final: false, ciphertext: new Uint8Array(0) }],
  ])("a plaintext frame: %s", (_name, frame) => {
    expect(() => new ChunkOpener(binding).open(frame as unknown as ChunkFrame)).toThrow(PlaintextChunkError);
  });

  test.each([
    ["first byte", 0],
    ["last ciphertext bit", 8 * 3 - 1],
    ["first tag bit", 8 * 3],
    ["last tag bit", 8 * (3 + 16) - 1],
  ])("a tampered ciphertext (%s)", (_name, bit) => {
    expect(() => new ChunkOpener(binding).open({ ...f0, ciphertext: flipped(f0.ciphertext, bit) })).toThrow(ChunkAuthenticationError);
  });

  test("a flipped final flag (a non-final chunk claimed final, and the reverse)", () => {
    expect(() => new ChunkOpener(binding).open({ ...f0, final: true })).toThrow(ChunkAuthenticationError);
    const opener = new ChunkOpener(binding);
    for (const f of [f0, f1, f2]) opener.open(f);
    expect(() => opener.open({ ...f3, final: false })).toThrow(ChunkAuthenticationError);
  });

  test("a chunk moved to another position (seq rewritten to match)", () => {
    const opener = new ChunkOpener(binding);
    opener.open(f0);
    expect(() => opener.open({ ...f2, seq: 1 })).toThrow(ChunkAuthenticationError);
  });

  test.each([
    ["another response key", { ...binding, responseKey: flipped(binding.responseKey, 0) }],
    ["another request id", { ...binding, requestId: `${binding.requestId}x` }],
    ["another attempt", { ...binding, attempt: binding.attempt + 1 }],
  ])("a stream opened with %s", (_name, other) => {
    expect(() => new ChunkOpener(other).open(f0)).toThrow(ChunkAuthenticationError);
  });

  test("an oversized ciphertext, before decrypting it", () => {
    const ciphertext = new Uint8Array(MAX_CHUNK_CIPHERTEXT_BYTES + 1);
    expect(() => new ChunkOpener(binding).open({ seq: 0, final: true, ciphertext })).toThrow(OversizedChunkError);
  });

  test.each([
    ["a negative seq", { ...f0, seq: -1 }],
    ["a fractional seq", { ...f0, seq: 0.5 }],
    ["a string seq", { ...f0, seq: "0" }],
    ["seq 2^53", { ...f0, seq: 2 ** 53 }],
    ["a string final flag", { ...f0, final: "false" }],
    ["no final flag", { seq: 0, ciphertext: f0.ciphertext }],
  ])("a malformed frame: %s", (_name, frame) => {
    expect(() => new ChunkOpener(binding).open(frame as unknown as ChunkFrame)).toThrow(MalformedChunkError);
  });

  test("fail closed: after a violation, a valid frame and finish() throw the same error", () => {
    const opener = new ChunkOpener(binding);
    opener.open(f0);
    const first = thrown(() => opener.open(f2));
    expect(first).toBeInstanceOf(ReorderedChunkError);
    expect([thrown(() => opener.open(f1)), thrown(() => opener.finish()), opener.nextSeq]).toEqual([first, first, 1]);
    expect(thrown(() => opener.open(f1))).toBe(first);
  });

  test("a tampered frame does not advance the stream", () => {
    const opener = new ChunkOpener(binding);
    expect(() => opener.open({ ...f0, ciphertext: flipped(f0.ciphertext, 0) })).toThrow(ChunkAuthenticationError);
    expect(opener.nextSeq).toBe(0);
  });

  test("a response key of 31 bytes", () => {
    expect(() => new ChunkOpener({ ...binding, responseKey: binding.responseKey.subarray(1) })).toThrow(InvalidKeyError);
  });
});

describe("the sealer refuses", () => {
  test("a chunk after the final one", () => {
    const sealer = new ChunkSealer(binding);
    sealer.seal(utf8("last"), true);
    expect(() => sealer.seal(utf8("more"), false)).toThrow(ChunkAfterFinalError);
  });

  test("an oversized plaintext; the largest allowed chunk round-trips", () => {
    expect(() => new ChunkSealer(binding).seal(new Uint8Array(MAX_CHUNK_PLAINTEXT_BYTES + 1), true)).toThrow(OversizedChunkError);
    const largest = new Uint8Array(MAX_CHUNK_PLAINTEXT_BYTES).fill(7);
    const frame = new ChunkSealer(binding).seal(largest, true);
    expect(frame.ciphertext.byteLength).toBe(MAX_CHUNK_CIPHERTEXT_BYTES);
    expect(new ChunkOpener(binding).open(frame)).toEqual(largest);
  });

  test.each([
    ["a string plaintext", () => new ChunkSealer(binding).seal("x" as unknown as Uint8Array, false), InvalidInputError],
    ["a non-boolean final flag", () => new ChunkSealer(binding).seal(utf8("x"), 1 as unknown as boolean), InvalidInputError],
    ["a response key of 33 bytes", () => new ChunkSealer({ ...binding, responseKey: new Uint8Array(33) }), InvalidKeyError],
    ["an empty request id", () => new ChunkSealer({ ...binding, requestId: "" }), InvalidInputError],
    ["a negative attempt", () => new ChunkSealer({ ...binding, attempt: -1 }), InvalidInputError],
  ] as const)("%s", (_name, call, errorClass) => {
    expect(call).toThrow(errorClass);
  });
});

describe("chunkFromWire refuses", () => {
  test.each([
    ["a plaintext delta frame", { seq: 0, final: false, delta: { content: "Hello" } }, PlaintextChunkError],
    ["plaintext in the ciphertext field", { seq: 0, final: false, ciphertext: "Hello, world!" }, PlaintextChunkError],
    ["padded base64", { seq: 0, final: false, ciphertext: `${toBase64url(f0.ciphertext)}=` }, PlaintextChunkError],
    ["a ciphertext shorter than the tag", { seq: 0, final: false, ciphertext: "AAAA" }, PlaintextChunkError],
    [
      "an oversized ciphertext",
      { seq: 0, final: false, ciphertext: "A".repeat(Math.ceil((MAX_CHUNK_CIPHERTEXT_BYTES * 4) / 3) + 4) },
      OversizedChunkError,
    ],
    ["a missing seq", { final: false, ciphertext: toBase64url(f0.ciphertext) }, MalformedChunkError],
    ["a non-object", "chunk", MalformedChunkError],
    ["null", null, MalformedChunkError],
  ] as const)("%s", (_name, value, errorClass) => {
    expect(() => chunkFromWire(value)).toThrow(errorClass);
  });
});
