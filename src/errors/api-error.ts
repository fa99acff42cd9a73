/**
 * The closed error vocabulary of the API (DESIGN.md section 5) and the one place that turns a typed
 * error into the OpenAI-style envelope `{"error": {message, type, code, param?}}`.
 *
 * Invariants:
 * - Every error the HTTP layer returns is an ApiError; anything else becomes 500 internal_error.
 * - A message never quotes request content (prompts, bodies); it may name a parameter or an id.
 */

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "insufficient_funds"
  | "insufficient_quota"
  | "permission_error"
  | "not_found_error"
  | "conflict_error"
  | "request_too_large"
  | "rate_limit_error"
  | "server_error"
  | "provider_error"
  | "service_unavailable"
  | "timeout";

/** Status, type and allowed codes: the single table every error is checked against (and the OpenAPI document's). */
export const VOCABULARY = {
  400: { type: "invalid_request_error", codes: ["invalid_json", "missing_field", "invalid_value", "unsupported_value"] },
  401: { type: "authentication_error", codes: ["invalid_api_key", "invalid_token", "invalid_session"] },
  403: { type: "permission_error", codes: ["model_not_allowed", "forbidden", "csrf_failed"] },
  404: { type: "not_found_error", codes: ["model_not_found", "not_found", "device_code_not_found"] },
  409: { type: "conflict_error", codes: ["self_route_conflict", "conflict", "device_code_already_decided"] },
  413: { type: "request_too_large", codes: ["request_too_large", "prompt_too_large"] },
  422: { type: "invalid_request_error", codes: ["tool_schema_invalid"] },
  429: { type: "rate_limit_error", codes: ["rate_limit_exceeded", "capacity_exhausted", "first_content_timeout"] },
  500: { type: "server_error", codes: ["internal_error"] },
  502: { type: "provider_error", codes: ["provider_error", "invalid_provider_output"] },
  503: { type: "service_unavailable", codes: ["service_unavailable", "model_unavailable", "provider_error"] },
  504: { type: "timeout", codes: ["timeout", "provider_error"] },
} as const;

type Vocabulary = typeof VOCABULARY;
export type ErrorStatus = keyof Vocabulary | 402;
export type ErrorCode = Vocabulary[keyof Vocabulary]["codes"][number] | "insufficient_quota";

export interface ErrorEnvelope {
  error: { message: string; type: string; code: string; param?: string };
}

export class ApiError extends Error {
  override readonly name = "ApiError";
  constructor(
    readonly status: ErrorStatus,
    readonly type: ErrorType,
    readonly code: ErrorCode,
    message: string,
    readonly param?: string,
    /** Extra response headers, e.g. Retry-After. */
    readonly headers?: Readonly<Record<string, string>>,
  ) {
    super(message);
  }

  toEnvelope(): ErrorEnvelope {
    const body: ErrorEnvelope["error"] = { message: this.message, type: this.type, code: this.code };
    if (this.param !== undefined) body.param = this.param;
    return { error: body };
  }
}

function make<S extends keyof Vocabulary>(status: S, code: Vocabulary[S]["codes"][number]) {
  return (message: string, param?: string, headers?: Record<string, string>) =>
    new ApiError(status, VOCABULARY[status].type, code, message, param, headers);
}

/** Constructors for every error in the vocabulary; handlers use these, never raw envelopes. */
export const Errors = {
  invalidJson: make(400, "invalid_json"),
  missingField: (param: string) => make(400, "missing_field")(`'${param}' is required`, param),
  invalidValue: make(400, "invalid_value"),
  unsupportedValue: make(400, "unsupported_value"),
  invalidApiKey: make(401, "invalid_api_key"),
  invalidToken: make(401, "invalid_token"),
  /** No console session cookie, or an unknown, expired or signed-out session. */
  invalidSession: make(401, "invalid_session"),
  /** Account balance too low. */
  insufficientFunds: (message: string) => new ApiError(402, "insufficient_funds", "insufficient_quota", message),
  /** Key spend cap reached. */
  insufficientQuota: (message: string) => new ApiError(402, "insufficient_quota", "insufficient_quota", message),
  modelNotAllowed: make(403, "model_not_allowed"),
  forbidden: make(403, "forbidden"),
  /** A state-changing console request without the session's `x-csrf-token`. */
  csrfFailed: make(403, "csrf_failed"),
  modelNotFound: make(404, "model_not_found"),
  notFound: make(404, "not_found"),
  /** A provider device login's user code is unknown or expired (one answer for both). */
  deviceCodeNotFound: make(404, "device_code_not_found"),
  selfRouteConflict: make(409, "self_route_conflict"),
  conflict: make(409, "conflict"),
  /** A provider device login was already approved or denied. */
  deviceCodeAlreadyDecided: make(409, "device_code_already_decided"),
  requestTooLarge: make(413, "request_too_large"),
  promptTooLarge: make(413, "prompt_too_large"),
  /** A JSON Schema of the request (tool parameters, response format) cannot be compiled within the limits. */
  toolSchemaInvalid: make(422, "tool_schema_invalid"),
  rateLimited: (message: string, retryAfterSeconds: number, headers: Record<string, string> = {}) =>
    make(429, "rate_limit_exceeded")(message, undefined, { ...headers, "retry-after": retryAfter(retryAfterSeconds) }),
  capacityExhausted: (message: string, retryAfterSeconds: number) =>
    make(429, "capacity_exhausted")(message, undefined, { "retry-after": retryAfter(retryAfterSeconds) }),
  firstContentTimeout: (message: string, retryAfterSeconds: number) =>
    make(429, "first_content_timeout")(message, undefined, { "retry-after": retryAfter(retryAfterSeconds) }),
  internal: () => make(500, "internal_error")("internal server error"),
  providerError: make(502, "provider_error"),
  invalidProviderOutput: make(502, "invalid_provider_output"),
  serviceUnavailable: make(503, "service_unavailable"),
  modelUnavailable: make(503, "model_unavailable"),
  timeout: make(504, "timeout"),
} as const;

/** Retry-After is a whole number of seconds, at least 0 (spec, Limits point 4). */
export function retryAfter(seconds: number): string {
  return String(Math.max(0, Math.ceil(Number.isFinite(seconds) ? seconds : 0)));
}

/** Maps anything thrown to an ApiError; unknown errors become 500 without their message. */
export function toApiError(error: unknown): ApiError {
  return error instanceof ApiError ? error : Errors.internal();
}
