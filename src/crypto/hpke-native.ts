/**
 * Synchronous node:crypto primitives for @hpke/core's DHKEM(X25519, HKDF-SHA256) and HKDF-SHA256, so that
 * seal.ts's "native" suite runs the library's own RFC 9180 key schedule, Encap/Decap and context logic
 * without an async WebCrypto round trip (a thread-pool hop; bench/HISTORY.md) per primitive call.
 *
 * What plugs in where (the library's extension points; nothing of HPKE itself is implemented here):
 *   NativeHkdfSha256           extends @hpke/core HkdfSha256 (KdfInterface, @hpke/common): only the three
 *                              raw HKDF operations are replaced; init, buildLabeledIkm/Info and
 *                              labeledExtract/Expand (the RFC 9180 labels) stay the library's.
 *   NativeX25519Primitives     implements DhkemPrimitives (@hpke/common), the `_prim` of the Dhkem base class.
 *   NativeDhkemX25519HkdfSha256 extends Dhkem (@hpke/common) with the two above: the library's Encap, Decap,
 *                              ExtractAndExpand(dh, kem_context) and DeriveKeyPair label logic.
 * The AEAD stays @hpke/chacha20poly1305 (already synchronous noble code; @noble/ciphers measured the same).
 *
 * Steps:
 *   Extract(salt, ikm)            = HMAC-SHA256(salt or 32 zero bytes, ikm)              (createHmac)
 *   Expand(prk, info, L)          = T(1) || T(2) ... first L bytes, T(i) = HMAC(prk, T(i-1) || info || i)
 *   ExtractAndExpand(s, ikm, i, L) = hkdfSync("sha256", ikm, s, i, L)  (Extract + Expand when info > 1,024 B)
 *   keys    = node KeyObjects, imported from raw bytes as DER: SPKI 302a300506032b656e032100 || pk,
 *             PKCS#8 302e020100300506032b656e04220420 || sk (RFC 8410); raw bytes = the same DER, prefix cut
 *   DH      = diffieHellman(sk, pk), refused when all-zero (RFC 9180 section 7.1.4)
 *   KeyGen  = generateKeyPairSync("x25519") (runtime CSPRNG); DeriveKeyPair as in RFC 9180 7.1.3
 *
 * Invariants:
 * - Same bytes as the WebCrypto and noble suites: test/unit/crypto/hpke-native.test.ts (RFC 9180 A.2.1,
 *   Umbra vector, byte-for-byte against webcrypto with the same ephemeral key) and seal.test.ts.
 * - Every method keeps the library's async signature and error classes (DeserializeError, SerializeError,
 *   DeriveKeyPairError, NotSupportedError, InvalidParamError); the work inside is synchronous.
 * - A low-order public key never yields a shared secret: dh throws, Encap/Decap turn it into
 *   EncapError/DecapError.
 * - Keys of this suite are NativeX25519Key objects; a CryptoKey of another suite is refused, not coerced.
 * - Shared secrets from DH are zeroed after copying out; secret raw bytes are copied, never aliased.
 */
import { createHmac, createPrivateKey, createPublicKey, diffieHellman, generateKeyPairSync, hkdfSync, type KeyObject } from "node:crypto";
import { Dhkem, type DhkemPrimitives, KEM_USAGES, LABEL_DKP_PRK, LABEL_SK } from "@hpke/common";
import { DeriveKeyPairError, DeserializeError, HkdfSha256, InvalidParamError, KemId, NotSupportedError, SerializeError } from "@hpke/core";

const HASH_BYTES = 32;
const X25519_BYTES = 32;
/** hkdfSync refuses a longer info (Node's limit); longer ones go through Extract + Expand. */
const HKDF_SYNC_MAX_INFO = 1024;
const EMPTY = new Uint8Array(0);
const ZERO_SALT = new Uint8Array(HASH_BYTES);
/** RFC 8410 DER prefixes of an X25519 SubjectPublicKeyInfo and PKCS#8 PrivateKeyInfo (32 raw bytes follow). */
const SPKI_PREFIX = Uint8Array.from([0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x03, 0x21, 0x00]);
const PKCS8_PREFIX = Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20]);

type Bytes = ArrayBufferLike | ArrayBufferView;

/** A view of the caller's bytes (no copy). */
function view(input: Bytes): Uint8Array {
  return ArrayBuffer.isView(input) ? new Uint8Array(input.buffer, input.byteOffset, input.byteLength) : new Uint8Array(input);
}

/** A fresh ArrayBuffer holding exactly these bytes. */
function ownBuffer(bytes: Uint8Array): ArrayBuffer {
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return copy.buffer;
}

function withPrefix(prefix: Uint8Array, raw: Uint8Array): Uint8Array {
  const der = new Uint8Array(prefix.byteLength + raw.byteLength);
  der.set(prefix, 0);
  der.set(raw, prefix.byteLength);
  return der;
}

/**
 * HKDF-SHA256 (RFC 5869) on node:crypto, as @hpke/core's KdfInterface. Subclass of the library's
 * HkdfSha256 so that the suite ids and the labeled inputs stay the library's code.
 */
export class NativeHkdfSha256 extends HkdfSha256 {
  override async extract(salt: Bytes, ikm: Bytes): Promise<ArrayBuffer> {
    return this.extractSync(salt, ikm);
  }

  override async expand(prk: Bytes, info: Bytes, len: number): Promise<ArrayBuffer> {
    return this.expandSync(prk, info, len);
  }

  override async extractAndExpand(salt: Bytes, ikm: Bytes, info: Bytes, len: number): Promise<ArrayBuffer> {
    const infoBytes = view(info);
    if (infoBytes.byteLength > HKDF_SYNC_MAX_INFO || len > 255 * HASH_BYTES) {
      return this.expandSync(this.extractSync(salt, ikm), infoBytes, len);
    }
    return hkdfSync("sha256", view(ikm), view(salt), infoBytes, len);
  }

  private extractSync(salt: Bytes, ikm: Bytes): ArrayBuffer {
    // The library's HkdfSha256 accepts only an empty or hash-sized salt; keep that contract.
    const saltBytes = salt.byteLength === 0 ? ZERO_SALT : view(salt);
    if (saltBytes.byteLength !== HASH_BYTES) {
      throw new InvalidParamError("The salt length must be the same as the hashSize");
    }
    return ownBuffer(createHmac("sha256", saltBytes).update(view(ikm)).digest());
  }

  private expandSync(prk: Bytes, info: Bytes, len: number): ArrayBuffer {
    if (len > 255 * HASH_BYTES) throw new Error("Entropy limit reached");
    const key = view(prk);
    const infoBytes = view(info);
    const okm = new Uint8Array(len);
    let previous: Uint8Array = EMPTY;
    for (let i = 1, offset = 0; offset < len; i++) {
      previous = createHmac("sha256", key).update(previous).update(infoBytes).update(Uint8Array.of(i)).digest();
      okm.set(previous.subarray(0, Math.min(HASH_BYTES, len - offset)), offset);
      offset += HASH_BYTES;
    }
    return okm.buffer;
  }
}

/** An X25519 key of this suite: a node KeyObject plus its raw 32 bytes (computed on first use). */
export class NativeX25519Key implements CryptoKey {
  readonly algorithm: CryptoKey["algorithm"] = { name: "X25519" };
  readonly extractable = true;
  readonly usages: CryptoKey["usages"];
  #raw: Uint8Array | undefined;
  #publicKey: NativeX25519Key | undefined;

  constructor(
    readonly type: "public" | "private",
    readonly keyObject: KeyObject,
    raw?: Uint8Array,
  ) {
    this.usages = type === "private" ? [...KEM_USAGES] : [];
    this.#raw = raw;
  }

  /** The raw 32 bytes (RFC 7748). Do not modify. */
  raw(): Uint8Array {
    if (this.#raw === undefined) {
      const der =
        this.type === "public"
          ? this.keyObject.export({ format: "der", type: "spki" })
          : this.keyObject.export({ format: "der", type: "pkcs8" });
      this.#raw = new Uint8Array(der.subarray(der.byteLength - X25519_BYTES));
      if (this.type === "private") der.fill(0);
    }
    return this.#raw;
  }

  /** The public key of a private key (cached), or the key itself. */
  publicKey(): NativeX25519Key {
    if (this.type === "public") return this;
    this.#publicKey ??= new NativeX25519Key("public", createPublicKey(this.keyObject));
    return this.#publicKey;
  }
}

function nativeKey(key: CryptoKey, type: "public" | "private"): NativeX25519Key {
  if (!(key instanceof NativeX25519Key) || key.type !== type) throw new Error(`not an X25519 ${type} key of the native suite`);
  return key;
}

function importRaw(raw: Uint8Array, isPublic: boolean): NativeX25519Key {
  if (raw.byteLength !== X25519_BYTES) throw new Error(`Invalid ${isPublic ? "public" : "private"} key for the ciphersuite`);
  const copy = raw.slice();
  if (isPublic) {
    return new NativeX25519Key(
      "public",
      createPublicKey({ key: Buffer.from(withPrefix(SPKI_PREFIX, copy).buffer), format: "der", type: "spki" }),
      copy,
    );
  }
  const der = withPrefix(PKCS8_PREFIX, copy);
  try {
    return new NativeX25519Key("private", createPrivateKey({ key: Buffer.from(der.buffer), format: "der", type: "pkcs8" }), copy);
  } finally {
    der.fill(0);
  }
}

function base64urlBytes(value: unknown, what: string): Uint8Array {
  if (typeof value !== "string") throw new Error(`Invalid key: \`${what}\` not found`);
  return new Uint8Array(Buffer.from(value, "base64url"));
}

/** X25519 on node:crypto, as the DhkemPrimitives (`_prim`) of @hpke/common's Dhkem. */
class NativeX25519Primitives implements DhkemPrimitives {
  constructor(private readonly hkdf: NativeHkdfSha256) {}

  async serializePublicKey(key: CryptoKey): Promise<ArrayBuffer> {
    try {
      return ownBuffer(nativeKey(key, "public").raw());
    } catch (error) {
      throw new SerializeError(error);
    }
  }

  async deserializePublicKey(key: Bytes): Promise<CryptoKey> {
    try {
      return importRaw(view(key), true);
    } catch (error) {
      throw new DeserializeError(error);
    }
  }

  async serializePrivateKey(key: CryptoKey): Promise<ArrayBuffer> {
    try {
      return ownBuffer(nativeKey(key, "private").raw());
    } catch (error) {
      throw new SerializeError(error);
    }
  }

  async deserializePrivateKey(key: Bytes): Promise<CryptoKey> {
    try {
      return importRaw(view(key), false);
    } catch (error) {
      throw new DeserializeError(error);
    }
  }

  async importKey(format: "raw" | "jwk", key: Parameters<DhkemPrimitives["importKey"]>[1], isPublic: boolean): Promise<CryptoKey> {
    try {
      if (format === "raw") {
        if (!(key instanceof ArrayBuffer)) throw new Error("Invalid raw key");
        return importRaw(new Uint8Array(key), isPublic);
      }
      if (key instanceof ArrayBuffer) throw new Error("Invalid jwk key format");
      if (key.kty !== "OKP") throw new Error(`Invalid kty: ${key.kty}`);
      if (key.crv !== "X25519") throw new Error(`Invalid crv: ${key.crv}`);
      if (isPublic) {
        if (key.d !== undefined) throw new Error("Invalid key: `d` should not be set");
        return importRaw(base64urlBytes(key.x, "x"), true);
      }
      const imported = importRaw(base64urlBytes(key.d, "d"), false);
      if (key.x !== undefined && Buffer.compare(base64urlBytes(key.x, "x"), imported.publicKey().raw()) !== 0) {
        throw new Error("Invalid key: `x` does not match `d`");
      }
      return imported;
    } catch (error) {
      throw new DeserializeError(error);
    }
  }

  async generateKeyPair(): Promise<CryptoKeyPair> {
    try {
      const pair = generateKeyPairSync("x25519");
      return { publicKey: new NativeX25519Key("public", pair.publicKey), privateKey: new NativeX25519Key("private", pair.privateKey) };
    } catch (error) {
      throw new NotSupportedError(error);
    }
  }

  async deriveKeyPair(ikm: Bytes): Promise<CryptoKeyPair> {
    try {
      const dkpPrk = await this.hkdf.labeledExtract(EMPTY, LABEL_DKP_PRK, view(ikm));
      const rawSk = new Uint8Array(await this.hkdf.labeledExpand(dkpPrk, LABEL_SK, EMPTY, X25519_BYTES));
      const privateKey = importRaw(rawSk, false);
      rawSk.fill(0);
      return { privateKey, publicKey: privateKey.publicKey() };
    } catch (error) {
      throw new DeriveKeyPairError(error);
    }
  }

  async derivePublicKey(key: CryptoKey): Promise<CryptoKey> {
    try {
      return nativeKey(key, "private").publicKey();
    } catch (error) {
      throw new DeserializeError(error);
    }
  }

  async dh(sk: CryptoKey, pk: CryptoKey): Promise<ArrayBuffer> {
    let secret: Buffer;
    try {
      // BoringSSL/OpenSSL already refuse an all-zero result; the check below does not rely on it.
      secret = diffieHellman({ privateKey: nativeKey(sk, "private").keyObject, publicKey: nativeKey(pk, "public").keyObject });
    } catch (error) {
      throw new SerializeError(error);
    }
    let acc = 0;
    for (const byte of secret) acc |= byte;
    const out = ownBuffer(secret);
    secret.fill(0);
    if (acc === 0 || secret.byteLength !== X25519_BYTES) throw new SerializeError("X25519: all-zero shared secret (low-order public key)");
    return out;
  }
}

/**
 * DHKEM(X25519, HKDF-SHA256) (RFC 9180 section 4.1, KEM id 0x0020): @hpke/common's Dhkem with the node:crypto
 * primitives and KDF above. Pair it with a NativeHkdfSha256 as the suite's KDF (its own instance: the
 * library initialises each KDF with its suite id).
 */
export class NativeDhkemX25519HkdfSha256 extends Dhkem {
  override readonly id: KemId = KemId.DhkemX25519HkdfSha256;
  override readonly secretSize: number = 32;
  override readonly encSize: number = 32;
  override readonly publicKeySize: number = 32;
  override readonly privateKeySize: number = 32;

  constructor() {
    const kdf = new NativeHkdfSha256();
    super(KemId.DhkemX25519HkdfSha256, new NativeX25519Primitives(kdf), kdf);
  }
}
