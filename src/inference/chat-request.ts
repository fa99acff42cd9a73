/**
 * Validation of a TextChatRequest (docs/api.md "POST /v1/chat/completions"), with the output budget rules:
 * omitted, null or 0 is the server default; a positive value requests that budget (clamped to the model);
 * negative or malformed is 400; a positive max_tokens wins, else a positive max_completion_tokens is
 * copied to max_tokens. `n` > 1 is 400. temperature, top_p and stop are type-checked; messages are read as
 * OpenAI shapes them (src/protocol/chat-messages.ts); tools, tool_choice, parallel_tool_calls and
 * response_format are checked (tool-fields.ts) and their JSON Schemas listed for compiling (tool-schemas.ts,
 * by the caller); other fields pass through to the runtime, except identity fields, which are dropped.
 * Error messages name fields, never their content. Nesting is bounded first (MAX_JSON_DEPTH), before
 * anything else walks the body.
 */
import { ApiError, Errors } from "../errors/api-error.ts";
import { type ChatMessage, type MessageFault, readChatMessages } from "../protocol/chat-messages.ts";
import { type EngineRequestBody, MAX_TOKENS_LIMIT } from "../protocol/frames.ts";
import { isObject, type JsonObject, MAX_JSON_DEPTH, tooDeep } from "../validation/fields.ts";
import { readToolFields } from "./tool-fields.ts";
import type { SchemaToCheck } from "./tool-schemas.ts";

export interface ChatRequest {
  readonly model: string;
  readonly messages: readonly ChatMessage[];
  /** The first image part's param (`messages[i].content[j]`): refused unless the model takes images. */
  readonly imageParam: string | undefined;
  /** The JSON Schemas of tools and response_format, to compile before dispatch (422). */
  readonly schemas: readonly SchemaToCheck[];
  readonly stream: boolean;
  /** `self_route: true`: serve only on the caller's own provider machines, free of charge. */
  readonly selfRoute: boolean;
  /** The positive budget the client asked for, if any (rules 1, 2, 4). */
  readonly requestedMaxTokens: number | undefined;
  /** Fields forwarded to the runtime as they came (sampling parameters and the like). */
  readonly passThrough: Readonly<Record<string, unknown>>;
}

/** Fields the coordinator consumes itself, and identity fields it never forwards. */
const CONSUMED = new Set(["model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "n", "self_route"]);
const IDENTITY = new Set(["user", "safety_identifier", "metadata", "store"]);

/**
 * The budget fields, read from their digits by the route (parseJsonExact) where a double cannot tell
 * neighbouring integers apart: there they arrive as a bigint (or as their literal when not an integer).
 */
export const BUDGET_FIELDS: readonly string[] = ["max_tokens", "max_completion_tokens"];

/** The largest int64; a larger budget is not an int64 (spec budget rule 3: malformed). */
const INT64_MAX = 9223372036854775807n;

const beyond = (name: string) => Errors.invalidValue(`'${name}' must be an int64 (at most ${INT64_MAX})`, name);

/** A message fault as the API's 400 (module-level: no closure per request). */
const refuseMessages = (fault: MessageFault): never => {
  throw new ApiError(400, "invalid_request_error", fault.code, fault.message, fault.param);
};

function budget(o: JsonObject, name: string): number | undefined {
  const v = o[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v === "bigint") {
    if (v < 0n) throw Errors.invalidValue(`'${name}' must be at least 0`, name);
    if (v > INT64_MAX) throw beyond(name);
    return v === 0n ? undefined : Number(v);
  }
  if (typeof v !== "number" || !Number.isInteger(v)) throw Errors.invalidValue(`'${name}' must be an integer`, name);
  if (v < 0) throw Errors.invalidValue(`'${name}' must be at least 0`, name);
  // The double 2^63 stands for 2^63 - 1 as well as for 2^63: without its digits it is not provably an int64.
  if (v >= 2 ** 63) throw beyond(name);
  return v === 0 ? undefined : v;
}

function finiteNumber(o: JsonObject, name: string): void {
  const v = o[name];
  if (v !== undefined && v !== null && (typeof v !== "number" || !Number.isFinite(v))) {
    throw Errors.invalidValue(`'${name}' must be a number`, name);
  }
}

export function parseChatRequest(body: unknown): ChatRequest {
  if (body === undefined) throw Errors.invalidJson("a JSON request body is required");
  if (!isObject(body)) throw Errors.invalidJson("the request body must be a JSON object");
  const deep = tooDeep(body);
  if (deep !== undefined) throw Errors.invalidValue(`a field nests deeper than ${MAX_JSON_DEPTH} levels`, deep.slice(0, 64));

  const model = body.model;
  if (model === undefined || model === null) throw Errors.missingField("model");
  if (typeof model !== "string" || model.length === 0 || model.length > 256) {
    throw Errors.invalidValue("'model' must be a non-empty string of at most 256 characters", "model");
  }

  const { messages, imageParam } = readChatMessages(body.messages, refuseMessages);

  const stream = body.stream;
  if (stream !== undefined && stream !== null && typeof stream !== "boolean")
    throw Errors.invalidValue("'stream' must be a boolean", "stream");
  if (body.stream_options !== undefined && body.stream_options !== null && !isObject(body.stream_options)) {
    throw Errors.invalidValue("'stream_options' must be an object", "stream_options");
  }

  const selfRoute = body.self_route;
  if (selfRoute !== undefined && selfRoute !== null && typeof selfRoute !== "boolean") {
    throw Errors.invalidValue("'self_route' must be a boolean", "self_route");
  }

  const maxTokens = budget(body, "max_tokens");
  const maxCompletionTokens = budget(body, "max_completion_tokens");

  const n = body.n;
  if (n !== undefined && n !== null) {
    if (typeof n !== "number" || !Number.isInteger(n) || n < 1) throw Errors.invalidValue("'n' must be a positive integer", "n");
    if (n > 1) throw Errors.unsupportedValue("'n' greater than 1 is not supported", "n");
  }

  finiteNumber(body, "temperature");
  finiteNumber(body, "top_p");
  const stop = body.stop;
  if (stop !== undefined && stop !== null && typeof stop !== "string") {
    if (!Array.isArray(stop) || !stop.every((s) => typeof s === "string")) {
      throw Errors.invalidValue("'stop' must be a string or an array of strings", "stop");
    }
  }

  const schemas = readToolFields(body);

  const passThrough: Record<string, unknown> = {};
  for (const key of Object.keys(body)) {
    if (!CONSUMED.has(key) && !IDENTITY.has(key) && body[key] !== undefined) passThrough[key] = body[key];
  }

  return {
    model,
    messages,
    imageParam,
    schemas,
    stream: stream === true,
    selfRoute: selfRoute === true,
    requestedMaxTokens: maxTokens ?? maxCompletionTokens,
    passThrough,
  };
}

/** The output budget after the server default, the model's limit and the protocol's (MAX_TOKENS_LIMIT). */
export function effectiveBudget(requested: number | undefined, defaultMaxTokens: number, modelLimit: number | null): number {
  const wanted = Math.min(requested ?? defaultMaxTokens, MAX_TOKENS_LIMIT);
  return modelLimit === null ? wanted : Math.min(wanted, modelLimit);
}

/** The request as the provider's engine receives it. */
export function engineBody(request: ChatRequest, maxTokens: number): EngineRequestBody {
  return { ...request.passThrough, messages: request.messages, max_tokens: maxTokens };
}
