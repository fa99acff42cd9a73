/**
 * The building blocks of the OpenAPI document's schemas (JSON Schema 2020-12, OpenAPI 3.1's dialect): the
 * schema type, references to components, and the few shapes used everywhere (int64, a nullable value).
 * The document is plain data: what `GET /v1/openapi.json` serves is `JSON.stringify` of it.
 */

/** A JSON Schema, or any other object of the document (plain JSON data). */
export type JsonSchema = { readonly [key: string]: unknown };

/** A reference to `#/components/schemas/<name>`. */
export const ref = (name: string): JsonSchema => ({ $ref: `#/components/schemas/${name}` });

/** An integer in int64's range (Unix seconds, token counts, micro-USD). */
export const int64 = (description?: string, minimum?: number): JsonSchema => ({
  type: "integer",
  format: "int64",
  ...(minimum !== undefined ? { minimum } : {}),
  ...(description !== undefined ? { description } : {}),
});

export const string = (description?: string): JsonSchema => ({ type: "string", ...(description !== undefined ? { description } : {}) });

/** `schema`, or null (the request readers treat null as absent). */
export function orNull(schema: JsonSchema): JsonSchema {
  const type = schema.type;
  if (typeof type !== "string" || "enum" in schema || "const" in schema) return { anyOf: [schema, { type: "null" }] };
  return { ...schema, type: [type, "null"] };
}

/** An object schema: `required` names the fields always present; the others are optional. */
export function object(properties: Record<string, JsonSchema>, required: readonly string[], description?: string): JsonSchema {
  return {
    type: "object",
    ...(description !== undefined ? { description } : {}),
    required: [...required],
    properties,
  };
}
