/**
 * A minimal strict DER reader for the few values this library reads itself: the outer length of a
 * certificate (trailing bytes) and Apple's extension values (INTEGER, string types).
 *
 * Strictness: single-byte tags only; definite lengths in minimal form (short form below 128, long
 * form with no leading zero byte and at most 4 length bytes); INTEGER contents minimal (no redundant
 * 0x00 or 0xFF leading byte); a "whole" value must end exactly at the end of its input.
 * Every reader throws AttestationError(check) on anything else.
 */
import { type AttestationCheck, AttestationError } from "./errors.ts";

const TAG_INTEGER = 0x02;
export const TAG_UTF8_STRING = 0x0c;
export const TAG_PRINTABLE_STRING = 0x13;
export const TAG_IA5_STRING = 0x16;

export interface Tlv {
  readonly tag: number;
  readonly value: Uint8Array;
  /** Offset just past this element. */
  readonly end: number;
}

/** Reads one element at `offset`. */
function readTlv(bytes: Uint8Array, offset: number, check: AttestationCheck, what: string): Tlv {
  const fail = (why: string): never => {
    throw new AttestationError(check, `${what}: ${why}`);
  };
  if (offset + 2 > bytes.length) fail("truncated");
  const tag = bytes[offset]!;
  if ((tag & 0x1f) === 0x1f) fail("multi-byte tag");
  let length = bytes[offset + 1]!;
  let at = offset + 2;
  if (length === 0x80) fail("indefinite length");
  if (length > 0x80) {
    const n = length & 0x7f;
    if (n > 4) fail("length too large");
    if (at + n > bytes.length) fail("truncated length");
    if (bytes[at] === 0) fail("non-minimal length");
    length = 0;
    for (let i = 0; i < n; i++) length = length * 256 + bytes[at + i]!;
    if (length < 0x80) fail("non-minimal length");
    at += n;
  }
  if (at + length > bytes.length) fail("truncated value");
  return { tag, value: bytes.subarray(at, at + length), end: at + length };
}

/** Reads `bytes` as exactly one element (no trailing bytes). */
export function readWhole(bytes: Uint8Array, check: AttestationCheck, what: string): Tlv {
  const tlv = readTlv(bytes, 0, check, what);
  if (tlv.end !== bytes.length) throw new AttestationError(check, `${what}: ${bytes.length - tlv.end} trailing bytes`);
  return tlv;
}

/** Decodes `bytes` as exactly one DER INTEGER. */
export function decodeInteger(bytes: Uint8Array, check: AttestationCheck, what: string): bigint {
  const { tag, value } = readWhole(bytes, check, what);
  if (tag !== TAG_INTEGER) throw new AttestationError(check, `${what}: not an INTEGER`);
  if (value.length === 0) throw new AttestationError(check, `${what}: empty INTEGER`);
  if (value.length > 1 && ((value[0] === 0x00 && value[1]! < 0x80) || (value[0] === 0xff && value[1]! >= 0x80))) {
    throw new AttestationError(check, `${what}: non-minimal INTEGER`);
  }
  let n = 0n;
  for (const b of value) n = (n << 8n) | BigInt(b);
  if (value[0]! >= 0x80) n -= 1n << BigInt(8 * value.length);
  return n;
}

/** Encodes a DER INTEGER (for certificate builders). */
export function encodeInteger(n: bigint): Uint8Array {
  const out: number[] = [];
  let v = n;
  for (;;) {
    out.unshift(Number(v & 0xffn));
    const rest = v >> 8n;
    const sign = out[0]! & 0x80;
    if ((rest === 0n && !sign) || (rest === -1n && sign)) break;
    v = rest;
  }
  return Uint8Array.from([TAG_INTEGER, out.length, ...out]);
}
