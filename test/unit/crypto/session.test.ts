/**
 * Session keys (src/crypto/session.ts): the independent vector (test/fixtures/crypto/session.json, Python
 * `cryptography`: the session secret, the one-way chain, the request keys), round trips between a sender
 * and a recipient session, the request counter (replay and reorder refused, gaps stepped over up to a
 * bound, a failed open moves nothing), and every binding field.
 */
import { describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { InvalidInputError, InvalidKeyError, RequestOpenError } from "../../../src/crypto/errors.ts";
import { generateX25519KeyPair } from "../../../src/crypto/seal.ts";
import {
  MAX_RATCHET_STEPS,
  openRecipientSession,
  openSenderSession,
  ratchetInfo,
  requestKeyInfo,
  SessionOpener,
  SessionSealer,
  sessionInfo,
} from "../../../src/crypto/session.ts";
import vector from "../../fixtures/crypto/session.json" with { type: "json" };

const fromHex = (h: string) => new Uint8Array(Buffer.from(h, "hex"));
const toHex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const text = (s: string) => new TextEncoder().encode(s);
const SESSION = { protocolVersion: 1, providerId: "prv_1" };
const binding = (requestId = "req_1", attempt = 0) => ({ protocolVersion: 1, requestId, attempt });

async function pair() {
  const keys = await generateX25519KeyPair();
  const sender = await openSenderSession(keys.publicKey, SESSION);
  const opener = await openRecipientSession(keys.privateKey, sender.enc, SESSION);
  return { keys, sender, opener };
}

describe("session keys: independent vector", () => {
  test("session info, ratchet info and request key info bytes", () => {
    expect(toHex(sessionInfo(vector.binding))).toBe(vector.info);
    for (const r of [...vector.requests, ...vector.edges]) {
      expect(toHex(ratchetInfo(r.n))).toBe(r.ratchetInfo);
      expect(toHex(requestKeyInfo(r.n, r.binding))).toBe(r.requestKeyInfo);
    }
  });

  test("the recipient opens the vector's session and every request (stepping over 3 and 4), with its response keys", async () => {
    const opener = await openRecipientSession(fromHex(vector.recipientPrivateKey), fromHex(vector.enc), vector.binding);
    for (const r of vector.requests) {
      const opened = opener.open(r.n, fromHex(r.ciphertext), r.binding);
      expect(toHex(opened.plaintext)).toBe(r.plaintext);
      expect(toHex(opened.responseKey)).toBe(r.responseKey);
    }
  });

  test("a sealer with the vector's secret produces the vector's ciphertexts for n = 1, 2", () => {
    const sealer = new SessionSealer(fromHex(vector.sessionSecret));
    for (const r of vector.requests.slice(0, 2)) {
      const sealed = sealer.seal(fromHex(r.plaintext), r.binding);
      expect(sealed.n).toBe(r.n);
      expect(toHex(sealed.ciphertext)).toBe(r.ciphertext);
      expect(toHex(sealed.responseKey)).toBe(r.responseKey);
    }
  });
});

describe("session keys: round trips and the counter", () => {
  test("requests open in order with the sender's response keys; n counts from 1", async () => {
    const { sender, opener } = await pair();
    for (let i = 1; i <= 5; i++) {
      const sealed = sender.sealer.seal(text(`request ${i}`), binding(`req_${i}`));
      expect(sealed.n).toBe(i);
      const opened = opener.open(sealed.n, sealed.ciphertext, binding(`req_${i}`));
      expect(new TextDecoder().decode(opened.plaintext)).toBe(`request ${i}`);
      expect(opened.responseKey).toEqual(sealed.responseKey);
    }
    expect([sender.sealer.counter, opener.counter]).toEqual([5, 5]);
  });

  test("each request gets its own keys: same plaintext and ids under n and n + 1 differ", async () => {
    const { sender } = await pair();
    const a = sender.sealer.seal(text("same"), binding());
    const b = sender.sealer.seal(text("same"), binding());
    expect(toHex(a.ciphertext)).not.toBe(toHex(b.ciphertext));
    expect(toHex(a.responseKey)).not.toBe(toHex(b.responseKey));
  });

  test("an opener that skipped requests opens later ones like one that saw them all", async () => {
    const { keys, sender, opener } = await pair();
    const skipping = await openRecipientSession(keys.privateKey, sender.enc, SESSION);
    const sealed = [1, 2, 3, 4].map((i) => sender.sealer.seal(text(`r${i}`), binding(`req_${i}`)));
    for (const [i, x] of sealed.entries()) opener.open(x.n, x.ciphertext, binding(`req_${i + 1}`));
    const last = sealed[3] as (typeof sealed)[number];
    expect(skipping.open(last.n, last.ciphertext, binding("req_4")).responseKey).toEqual(last.responseKey);
    expect([opener.counter, skipping.counter]).toEqual([4, 4]);
  });

  test(`a request more than ${MAX_RATCHET_STEPS} steps ahead is refused and moves nothing`, async () => {
    const { opener } = await pair();
    expect(() => opener.open(MAX_RATCHET_STEPS + 1, new Uint8Array(32), binding())).toThrow(RequestOpenError);
    expect(opener.counter).toBe(0);
  });

  test("a replayed or reordered n is refused; gaps are allowed", async () => {
    const { sender, opener } = await pair();
    const one = sender.sealer.seal(text("one"), binding("req_a"));
    const two = sender.sealer.seal(text("two"), binding("req_b"));
    const three = sender.sealer.seal(text("three"), binding("req_c"));
    opener.open(two.n, two.ciphertext, binding("req_b")); // one was never delivered: a gap
    expect(() => opener.open(one.n, one.ciphertext, binding("req_a"))).toThrow(RequestOpenError);
    expect(() => opener.open(two.n, two.ciphertext, binding("req_b"))).toThrow(RequestOpenError);
    expect(opener.open(three.n, three.ciphertext, binding("req_c")).plaintext).toEqual(text("three"));
  });

  test("a request that does not open leaves the counter where it was", async () => {
    const { sender, opener } = await pair();
    const sealed = sender.sealer.seal(text("x"), binding());
    const tampered = sealed.ciphertext.slice();
    tampered[0] = (tampered[0] as number) ^ 1;
    expect(() => opener.open(sealed.n, tampered, binding())).toThrow(RequestOpenError);
    expect(opener.counter).toBe(0);
    expect(opener.open(sealed.n, sealed.ciphertext, binding()).plaintext).toEqual(text("x"));
  });

  test("every bound field matters: request id, attempt, protocol version, n, the session", async () => {
    const { keys, sender, opener } = await pair();
    const sealed = sender.sealer.seal(text("x"), binding("req_1", 1));
    const other = await openRecipientSession(keys.privateKey, (await openSenderSession(keys.publicKey, SESSION)).enc, SESSION);
    const otherProvider = await openRecipientSession(keys.privateKey, sender.enc, { protocolVersion: 1, providerId: "prv_2" });
    const wrong: [SessionOpener, number, ReturnType<typeof binding>][] = [
      [opener, sealed.n, binding("req_2", 1)],
      [opener, sealed.n, binding("req_1", 2)],
      [opener, sealed.n, { protocolVersion: 2, requestId: "req_1", attempt: 1 }],
      [opener, sealed.n + 1, binding("req_1", 1)],
      [other, sealed.n, binding("req_1", 1)],
      [otherProvider, sealed.n, binding("req_1", 1)],
    ];
    for (const [o, n, b] of wrong) expect(() => o.open(n, sealed.ciphertext, b)).toThrow(RequestOpenError);
    expect(opener.open(sealed.n, sealed.ciphertext, binding("req_1", 1)).plaintext).toEqual(text("x"));
  });

  test("bad inputs are typed errors", async () => {
    const { opener } = await pair();
    expect(() => opener.open(0, new Uint8Array(16), binding())).toThrow(InvalidInputError);
    expect(() => opener.open(1.5, new Uint8Array(16), binding())).toThrow(InvalidInputError);
    expect(() => opener.open(1, new Uint8Array(15), binding())).toThrow(InvalidInputError);
    expect(() => new SessionSealer(new Uint8Array(31))).toThrow(InvalidKeyError);
    expect(() => new SessionOpener(new Uint8Array(33))).toThrow(InvalidKeyError);
    expect(() => requestKeyInfo(0, binding())).toThrow(InvalidInputError);
    expect(() => ratchetInfo(0)).toThrow(InvalidInputError);
    await expect(openSenderSession(new Uint8Array(31), SESSION)).rejects.toBeInstanceOf(InvalidKeyError);
    // A low-order recipient key (all zeros) gives an all-zero shared secret: refused.
    await expect(openSenderSession(new Uint8Array(32), SESSION)).rejects.toBeInstanceOf(InvalidKeyError);
    await expect(openRecipientSession(randomBytes(32), new Uint8Array(32), SESSION)).rejects.toBeInstanceOf(RequestOpenError);
  });
});
