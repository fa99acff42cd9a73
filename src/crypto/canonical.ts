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
/** Every format's bytes fit in this without growing, except long request ids or model names. */
const INITIAL_CAPACITY = 256;
/** Encoded domain tags (a handful of constants in practice; bounded all the same). */
const TAGS = new Map<string, Uint8Array>();
const MAX_CACHED_TAGS = 64;
const U32_MAX = 0xffff_ffff;
/** With the u flag a surrogate pair is one code point, so only an unpaired surrogate matches. */
const LONE_SURROGATE = /\p{Cs}/u;

/** Largest buffer kept for the next builder (a longer one is dropped after its build). */
const MAX_KEPT_CAPACITY = 64 * 1024;
/**
 * The buffer the next builder writes into, taken by one builder at a time (a build is synchronous, from
 * `tagged` to `finish`): a build then allocates its result only. Undefined while taken; a builder made
 * meanwhile (one built inside another's chain) gets a buffer of its own. Every finished builder leaves
 * its buffer here (one abandoned by a throw outside the builder is simply collected).
 */
let spare: Uint8Array | undefined = new Uint8Array(INITIAL_CAPACITY);
const DONE = new Uint8Array(0);

/**
 * Builder for one canonical byte string; start with `CanonicalBytes.tagged(tag)`, end with `finish()`.
 * Fields are written in place into one growing buffer (UTF-8 text encoded straight into it, lengths and
 * integers written byte by byte), the module's spare one when it is free: several byte strings are built
 * for every request on both sides (key infos, AAD prefixes, receipts), so a build allocates its result,
 * not a buffer and an array per field. A builder is used once: after `finish()` or a refused field it
 * has given its buffer back.
 */
export class CanonicalBytes {
  private buffer: Uint8Array;
  private size = 0;

  private constructor() {
    this.buffer = spare ?? new Uint8Array(INITIAL_CAPACITY);
    spare = undefined;
  }

  /**
   * A new byte string that starts with the domain tag (lowercase ASCII letters, digits and '-', 1..64).
   * @throws InvalidInputError for a tag outside that alphabet.
   */
  static tagged(tag: string): CanonicalBytes {
    let encoded = TAGS.get(tag);
    if (encoded === undefined) {
      if (!TAG.test(tag)) throw new InvalidInputError("domain tag must be 1..64 of [a-z0-9-]"); // before a buffer is lent
      encoded = UTF8.encode(tag);
      if (TAGS.size < MAX_CACHED_TAGS) TAGS.set(tag, encoded);
    }
    return new CanonicalBytes().bytes("tag", encoded, 64);
  }

  /**
   * u32(len) || value.
   * @throws InvalidInputError when value is not a Uint8Array of at most maxBytes (exactly, if exact is set).
   */
  bytes(field: string, value: Uint8Array, maxBytes: number, exact = false): this {
    if (!(value instanceof Uint8Array)) throw this.refuse(`${field} must be bytes`);
    if (exact ? value.byteLength !== maxBytes : value.byteLength > maxBytes) {
      throw this.refuse(`${field} must be ${exact ? "exactly" : "at most"} ${maxBytes} bytes`);
    }
    this.reserve(4 + value.byteLength);
    writeU32(this.buffer, this.size, value.byteLength);
    this.buffer.set(value, this.size + 4);
    this.size += 4 + value.byteLength;
    return this;
  }

  /**
   * u32(len) || UTF-8(value), for a non-empty, well-formed string of 1..maxBytes UTF-8 bytes.
   * @throws InvalidInputError for a non-string, an empty string, a lone surrogate or too many bytes.
   */
  text(field: string, value: string, maxBytes: number): this {
    if (typeof value !== "string" || value.length === 0) throw this.refuse(`${field} must be a non-empty string`);
    if (value.length <= maxBytes && this.ascii(value)) return this;
    if (LONE_SURROGATE.test(value)) throw this.refuse(`${field} is not well-formed Unicode`);
    // UTF-8 takes at least one byte and at most three per UTF-16 unit (a surrogate pair, 2 units, is 4 bytes).
    if (value.length > maxBytes) throw this.refuse(`${field} must be at most ${maxBytes} bytes`);
    this.reserve(4 + value.length * 3);
    const { written } = UTF8.encodeInto(value, this.buffer.subarray(this.size + 4));
    if (written > maxBytes) throw this.refuse(`${field} must be at most ${maxBytes} bytes`);
    writeU32(this.buffer, this.size, written);
    this.size += 4 + written;
    return this;
  }

  /** Writes u32(len) || value when every unit of `value` is ASCII (request ids, names): UTF-8 is then the units. */
  private ascii(value: string): boolean {
    this.reserve(4 + value.length);
    const at = this.size + 4;
    for (let i = 0; i < value.length; i++) {
      const unit = value.charCodeAt(i);
      if (unit > 0x7f) return false; // what was written past `size` is overwritten by the general path
      this.buffer[at + i] = unit;
    }
    writeU32(this.buffer, this.size, value.length);
    this.size = at + value.length;
    return true;
  }

  /** One byte: 0x01 for true, 0x00 for false. @throws InvalidInputError for a non-boolean. */
  flag(field: string, value: boolean): this {
    if (typeof value !== "boolean") throw this.refuse(`${field} must be a boolean`);
    this.reserve(1);
    this.buffer[this.size++] = value ? 1 : 0;
    return this;
  }

  /** @throws InvalidInputError unless 0 <= value <= 2^32 - 1 and an integer. */
  u32(field: string, value: number): this {
    this.checked(field, value, U32_MAX);
    this.reserve(4);
    writeU32(this.buffer, this.size, value);
    this.size += 4;
    return this;
  }

  /** @throws InvalidInputError unless 0 <= value <= 2^53 - 1 (Number.MAX_SAFE_INTEGER) and an integer. */
  u64(field: string, value: number): this {
    this.checked(field, value, Number.MAX_SAFE_INTEGER);
    this.reserve(8);
    writeU64(this.buffer, this.size, value);
    this.size += 8;
    return this;
  }

  /** The bytes written, in a buffer of their exact length. */
  finish(): Uint8Array<ArrayBuffer> {
    if (this.buffer === DONE) throw new Error("a CanonicalBytes builder is used once");
    const out = this.buffer.slice(0, this.size);
    this.giveBack();
    return out;
  }

  /** The error to throw for a refused field; the builder gives its buffer back first. */
  private refuse(message: string): InvalidInputError {
    this.giveBack();
    return new InvalidInputError(message);
  }

  private checked(field: string, value: number, max: number): void {
    try {
      checkedInteger(field, value, max);
    } catch (e) {
      this.giveBack();
      throw e;
    }
  }

  /** The buffer goes to the next builder (a grown one too, up to MAX_KEPT_CAPACITY); this one is done. */
  private giveBack(): void {
    if (this.buffer === DONE) return;
    if (this.buffer.byteLength <= MAX_KEPT_CAPACITY) spare = this.buffer;
    this.buffer = DONE;
  }

  private reserve(bytes: number): void {
    if (this.buffer === DONE) throw new Error("a CanonicalBytes builder is used once");
    if (this.size + bytes <= this.buffer.byteLength) return;
    const grown = new Uint8Array(Math.max(this.buffer.byteLength * 2, this.size + bytes));
    grown.set(this.buffer.subarray(0, this.size));
    this.buffer = grown;
  }
}

/** An integer in [0, max]; returns it. @throws InvalidInputError otherwise. */
export function checkedInteger(field: string, value: number, max: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > max) {
    throw new InvalidInputError(`${field} must be an integer in [0, ${max}]`);
  }
  return value;
}

/** Writes `value` (an integer in [0, 2^32 - 1]) big-endian at `offset`. */
function writeU32(out: Uint8Array, offset: number, value: number): void {
  out[offset] = value >>> 24;
  out[offset + 1] = (value >>> 16) & 0xff;
  out[offset + 2] = (value >>> 8) & 0xff;
  out[offset + 3] = value & 0xff;
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
