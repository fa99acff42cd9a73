/** The store's errors, thrown by every implementation (the conformance suite checks them). */
/** A uniqueness constraint refused the write; `field` names the input that collided. */
export class DuplicateError extends Error {
  override readonly name = "DuplicateError";
  constructor(readonly field: string) {
    super(`${field} is already in use`);
  }
}

/** The store cannot be opened, migrated or written. The message names the path, never data. */
export class StoreOpenError extends Error {
  override readonly name = "StoreOpenError";
}

/** Connection failures of the Postgres driver (postgres.js codes and socket errors). */
const UNREACHABLE = new Set([
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
]);

/**
 * True for an error that says the database cannot be reached now (not that a request was wrong): a lost
 * or refused connection, SQLSTATE class 08 (connection exception), a server shutting down or starting
 * (57P01-57P03), too many connections (53300), also as the `cause` of a wrapping error (drizzle's). The
 * API answers it 503 with Retry-After.
 */
export function isStoreUnavailable(e: unknown, depth = 0): boolean {
  if (typeof e !== "object" || e === null || depth > 3) return false;
  // Drizzle wraps the driver's error (DrizzleQueryError): its `cause` says what happened.
  if ("cause" in e && isStoreUnavailable((e as { cause: unknown }).cause, depth + 1)) return true;
  if (!("code" in e)) return false;
  const code = String((e as { code: unknown }).code);
  return UNREACHABLE.has(code) || code.startsWith("08") || ["57P01", "57P02", "57P03", "53300"].includes(code);
}
