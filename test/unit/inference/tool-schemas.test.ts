/**
 * Compiling a request's JSON Schemas (tool-schemas.ts): valid draft 2020-12 and draft-07 schemas pass;
 * schemas that cannot be compiled, that break the bounds or OpenAI's strict subset are 422
 * tool_schema_invalid naming the schema and a fixed reason (never the schema's content); nothing leaks
 * from one compile into the next; verdicts are cached in a bounded LRU.
 */
import { describe, expect, test } from "bun:test";
import { ApiError } from "../../../src/errors/api-error.ts";
import {
  MAX_REQUEST_SCHEMA_BYTES,
  MAX_SCHEMA_BYTES,
  MAX_SCHEMA_DEPTH,
  MAX_SCHEMA_PATTERNS,
  type SchemaToCheck,
  ToolSchemas,
} from "../../../src/inference/tool-schemas.ts";
import type { JsonObject } from "../../../src/validation/fields.ts";

const CANARY = "canary-3c9d-secret-schema";
const PARAM = "tools[0].function.parameters";

/** The 422 for one schema, as {status, type, code, param, message}; undefined when it compiles. */
async function verdict(schema: JsonObject, strict = false, schemas = new ToolSchemas()) {
  try {
    await schemas.check([{ param: PARAM, schema, strict }]);
    return undefined;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    expect(JSON.stringify(e.toEnvelope())).not.toContain(CANARY);
    return { status: e.status as number, type: e.type as string, code: e.code as string, param: e.param, message: e.message };
  }
}

const refused = (reason: string, param = PARAM) => ({
  status: 422,
  type: "invalid_request_error",
  code: "tool_schema_invalid",
  param,
  message: `'${param}' ${reason}`,
});

/** A schema nesting `levels` JSON levels deep (the schema itself is level 1). */
function nested(levels: number): JsonObject {
  let schema: JsonObject = { type: "string" };
  for (let level = 1; level < levels; level++) schema = { type: "array", items: schema };
  return schema;
}
const depthOf = (v: unknown): number => (typeof v === "object" && v !== null ? 1 + Math.max(0, ...Object.values(v).map(depthOf)) : 0);

describe("schemas that compile", () => {
  const shared = new ToolSchemas();
  test.each<[string, JsonObject]>([
    ["an empty schema", {}],
    [
      "a plain object schema with annotations",
      { type: "object", title: "t", description: CANARY, properties: { a: { type: "integer", minimum: 0 } } },
    ],
    ["$defs and local $ref", { $defs: { city: { type: "string" } }, type: "object", properties: { c: { $ref: "#/$defs/city" } } }],
    [
      "a recursive tree",
      {
        $defs: { node: { type: "object", properties: { kids: { type: "array", items: { $ref: "#/$defs/node" } } } } },
        $ref: "#/$defs/node",
      },
    ],
    ["prefixItems and unevaluatedItems (2020-12)", { type: "array", prefixItems: [{ type: "string" }], unevaluatedItems: false }],
    ["an $anchor reference", { $defs: { c: { $anchor: "city", type: "string" } }, properties: { a: { $ref: "#city" } } }],
    [
      "$id-relative references inside the document",
      { $id: "https://schemas.example/root", $defs: { a: { $id: "a.json", type: "string" } }, $ref: "a.json" },
    ],
    ["the 2020-12 meta-schema declared", { $schema: "https://json-schema.org/draft/2020-12/schema", type: "object" }],
    [
      "draft-07 as the openai and ai SDKs emit it",
      {
        $schema: "http://json-schema.org/draft-07/schema#",
        type: "object",
        definitions: { u: { type: "string", format: "email" } },
        properties: { t: { type: "array", items: [{ type: "string" }], additionalItems: false }, u: { $ref: "#/definitions/u" } },
      },
    ],
    ["unknown keywords and formats (annotations)", { type: "string", format: "made-up", nullable: true, "x-extension": { a: 1 } }],
    [
      "a valid pattern and patternProperties",
      { type: "object", patternProperties: { "^[a-z]+$": { type: "string", pattern: "^\\p{L}+$" } } },
    ],
    [`${MAX_SCHEMA_DEPTH} levels deep`, nested(MAX_SCHEMA_DEPTH)],
  ])("%s", async (_name, schema) => {
    expect(await verdict(schema, false, shared)).toBeUndefined();
  });

  test("the nested() helper builds the depth it says", () => {
    expect([depthOf(nested(MAX_SCHEMA_DEPTH)), depthOf(nested(MAX_SCHEMA_DEPTH + 1))]).toEqual([MAX_SCHEMA_DEPTH, MAX_SCHEMA_DEPTH + 1]);
  });
});

describe("schemas that cannot be compiled -> 422 tool_schema_invalid", () => {
  test.each<[string, JsonObject, string]>([
    ["a misspelt type", { type: "objec" }, "is not a valid JSON Schema (2020-12): its 'type' keyword is malformed"],
    [
      "required not an array",
      { type: "object", required: "a" },
      "is not a valid JSON Schema (2020-12): its 'required' keyword is malformed",
    ],
    ["properties holding a number", { properties: { [CANARY]: 5 } }, "is not a valid JSON Schema (2020-12)"],
    [
      "a draft-07 tuple without $schema (2020-12 items)",
      { type: "array", items: [{ type: "string" }] },
      "is not a valid JSON Schema (2020-12): its 'items' keyword is malformed",
    ],
    [
      "a remote $ref",
      { $ref: `https://${CANARY}.example/schema.json` },
      "has a $ref that does not resolve within the schema (remote references are never fetched)",
    ],
    [
      "a file $ref",
      { $ref: "file:///etc/passwd" },
      "has a $ref that does not resolve within the schema (remote references are never fetched)",
    ],
    [
      "a relative $ref to another document",
      { properties: { a: { $ref: "other.json#/x" } } },
      "has a $ref that does not resolve within the schema (remote references are never fetched)",
    ],
    [
      "a $ref to a missing definition",
      { $ref: `#/$defs/${CANARY}` },
      "has a $ref that does not resolve within the schema (remote references are never fetched)",
    ],
    [
      "a $ref cycle",
      { $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" },
      "has references that do not resolve within the step budget (a $ref cycle?)",
    ],
    [
      "a $ref to itself",
      { $defs: { a: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" },
      "has references that do not resolve within the step budget (a $ref cycle?)",
    ],
    [
      "a pattern that is not a regular expression",
      { type: "string", pattern: `([${CANARY}` },
      "holds a pattern that is not a valid regular expression",
    ],
    [
      "a patternProperties key that is not a regular expression",
      { patternProperties: { "(": {} } },
      "holds a pattern that is not a valid regular expression",
    ],
    ["an invalid $anchor", { $defs: { a: { $anchor: "1 bad" } } }, "has an invalid or ambiguous $id or $anchor"],
    [
      "draft 2019-09",
      { $schema: "https://json-schema.org/draft/2019-09/schema" },
      "declares a $schema other than draft 2020-12 or draft-07",
    ],
    ["a $schema that is not a string", { $schema: 7 }, "declares a $schema other than draft 2020-12 or draft-07"],
    ["a remote $schema", { $schema: `https://${CANARY}.example/meta` }, "declares a $schema other than draft 2020-12 or draft-07"],
    [
      "draft-07 with a bad type",
      { $schema: "http://json-schema.org/draft-07/schema#", type: 5 },
      "is not a valid JSON Schema (draft-07): its 'type' keyword is malformed",
    ],
  ])("%s", async (_name, schema, reason) => {
    expect(await verdict(schema)).toEqual(refused(reason));
  });
});

describe("bounds", () => {
  const wide = (properties: number, extra = "") =>
    ({
      type: "object",
      description: extra,
      properties: Object.fromEntries(Array.from({ length: properties }, (_, i) => [`p${i}`, { type: "string" }])),
    }) as JsonObject;
  /** A schema of exactly `bytes` bytes of JSON. */
  const sized = (bytes: number): JsonObject => {
    const empty = JSON.stringify({ description: "" }).length;
    return { description: "x".repeat(bytes - empty) };
  };

  test.each<[string, JsonObject, string | undefined]>([
    [`exactly ${MAX_SCHEMA_BYTES} bytes`, sized(MAX_SCHEMA_BYTES), undefined],
    [`${MAX_SCHEMA_BYTES + 1} bytes`, sized(MAX_SCHEMA_BYTES + 1), `is larger than ${MAX_SCHEMA_BYTES} bytes`],
    [
      "multi-byte characters count as their UTF-8 bytes",
      { description: "é".repeat(MAX_SCHEMA_BYTES / 2) },
      `is larger than ${MAX_SCHEMA_BYTES} bytes`,
    ],
    [`${MAX_SCHEMA_DEPTH + 1} levels deep`, nested(MAX_SCHEMA_DEPTH + 1), `nests deeper than ${MAX_SCHEMA_DEPTH} levels`],
    [
      `${MAX_SCHEMA_PATTERNS} regular expressions`,
      { properties: Object.fromEntries(Array.from({ length: MAX_SCHEMA_PATTERNS }, (_, i) => [`p${i}`, { pattern: `^${i}$` }])) },
      undefined,
    ],
    [
      `${MAX_SCHEMA_PATTERNS + 1} regular expressions (pattern and patternProperties)`,
      {
        patternProperties: { "^x": {} },
        properties: Object.fromEntries(Array.from({ length: MAX_SCHEMA_PATTERNS }, (_, i) => [`p${i}`, { pattern: `^${i}$` }])),
      },
      `holds more than ${MAX_SCHEMA_PATTERNS} regular expressions (pattern, patternProperties)`,
    ],
    ["a wide schema within the bytes (1,500 properties)", wide(1500), undefined],
  ])("%s", async (_name, schema, reason) => {
    expect(await verdict(schema)).toEqual(reason === undefined ? undefined : refused(reason));
  });

  test(`the request's schemas together: at most ${MAX_REQUEST_SCHEMA_BYTES} bytes, the one crossing it is named`, async () => {
    const schema = sized(MAX_SCHEMA_BYTES);
    const list = (n: number): SchemaToCheck[] =>
      Array.from({ length: n }, (_, i) => ({ param: `tools[${i}].function.parameters`, schema, strict: false }));
    const schemas = new ToolSchemas();
    await schemas.check(list(MAX_REQUEST_SCHEMA_BYTES / MAX_SCHEMA_BYTES));
    let error: unknown;
    await schemas.check(list(MAX_REQUEST_SCHEMA_BYTES / MAX_SCHEMA_BYTES + 1)).catch((e) => (error = e));
    expect(error instanceof ApiError && { status: error.status, code: error.code, param: error.param, message: error.message }).toEqual({
      status: 422,
      code: "tool_schema_invalid",
      param: "tools[4].function.parameters",
      message: `the request's schemas together are larger than ${MAX_REQUEST_SCHEMA_BYTES} bytes`,
    });
  });
});

describe("strict: true -> OpenAI's strict subset", () => {
  const ok = { type: "object", properties: { a: { type: "string" } }, required: ["a"], additionalProperties: false };
  test.each<[string, JsonObject, string | undefined]>([
    ["every object closed and fully required", ok, undefined],
    [
      "nested objects in arrays, anyOf and $defs, all closed",
      {
        type: "object",
        properties: { list: { type: "array", items: { $ref: "#/$defs/item" } }, either: { anyOf: [{ type: "string" }, { type: "null" }] } },
        required: ["list", "either"],
        additionalProperties: false,
        $defs: { item: { type: "object", properties: { n: { type: "number" } }, required: ["n"], additionalProperties: false } },
      },
      undefined,
    ],
    [
      "the root not an object",
      { type: "array", items: { type: "string" } },
      "is strict: its root must be an object schema ('type': 'object')",
    ],
    [
      "additionalProperties missing",
      { type: "object", properties: { a: { type: "string" } }, required: ["a"] },
      "is strict: every object schema needs 'additionalProperties': false",
    ],
    [
      "a property not required",
      { type: "object", properties: { a: { type: "string" }, [CANARY]: { type: "string" } }, required: ["a"], additionalProperties: false },
      "is strict: every object schema must list all its properties in 'required'",
    ],
    [
      "an open object inside array items",
      { ...ok, properties: { a: { type: "array", items: { type: "object", properties: {} } } } },
      "is strict: every object schema needs 'additionalProperties': false",
    ],
    [
      "an object in $defs missing a required property",
      { ...ok, $defs: { d: { type: "object", properties: { x: {} }, additionalProperties: false } } },
      "is strict: every object schema must list all its properties in 'required'",
    ],
    [
      "an open object under anyOf",
      { ...ok, properties: { a: { anyOf: [{ type: "object", properties: { b: {} }, required: ["b"] }] } } },
      "is strict: every object schema needs 'additionalProperties': false",
    ],
  ])("%s", async (_name, schema, reason) => {
    expect(await verdict(schema, true)).toEqual(reason === undefined ? undefined : refused(reason));
  });

  test("the same schema without strict compiles", async () => {
    expect(await verdict({ type: "object", properties: { a: { type: "string" } } }, false)).toBeUndefined();
  });
});

describe("isolation and cache", () => {
  test("an $id registered while compiling one schema does not resolve in the next", async () => {
    const schemas = new ToolSchemas();
    expect(await verdict({ properties: { a: { $id: "https://shared.example/x", type: "string" } } }, false, schemas)).toBeUndefined();
    expect(await verdict({ $ref: "https://shared.example/x" }, false, schemas)).toEqual(
      refused("has a $ref that does not resolve within the schema (remote references are never fetched)"),
    );
    // The same $id in another schema is no conflict either.
    expect(await verdict({ properties: { b: { $id: "https://shared.example/x", type: "number" } } }, false, schemas)).toBeUndefined();
  });

  test("a verdict is cached by the schema's text: the same tools on every turn compile once", async () => {
    const schemas = new ToolSchemas();
    const good = { type: "object", properties: { a: { type: "string" } } };
    const bad = { type: "objec" };
    for (let turn = 0; turn < 5; turn++) {
      expect(await verdict(structuredClone(good), false, schemas)).toBeUndefined();
      expect(await verdict(structuredClone(bad), false, schemas)).toEqual(
        refused("is not a valid JSON Schema (2020-12): its 'type' keyword is malformed"),
      );
    }
    // strict is part of the key: the same text under strict is a new verdict.
    expect(await verdict(good, true, schemas)).toEqual(refused("is strict: every object schema needs 'additionalProperties': false"));
    expect({ compiles: schemas.compiles, cached: schemas.size }).toEqual({ compiles: 3, cached: 3 });
  });

  test("the cache is a bounded LRU: the least recently used verdict goes first", async () => {
    const schemas = new ToolSchemas({ cacheEntries: 2 });
    const s = (n: number) => ({ title: `s${n}` });
    await schemas.check([{ param: "a", schema: s(1), strict: false }]);
    await schemas.check([{ param: "a", schema: s(2), strict: false }]);
    await schemas.check([{ param: "a", schema: s(1), strict: false }]); // s1 used again: s2 is now the oldest
    await schemas.check([{ param: "a", schema: s(3), strict: false }]); // evicts s2
    await schemas.check([{ param: "a", schema: s(1), strict: false }]); // cached
    const before = schemas.compiles;
    await schemas.check([{ param: "a", schema: s(2), strict: false }]); // compiled again
    expect({ before, after: schemas.compiles, size: schemas.size }).toEqual({ before: 3, after: 4, size: 2 });
  });

  test("many distinct schemas (past the compiler's recycling) keep compiling and refusing correctly", async () => {
    const schemas = new ToolSchemas({ cacheEntries: 8 });
    const outcomes: string[] = [];
    for (let i = 0; i < 600; i++) {
      const schema =
        i % 3 === 0 ? { type: "object", properties: { [`p${i}`]: { type: "string", pattern: `^${i}$` } } } : { $ref: `#/$defs/m${i}` };
      outcomes.push((await verdict(schema, false, schemas)) === undefined ? "ok" : "refused");
    }
    expect(outcomes).toEqual(Array.from({ length: 600 }, (_, i) => (i % 3 === 0 ? "ok" : "refused")));
  });
});
