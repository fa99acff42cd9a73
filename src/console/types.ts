/**
 * The console's session as its routes see it (docs/api.md, "Console API"), and the dependency through
 * which they get one: sessions are made and checked elsewhere (the console's sign-in); the data routes
 * only ask for the session of a request and for its CSRF check. Times in Unix ms.
 */

/** A signed-in account holder's console session. */
export interface ConsoleSession {
  /** The SHA-256 (hex) of the session id: names the session without being its secret. */
  readonly id: string;
  readonly accountId: string;
  readonly csrfToken: string;
  readonly createdAt: number;
  /** Absolute expiry. */
  readonly expiresAt: number;
  /** Idle expiry as of this request (after its renewal). */
  readonly idleExpiresAt: number;
}

/** How console routes authenticate: injected, so the data routes do not depend on how sessions are kept. */
export interface ConsoleAuth {
  /** The caller's live session; throws 401 `invalid_session` (no, unknown, expired or signed-out cookie). */
  authenticate(request: Request): Promise<ConsoleSession>;
  /** Throws 403 `csrf_failed` unless the request carries the session's `x-csrf-token`. */
  requireCsrf(request: Request, session: ConsoleSession): void;
}
