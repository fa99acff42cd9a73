/**
 * Checks against the OpenAPI document (src/api/openapi/): its structure (`documentProblems`: OpenAPI 3.1's
 * objects, every `$ref` resolving, path parameters, security, operation ids, every schema compiling with
 * Ajv 2020-12), and real answers (`OpenApiChecker.response`): the status documented for the operation, the
 * content type, required headers, and the body (JSON, or each event's data for text/event-stream through
 * `x-sse-data`) valid against the documented schema. Answers are checked strictly: every object schema
 * with `properties` is closed (`additionalProperties: false` unless it says otherwise), so a field the
 * code writes and the document does not name fails. Requests are checked against the open schemas.
 */
import Ajv2020, { type ErrorObject, type ValidateFunction } from "ajv/dist/2020";
import { createParser } from "eventsource-parser";

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const ROOT_ID = "urn:umbra:openapi";
const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/** The value at a local JSON pointer (`#/components/schemas/Model`), or undefined. */
export function resolvePointer(doc: unknown, pointer: string): unknown {
  if (!pointer.startsWith("#")) return undefined;
  let at: unknown = doc;
  for (const raw of pointer.slice(1).split("/").slice(1)) {
    const key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    if (!isObj(at) && !Array.isArray(at)) return undefined;
    at = (at as Json)[key];
    if (at === undefined) return undefined;
  }
  return at;
}

/** Every `$ref` in `value` with where it sits. */
function refs(value: unknown, at = "#"): { at: string; ref: string }[] {
  if (Array.isArray(value)) return value.flatMap((v, i) => refs(v, `${at}/${i}`));
  if (!isObj(value)) return [];
  return Object.entries(value).flatMap(([k, v]) => (k === "$ref" && typeof v === "string" ? [{ at, ref: v }] : refs(v, `${at}/${k}`)));
}

/** A deep copy with component refs made absolute and, when `closed`, every object schema with properties closed. */
function prepare(value: unknown, closed: boolean): unknown {
  if (Array.isArray(value)) return value.map((v) => prepare(v, closed));
  if (!isObj(value)) return value;
  const out: Json = {};
  for (const [k, v] of Object.entries(value)) {
    if (k === "$ref" && typeof v === "string") out[k] = v.replace("#/components/schemas/", `${ROOT_ID}#/$defs/`);
    else
      out[k] =
        k === "properties" && isObj(v)
          ? Object.fromEntries(Object.entries(v).map(([p, s]) => [p, prepare(s, closed)]))
          : prepare(v, closed);
  }
  const isObjectType = out.type === "object" || (Array.isArray(out.type) && out.type.includes("object"));
  if (closed && isObjectType && isObj(out.properties) && !("additionalProperties" in out)) out.additionalProperties = false;
  return out;
}

function newAjv(doc: Json, closed: boolean): Ajv2020 {
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false, strictRequired: false });
  ajv.addFormat("int64", { type: "number", validate: (n: number) => Number.isInteger(n) });
  ajv.addVocabulary(["example", "externalDocs", "xml", "discriminator"]);
  const schemas = ((doc.components as Json | undefined)?.schemas ?? {}) as Json;
  ajv.addSchema({ $id: ROOT_ID, $defs: prepare(schemas, closed) });
  return ajv;
}

const explain = (errors: ErrorObject[] | null | undefined) =>
  (errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message ?? ""} ${JSON.stringify(e.params)}`).join("; ");

/** The fields OpenAPI 3.1 allows in each object checked here (besides `x-` extensions). */
const FIELDS: Record<string, readonly string[]> = {
  document: ["openapi", "info", "jsonSchemaDialect", "servers", "paths", "webhooks", "components", "security", "tags", "externalDocs"],
  info: ["title", "summary", "description", "termsOfService", "contact", "license", "version"],
  operation: [
    "tags",
    "summary",
    "description",
    "externalDocs",
    "operationId",
    "parameters",
    "requestBody",
    "responses",
    "callbacks",
    "deprecated",
    "security",
    "servers",
  ],
  parameter: [
    "name",
    "in",
    "description",
    "required",
    "deprecated",
    "allowEmptyValue",
    "style",
    "explode",
    "allowReserved",
    "schema",
    "example",
    "examples",
    "content",
  ],
  requestBody: ["description", "content", "required"],
  response: ["description", "headers", "content", "links"],
  media: ["schema", "example", "examples", "encoding"],
  header: ["description", "required", "deprecated", "schema", "example", "examples", "content", "style", "explode"],
  reference: ["$ref", "summary", "description"],
};

/** What is wrong with the document's structure; empty when nothing is. */
export function documentProblems(doc: Json): string[] {
  const problems: string[] = [];
  const need = (ok: boolean, what: string) => {
    if (!ok) problems.push(what);
  };
  /** Fields of `value` that its kind of object does not have. */
  const only = (kind: string, value: unknown, where: string) => {
    if (!isObj(value)) {
      problems.push(`${where}: not an object`);
      return;
    }
    const allowed = "$ref" in value ? FIELDS.reference : FIELDS[kind];
    for (const key of Object.keys(value))
      need(key.startsWith("x-") || (allowed ?? []).includes(key), `${where}: ${kind} has no field ${key}`);
  };
  only("document", doc, "#");
  only("info", doc.info, "info");
  for (const [name, h] of Object.entries(((doc.components as Json | undefined)?.headers ?? {}) as Json))
    only("header", h, `header ${name}`);
  need(doc.openapi === "3.1.0", "openapi is not 3.1.0");
  const info = doc.info as Json | undefined;
  need(isObj(info) && typeof info.title === "string" && typeof info.version === "string", "info needs title and version");
  const components = (doc.components ?? {}) as Json;
  const schemes = (components.securitySchemes ?? {}) as Json;
  const tags = new Set(((doc.tags ?? []) as Json[]).map((t) => t.name));
  const ids = new Set<string>();
  for (const { at, ref } of refs(doc)) need(resolvePointer(doc, ref) !== undefined, `${at}: $ref ${ref} does not resolve`);
  const paths = doc.paths as Json | undefined;
  need(isObj(paths), "paths is not an object");
  for (const [template, item] of Object.entries(paths ?? {})) {
    need(template.startsWith("/"), `path ${template} does not start with /`);
    const wanted = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]).sort();
    for (const [method, operation] of Object.entries(item as Json)) {
      const where = `${method.toUpperCase()} ${template}`;
      if (!METHODS.includes(method) || !isObj(operation)) {
        problems.push(`${where}: not an operation`);
        continue;
      }
      only("operation", operation, where);
      if (operation.requestBody !== undefined) {
        only("requestBody", operation.requestBody, `${where} requestBody`);
        for (const [type, media] of Object.entries(((operation.requestBody as Json).content ?? {}) as Json))
          only("media", media, `${where} ${type}`);
      }
      const id = operation.operationId;
      need(typeof id === "string" && !ids.has(id), `${where}: operationId missing or repeated`);
      ids.add(id as string);
      for (const tag of (operation.tags ?? []) as string[]) need(tags.has(tag), `${where}: tag ${tag} not declared`);
      for (const requirement of (operation.security ?? []) as Json[]) {
        for (const name of Object.keys(requirement)) need(name in schemes, `${where}: security scheme ${name} not declared`);
      }
      const params = (operation.parameters ?? []) as Json[];
      for (const p of params) {
        only("parameter", p, `${where} parameter`);
        need(typeof p.name === "string" && ["query", "header", "path", "cookie"].includes(p.in as string), `${where}: bad parameter`);
        need(p.in !== "path" || p.required === true, `${where}: path parameter ${p.name} not required`);
        need(isObj(p.schema), `${where}: parameter ${p.name} has no schema`);
      }
      const declared = params.filter((p) => p.in === "path").map((p) => p.name);
      const [got, template_] = [JSON.stringify(declared.sort()), JSON.stringify(wanted)];
      need(got === template_, `${where}: path parameters ${got}, the template's ${template_}`);
      const responses = operation.responses as Json | undefined;
      need(isObj(responses) && Object.keys(responses).length > 0, `${where}: no responses`);
      for (const [status, response] of Object.entries(responses ?? {})) {
        need(/^[1-5][0-9]{2}$|^default$/.test(status), `${where}: response key ${status}`);
        const r = response as Json;
        only("response", r, `${where} ${status}`);
        need(typeof r.description === "string", `${where} ${status}: no description`);
        for (const [name, h] of Object.entries((r.headers ?? {}) as Json)) only("header", h, `${where} ${status} header ${name}`);
        for (const [type, media] of Object.entries((r.content ?? {}) as Json)) {
          only("media", media, `${where} ${status} ${type}`);
          need(/^[a-z]+\/[a-z0-9.+-]+$/.test(type), `${where} ${status}: media type ${type}`);
          need(isObj((media as Json).schema), `${where} ${status} ${type}: no schema`);
        }
      }
    }
  }
  const schemas = (components.schemas ?? {}) as Json;
  const ajv = newAjv(doc, false);
  for (const name of Object.keys(schemas)) {
    try {
      ajv.getSchema(`${ROOT_ID}#/$defs/${name}`);
    } catch (e) {
      problems.push(`schema ${name} does not compile: ${(e as Error).message}`);
    }
  }
  return problems;
}

/** An answer as the checker reads it. */
export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
}

/** Validates answers against a document and records which operation and status each one exercised. */
export class OpenApiChecker {
  /** `METHOD template status` of every answer checked. */
  readonly covered = new Set<string>();
  private readonly closed: Ajv2020;
  private readonly open: Ajv2020;
  private readonly compiled = { closed: new Map<unknown, ValidateFunction>(), open: new Map<unknown, ValidateFunction>() };

  constructor(private readonly doc: Json) {
    this.closed = newAjv(doc, true);
    this.open = newAjv(doc, false);
  }

  /** Errors of `value` against `schema` (answers: closed; requests: open). */
  validate(schema: unknown, value: unknown, closed = true): string[] {
    const cache = closed ? this.compiled.closed : this.compiled.open;
    let fn = cache.get(schema);
    if (!fn) {
      fn = (closed ? this.closed : this.open).compile(prepare(schema, closed) as Json);
      cache.set(schema, fn);
    }
    return fn(value) ? [] : [explain(fn.errors)];
  }

  private operation(method: string, template: string): Json {
    const operation = ((this.doc.paths as Json)[template] as Json | undefined)?.[method.toLowerCase()];
    if (!isObj(operation)) throw new Error(`${method} ${template} is not in the document`);
    return operation;
  }

  /** Problems of a request body against the operation's documented request schema (open). */
  request(method: string, template: string, contentType: string, body: unknown): string[] {
    const media = ((this.operation(method, template).requestBody as Json).content as Json)[contentType] as Json | undefined;
    if (!media) return [`request content type ${contentType} not documented`];
    return this.validate(media.schema, body, false);
  }

  /** Problems of an answer to `METHOD template`; records its coverage. */
  response(method: string, template: string, answer: Answer): string[] {
    const where = `${method} ${template} ${answer.status}`;
    this.covered.add(where);
    const response = (this.operation(method, template).responses as Json)[String(answer.status)] as Json | undefined;
    if (!response) return [`${where}: status not documented`];
    const problems: string[] = [];
    for (const [name, raw] of Object.entries((response.headers ?? {}) as Json)) {
      const header = (isObj(raw) && typeof raw.$ref === "string" ? resolvePointer(this.doc, raw.$ref) : raw) as Json;
      const value = answer.headers.get(name);
      if (value === null) {
        if (header.required === true) problems.push(`${where}: required header ${name} missing`);
        continue;
      }
      problems.push(...this.validate(header.schema, value).map((e) => `${where}: header ${name}: ${e}`));
    }
    const type = (answer.headers.get("content-type") ?? "").split(";")[0]?.trim() ?? "";
    const media = ((response.content ?? {}) as Json)[type] as Json | undefined;
    if (!media) return [...problems, `${where}: content type ${type} not documented`];
    if (type === "text/event-stream") {
      const data: string[] = [];
      createParser({ onEvent: (e) => data.push(e.data) }).feed(answer.text);
      if (data.length === 0) problems.push(`${where}: no events`);
      for (const d of data) {
        const value = d === "[DONE]" ? d : JSON.parse(d);
        problems.push(...this.validate(media["x-sse-data"], value).map((e) => `${where}: event ${d.slice(0, 80)}: ${e}`));
      }
      return problems;
    }
    return [...problems, ...this.validate(media.schema, JSON.parse(answer.text)).map((e) => `${where}: ${e}`)];
  }

  /** Every `METHOD template` of the document. */
  operations(): string[] {
    return Object.entries(this.doc.paths as Json).flatMap(([template, item]) =>
      Object.keys(item as Json).map((method) => `${method.toUpperCase()} ${template}`),
    );
  }
}
