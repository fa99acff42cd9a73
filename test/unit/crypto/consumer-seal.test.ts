/**
 * The consumer sealed transport, version 2 (src/crypto/consumer-seal.ts): consumer.json is an independent
 * Python implementation of the documented layout (test/fixtures/crypto/generate.py); the rest checks the
 * bindings (credential, path, timestamp), the envelope reader, and that every answer has its own key.
 */
import { describe, expect, test } from "bun:test";
import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import { CanonicalBytes } from "../../../src/crypto/canonical.ts";
import { CONSUMER_CHUNKS, chunkAad, chunkNonce, MAX_CHUNK_PLAINTEXT_BYTES } from "../../../src/crypto/chunks.ts";
import {
  type ConsumerBinding,
  ConsumerResponseSealer,
  consumerInfo,
  consumerResponseKey,
  openConsumerRequest,
  readSealedEnvelope,
  type SealedBody,
  sealConsumerRequest,
} from "../../../src/crypto/consumer-seal.ts";
import { fromBase64url, fromHex, toBase64url, toHex } from "../../../src/crypto/encoding.ts";
import { generateX25519KeyPair, HPKE_SUITE, hpkeSeal } from "../../../src/crypto/seal.ts";
import vector from "../../fixtures/crypto/consumer.json" with { type: "json" };

const BINDING: ConsumerBinding = { path: "/v1/chat/completions", credential: "sk-umbra-test-credential", timestamp: 1_767_225_600 };
const utf8 = (text: string) => new TextEncoder().encode(text);

/** Flips one bit of a base64url ciphertext. */
function flip(text: string): string {
  const bytes = fromBase64url(text);
  bytes[0] = (bytes[0] as number) ^ 1;
  return toBase64url(bytes);
}

function read(envelope: unknown) {
  const result = readSealedEnvelope(envelope);
  if (!result.ok) throw new Error(result.message);
  return result;
}

async function pair(body = utf8('{"a":1}'), binding = BINDING) {
  const keys = await generateX25519KeyPair();
  const { envelope, answers } = await sealConsumerRequest(keys.publicKey, body, binding);
  const r = read(envelope);
  const { plaintext, sealer } = await openConsumerRequest(keys.privateKey, r.enc, r.ciphertext, binding);
  return { keys, envelope, plaintext, sealer, answers, opener: answers.opener(sealer.responseNonce) };
}

describe("golden vector (consumer.json, independent implementation)", () => {
  const skR = fromHex(vector.recipientPrivateKey);
  const envelope = vector.envelope;

  test("info = lp(tag) || lp(path) || lp(SHA-256(credential)) || u64(timestamp)", () => {
    expect([consumerInfo(vector.binding), ...vector.infos.map((c) => consumerInfo(c.binding))].map(toHex)).toEqual([
      vector.info,
      ...vector.infos.map((c) => c.info),
    ]);
    expect(vector.info).toContain(vector.credentialSha256);
  });

  test("the consumer side reproduces the envelope from the fixed ephemeral key", async () => {
    const suite = HPKE_SUITE;
    const sender = await suite.createSenderContext({
      recipientPublicKey: await suite.kem.deserializePublicKey(fromHex(vector.recipientPublicKey)),
      info: consumerInfo(vector.binding),
      ekm: fromHex(vector.ikmE),
    });
    const got = {
      version: 2,
      timestamp: vector.binding.timestamp,
      enc: toBase64url(new Uint8Array(sender.enc)),
      ciphertext: toBase64url(new Uint8Array(await sender.seal(fromHex(vector.plaintext), new Uint8Array(0)))),
    };
    expect(got).toEqual(envelope);
    expect(toHex(new Uint8Array(await sender.export(utf8("umbra response"), 32)))).toBe(vector.exported);
  });

  test("the coordinator opens it and seals each answer, under its nonce, to the vector's bytes", async () => {
    const r = read(envelope);
    const opened = await openConsumerRequest(skR, r.enc, r.ciphertext, vector.binding);
    expect(toHex(opened.plaintext)).toBe(vector.plaintext);
    const sealed = vector.answers.map((answer) => {
      const sealer = new ConsumerResponseSealer(fromHex(vector.exported), fromBase64url(answer.responseNonce));
      return { responseNonce: sealer.responseNonce, body: sealer.body(fromHex(vector.answerPlaintext)) };
    });
    expect(sealed).toEqual(vector.answers.map(({ responseNonce, body }) => ({ responseNonce, body })));
    expect(vector.answers.map((a) => toHex(consumerResponseKey(fromHex(vector.exported), fromBase64url(a.responseNonce))))).toEqual(
      vector.answers.map((a) => a.responseKey),
    );
  });

  test("the chunk under the answer's key is plain ChaCha20-Poly1305 (nonce and AAD as documented)", () => {
    const [answer] = vector.answers;
    if (!answer) throw new Error("no answer in the vector");
    const chunk = answer.body.chunks[0] as { seq: number; final: boolean; ciphertext: string };
    const aad = chunkAad("consumer", 0, chunk.seq, chunk.final, CONSUMER_CHUNKS);
    const plaintext = chacha20poly1305(fromHex(answer.responseKey), chunkNonce(chunk.seq), aad).decrypt(fromBase64url(chunk.ciphertext));
    expect(toHex(plaintext)).toBe(vector.answerPlaintext);
  });

  test("the response tag is the canonical lp(tag)", () => {
    expect(toHex(CanonicalBytes.tagged("umbra-consumer-response-v2").finish())).toBe(
      `0000001a${Buffer.from("umbra-consumer-response-v2").toString("hex")}`,
    );
  });
});

describe("bindings: a request opens only for its credential, path and timestamp", () => {
  test.each<[string, Partial<ConsumerBinding>]>([
    ["another credential", { credential: "sk-umbra-attacker" }],
    ["the credential with one more character", { credential: `${BINDING.credential}x` }],
    ["another path", { path: "/v1/completions" }],
    ["another timestamp (one second later)", { timestamp: BINDING.timestamp + 1 }],
  ])("%s does not open", async (_, change) => {
    const keys = await generateX25519KeyPair();
    const { envelope } = await sealConsumerRequest(keys.publicKey, utf8("{}"), BINDING);
    const r = read(envelope);
    await expect(openConsumerRequest(keys.privateKey, r.enc, r.ciphertext, { ...BINDING, ...change })).rejects.toMatchObject({
      code: "request_open_failed",
    });
    // The same envelope opens under its own binding.
    expect((await openConsumerRequest(keys.privateKey, r.enc, r.ciphertext, BINDING)).plaintext).toEqual(utf8("{}"));
  });

  test("a version 1 seal (info without credential and time) does not open as version 2", async () => {
    const keys = await generateX25519KeyPair();
    const v1Info = CanonicalBytes.tagged("umbra-consumer-v1").text("path", BINDING.path, 256).finish();
    const sealed = await hpkeSeal(keys.publicKey, utf8("{}"), v1Info);
    await expect(openConsumerRequest(keys.privateKey, sealed.enc, sealed.ciphertext, BINDING)).rejects.toMatchObject({
      code: "request_open_failed",
    });
  });

  test("an empty credential or a timestamp out of range is refused before sealing", () => {
    expect(() => consumerInfo({ ...BINDING, credential: "" })).toThrow("credential");
    expect(() => consumerInfo({ ...BINDING, timestamp: -1 })).toThrow("timestamp");
    expect(() => consumerInfo({ ...BINDING, timestamp: 1.5 })).toThrow("timestamp");
  });
});

describe("answers: every answer has its own key", () => {
  test("a body opens to its bytes and a JSON answer larger than one chunk round-trips in several", async () => {
    const { plaintext, sealer, opener } = await pair();
    expect(new TextDecoder().decode(plaintext)).toBe('{"a":1}');
    const big = new Uint8Array(MAX_CHUNK_PLAINTEXT_BYTES * 2 + 5).fill(7);
    const sealed = sealer.body(big);
    expect(sealed.chunks.map((c) => c.final)).toEqual([false, false, true]);
    expect(sealed.version).toBe(2);
    expect(opener.body(JSON.parse(JSON.stringify(sealed)))).toEqual(big);
  });

  test("two answers to one request, even if it were opened twice, never share a key or a keystream", async () => {
    // The vector's request, whose exported secret is known: opened twice, as a replay that got through would be.
    const r = read(vector.envelope);
    const skR = fromHex(vector.recipientPrivateKey);
    const opened = [
      await openConsumerRequest(skR, r.enc, r.ciphertext, vector.binding),
      await openConsumerRequest(skR, r.enc, r.ciphertext, vector.binding),
    ];
    const nonces = opened.map((o) => o.sealer.responseNonce);
    const keys = nonces.map((n) => toHex(consumerResponseKey(fromHex(vector.exported), fromBase64url(n))));
    expect([new Set(nonces).size, new Set(keys).size]).toEqual([2, 2]);

    // The same known answer (a 403 text, say) sealed for both: the ciphertexts' XOR is not the plaintexts' XOR
    // (zero here), so one answer's text does not reveal the other's.
    const known = utf8(`{"error":{"message":"${"x".repeat(200)}"}}`);
    const [a, b] = opened.map((o) => fromBase64url(o.sealer.body(known).chunks[0]?.ciphertext ?? ""));
    const xor = (a as Uint8Array).subarray(0, known.byteLength).map((byte, i) => byte ^ ((b as Uint8Array)[i] as number));
    expect(xor.every((byte) => byte === 0)).toBe(false);
  });

  test("response keys: a function of the exported secret and the nonce, distinct for distinct nonces", () => {
    const exported = fromHex(vector.exported);
    const nonces = [new Uint8Array(32), new Uint8Array(32).fill(1), crypto.getRandomValues(new Uint8Array(32))];
    const keys = nonces.map((n) => toHex(consumerResponseKey(exported, n)));
    expect(new Set(keys).size).toBe(3);
    expect(toHex(consumerResponseKey(exported, nonces[0] as Uint8Array))).toBe(keys[0] as string);
    expect(() => consumerResponseKey(exported, new Uint8Array(31))).toThrow("32 bytes");
  });

  test("an answer sealed for another response nonce does not open", async () => {
    const { sealer, answers } = await pair();
    const body = sealer.body(utf8('{"ok":true}'));
    const other = new ConsumerResponseSealer(new Uint8Array(32)).responseNonce;
    expect(() => answers.opener(other).body(body)).toThrow();
    expect(answers.opener(sealer.responseNonce).body(body)).toEqual(utf8('{"ok":true}'));
  });

  test("a missing or malformed response nonce is refused by name", async () => {
    const { answers } = await pair();
    expect(() => answers.opener(null)).toThrow("x-umbra-response-nonce");
    expect(() => answers.opener("***")).toThrow("x-umbra-response-nonce");
    expect(() => answers.opener(toBase64url(new Uint8Array(16)))).toThrow("32 bytes");
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
    const events = [sealer.stream(utf8("data: 1\n\n")), sealer.stream(utf8("data: 2\n\n"))];
    const data = (sse: string) => sse.trim().slice("data: ".length);
    expect(new TextDecoder().decode(opener.stream(data(events[0] as string)) ?? new Uint8Array())).toBe("data: 1\n\n");
    expect(() => opener.finish()).toThrow();

    const second = await pair();
    const frames = [second.sealer.stream(utf8("data: x\n\n")), second.sealer.end()].map(data);
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
});

describe("envelope reader", () => {
  const good = {
    version: 2,
    timestamp: 1_767_225_600,
    enc: toBase64url(new Uint8Array(32).fill(9)),
    ciphertext: toBase64url(new Uint8Array(16)),
  };
  const problem = (value: unknown) => {
    const r = readSealedEnvelope(value);
    return r.ok ? "ok" : `${r.problem}:${r.param}`;
  };

  test.each<[string, string, unknown]>([
    ["a good envelope", "ok", good],
    ["null", "invalid:body", null],
    ["no version", "missing:version", { ...good, version: undefined }],
    ["version 1 (retired)", "retired:version", { ...good, version: 1 }],
    ["version 3", "invalid:version", { ...good, version: 3 }],
    ["no timestamp", "missing:timestamp", { ...good, timestamp: undefined }],
    ["a string timestamp", "invalid:timestamp", { ...good, timestamp: "1767225600" }],
    ["a fractional timestamp", "invalid:timestamp", { ...good, timestamp: 1.5 }],
    ["a negative timestamp", "invalid:timestamp", { ...good, timestamp: -1 }],
    ["a timestamp beyond 2^53", "invalid:timestamp", { ...good, timestamp: 2 ** 53 }],
    ["no enc", "missing:enc", { ...good, enc: undefined }],
    ["enc 31 bytes", "invalid:enc", { ...good, enc: toBase64url(new Uint8Array(31)) }],
    ["enc padded", "invalid:enc", { ...good, enc: `${good.enc}=` }],
    ["no ciphertext", "missing:ciphertext", { ...good, ciphertext: undefined }],
    ["ciphertext shorter than a tag", "invalid:ciphertext", { ...good, ciphertext: toBase64url(new Uint8Array(15)) }],
  ])("%s -> %s", (_, expected, value) => {
    expect(problem(value)).toBe(expected);
  });

  test("a good envelope reads to its bytes, its timestamp and enc as sent", () => {
    expect(readSealedEnvelope(good)).toEqual({
      ok: true,
      timestamp: good.timestamp,
      enc: fromBase64url(good.enc),
      encText: good.enc,
      ciphertext: fromBase64url(good.ciphertext),
    });
  });

  test("version 1 is refused with a message that says to use version 2", () => {
    expect(readSealedEnvelope({ version: 1, enc: "x", ciphertext: "y" })).toEqual({
      ok: false,
      param: "version",
      problem: "retired",
      message: 'sealed envelope version 1 is no longer accepted: seal with version 2 (docs/api.md, "Sealed transport")',
    });
  });
});
