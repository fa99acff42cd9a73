/**
 * The tool-calling and structured-output fields of a chat request, read as OpenAI defines them
 * (docs/api.md "Tools and structured output"): `tools` (function tools, at most MAX_TOOLS, unique names),
 * `tool_choice` ("none" | "auto" | "required" | a named function among `tools`), `parallel_tool_calls`
 * (boolean) and `response_format` (text | json_object | json_schema).
 *
 * A malformed shape is a 400 (missing_field, invalid_value, unsupported_value) whose `param` is OpenAI's
 * dotted path (`tools[0].function.name`); messages name fields, never values. The fields are forwarded as
 * sent; what this returns is the list of JSON Schemas among them, for tool-schemas.ts to compile (422).
 */
import { Errors } from "../errors/api-error.ts";
import { isObject, type JsonObject } from "../validation/fields.ts";
import type { SchemaToCheck } from "./tool-schemas.ts";

/** Most tools one request may declare. */
export const MAX_TOOLS = 128;
/** OpenAI's rule for function and json_schema names (the OpenAPI document states it too). */
export const NAME = /^[A-Za-z0-9_-]{1,64}$/;
const NAME_RULE = "must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -";

const present = (v: unknown): boolean => v !== undefined && v !== null;

function objectAt(v: unknown, param: string): JsonObject {
  if (!present(v)) throw Errors.missingField(param);
  if (!isObject(v)) throw Errors.invalidValue(`'${param}' must be an object`, param);
  return v;
}

function name(o: JsonObject, param: string): string {
  const v = o.name;
  if (!present(v)) throw Errors.missingField(param);
  if (typeof v !== "string" || !NAME.test(v)) throw Errors.invalidValue(`'${param}' ${NAME_RULE}`, param);
  return v;
}

function optional(o: JsonObject, key: string, param: string, type: "string" | "boolean"): void {
  const v = o[key];
  if (present(v) && typeof v !== type) throw Errors.invalidValue(`'${param}' must be a ${type}`, param);
}

/** The JSON Schema at `o[key]`, if any: an object (a JSON Schema document). */
function schemaAt(o: JsonObject, key: string, param: string, strict: boolean): SchemaToCheck | undefined {
  const v = o[key];
  if (!present(v)) return undefined;
  if (!isObject(v)) throw Errors.invalidValue(`'${param}' must be a JSON Schema object`, param);
  return { param, schema: v, strict };
}

function readTools(v: unknown, schemas: SchemaToCheck[]): Set<string> {
  if (!Array.isArray(v)) throw Errors.invalidValue("'tools' must be an array", "tools");
  if (v.length === 0) throw Errors.invalidValue("'tools' must hold at least 1 tool (or be left out)", "tools");
  if (v.length > MAX_TOOLS) throw Errors.invalidValue(`'tools' must hold at most ${MAX_TOOLS} tools`, "tools");
  const names = new Set<string>();
  for (let i = 0; i < v.length; i++) {
    const p = `tools[${i}]`;
    const tool = objectAt(v[i], p);
    const type = tool.type;
    if (!present(type)) throw Errors.missingField(`${p}.type`);
    if (type === "custom") throw Errors.unsupportedValue(`'${p}.type' custom tools are not supported: use 'function'`, `${p}.type`);
    if (type !== "function") throw Errors.invalidValue(`'${p}.type' must be 'function'`, `${p}.type`);
    const fn = objectAt(tool.function, `${p}.function`);
    const fname = name(fn, `${p}.function.name`);
    if (names.has(fname)) throw Errors.invalidValue(`'${p}.function.name' repeats the name of an earlier tool`, `${p}.function.name`);
    names.add(fname);
    optional(fn, "description", `${p}.function.description`, "string");
    optional(fn, "strict", `${p}.function.strict`, "boolean");
    const schema = schemaAt(fn, "parameters", `${p}.function.parameters`, fn.strict === true);
    if (schema) schemas.push(schema);
  }
  return names;
}

function readToolChoice(v: unknown, tools: Set<string> | undefined): void {
  if (typeof v === "string") {
    if (v === "none" || v === "auto") return;
    if (v !== "required") throw Errors.invalidValue("'tool_choice' must be 'none', 'auto', 'required' or a named function", "tool_choice");
    if (!tools) throw Errors.invalidValue("'tool_choice' 'required' needs 'tools'", "tool_choice");
    return;
  }
  if (!isObject(v)) throw Errors.invalidValue("'tool_choice' must be a string or an object", "tool_choice");
  const type = v.type;
  if (!present(type)) throw Errors.missingField("tool_choice.type");
  if (type === "allowed_tools" || type === "custom") {
    throw Errors.unsupportedValue("'tool_choice.type' must be 'function' (allowed_tools and custom are not supported)", "tool_choice.type");
  }
  if (type !== "function") throw Errors.invalidValue("'tool_choice.type' must be 'function'", "tool_choice.type");
  const fname = name(objectAt(v.function, "tool_choice.function"), "tool_choice.function.name");
  if (!tools?.has(fname)) throw Errors.invalidValue("'tool_choice.function.name' names no tool in 'tools'", "tool_choice.function.name");
}

function readResponseFormat(v: unknown, schemas: SchemaToCheck[]): void {
  const format = objectAt(v, "response_format");
  const type = format.type;
  if (!present(type)) throw Errors.missingField("response_format.type");
  if (type === "text" || type === "json_object") return;
  if (type !== "json_schema") {
    throw Errors.invalidValue("'response_format.type' must be 'text', 'json_object' or 'json_schema'", "response_format.type");
  }
  const js = objectAt(format.json_schema, "response_format.json_schema");
  name(js, "response_format.json_schema.name");
  optional(js, "description", "response_format.json_schema.description", "string");
  optional(js, "strict", "response_format.json_schema.strict", "boolean");
  const schema = schemaAt(js, "schema", "response_format.json_schema.schema", js.strict === true);
  if (schema) schemas.push(schema);
}

/** Checks the tool and response-format fields of `body`; returns the JSON Schemas among them, in order. */
export function readToolFields(body: JsonObject): SchemaToCheck[] {
  const schemas: SchemaToCheck[] = [];
  const tools = present(body.tools) ? readTools(body.tools, schemas) : undefined;
  if (present(body.tool_choice)) readToolChoice(body.tool_choice, tools);
  const parallel = body.parallel_tool_calls;
  if (present(parallel) && typeof parallel !== "boolean") {
    throw Errors.invalidValue("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
  }
  if (present(body.response_format)) readResponseFormat(body.response_format, schemas);
  return schemas;
}
