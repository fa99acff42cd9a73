/**
 * Readers for untrusted JSON objects. Each returns the typed value or throws a 400 ApiError whose
 * `param` names the field. Messages name the field and the rule, never the value received.
 */
import { Errors } from "../errors/api-error.ts";

export type JsonObject = Record<string, unknown>;

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * How deep a request body may nest, the body itself being level 1 (docs/api.md, Limits): deeper input
 * would cost every later walk of it (serializing, sealing) its stack, on either side of the provider hop.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * The top-level field of `body` under which an object or array sits deeper than `max` levels (the body
 * being level 1), or undefined. Iterative, so input nested 100,000 deep cannot overflow the stack.
 */
export function tooDeep(body: JsonObject, max = MAX_JSON_DEPTH): string | undefined {
  const values: unknown[] = [];
  const levels: number[] = [];
  for (const key of Object.keys(body)) {
    values.push(body[key]);
    levels.push(2);
    while (values.length > 0) {
      const value = values.pop();
      const level = levels.pop() as number;
      if (typeof value !== "object" || value === null) continue;
      if (level > max) return key;
      for (const child of Array.isArray(value) ? value : Object.values(value)) {
        if (typeof child === "object" && child !== null) {
          values.push(child);
          levels.push(level + 1);
        }
      }
    }
  }
  return undefined;
}

/** Where doubles no longer hold every integer, up to uint64: a literal there is read from its digits. */
const inexact = (v: unknown): v is number => typeof v === "number" && v >= 2 ** 53 && v <= 2 ** 64;

/**
 * JSON.parse of `text`, except that the top-level fields `exact` of an object, when their number lies
 * where doubles no longer hold every integer (2^53 to 2^64), are read from their digits: an integer
 * literal becomes its exact bigint (JSON.parse reads 9223372036854775807 and 9223372036854775808 both as
 * the double 2^63), any other literal (9007199254740993.5) its source text, so that no reader takes it
 * for the integer its double is. Throws what JSON.parse throws.
 */
export function parseJsonExact(text: string, exact: readonly string[]): unknown {
  const value: unknown = JSON.parse(text);
  if (!isObject(value) || !anyInexact(value, exact)) return value;
  // Rare: parsed again with the numbers' source text (JSON.parse source text access), kept for `exact`.
  const found: { holder: unknown; key: string; source: string }[] = [];
  const again: unknown = JSON.parse(text, function (this: unknown, key: string, v: unknown, context?: { source?: string }) {
    if (inexact(v) && context?.source !== undefined && exact.includes(key)) found.push({ holder: this, key, source: context.source });
    return v;
  });
  if (!isObject(again)) return again;
  for (const { holder, key, source } of found) {
    if (holder === again) again[key] = integerLiteral(source) ?? source;
  }
  return again;
}

/** Whether one of the fields `names` of `value` holds a number a double may not hold exactly (a loop: no closure per body). */
function anyInexact(value: JsonObject, names: readonly string[]): boolean {
  for (const name of names) if (inexact(value[name])) return true;
  return false;
}

/** The integer a JSON number literal denotes exactly (`1.0e3` is 1000n), or undefined when it has a fraction. */
function integerLiteral(literal: string): bigint | undefined {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(literal);
  if (m === null) return undefined;
  const fraction = m[3] ?? "";
  let digits = `${m[2]}${fraction}`;
  let scale = Number(m[4] ?? "0") - fraction.length;
  // Trailing zeros move into the scale (a loop: a regex would backtrack on a long run of them).
  let end = digits.length;
  while (end > 0 && digits[end - 1] === "0") end--;
  scale += digits.length - end;
  digits = digits.slice(0, end);
  if (digits === "") return 0n;
  if (scale < 0) return undefined;
  // Callers pass literals whose value is below 2^64: the scale is small.
  const magnitude = BigInt(digits) * 10n ** BigInt(scale);
  return m[1] === "-" ? -magnitude : magnitude;
}

/** The body as an object; `allowed` lists the accepted keys (others are rejected by name). */
export function objectBody(body: unknown, allowed?: readonly string[]): JsonObject {
  if (body === undefined || body === null || body === "") throw Errors.invalidJson("a JSON object body is required");
  if (!isObject(body)) throw Errors.invalidJson("the body must be a JSON object");
  if (allowed) {
    for (const k of Object.keys(body)) {
      if (!allowed.includes(k)) throw Errors.unsupportedValue(`unknown field '${k.slice(0, 64)}'`, k.slice(0, 64));
    }
  }
  return body;
}

interface StringRule {
  readonly max?: number;
  readonly pattern?: RegExp;
  readonly patternHint?: string;
}

export function optionalString(o: JsonObject, name: string, rule: StringRule = {}): string | undefined {
  const v = o[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw Errors.invalidValue(`'${name}' must be a string`, name);
  if (v.length === 0) throw Errors.invalidValue(`'${name}' must not be empty`, name);
  const max = rule.max ?? 1024;
  if (v.length > max) throw Errors.invalidValue(`'${name}' must be at most ${max} characters`, name);
  if (rule.pattern && !rule.pattern.test(v)) {
    throw Errors.invalidValue(`'${name}' ${rule.patternHint ?? "has characters that are not allowed"}`, name);
  }
  return v;
}

export function requiredString(o: JsonObject, name: string, rule: StringRule = {}): string {
  const v = optionalString(o, name, rule);
  if (v === undefined) throw Errors.missingField(name);
  return v;
}

export function optionalInt(o: JsonObject, name: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  const v = o[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isSafeInteger(v)) throw Errors.invalidValue(`'${name}' must be an integer`, name);
  if (v < min || v > max) throw Errors.invalidValue(`'${name}' must be between ${min} and ${max}`, name);
  return v;
}

export function requiredInt(o: JsonObject, name: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const v = optionalInt(o, name, min, max);
  if (v === undefined) throw Errors.missingField(name);
  return v;
}

export function optionalBool(o: JsonObject, name: string): boolean | undefined {
  const v = o[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") throw Errors.invalidValue(`'${name}' must be true or false`, name);
  return v;
}

export function optionalStringArray(o: JsonObject, name: string, rule: StringRule & { maxItems?: number } = {}): string[] | undefined {
  const v = o[name];
  if (v === undefined || v === null) return undefined;
  const maxItems = rule.maxItems ?? 256;
  if (!Array.isArray(v)) throw Errors.invalidValue(`'${name}' must be an array of strings`, name);
  if (v.length > maxItems) throw Errors.invalidValue(`'${name}' must have at most ${maxItems} items`, name);
  const max = rule.max ?? 256;
  for (const item of v) {
    if (typeof item !== "string" || item.length === 0 || item.length > max) {
      throw Errors.invalidValue(`'${name}' must hold non-empty strings of at most ${max} characters`, name);
    }
    if (rule.pattern && !rule.pattern.test(item)) {
      throw Errors.invalidValue(`'${name}' items ${rule.patternHint ?? "have characters that are not allowed"}`, name);
    }
  }
  return [...new Set(v as string[])];
}

/** Model, build and alias ids: printable, no spaces, may contain slashes but not at the ends. */
export const MODEL_ID: StringRule = {
  max: 256,
  pattern: /^[A-Za-z0-9._:@+-](?:[A-Za-z0-9._:@+/-]*[A-Za-z0-9._:@+-])?$/,
  patternHint: "may hold letters, digits and . _ : @ + - /, and must not start or end with /",
};

/** A whole number from a query string (or a JSON number), within bounds; `fallback` when absent. */
export function queryInt(value: unknown, param: string, bounds: { min: number; max: number; fallback: number }): number {
  if (value === undefined) return bounds.fallback;
  const n = typeof value === "string" && /^[0-9]{1,16}$/.test(value) ? Number(value) : value;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < bounds.min || n > bounds.max) {
    throw Errors.invalidValue(`'${param}' must be an integer between ${bounds.min} and ${bounds.max}`, param);
  }
  return n;
}
