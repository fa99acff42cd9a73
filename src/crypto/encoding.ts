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

/** Bytes -> unpadded base64url. */
export function toBase64url(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64url");
}

/**
 * Unpadded, canonical base64url -> bytes.
 * @throws InvalidInputError when the text is not canonical unpadded base64url.
 */
export function fromBase64url(text: string, field = "value"): Uint8Array<ArrayBuffer> {
  if (typeof text !== "string" || !BASE64URL.test(text) || text.length % 4 === 1) {
    throw new InvalidInputError(`${field} is not unpadded base64url`);
  }
  const bytes = Buffer.from(text, "base64url");
  if (bytes.toString("base64url") !== text) throw new InvalidInputError(`${field} is not canonical base64url`);
  // A copy: Buffer.from may return a view into a shared pool.
  return new Uint8Array(bytes);
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
