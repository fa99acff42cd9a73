/**
 * Console sessions (issue 22; docs/security.md "Console sessions"): made at sign-in (link or OpenID
 * Connect), carried by the cookie `umbra_session`, ended by sign-out or sign-out everywhere.
 *
 * Invariants:
 * - the session id is 32 random bytes (base64url); the store keeps only its SHA-256 (hex), which is also
 *   `ConsoleSession.id`: the id itself is never stored, logged or handed to a route;
 * - absolute expiry 12 hours after creation, idle expiry 2 hours after last use; the idle expiry is
 *   renewed on use at most once a minute (one write per minute per session, not per request);
 * - the CSRF token is HMAC-SHA256(key = session id, "umbra-console-csrf-v1"), base64url: derived, never
 *   stored, unforgeable without the cookie, the same on every replica;
 * - a new session never reuses a presented cookie (no fixation): sign-in always mints a fresh id;
 * - the cookie is `HttpOnly; SameSite=Lax; Path=/`, `Secure` unless the public URL is loopback http.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { sha256Hex } from "../auth/secrets.ts";
import { Errors } from "../errors/api-error.ts";
import type { ConsoleSessionRecord, Store } from "../store/types.ts";
import type { ConsoleAuth, ConsoleSession } from "./types.ts";

export type { ConsoleAuth, ConsoleSession };

export const SESSION_COOKIE = "umbra_session";
export const CSRF_HEADER = "x-csrf-token";
export const SESSION_ABSOLUTE_MS = 12 * 3_600_000;
export const SESSION_IDLE_MS = 2 * 3_600_000;
/** The idle expiry is written at most this often per session. */
export const SESSION_RENEW_MS = 60_000;

const CSRF_LABEL = "umbra-console-csrf-v1";

function csrfOf(sessionId: string): string {
  return createHmac("sha256", sessionId).update(CSRF_LABEL).digest("base64url");
}

/** Throws 403 `csrf_failed` unless `x-csrf-token` equals the session's token (constant-time compare). */
export function requireCsrf(request: Request, session: ConsoleSession): void {
  const given = request.headers.get(CSRF_HEADER);
  const expected = Buffer.from(session.csrfToken);
  if (given === null || given.length !== session.csrfToken.length || !timingSafeEqual(Buffer.from(given), expected)) {
    throw Errors.csrfFailed(`this request needs the session's CSRF token in '${CSRF_HEADER}' (GET /console/api/session)`);
  }
}

/** The value of one cookie in a Cookie header, or undefined. */
export function cookieValue(header: string | null, name: string): string | undefined {
  if (header === null) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** True when cookies may go without `Secure`: the public URL is plain http on a loopback host. */
export function loopbackHttp(publicUrl: string | undefined): boolean {
  if (publicUrl === undefined || !URL.canParse(publicUrl)) return false;
  const url = new URL(publicUrl);
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  return url.protocol === "http:" && (host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host));
}

const SESSION_ID = /^[A-Za-z0-9_-]{43}$/;

export interface ConsoleSessionsOptions {
  readonly store: Pick<Store, "consoleSessions">;
  /** Unix ms. */
  readonly now: () => number;
  /** The coordinator's public base URL (config/config.ts publicBaseUrl); decides the cookie's `Secure`. */
  readonly publicUrl: string | undefined;
}

/** Sessions: create, authenticate (with renewal), sign out, sign out everywhere, and their cookies. */
export class ConsoleSessions implements ConsoleAuth {
  private readonly secure: boolean;

  constructor(private readonly options: ConsoleSessionsOptions) {
    this.secure = !loopbackHttp(options.publicUrl);
  }

  /** A new session for the account and its Set-Cookie value; undefined when the account does not exist. */
  async create(accountId: string): Promise<{ session: ConsoleSession; setCookie: string } | undefined> {
    const id = randomBytes(32).toString("base64url");
    const now = this.options.now();
    const record: ConsoleSessionRecord = {
      idHash: sha256Hex(id),
      accountId,
      createdAt: now,
      expiresAt: now + SESSION_ABSOLUTE_MS,
      idleExpiresAt: now + SESSION_IDLE_MS,
    };
    const created = await this.options.store.consoleSessions.create(record);
    if (!created) return undefined;
    return { session: toSession(created, id), setCookie: this.cookie(id, Math.floor(SESSION_ABSOLUTE_MS / 1000)) };
  }

  async authenticate(request: Request): Promise<ConsoleSession> {
    const id = cookieValue(request.headers.get("cookie"), SESSION_COOKIE);
    const refused = () => Errors.invalidSession("no console session: sign in again");
    if (id === undefined || !SESSION_ID.test(id)) throw refused();
    const hash = sha256Hex(id);
    const record = await this.options.store.consoleSessions.findByHash(hash);
    const now = this.options.now();
    if (!record) throw refused();
    if (now >= record.expiresAt || now >= record.idleExpiresAt) {
      await this.options.store.consoleSessions.delete(hash);
      throw refused();
    }
    const idleExpiresAt = Math.min(now + SESSION_IDLE_MS, record.expiresAt);
    if (idleExpiresAt - record.idleExpiresAt >= SESSION_RENEW_MS) {
      await this.options.store.consoleSessions.touch(hash, idleExpiresAt);
      return toSession({ ...record, idleExpiresAt }, id);
    }
    return toSession(record, id);
  }

  requireCsrf(request: Request, session: ConsoleSession): void {
    requireCsrf(request, session);
  }

  /** Ends the session the request's cookie names, if any (sign-in: the presented cookie is never kept). */
  async endPresented(request: Request): Promise<void> {
    const id = cookieValue(request.headers.get("cookie"), SESSION_COOKIE);
    if (id !== undefined && SESSION_ID.test(id)) await this.options.store.consoleSessions.delete(sha256Hex(id));
  }

  /** Ends this session. */
  async signOut(session: ConsoleSession): Promise<void> {
    await this.options.store.consoleSessions.delete(session.id);
  }

  /** Ends every session of the session's account (this one included); returns how many. */
  signOutEverywhere(session: ConsoleSession): Promise<number> {
    return this.options.store.consoleSessions.deleteAccount(session.accountId);
  }

  /** Deletes expired sessions (any replica may; the rows are refused once expired anyway). */
  sweep(): Promise<number> {
    return this.options.store.consoleSessions.sweep(this.options.now());
  }

  /** The Set-Cookie value that removes the session cookie. */
  clearCookie(): string {
    return this.cookie("", 0);
  }

  private cookie(value: string, maxAgeSeconds: number): string {
    return `${SESSION_COOKIE}=${value}; Path=/; Max-Age=${maxAgeSeconds}; HttpOnly; SameSite=Lax${this.secure ? "; Secure" : ""}`;
  }
}

function toSession(record: ConsoleSessionRecord, id: string): ConsoleSession {
  return {
    id: record.idHash,
    accountId: record.accountId,
    csrfToken: csrfOf(id),
    createdAt: record.createdAt,
    expiresAt: record.expiresAt,
    idleExpiresAt: record.idleExpiresAt,
  };
}
