/**
 * Canonical byte strings: the one encoding behind every byte string Umbra binds or signs (the HPKE `info`
 * of seal.ts, the chunk AAD of chunks.ts, the receipt of receipts.ts). Each format is a domain tag followed
 * by a fixed sequence of fields; the format files document their own field order.
 *
 * Wire format (all integers unsigned, big-endian, fixed width):
 *   tag      = u32(len) || ASCII bytes      (first field of every format, e.g. "umbra-receipt-v1")
 *   bytes    = u32(len) || bytes            (length-prefixed, so no field can run into the next)
 *   text     = u32(len) || UTF-8 bytes      (well-formed Unicode only: a lone surrogate is refused, since
 *                                            UTF-8 encoding would silently turn it into U+FFFD)
 *   u8       = 1 byte;  u32 = 4 bytes;  u64 = 8 bytes
 *
 * Invariants:
 * - Injective: a format's bytes determine every field (fixed order, lengths prefixed, fixed-width integers).
 * - Domain separation: distinct tags keep a byte string of one format from being valid in another.
 * - Every value is range-checked before encoding; a violation throws InvalidInputError naming the field.
 */
import { InvalidInputError } from "./errors.ts";

const UTF8 = new TextEncoder();
const TAG = /^[a-z0-9-]{1,64}$/;
const U32_MAX = 0xffff_ffff;
/** With the u flag a surrogate pair is one code point, so only an unpaired surrogate matches. */
const LONE_SURROGATE = /\p{Cs}/u;

/** Builder for one canonical byte string; start with `CanonicalBytes.tagged(tag)`, end with `finish()`. */
export class CanonicalBytes {
  private readonly parts: Uint8Array[] = [];
  private size = 0;

  private constructor() {}

  /**
   * A new byte string that starts with the domain tag (lowercase ASCII letters, digits and '-', 1..64).
   * @throws InvalidInputError for a tag outside that alphabet.
   */
  static tagged(tag: string): CanonicalBytes {
    if (!TAG.test(tag)) throw new InvalidInputError("domain tag must be 1..64 of [a-z0-9-]");
    return new CanonicalBytes().bytes("tag", UTF8.encode(tag), 64);
  }

  /**
   * u32(len) || value.
   * @throws InvalidInputError when value is not a Uint8Array of at most maxBytes (exactly, if exact is set).
   */
  bytes(field: string, value: Uint8Array, maxBytes: number, exact = false): this {
    if (!(value instanceof Uint8Array)) throw new InvalidInputError(`${field} must be bytes`);
    if (exact ? value.byteLength !== maxBytes : value.byteLength > maxBytes) {
      throw new InvalidInputError(`${field} must be ${exact ? "exactly" : "at most"} ${maxBytes} bytes`);
    }
    this.push(u32Bytes(value.byteLength));
    this.push(value);
    return this;
  }

  /**
   * u32(len) || UTF-8(value), for a non-empty, well-formed string of 1..maxBytes UTF-8 bytes.
   * @throws InvalidInputError for a non-string, an empty string, a lone surrogate or too many bytes.
   */
  text(field: string, value: string, maxBytes: number): this {
    if (typeof value !== "string" || value.length === 0) throw new InvalidInputError(`${field} must be a non-empty string`);
    if (LONE_SURROGATE.test(value)) throw new InvalidInputError(`${field} is not well-formed Unicode`);
    return this.bytes(field, UTF8.encode(value), maxBytes);
  }

  /** One byte: 0x01 for true, 0x00 for false. @throws InvalidInputError for a non-boolean. */
  flag(field: string, value: boolean): this {
    if (typeof value !== "boolean") throw new InvalidInputError(`${field} must be a boolean`);
    this.push(Uint8Array.of(value ? 1 : 0));
    return this;
  }

  /** @throws InvalidInputError unless 0 <= value <= 2^32 - 1 and an integer. */
  u32(field: string, value: number): this {
    this.push(u32Bytes(checkedInteger(field, value, U32_MAX)));
    return this;
  }

  /** @throws InvalidInputError unless 0 <= value <= 2^53 - 1 (Number.MAX_SAFE_INTEGER) and an integer. */
  u64(field: string, value: number): this {
    this.push(u64Bytes(checkedInteger(field, value, Number.MAX_SAFE_INTEGER)));
    return this;
  }

  finish(): Uint8Array<ArrayBuffer> {
    const out = new Uint8Array(this.size);
    let offset = 0;
    for (const part of this.parts) {
      out.set(part, offset);
      offset += part.byteLength;
    }
    return out;
  }

  private push(part: Uint8Array): void {
    this.parts.push(part);
    this.size += part.byteLength;
  }
}

/** An integer in [0, max]; returns it. @throws InvalidInputError otherwise. */
export function checkedInteger(field: string, value: number, max: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > max) {
    throw new InvalidInputError(`${field} must be an integer in [0, ${max}]`);
  }
  return value;
}

/** 4 bytes, big-endian. The caller has range-checked value. */
export function u32Bytes(value: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, value, false);
  return out;
}

/** 8 bytes, big-endian. The caller has range-checked value (a safe non-negative integer). */
export function u64Bytes(value: number): Uint8Array {
  const out = new Uint8Array(8);
  writeU64(out, 0, value);
  return out;
}

/**
 * Writes `value` (an integer in [0, 2^53 - 1]) big-endian at `offset`, as two 32-bit halves: no BigInt
 * and no DataView on the per-chunk path.
 */
export function writeU64(out: Uint8Array, offset: number, value: number): void {
  const high = Math.floor(value / 0x1_0000_0000);
  const low = value >>> 0;
  out[offset] = high >>> 24;
  out[offset + 1] = (high >>> 16) & 0xff;
  out[offset + 2] = (high >>> 8) & 0xff;
  out[offset + 3] = high & 0xff;
  out[offset + 4] = low >>> 24;
  out[offset + 5] = (low >>> 16) & 0xff;
  out[offset + 6] = (low >>> 8) & 0xff;
  out[offset + 7] = low & 0xff;
}
