/**
 * The three HPKE suites of the same algorithms (DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
 * ChaCha20-Poly1305), all @hpke/core's CipherSuite, for tests and bench/crypto.ts: `native` is production's
 * HPKE_SUITE (src/crypto/seal.ts); `webcrypto` (@hpke/core's X25519 and HKDF through the runtime's
 * WebCrypto) and `noble` (@hpke/dhkem-x25519, pure JS) live here so that production never imports them.
 * Pass one as seal.ts's HpkeOptions.suite.
 */
import { Chacha20Poly1305 } from "@hpke/chacha20poly1305";
import { CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { DhkemX25519HkdfSha256 as NobleDhkemX25519HkdfSha256, HkdfSha256 as NobleHkdfSha256 } from "@hpke/dhkem-x25519";
import { HPKE_SUITE } from "../../src/crypto/seal.ts";

export type KemImplementation = "native" | "webcrypto" | "noble";

export const HPKE_SUITES: Readonly<Record<KemImplementation, CipherSuite>> = {
  native: HPKE_SUITE,
  webcrypto: new CipherSuite({ kem: new DhkemX25519HkdfSha256(), kdf: new HkdfSha256(), aead: new Chacha20Poly1305() }),
  noble: new CipherSuite({ kem: new NobleDhkemX25519HkdfSha256(), kdf: new NobleHkdfSha256(), aead: new Chacha20Poly1305() }),
};
