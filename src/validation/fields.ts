/**
 * Readers for untrusted JSON objects. Each returns the typed value or throws a 400 ApiError whose
 * `param` names the field. Messages name the field and the rule, never the value received.
 */
import { Errors } from "../errors/api-error.ts";

export type JsonObject = Record<string, unknown>;

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
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
