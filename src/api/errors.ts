/**
 * The one place where errors become HTTP responses: ApiError -> its status, headers and envelope;
 * Elysia's own routing, parse and validation errors -> the same envelope; anything else -> 500 without
 * its message (logged by class name and route template only, since a message or a path could quote
 * input). The hook itself never throws; an unknown route's 404 does not quote the path.
 */
import { Elysia } from "elysia";
import { type ApiError, Errors, toApiError } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import { isStoreUnavailable } from "../store/errors.ts";

export function errorResponse(error: ApiError): Response {
  return new Response(JSON.stringify(error.toEnvelope()), {
    status: error.status,
    headers: { "content-type": "application/json", ...error.headers },
  });
}

export function errorHandling(logger: Logger) {
  return new Elysia({ name: "errors" }).onError({ as: "global" }, ({ code, error, route }) => {
    if (code === "NOT_FOUND") return errorResponse(Errors.notFound("no such route"));
    if (code === "PARSE") return errorResponse(Errors.invalidJson("the body is not valid JSON"));
    if (code === "VALIDATION") return errorResponse(Errors.invalidValue("the request does not match the expected shape"));
    return errorResponse(toLoggedApiError(logger, error, route || "unmatched"));
  });
}

/**
 * The error's ApiError. A database that cannot be reached now is 503 with Retry-After (logged as a
 * warning); anything else that is not an ApiError is a 500, logged by class name and route template only.
 */
export function toLoggedApiError(logger: Pick<Logger, "error" | "warn">, error: unknown, route: string): ApiError {
  if (isStoreUnavailable(error)) {
    logger.warn("database unavailable", { route });
    return Errors.serviceUnavailable("the database cannot be reached right now; retry shortly", undefined, { "retry-after": "1" });
  }
  const apiError = toApiError(error);
  if (apiError.status === 500) logger.error("unhandled error", { error_name: error instanceof Error ? error.name : typeof error, route });
  return apiError;
}
