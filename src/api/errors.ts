/**
 * The one place where errors become HTTP responses: ApiError -> its status, headers and envelope;
 * Elysia's own routing, parse and validation errors -> the same envelope; anything else -> 500 without
 * its message (logged by class name and route template only, since a message or a path could quote
 * input). The hook itself never throws; an unknown route's 404 does not quote the path.
 */
import { Elysia } from "elysia";
import { type ApiError, Errors, toApiError } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";

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

/** The error's ApiError; a 500 (anything not an ApiError) is logged by class name and route template only. */
export function toLoggedApiError(logger: Pick<Logger, "error">, error: unknown, route: string): ApiError {
  const apiError = toApiError(error);
  if (apiError.status === 500) logger.error("unhandled error", { error_name: error instanceof Error ? error.name : typeof error, route });
  return apiError;
}
