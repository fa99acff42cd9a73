/**
 * A sample value for a JSON Schema: the echo engine's deterministic tool-call arguments and structured
 * answers (echo.ts). The value validates against the schemas tool definitions and `json_schema`
 * response formats use in practice (draft 2020-12 and draft-07 keywords; the rules are on `sample`).
 * `pattern` and `not` are not honoured. Nesting deeper than MAX_SAMPLE_DEPTH gives null. Pure and total:
 * never throws, whatever the schema.
 */

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

/** Deepest schema nesting (and $ref chain) followed. */
const MAX_SAMPLE_DEPTH = 32;

const FORMATS: Readonly<Record<string, string>> = {
  "date-time": "1970-01-01T00:00:00Z",
  date: "1970-01-01",
  time: "00:00:00Z",
  email: "echo@example.com",
  uri: "https://example.com/",
  url: "https://example.com/",
  uuid: "00000000-0000-4000-8000-000000000000",
};

/** A value that validates against `schema`; `text` fills strings. */
export function sampleValue(schema: unknown, text: string): unknown {
  return sample(schema, text, schema, 0);
}

function resolve(ref: string, root: unknown): unknown {
  if (ref === "#") return root;
  if (!ref.startsWith("#/")) return undefined;
  let node: unknown = root;
  for (const raw of ref.slice(2).split("/")) {
    const key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    if (!isObj(node)) return undefined;
    node = node[key];
  }
  return node;
}

function typeOf(schema: Obj): string {
  const t = schema.type;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const first = t.find((x) => typeof x === "string" && x !== "null");
    return typeof first === "string" ? first : t.includes("null") ? "null" : "string";
  }
  if (isObj(schema.properties) || Array.isArray(schema.required)) return "object";
  if (schema.items !== undefined || Array.isArray(schema.prefixItems)) return "array";
  if (typeof schema.minimum === "number" || typeof schema.maximum === "number") return "number";
  return "string";
}

/**
 * The rules, by keyword:
 *   const -> it; enum -> its first value; anyOf / oneOf -> the first branch; allOf -> the branches merged;
 *   $ref -> a local reference ("#", "#/$defs/..", "#/definitions/..") resolved in the root schema;
 *   type (the first non-null one of a list; inferred from properties / items when absent) ->
 *     string: `text` (or a fixed value for the formats date-time, date, time, email, uri, uuid), padded
 *             with "x" to minLength, cut to maxLength;
 *     number / integer: the minimum (exclusiveMinimum + 1), else 1, at most the maximum, a multiple of
 *             multipleOf; boolean: true; null: null;
 *     array: prefixItems, then `items` up to minItems (so [] unless minItems asks for more), at most maxItems;
 *     object: every required property, recursively (properties, else additionalProperties, else text).
 */
function sample(schema: unknown, text: string, root: unknown, depth: number): unknown {
  if (depth > MAX_SAMPLE_DEPTH || !isObj(schema)) return depth > MAX_SAMPLE_DEPTH ? null : text;
  if (typeof schema.$ref === "string") return sample(resolve(schema.$ref, root), text, root, depth + 1);
  if ("const" in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  for (const key of ["anyOf", "oneOf"] as const) {
    const branches = schema[key];
    if (Array.isArray(branches) && branches.length > 0) {
      const { [key]: _, ...rest } = schema;
      return sample({ ...rest, ...(isObj(branches[0]) ? branches[0] : {}) }, text, root, depth + 1);
    }
  }
  if (Array.isArray(schema.allOf)) {
    const { allOf, ...rest } = schema;
    const merged: Obj = { ...rest };
    for (const part of allOf) {
      if (!isObj(part)) continue;
      const resolved = typeof part.$ref === "string" ? resolve(part.$ref, root) : part;
      if (!isObj(resolved)) continue;
      const required = [
        ...(Array.isArray(merged.required) ? merged.required : []),
        ...(Array.isArray(resolved.required) ? resolved.required : []),
      ];
      const properties = {
        ...(isObj(merged.properties) ? merged.properties : {}),
        ...(isObj(resolved.properties) ? resolved.properties : {}),
      };
      Object.assign(merged, resolved, { required, properties });
    }
    return sample(merged, text, root, depth + 1);
  }
  switch (typeOf(schema)) {
    case "null":
      return null;
    case "boolean":
      return true;
    case "integer":
    case "number":
      return numberFor(schema, typeOf(schema) === "integer");
    case "array": {
      const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems.map((s) => sample(s, text, root, depth + 1)) : [];
      const min = typeof schema.minItems === "number" ? schema.minItems : 0;
      const max = typeof schema.maxItems === "number" ? schema.maxItems : Number.POSITIVE_INFINITY;
      const wanted = Math.min(max, Math.max(min, prefix.length));
      const items = [...prefix];
      while (items.length < wanted) items.push(sample(schema.items, text, root, depth + 1));
      return items.slice(0, Math.max(wanted, 0));
    }
    case "object": {
      const out: Obj = {};
      const properties = isObj(schema.properties) ? schema.properties : {};
      const required = Array.isArray(schema.required) ? schema.required.filter((k): k is string => typeof k === "string") : [];
      for (const key of required) {
        const child = key in properties ? properties[key] : isObj(schema.additionalProperties) ? schema.additionalProperties : {};
        out[key] = sample(child, text, root, depth + 1);
      }
      return out;
    }
    default:
      return stringFor(schema, text);
  }
}

function numberFor(schema: Obj, integer: boolean): number {
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
  const min = num(schema.minimum);
  const exclusiveMin = num(schema.exclusiveMinimum);
  const max = num(schema.maximum);
  const exclusiveMax = num(schema.exclusiveMaximum);
  let value = min ?? (exclusiveMin !== undefined ? exclusiveMin + 1 : 1);
  if (max !== undefined && value > max) value = max;
  if (exclusiveMax !== undefined && value >= exclusiveMax) value = exclusiveMax - 1;
  const step = num(schema.multipleOf);
  if (step !== undefined && step > 0) value = Math.ceil(value / step) * step;
  return integer ? Math.ceil(value) : value;
}

function stringFor(schema: Obj, text: string): string {
  const format = typeof schema.format === "string" ? FORMATS[schema.format] : undefined;
  let value = format ?? text;
  const min = typeof schema.minLength === "number" ? schema.minLength : 0;
  const max = typeof schema.maxLength === "number" ? schema.maxLength : Number.POSITIVE_INFINITY;
  // Lengths count code points, as JSON Schema does.
  const points = [...value];
  if (points.length > max) value = points.slice(0, Math.max(0, max)).join("");
  if (points.length < min) value += "x".repeat(min - points.length);
  return value;
}
