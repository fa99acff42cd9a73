/**
 * Text forms of byte strings used by the crypto module: base64url (RFC 4648 section 5) for keys, enc,
 * ciphertexts and signatures in JSON frames, and lowercase hex for digests shown to consumers.
 *
 * Steps (decoding): check the alphabet and length, decode, re-encode and compare, so every byte string has
 * exactly one accepted text form.
 *
 * Invariants:
 * - base64url is unpadded: no `=`, no whitespace, no `+` or `/`; a length of 1 mod 4 and non-zero unused
 *   trailing bits are refused (they would give a second spelling of the same bytes).
 * - hex is lowercase, even length.
 * - Decoders throw InvalidInputError; encoders never throw.
 */
import { InvalidInputError } from "./errors.ts";

const BASE64URL = /^[A-Za-z0-9_-]*$/;
const HEX = /^(?:[0-9a-f]{2})*$/;

/** For Uint8Array's own base64 codecs (toBase64, fromBase64): no Buffer view, no copy out of Buffer's pool. */
const URL_ALPHABET = { alphabet: "base64url", omitPadding: true } as const;

/** Bytes -> unpadded base64url. */
export function toBase64url(bytes: Uint8Array): string {
  return bytes.toBase64(URL_ALPHABET);
}

/**
 * Unpadded, canonical base64url -> bytes.
 * @throws InvalidInputError when the text is not canonical unpadded base64url.
 */
export function fromBase64url(text: string, field = "value"): Uint8Array<ArrayBuffer> {
  if (typeof text !== "string" || !BASE64URL.test(text) || text.length % 4 === 1) {
    throw new InvalidInputError(`${field} is not unpadded base64url`);
  }
  // The unused low bits of the last character must be zero (else a second spelling of the same bytes):
  // 4 bits when 2 characters remain after the last full group of 4, 2 bits when 3 remain. Checked on the
  // character, so decoding does not need a re-encoded copy of the text to compare against.
  const rest = text.length % 4;
  if (rest !== 0 && (sextet(text.charCodeAt(text.length - 1)) & (rest === 2 ? 0x0f : 0x03)) !== 0) {
    throw new InvalidInputError(`${field} is not canonical base64url`);
  }
  // Its own buffer (never a view into a shared pool); the checks above made the text canonical.
  return Uint8Array.fromBase64(text, URL_ALPHABET);
}

/** The 6-bit value of a base64url character (the caller checked the alphabet). */
function sextet(code: number): number {
  if (code >= 97) return code - 71; // a-z: 26..51
  if (code >= 65) return code === 95 ? 63 : code - 65; // A-Z: 0..25; '_' (95) is 63
  if (code >= 48) return code + 4; // 0-9: 52..61
  return 62; // '-'
}

/** Bytes -> lowercase hex. */
export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}

/**
 * Lowercase, even-length hex -> bytes.
 * @throws InvalidInputError when the text is not lowercase hex of even length.
 */
export function fromHex(text: string, field = "value"): Uint8Array<ArrayBuffer> {
  if (typeof text !== "string" || !HEX.test(text)) throw new InvalidInputError(`${field} is not lowercase hex`);
  return new Uint8Array(Buffer.from(text, "hex"));
}
