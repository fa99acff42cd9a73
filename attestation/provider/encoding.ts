/**
 * Byte-level encodings shared by the checks: strict base64, constant-time comparison, hex, and a
 * strict JSON reader for signed payloads.
 *
 * Invariants:
 * - Base64 is the standard alphabet with padding (RFC 4648 section 4), canonical: decoding then
 *   re-encoding gives the input back, so one byte string has exactly one accepted text form.
 * - Signed JSON is read from the exact bytes that were verified: UTF-8 decoded with `fatal` (no
 *   replacement characters), no byte order mark, and objects with a repeated key are refused (two
 *   readers could otherwise see two different values under one signature). Nothing is re-serialized.
 */
import { type AttestationCheck, AttestationError } from "./errors.ts";

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Decodes canonical padded base64. Throws AttestationError(check) for anything else. */
export function decodeBase64(text: unknown, check: AttestationCheck, what: string): Uint8Array {
  if (typeof text !== "string" || !BASE64.test(text)) throw new AttestationError(check, `${what} is not base64`);
  const bytes = new Uint8Array(Buffer.from(text, "base64"));
  if (Buffer.from(bytes).toString("base64") !== text) throw new AttestationError(check, `${what} is not canonical base64`);
  return bytes;
}

export function encodeBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}

/** Compares two byte strings in time that depends only on their lengths. */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * Parses signed JSON bytes into a plain object. Throws AttestationError(check) when the bytes are not
 * UTF-8, start with a byte order mark, are not JSON, repeat a key inside one object, or are not an object.
 */
export function parseSignedJson(bytes: Uint8Array, check: AttestationCheck): Record<string, unknown> {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new AttestationError(check, "payload is not UTF-8");
  }
  if (text.charCodeAt(0) === 0xfeff) throw new AttestationError(check, "payload starts with a byte order mark");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new AttestationError(check, "payload is not JSON");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new AttestationError(check, "payload is not an object");
  const repeated = repeatedKey(text);
  if (repeated !== undefined) throw new AttestationError(check, `payload repeats the key ${JSON.stringify(repeated)}`);
  return value as Record<string, unknown>;
}

/**
 * Returns the first key repeated within one object of `text` (already known to be valid JSON), or
 * undefined. A scanner, not a parser: it tracks strings, object and array nesting, and which strings
 * are keys (a string directly inside an object, followed by a colon).
 */
function repeatedKey(text: string): string | undefined {
  const stack: (Set<string> | null)[] = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      const top = stack[stack.length - 1];
      if (expectKey && top) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (top.has(key)) return key;
        top.add(key);
        expectKey = false;
      }
      i = j;
    } else if (c === "{") {
      stack.push(new Set());
      expectKey = true;
    } else if (c === "[") {
      stack.push(null);
    } else if (c === "}" || c === "]") {
      stack.pop();
    } else if (c === ",") {
      expectKey = stack[stack.length - 1] instanceof Set;
    }
  }
  return undefined;
}

/** Reads a plain JSON object out of an untrusted value, or throws AttestationError(check). */
export function objectOf(value: unknown, check: AttestationCheck, what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new AttestationError(check, `${what} is not an object`);
  return value as Record<string, unknown>;
}

/** Refuses fields outside `allowed` (signed formats are exact: a new field is a new version). */
export function onlyFields(o: Record<string, unknown>, allowed: readonly string[], check: AttestationCheck, what: string): void {
  for (const key of Object.keys(o)) {
    if (!allowed.includes(key)) throw new AttestationError(check, `${what} has an unknown field ${JSON.stringify(key)}`);
  }
}
