/**
 * The console's session as its routes see it (docs/api.md, "Console API"), and the dependency through
 * which they get one: sessions are made and checked elsewhere (the console's sign-in); the data routes
 * only ask for the session of a request and for its CSRF check. Times in Unix ms.
 */

/** A signed-in account holder's console session. `id` names the session; it is never logged. */
export interface ConsoleSession {
  readonly id: string;
  readonly accountId: string;
  readonly csrfToken: string;
  readonly createdAt: number;
  readonly expiresAt: number;
}

/** How console routes authenticate: injected, so the data routes do not depend on how sessions are kept. */
export interface ConsoleAuth {
  /** The request's session; throws ApiError 401 `invalid_session` without a valid one. */
  authenticate(request: Request): Promise<ConsoleSession>;
  /** Throws ApiError 403 `csrf_failed` unless the request carries the session's CSRF token. */
  requireCsrf(request: Request, session: ConsoleSession): void;
}
