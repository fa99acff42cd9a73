/**
 * The OpenAPI document's error part: the envelope `{"error": {message, type, code, param?}}` as a schema per
 * status, built from the error vocabulary itself (src/errors/api-error.ts VOCABULARY, and the two 402s), so
 * a code added there is documented here; the shared headers (Retry-After, the rate-limit headers); and the
 * error responses each operation lists.
 *
 * Invariant: every status an operation can answer is listed explicitly with its envelope (the `default`
 * response only covers the route-independent refusals: a bad Host header, an unknown route).
 */
import { Errors, VOCABULARY } from "../../errors/api-error.ts";
import { type JsonSchema, ref } from "./schema.ts";

/** The statuses of the vocabulary, 402 included, in order. */
export const ERROR_STATUSES: readonly number[] = [...Object.keys(VOCABULARY).map(Number), 402].sort((a, b) => a - b);

const PAYMENT = [Errors.insufficientFunds(""), Errors.insufficientQuota("")];

function envelope(description: string, types: readonly string[], codes: readonly string[]): JsonSchema {
  return {
    type: "object",
    description,
    required: ["error"],
    properties: {
      error: {
        type: "object",
        required: ["message", "type", "code"],
        properties: {
          message: { type: "string", description: "Human-readable; never quotes request content." },
          type: types.length > 0 ? { type: "string", enum: [...new Set(types)] } : { type: "string" },
          code: codes.length > 0 ? { type: "string", enum: [...new Set(codes)] } : { type: "string" },
          param: { type: "string", description: "The request parameter at fault, in OpenAI's dotted form (`messages[2].content`)." },
        },
      },
    },
  };
}

/** `Error` (any status) and `Error<status>` for each status of the vocabulary. */
export function errorSchemas(): Record<string, JsonSchema> {
  const schemas: Record<string, JsonSchema> = {
    Error: envelope("The error envelope, whatever the status (also the in-band error event of a committed stream).", [], []),
  };
  for (const status of ERROR_STATUSES) {
    const entry = VOCABULARY[status as keyof typeof VOCABULARY];
    const types = entry ? [entry.type] : PAYMENT.map((e) => e.type);
    const codes = entry ? entry.codes : PAYMENT.map((e) => e.code);
    schemas[`Error${status}`] = envelope(`The error envelope of a ${status} answer.`, types, codes);
  }
  return schemas;
}

const RETRY_AFTER = { type: "string", pattern: "^[0-9]+$" };

export function headerComponents(): Record<string, JsonSchema> {
  const rate = (what: string) => ({ description: what, schema: { type: "string" } });
  return {
    RetryAfter: { description: "Whole seconds to wait before retrying (at least 0).", required: true, schema: RETRY_AFTER },
    RetryAfterOptional: { description: "When present: whole seconds to wait before retrying (at least 0).", schema: RETRY_AFTER },
    RequestId: { description: "The id of this answer's usage row and ledger entries.", required: true, schema: { type: "string" } },
    ResponseNonce: {
      description: "Sealed transport only: this answer's response nonce (32 bytes, base64url); it derives the answer's key.",
      schema: { type: "string", pattern: "^[A-Za-z0-9_-]{43}$" },
    },
    RateLimitLimitRequests: rate("The key's requests per minute (only when the key has a request limit)."),
    RateLimitRemainingRequests: rate("Requests left in the bucket now."),
    RateLimitResetRequests: rate("Time until the request bucket is full, e.g. `1s`, `6m0s`, `350ms`."),
    RateLimitLimitTokens: rate("The key's tokens per minute (only when the key has a token limit)."),
    RateLimitRemainingTokens: rate("Tokens left in the bucket now."),
    RateLimitResetTokens: rate("Time until the token bucket is full."),
  };
}

const header = (name: string) => ({ $ref: `#/components/headers/${name}` });

/** The x-ratelimit-* headers (present for each limited dimension). */
export const RATE_LIMIT_HEADERS: Record<string, JsonSchema> = {
  "x-ratelimit-limit-requests": header("RateLimitLimitRequests"),
  "x-ratelimit-remaining-requests": header("RateLimitRemainingRequests"),
  "x-ratelimit-reset-requests": header("RateLimitResetRequests"),
  "x-ratelimit-limit-tokens": header("RateLimitLimitTokens"),
  "x-ratelimit-remaining-tokens": header("RateLimitRemainingTokens"),
  "x-ratelimit-reset-tokens": header("RateLimitResetTokens"),
};

export const SEALED_JSON = "application/vnd.umbra.sealed+json";

export interface ErrorResponseOptions {
  /** The chat route: once a sealed body opened, the error is sealed back (SealedBody, with the nonce header). */
  readonly sealed?: boolean;
  /** Extra headers the answer may carry. */
  readonly headers?: Record<string, JsonSchema>;
}

/** The response object of one error status on one operation. */
export function errorResponse(status: number, description: string, options: ErrorResponseOptions = {}): JsonSchema {
  const headers: Record<string, JsonSchema> = { ...options.headers };
  if (status === 429) headers["Retry-After"] = header("RetryAfter");
  if (status === 503) headers["Retry-After"] = header("RetryAfterOptional");
  if (options.sealed) headers["x-umbra-response-nonce"] = header("ResponseNonce");
  return {
    description,
    ...(Object.keys(headers).length > 0 ? { headers } : {}),
    content: {
      "application/json": { schema: ref(`Error${status}`) },
      ...(options.sealed ? { [SEALED_JSON]: { schema: ref("SealedBody") } } : {}),
    },
  };
}

/** The `default` response every operation ends with. */
export const DEFAULT_ERROR: JsonSchema = {
  description:
    "Refusals of any route, in the same envelope: 400 `invalid_value` for a Host header that is not a host name, 404 `not_found` for an unknown route.",
  content: { "application/json": { schema: ref("Error") } },
};

/** 503 while the coordinator awaits provisioning of its secrets, or cannot reach its database (`Retry-After: 1`). */
export const UNAVAILABLE = "The coordinator awaits provisioning of its secrets (`--provisioning await`), or cannot reach its database now.";
