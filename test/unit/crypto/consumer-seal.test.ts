import { describe, expect, test } from "bun:test";
import { MAX_CHUNK_PLAINTEXT_BYTES } from "../../../src/crypto/chunks.ts";
import {
  consumerInfo,
  openConsumerRequest,
  readSealedEnvelope,
  type SealedBody,
  sealConsumerRequest,
} from "../../../src/crypto/consumer-seal.ts";
import { fromBase64url, toBase64url, toHex } from "../../../src/crypto/encoding.ts";
import { generateX25519KeyPair } from "../../../src/crypto/seal.ts";

const PATH = "/v1/chat/completions";

/** Flips one bit of a base64url ciphertext. */
function flip(text: string): string {
  const bytes = fromBase64url(text);
  bytes[0] = (bytes[0] as number) ^ 1;
  return toBase64url(bytes);
}

async function pair(body = new TextEncoder().encode('{"a":1}')) {
  const keys = await generateX25519KeyPair();
  const { envelope, opener } = await sealConsumerRequest(keys.publicKey, body, PATH);
  const read = readSealedEnvelope(envelope);
  if (!read.ok) throw new Error(read.message);
  const { plaintext, sealer } = await openConsumerRequest(keys.privateKey, read.enc, read.ciphertext, PATH);
  return { plaintext, sealer, opener };
}

describe("consumer sealing", () => {
  test("info layout: lp(tag) || lp(path)", () => {
    expect(toHex(consumerInfo("/x"))).toBe(
      `00000011${Buffer.from("umbra-consumer-v1").toString("hex")}00000002${Buffer.from("/x").toString("hex")}`,
    );
  });

  test("a body opens to its bytes and a JSON answer larger than one chunk round-trips in several", async () => {
    const { plaintext, sealer, opener } = await pair();
    expect(new TextDecoder().decode(plaintext)).toBe('{"a":1}');
    const big = new Uint8Array(MAX_CHUNK_PLAINTEXT_BYTES * 2 + 5).fill(7);
    const sealed = sealer.body(big);
    expect(sealed.chunks.map((c) => c.final)).toEqual([false, false, true]);
    expect(opener.body(JSON.parse(JSON.stringify(sealed)))).toEqual(big);
  });

  test("an empty answer is one final chunk", async () => {
    const { sealer, opener } = await pair();
    const sealed = sealer.body(new Uint8Array(0));
    expect(sealed.chunks.length).toBe(1);
    expect(opener.body(sealed).byteLength).toBe(0);
  });

  test.each<[string, (body: SealedBody) => unknown]>([
    ["reordered", (b) => ({ ...b, chunks: [b.chunks[1], b.chunks[0], b.chunks[2]] })],
    ["truncated", (b) => ({ ...b, chunks: b.chunks.slice(0, 2) })],
    ["replayed", (b) => ({ ...b, chunks: [b.chunks[0], b.chunks[0], b.chunks[1], b.chunks[2]] })],
    ["tampered", (b) => ({ ...b, chunks: b.chunks.map((c, i) => (i === 1 ? { ...c, ciphertext: flip(c.ciphertext) } : c)) })],
    ["not a body", () => ({ chunks: "no" })],
  ])("a %s JSON answer does not open", async (_, mangle) => {
    const { sealer, opener } = await pair();
    const sealed = sealer.body(new Uint8Array(MAX_CHUNK_PLAINTEXT_BYTES * 2 + 5).fill(1));
    expect(() => opener.body(mangle(sealed))).toThrow();
  });

  test("a stream opens frame by frame and a stream without its final frame is truncated", async () => {
    const { sealer, opener } = await pair();
    const events = [sealer.stream(new TextEncoder().encode("data: 1\n\n")), sealer.stream(new TextEncoder().encode("data: 2\n\n"))];
    const data = (sse: string) => sse.trim().slice("data: ".length);
    expect(new TextDecoder().decode(opener.stream(data(events[0] as string)) ?? new Uint8Array())).toBe("data: 1\n\n");
    expect(() => opener.finish()).toThrow();

    const second = await pair();
    const frames = [second.sealer.stream(new TextEncoder().encode("data: x\n\n")), second.sealer.end()].map(data);
    expect(second.opener.stream(frames[0] as string)).not.toBeNull();
    expect(second.opener.stream(frames[1] as string)).toBeNull();
    second.opener.finish();
    expect(() => second.opener.stream(frames[1] as string)).toThrow();
  });

  test("a frame of another request does not open (fresh key per request)", async () => {
    const a = await pair();
    const b = await pair();
    expect(() => b.opener.body(a.sealer.body(new Uint8Array(3)))).toThrow();
  });

  test("envelope shape checks name the field", () => {
    expect(readSealedEnvelope(null)).toMatchObject({ ok: false, param: "body" });
    expect(readSealedEnvelope({ version: 1, enc: "", ciphertext: "" })).toMatchObject({ ok: false, param: "enc" });
  });
});
