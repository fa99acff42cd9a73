/**
 * The node:crypto primitives plugged into @hpke/core (src/crypto/hpke-native.ts, seal.ts's "native" suite):
 * RFC 9180 A.2.1 and the Umbra vector (test/fixtures/crypto), byte-for-byte equality with the webcrypto and
 * noble suites for the same ephemeral key (the library's `ekm` test hook) and for the raw HKDF operations,
 * round trips across suites, and the refusals: low-order keys (InvalidKeyError), wrong key, tampering and
 * other bindings (RequestOpenError), keys of another suite.
 */
import { describe, expect, test } from "bun:test";
import { HkdfSha256 } from "@hpke/core";
import { fromHex, toBase64url, toHex } from "../../../src/crypto/encoding.ts";
import { InvalidKeyError, RequestOpenError } from "../../../src/crypto/errors.ts";
import { NativeDhkemX25519HkdfSha256, NativeHkdfSha256, NativeX25519Key } from "../../../src/crypto/hpke-native.ts";
import {
  generateX25519KeyPair,
  openRequest,
  type RequestBinding,
  requestInfo,
  sealRequest,
  x25519PublicKey,
} from "../../../src/crypto/seal.ts";
import vector from "../../fixtures/crypto/request.json" with { type: "json" };
import rfc from "../../fixtures/crypto/rfc9180_a21.json" with { type: "json" };
import { HPKE_SUITES, type KemImplementation } from "../../support/hpke-suites.ts";

const binding: RequestBinding = vector.binding;
const skR = fromHex(vector.recipientPrivateKey);
const pkR = fromHex(vector.recipientPublicKey);
const enc = fromHex(vector.enc);
const ciphertext = fromHex(vector.ciphertext);
const utf8 = (text: string) => new TextEncoder().encode(text);
const random = (n: number) => crypto.getRandomValues(new Uint8Array(n));
const hex = (buffer: ArrayBuffer) => toHex(new Uint8Array(buffer));
const native = HPKE_SUITES.native;

/** Everything a sender produces from a fixed ephemeral key: enc, two messages, two exports. */
async function senderTranscript(kem: KemImplementation, ikmE: Uint8Array, recipient: Uint8Array, info: Uint8Array, pt: Uint8Array) {
  const suite = HPKE_SUITES[kem];
  const sender = await suite.createSenderContext({
    recipientPublicKey: await suite.kem.deserializePublicKey(recipient),
    info,
    ekm: ikmE,
  });
  return {
    enc: hex(sender.enc),
    ct0: hex(await sender.seal(pt, new Uint8Array(0))),
    ct1: hex(await sender.seal(pt, utf8("aad 1"))),
    responseKey: hex(await sender.export(utf8("umbra response"), 32)),
    export100: hex(await sender.export(new Uint8Array(0), 100)),
  };
}

describe("the native suite against fixed vectors", () => {
  test("RFC 9180 A.2.1: DeriveKeyPair, Encap with the fixed ephemeral key, Seal 0 and 1, Export", async () => {
    const recipient = await native.kem.deriveKeyPair(fromHex(rfc.ikmR));
    const sender = await native.createSenderContext({
      recipientPublicKey: await native.kem.deserializePublicKey(fromHex(rfc.pkRm)),
      info: fromHex(rfc.info),
      ekm: fromHex(rfc.ikmE),
    });
    const got = {
      skRm: hex(await native.kem.serializePrivateKey(recipient.privateKey)),
      pkRm: hex(await native.kem.serializePublicKey(recipient.publicKey)),
      enc: hex(sender.enc),
      ct0: hex(await sender.seal(fromHex(rfc.pt), fromHex(rfc.aad0))),
      ct1: hex(await sender.seal(fromHex(rfc.pt), fromHex(rfc.aad1))),
      exports: await Promise.all(rfc.exports.map(async ([context]) => [context, hex(await sender.export(fromHex(context!), 32))])),
    };
    expect(got).toEqual({ skRm: rfc.skRm, pkRm: rfc.pkRm, enc: rfc.enc, ct0: rfc.ct0, ct1: rfc.ct1, exports: rfc.exports });
  });

  test("RFC 9180 A.2.1, recipient side: Decap and Open of messages 0 and 1", async () => {
    const recipient = await native.createRecipientContext({
      recipientKey: await native.kem.deserializePrivateKey(fromHex(rfc.skRm)),
      enc: fromHex(rfc.enc),
      info: fromHex(rfc.info),
    });
    expect(hex(await recipient.open(fromHex(rfc.ct0), fromHex(rfc.aad0)))).toBe(rfc.pt);
    expect(hex(await recipient.open(fromHex(rfc.ct1), fromHex(rfc.aad1)))).toBe(rfc.pt);
  });

  test("Umbra vector (request.json): open, and reproduce the sender side from ikmE", async () => {
    expect(await openRequest(skR, enc, ciphertext, binding, { suite: HPKE_SUITES.native })).toEqual({
      plaintext: fromHex(vector.plaintext),
      responseKey: fromHex(vector.responseKey),
    });
    const got = await senderTranscript("native", fromHex(vector.ikmE), pkR, requestInfo(binding), fromHex(vector.plaintext));
    expect([got.enc, got.ct0, got.responseKey]).toEqual([vector.enc, vector.ciphertext, vector.responseKey]);
  });

  test("RFC 5869 test case 3 (empty salt and info): Extract, Expand and ExtractAndExpand", async () => {
    const kdf = new NativeHkdfSha256();
    const ikm = new Uint8Array(22).fill(0x0b);
    const prk = "19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04";
    const okm = "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8";
    expect(hex(await kdf.extract(new Uint8Array(0), ikm))).toBe(prk);
    expect(hex(await kdf.expand(fromHex(prk), new Uint8Array(0), 42))).toBe(okm);
    expect(hex(await kdf.extractAndExpand(new Uint8Array(0), ikm, new Uint8Array(0), 42))).toBe(okm);
  });
});

describe("byte-for-byte equal to the other suites", () => {
  test.each(["webcrypto", "noble"] as const)("same ephemeral key, recipient, info and plaintext as %s: same transcript", async (other) => {
    for (const size of [0, 1, 63, 4096]) {
      const ikmE = random(32);
      const recipient = x25519PublicKey(random(32));
      const info = requestInfo({ protocolVersion: 1, requestId: `req_${size}`, attempt: size % 3 });
      const pt = random(size);
      expect(await senderTranscript("native", ikmE, recipient, info, pt)).toEqual(await senderTranscript(other, ikmE, recipient, info, pt));
    }
  });

  test("the same key pair from DeriveKeyPair as webcrypto, for random ikm", async () => {
    const webcrypto = HPKE_SUITES.webcrypto;
    for (let i = 0; i < 8; i++) {
      const ikm = random(32 + i);
      const [a, b] = await Promise.all([native.kem.deriveKeyPair(ikm), webcrypto.kem.deriveKeyPair(ikm)]);
      expect([hex(await native.kem.serializePrivateKey(a.privateKey)), hex(await native.kem.serializePublicKey(a.publicKey))]).toEqual([
        hex(await webcrypto.kem.serializePrivateKey(b.privateKey)),
        hex(await webcrypto.kem.serializePublicKey(b.publicKey)),
      ]);
    }
  });

  test("HKDF operations equal the library's WebCrypto HkdfSha256 (including info over hkdfSync's 1,024 bytes)", async () => {
    const mine = new NativeHkdfSha256();
    const theirs = new HkdfSha256();
    const suiteId = utf8("HPKE\u0000\u0020\u0000\u0001\u0000\u0003");
    mine.init(suiteId);
    theirs.init(suiteId);
    for (const [infoBytes, len] of [
      [0, 32],
      [65, 12],
      [100, 64],
      [1024, 32],
      [1025, 32],
      [3000, 96],
    ] as const) {
      const salt = random(32);
      const ikm = random(48);
      const info = random(infoBytes);
      const prk = random(32);
      expect(hex(await mine.extract(salt, ikm))).toBe(hex(await theirs.extract(salt, ikm)));
      expect(hex(await mine.extract(new Uint8Array(0), ikm))).toBe(hex(await theirs.extract(new Uint8Array(0), ikm)));
      expect(hex(await mine.expand(prk, info, len))).toBe(hex(await theirs.expand(prk, info, len)));
      // WebCrypto's HKDF, like hkdfSync, refuses an info over 1,024 bytes: compare with the library's Extract + Expand.
      const expected =
        infoBytes > 1024
          ? await theirs.expand(await theirs.extract(salt, ikm), info, len)
          : await theirs.extractAndExpand(salt, ikm, info, len);
      expect(hex(await mine.extractAndExpand(salt, ikm, info, len))).toBe(hex(expected));
      expect(hex(await mine.labeledExpand(prk, utf8("sec"), info, len))).toBe(hex(await theirs.labeledExpand(prk, utf8("sec"), info, len)));
    }
  });

  test("a salt neither empty nor 32 bytes is refused, as by the library's HkdfSha256", async () => {
    await expect(new NativeHkdfSha256().extract(new Uint8Array(13), new Uint8Array(1))).rejects.toThrow();
    await expect(new HkdfSha256().extract(new Uint8Array(13), new Uint8Array(1))).rejects.toThrow();
  });
});

describe("round trips across suites", () => {
  test.each([
    ["native", "webcrypto"],
    ["webcrypto", "native"],
    ["native", "noble"],
    ["noble", "native"],
    ["native", "native"],
  ] as const)("sealed with %s, opened with %s", async (sealWith, openWith) => {
    const keys = await generateX25519KeyPair({ suite: HPKE_SUITES[openWith] });
    const plaintext = random(4096);
    const sealed = await sealRequest(keys.publicKey, plaintext, binding, { suite: HPKE_SUITES[sealWith] });
    expect(await openRequest(keys.privateKey, sealed.enc, sealed.ciphertext, binding, { suite: HPKE_SUITES[openWith] })).toEqual({
      plaintext,
      responseKey: sealed.responseKey,
    });
  });

  test("generated key pairs are 32 raw bytes and consistent", async () => {
    const keys = await generateX25519KeyPair({ suite: HPKE_SUITES.native });
    expect([keys.publicKey.byteLength, keys.privateKey.byteLength]).toEqual([32, 32]);
    expect(x25519PublicKey(keys.privateKey)).toEqual(keys.publicKey);
  });

  test("JWK import gives the same keys as raw import; a mismatched x is refused", async () => {
    const keys = await generateX25519KeyPair({ suite: HPKE_SUITES.native });
    const x = toBase64url(keys.publicKey);
    const d = toBase64url(keys.privateKey);
    const pk = await native.kem.importKey("jwk", { kty: "OKP", crv: "X25519", x }, true);
    const sk = await native.kem.importKey("jwk", { kty: "OKP", crv: "X25519", x, d }, false);
    expect(hex(await native.kem.serializePublicKey(pk))).toBe(toHex(keys.publicKey));
    expect(hex(await native.kem.serializePrivateKey(sk))).toBe(toHex(keys.privateKey));
    const wrongX = toBase64url(x25519PublicKey(random(32)));
    await expect(native.kem.importKey("jwk", { kty: "OKP", crv: "X25519", x: wrongX, d }, false)).rejects.toThrow();
    await expect(native.kem.importKey("jwk", { kty: "OKP", crv: "Ed25519", x }, true)).rejects.toThrow();
  });
});

describe("the native suite refuses", () => {
  // u-coordinates of small-order points of Curve25519 (all-zero shared secret), and a non-canonical one (p + 1).
  const lowOrder = [
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  ];

  test.each(lowOrder)("sealing to the low-order key %s (InvalidKeyError)", async (point) => {
    await expect(sealRequest(fromHex(point), utf8("x"), binding, { suite: HPKE_SUITES.native })).rejects.toThrow(InvalidKeyError);
  });

  test.each(lowOrder)("a low-order enc %s on open (RequestOpenError), and DH itself throws", async (point) => {
    await expect(openRequest(skR, fromHex(point), ciphertext, binding, { suite: HPKE_SUITES.native })).rejects.toThrow(RequestOpenError);
    const kem = new NativeDhkemX25519HkdfSha256();
    const sk = await kem.deserializePrivateKey(skR);
    const pk = await kem.deserializePublicKey(fromHex(point));
    await expect(kem.decap({ recipientKey: sk, enc: fromHex(point) })).rejects.toThrow();
    expect(pk).toBeInstanceOf(NativeX25519Key);
  });

  test("every single flipped bit of enc (RequestOpenError)", async () => {
    const outcomes = new Set<string>();
    for (let bit = 0; bit < 256; bit++) {
      const bad = enc.slice();
      bad[bit >> 3]! ^= 1 << (bit & 7);
      const error = await openRequest(skR, bad, ciphertext, binding, { suite: HPKE_SUITES.native }).catch((e: unknown) => e);
      outcomes.add(error instanceof RequestOpenError ? "RequestOpenError" : String(error));
    }
    expect([...outcomes]).toEqual(["RequestOpenError"]);
  });

  test("a flipped ciphertext bit, the wrong recipient key, and each other binding field (RequestOpenError)", async () => {
    const other = await generateX25519KeyPair({ suite: HPKE_SUITES.native });
    const tampered = ciphertext.slice();
    tampered[5]! ^= 1;
    const attempts: Array<() => Promise<unknown>> = [
      () => openRequest(skR, enc, tampered, binding, { suite: HPKE_SUITES.native }),
      () => openRequest(other.privateKey, enc, ciphertext, binding, { suite: HPKE_SUITES.native }),
      () => openRequest(skR, enc, ciphertext, { ...binding, requestId: `${binding.requestId}x` }, { suite: HPKE_SUITES.native }),
      () => openRequest(skR, enc, ciphertext, { ...binding, attempt: binding.attempt + 1 }, { suite: HPKE_SUITES.native }),
      () => openRequest(skR, enc, ciphertext, { ...binding, protocolVersion: binding.protocolVersion + 1 }, { suite: HPKE_SUITES.native }),
    ];
    for (const attempt of attempts) await expect(attempt()).rejects.toThrow(RequestOpenError);
  });

  test("malformed keys (InvalidKeyError)", async () => {
    await expect(sealRequest(pkR.subarray(1), utf8("x"), binding, { suite: HPKE_SUITES.native })).rejects.toThrow(InvalidKeyError);
    await expect(openRequest(skR.subarray(1), enc, ciphertext, binding, { suite: HPKE_SUITES.native })).rejects.toThrow(InvalidKeyError);
    await expect(native.kem.deserializePublicKey(new Uint8Array(33))).rejects.toThrow();
  });

  test("a key of another suite (WebCrypto CryptoKey) instead of its own", async () => {
    const webcrypto = HPKE_SUITES.webcrypto;
    const foreign = await webcrypto.kem.deserializePublicKey(pkR);
    await expect(native.createSenderContext({ recipientPublicKey: foreign })).rejects.toThrow();
    const ownPrivate = await native.kem.deserializePrivateKey(skR);
    await expect(native.kem.serializePublicKey(ownPrivate)).rejects.toThrow();
  });
});
