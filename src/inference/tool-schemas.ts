/**
 * Compiling the JSON Schemas of a chat request (tool parameters, response_format json_schema) with Ajv
 * before dispatch: draft 2020-12, or draft-07 when the schema's `$schema` says so. A schema that cannot be
 * compiled is 422 `tool_schema_invalid` with `param` naming it and a fixed reason, never its content
 * (docs/api.md "Tools and structured output").
 *
 * Schemas are untrusted input to a code generator (docs/security.md "JSON Schemas from consumers"):
 * bounds come first; nothing is fetched, and reference resolution has a step budget; no `$data`, custom
 * keywords, formats or async; a schema's `$id` never stays registered; the Ajv instance is replaced after
 * RECYCLE_COMPILES compiles or RECYCLE_BYTES of schema. Ajv is imported on the first schema, not at start.
 * Verdicts are cached by the schema text's SHA-256 in a bounded LRU, one ToolSchemas per app.
 */
import { createHash } from "node:crypto";
import type AjvCore from "ajv/dist/core";
import type { UriResolver } from "ajv/dist/types";
import { Errors } from "../errors/api-error.ts";
import { isObject, type JsonObject } from "../validation/fields.ts";

/** One JSON Schema of a request, named by its OpenAI parameter path. */
export interface SchemaToCheck {
  readonly param: string;
  readonly schema: JsonObject;
  /** `strict: true` on its function or json_schema: OpenAI's strict subset applies. */
  readonly strict: boolean;
}

/** Largest schema, in bytes of its JSON text (UTF-8). */
export const MAX_SCHEMA_BYTES = 64 * 1024;
/** Largest sum of a request's schemas, in bytes. */
export const MAX_REQUEST_SCHEMA_BYTES = 256 * 1024;
/** Deepest schema, in levels of JSON objects and arrays (the schema object itself is level 1). */
export const MAX_SCHEMA_DEPTH = 32;
/** Most regular expressions in one schema (`pattern` values and `patternProperties` keys). */
export const MAX_SCHEMA_PATTERNS = 128;
/** Steps of reference resolution (URI parses and resolutions) one compile may take. */
const RESOLUTION_STEPS = 10_000;
const RECYCLE_COMPILES = 256;
const RECYCLE_BYTES = 4 * 1024 * 1024;
const DEFAULT_CACHE_ENTRIES = 512;

const DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema";
const DRAFT_07 = "http://json-schema.org/draft-07/schema";
type Draft = "2020-12" | "draft-07";

/** Thrown by the counting URI resolver when a compile's reference resolution runs out of steps. */
class ResolutionBudget extends Error {}

interface Compiler {
  readonly ajv: AjvCore;
  /** The instance's `refs` keys before any consumer schema (meta-schemas). */
  readonly baseline: ReadonlySet<string>;
  compiles: number;
  bytes: number;
}

interface Ajv {
  readonly compilers: Map<Draft, Compiler>;
  readonly MissingRefError: new (...args: never[]) => Error;
  readonly create: (draft: Draft) => Compiler;
  /** Resets the step budget of the next compile. */
  readonly budget: (steps: number) => void;
}

async function loadAjv(): Promise<Ajv> {
  const [{ default: Ajv2020, MissingRefError }, { default: AjvDraft07 }, { default: loaded }] = await Promise.all([
    import("ajv/dist/2020"),
    import("ajv"),
    import("ajv/dist/runtime/uri"),
  ]);
  // Ajv's own URI resolver (fast-uri); a CommonJS default that `bun build` wraps once more.
  const uri: UriResolver = "parse" in loaded ? loaded : (loaded as { default: UriResolver }).default;
  let left = Number.POSITIVE_INFINITY;
  const step = () => {
    if (--left < 0) throw new ResolutionBudget("reference resolution budget exhausted");
  };
  const uriResolver = {
    parse: (text: string) => {
      step();
      return uri.parse(text);
    },
    resolve: (base: string, path: string) => {
      step();
      return uri.resolve(base, path);
    },
    serialize: uri.serialize,
  };
  const options = {
    strict: false, // unknown keywords and formats are annotations, as for most runtimes
    logger: false as const,
    addUsedSchema: false,
    validateFormats: false,
    ownProperties: true,
    code: { optimize: false, source: false, lines: false },
    uriResolver,
  };
  const create = (draft: Draft): Compiler => {
    const ajv: AjvCore = draft === "2020-12" ? new Ajv2020(options) : new AjvDraft07(options);
    ajv.validateSchema({}); // compiles the meta-schema now, outside any consumer schema's step budget
    return { ajv, baseline: new Set(Object.keys(ajv.refs)), compiles: 0, bytes: 0 };
  };
  return { compilers: new Map(), MissingRefError, create, budget: (steps) => (left = steps) };
}

const OK = "";

/** The app's schema compiler and its verdict cache. */
export class ToolSchemas {
  private ajv: Promise<Ajv> | undefined;
  private readonly cache = new Map<string, string>();
  private readonly maxEntries: number;
  private compiled = 0;

  constructor(options: { readonly cacheEntries?: number } = {}) {
    this.maxEntries = options.cacheEntries ?? DEFAULT_CACHE_ENTRIES;
  }

  /** Throws 422 tool_schema_invalid for the first schema that cannot be compiled (in request order). */
  async check(schemas: readonly SchemaToCheck[]): Promise<void> {
    let total = 0;
    for (const { param, schema, strict } of schemas) {
      const text = JSON.stringify(schema);
      const bytes = Buffer.byteLength(text, "utf8");
      if (bytes > MAX_SCHEMA_BYTES) throw Errors.toolSchemaInvalid(`'${param}' is larger than ${MAX_SCHEMA_BYTES} bytes`, param);
      total += bytes;
      if (total > MAX_REQUEST_SCHEMA_BYTES) {
        throw Errors.toolSchemaInvalid(`the request's schemas together are larger than ${MAX_REQUEST_SCHEMA_BYTES} bytes`, param);
      }
      const key = createHash("sha256")
        .update(strict ? "strict\n" : "plain\n")
        .update(text)
        .digest("base64url");
      let verdict = this.cached(key);
      if (verdict === undefined) {
        this.ajv ??= loadAjv();
        verdict = this.verdict(await this.ajv, schema, strict, bytes);
        this.compiled++;
        this.remember(key, verdict);
      }
      if (verdict !== OK) throw Errors.toolSchemaInvalid(`'${param}' ${verdict}`, param);
    }
  }

  /** Cached verdicts. */
  get size(): number {
    return this.cache.size;
  }

  /** Schemas compiled so far (cache misses that reached Ajv or the bounds). */
  get compiles(): number {
    return this.compiled;
  }

  private cached(key: string): string | undefined {
    const verdict = this.cache.get(key);
    if (verdict !== undefined) {
      this.cache.delete(key);
      this.cache.set(key, verdict);
    }
    return verdict;
  }

  private remember(key: string, verdict: string): void {
    this.cache.set(key, verdict);
    if (this.cache.size > this.maxEntries) this.cache.delete(this.cache.keys().next().value as string);
  }

  /** OK, or why the schema is refused (a fixed phrase after its param). */
  private verdict(ajv: Ajv, schema: JsonObject, strict: boolean, bytes: number): string {
    const shape = measure(schema);
    if (shape.depth > MAX_SCHEMA_DEPTH) return `nests deeper than ${MAX_SCHEMA_DEPTH} levels`;
    if (shape.patterns > MAX_SCHEMA_PATTERNS)
      return `holds more than ${MAX_SCHEMA_PATTERNS} regular expressions (pattern, patternProperties)`;
    const declared = schema.$schema;
    const draft = declared === undefined ? "2020-12" : draftOf(declared);
    if (draft === undefined) return "declares a $schema other than draft 2020-12 or draft-07";
    let compiler = ajv.compilers.get(draft);
    if (!compiler || compiler.compiles >= RECYCLE_COMPILES || compiler.bytes >= RECYCLE_BYTES) {
      compiler = ajv.create(draft);
      ajv.compilers.set(draft, compiler);
    }
    compiler.compiles++;
    compiler.bytes += bytes;
    const problem = compile(ajv, compiler, schema, draft);
    if (problem !== undefined) return problem;
    return strict ? (strictProblem(schema) ?? OK) : OK;
  }
}

function draftOf(declared: unknown): Draft | undefined {
  if (typeof declared !== "string") return undefined;
  const id = declared.endsWith("#") ? declared.slice(0, -1) : declared;
  return id === DRAFT_2020 ? "2020-12" : id === DRAFT_07 ? "draft-07" : undefined;
}

function compile(ajv: Ajv, compiler: Compiler, schema: JsonObject, draft: Draft): string | undefined {
  const instance = compiler.ajv;
  ajv.budget(RESOLUTION_STEPS);
  try {
    instance.compile(schema);
    return undefined;
  } catch (e) {
    return reason(e, ajv, instance, draft);
  } finally {
    ajv.budget(Number.POSITIVE_INFINITY);
    instance.removeSchema(schema);
    for (const key of Object.keys(instance.refs)) if (!compiler.baseline.has(key)) delete instance.refs[key];
  }
}

/** Why Ajv refused a schema, as a fixed phrase (Ajv's own messages may quote the schema). */
function reason(e: unknown, { MissingRefError }: Ajv, ajv: AjvCore, draft: Draft): string {
  if (e instanceof ResolutionBudget) return "has references that do not resolve within the step budget (a $ref cycle?)";
  if (e instanceof MissingRefError) {
    return "has a $ref that does not resolve within the schema (remote references are never fetched)";
  }
  if (e instanceof RangeError) return "is too complex to compile";
  if (e instanceof SyntaxError && /regular expression/i.test(e.message)) return "holds a pattern that is not a valid regular expression";
  const message = e instanceof Error ? e.message : "";
  if (message.startsWith("schema is invalid")) {
    const keyword = ajv.errors?.[0]?.instancePath.split("/").pop();
    const known = keyword !== undefined && keyword !== "" && ajv.getKeyword(keyword) !== false;
    return `is not a valid JSON Schema (${draft})${known ? `: its '${keyword}' keyword is malformed` : ""}`;
  }
  if (message.startsWith("invalid anchor") || message.includes("resolves to more than one schema")) {
    return "has an invalid or ambiguous $id or $anchor";
  }
  if (message.startsWith("no schema with key or ref")) return "refers to an unknown meta-schema ($schema)";
  return "cannot be compiled";
}

/** Depth (levels of objects and arrays) and regular expressions of a schema, iteratively. */
function measure(schema: JsonObject): { depth: number; patterns: number } {
  let depth = 0;
  let patterns = 0;
  const stack: [unknown, number][] = [[schema, 1]];
  while (stack.length > 0) {
    const [value, level] = stack.pop() as [unknown, number];
    if (level > depth) depth = level;
    if (depth > MAX_SCHEMA_DEPTH) break;
    if (Array.isArray(value)) {
      for (const item of value) if (typeof item === "object" && item !== null) stack.push([item, level + 1]);
      continue;
    }
    const o = value as JsonObject;
    if (typeof o.pattern === "string") patterns++;
    if (isObject(o.patternProperties)) patterns += Object.keys(o.patternProperties).length;
    for (const child of Object.values(o)) if (typeof child === "object" && child !== null) stack.push([child, level + 1]);
  }
  return { depth, patterns };
}

/** Keywords whose value is a schema, an array of schemas, or a map of schemas. */
const ONE = [
  "additionalProperties",
  "items",
  "additionalItems",
  "contains",
  "not",
  "if",
  "then",
  "else",
  "propertyNames",
  "unevaluatedProperties",
  "unevaluatedItems",
];
const MANY = ["anyOf", "allOf", "oneOf", "prefixItems", "items"];
const MAP = ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];

const isObjectSchema = (s: JsonObject): boolean =>
  s.type === "object" || (Array.isArray(s.type) && s.type.includes("object")) || isObject(s.properties);

/** Why a `strict: true` schema is outside OpenAI's strict subset, or undefined. */
function strictProblem(root: JsonObject): string | undefined {
  if (!isObjectSchema(root)) return "is strict: its root must be an object schema ('type': 'object')";
  const visit = (s: JsonObject): string | undefined => {
    if (isObjectSchema(s)) {
      if (s.additionalProperties !== false) return "is strict: every object schema needs 'additionalProperties': false";
      const required = Array.isArray(s.required) ? s.required : [];
      const properties = isObject(s.properties) ? Object.keys(s.properties) : [];
      if (properties.some((p) => !required.includes(p))) return "is strict: every object schema must list all its properties in 'required'";
    }
    for (const key of ONE) {
      const v = s[key];
      if (isObject(v)) {
        const found = visit(v);
        if (found) return found;
      }
    }
    for (const key of MANY) {
      const v = s[key];
      if (Array.isArray(v)) {
        for (const item of v) {
          const found = isObject(item) ? visit(item) : undefined;
          if (found) return found;
        }
      }
    }
    for (const key of MAP) {
      const v = s[key];
      if (isObject(v)) {
        for (const item of Object.values(v)) {
          const found = isObject(item) ? visit(item) : undefined;
          if (found) return found;
        }
      }
    }
    return undefined;
  };
  return visit(root);
}
