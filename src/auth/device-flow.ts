/**
 * Pending provider device logins: the coordinator's side of the OAuth 2.0 Device Authorization Grant
 * (RFC 8628) that `umbra-provider login` runs (docs/api.md, "Provider device login"). The tool `start`s
 * a login, the account holder checks it (`preview`) and approves or denies it (`decide`; the caller checks
 * the credential's permission, src/auth/authenticator.ts), and the tool `poll`s. In memory only: a
 * restart forgets pending logins. Times are Unix ms from the injected clock; intervals are whole seconds.
 *
 * Invariants: only the SHA-256 of a device code is kept, never the code, and neither is logged; a user
 * code maps to at most one pending entry; unknown and expired user codes answer alike, and so does a
 * code another account decided (`viewer`); an approval is handed out at most once (`poll` is synchronous).
 * The models and trust level a login carries are the tool's report, unverified until the machine connects.
 */
import { createHash, randomBytes } from "node:crypto";
import type { TrustLevel } from "../../attestation/provider/levels.ts";
import { Errors } from "../errors/api-error.ts";
import { RateLimiter } from "../limits/rate-limiter.ts";

/** RFC 8628 section 6.1: no vowels (no words), no easily confused characters. */
export const USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ";
const USER_CODE_LENGTH = 8;
/** Added to a code's interval at each slow_down (RFC 8628 section 3.5). */
const SLOW_DOWN_STEP_SECONDS = 5;
/** Polls this much earlier than the interval still count as on time (timer and network jitter). */
const POLL_SLACK_MS = 500;

export type Decision = "approve" | "deny";

export interface DeviceFlowOptions {
  /** Unix ms. */
  readonly now: () => number;
  readonly expiresInSeconds?: number;
  readonly intervalSeconds?: number;
  /** Pending (unexpired) logins held at once; beyond it `start` answers 503. */
  readonly maxPending?: number;
  /** Codes one client address may request per minute (a bucket of this size refilling over a minute). */
  readonly codesPerMinute?: number;
  /** Wrong user codes per minute, per credential and per client address. */
  readonly wrongCodesPerMinute?: number;
}

export interface StartedLogin {
  readonly deviceCode: string;
  /** Shown form, XXXX-XXXX. */
  readonly userCode: string;
  readonly expiresIn: number;
  readonly interval: number;
}

export interface DecidedLogin {
  readonly userCode: string;
  readonly decision: Decision;
  readonly accountId: string;
  readonly machineName: string | null;
  /** The lifetime the approver chose for the device token; null: it does not expire. */
  readonly tokenExpiresInSeconds: number | null;
}

/** What the tool reported of its machine when it started the login: unverified until the machine connects. */
export interface ReportedMachine {
  readonly machineName: string | null;
  /** Build ids it is configured to serve; null when it sent none. */
  readonly models: readonly string[] | null;
  /** The trust level it expects to earn; null when it sent none. */
  readonly trustLevel: TrustLevel | null;
}

/** A pending, undecided login as the approver sees it before deciding. Times in Unix ms. */
export interface LoginPreview extends ReportedMachine {
  readonly userCode: string;
  readonly requestedAt: number;
  readonly expiresAt: number;
}

/** What a poll learns; the error names are RFC 8628 section 3.5's. */
export type PollResult =
  | {
      readonly status: "approved";
      readonly accountId: string;
      readonly machineName: string | null;
      readonly tokenExpiresInSeconds: number | null;
    }
  | { readonly status: "authorization_pending" | "slow_down"; readonly interval: number }
  | { readonly status: "access_denied" | "expired_token" | "invalid_grant" };

interface Pending extends ReportedMachine {
  readonly deviceHash: string;
  readonly userCode: string;
  readonly requestedAt: number;
  readonly expiresAt: number;
  interval: number;
  lastPollAt: number | undefined;
  decision: { readonly kind: Decision; readonly accountId: string; readonly tokenExpiresInSeconds: number | null } | undefined;
}

/** Who asks about a user code, for the wrong-code limits. */
interface Asker {
  readonly userCode: string;
  /** Names the approving credential: an API key id, or the account for a JWT. */
  readonly credential: string;
  readonly address: string | undefined;
  /** The asker's account: a code another account already decided is not found for it. */
  readonly viewer?: string;
}

export function hashDeviceCode(deviceCode: string): string {
  return createHash("sha256").update(deviceCode).digest("hex");
}

/**
 * A user code as typed -> its 8 letters in upper case (case, dashes and spaces do not matter); undefined
 * when it cannot be a user code.
 */
export function normalizeUserCode(typed: string): string | undefined {
  const letters = typed.replace(/[\s-]/g, "").toUpperCase();
  if (letters.length !== USER_CODE_LENGTH) return undefined;
  for (const c of letters) if (!USER_CODE_ALPHABET.includes(c)) return undefined;
  return letters;
}

/** The shown form of 8 normalized letters: XXXX-XXXX. */
export function formatUserCode(letters: string): string {
  return `${letters.slice(0, 4)}-${letters.slice(4)}`;
}

/** 8 uniform letters of the alphabet (rejection sampling: bytes >= 240 would bias the modulo). */
function randomUserCode(): string {
  let out = "";
  const limit = 256 - (256 % USER_CODE_ALPHABET.length);
  while (out.length < USER_CODE_LENGTH) {
    for (const byte of randomBytes(16)) {
      if (byte < limit && out.length < USER_CODE_LENGTH) out += USER_CODE_ALPHABET[byte % USER_CODE_ALPHABET.length];
    }
  }
  return out;
}

/**
 * The rate-limit subject of a client address: an IPv4 address as is (also when IPv4-mapped), an IPv6
 * address by its /64 (one host usually holds a whole /64). Undefined (in-process calls) -> "unknown".
 */
export function addressSubject(address: string | undefined): string {
  if (address === undefined || address === "") return "unknown";
  const bare = address.replace(/%.*$/, "").toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(bare);
  if (mapped?.[1]) return mapped[1];
  if (!bare.includes(":")) return bare;
  const [head = "", tail] = bare.split("::", 2);
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups =
    tail === undefined ? left : [...left, ...new Array<string>(Math.max(0, 8 - left.length - right.length)).fill("0"), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ""))
    .join(":")}::/64`;
}

export class DeviceFlow {
  private readonly now: () => number;
  readonly expiresInSeconds: number;
  readonly intervalSeconds: number;
  private readonly maxPending: number;
  private readonly codesPerMinute: number;
  private readonly wrongCodesPerMinute: number;
  /** By device-code hash, oldest first. */
  private readonly pending = new Map<string, Pending>();
  /** Normalized user code -> device-code hash, for pending entries only. */
  private readonly byUserCode = new Map<string, string>();
  /** Device-code hash -> when the tombstone is forgotten, oldest first. */
  private readonly expired = new Map<string, number>();
  private readonly limiter: RateLimiter;

  constructor(options: DeviceFlowOptions) {
    this.now = options.now;
    this.expiresInSeconds = options.expiresInSeconds ?? 600;
    this.intervalSeconds = options.intervalSeconds ?? 5;
    this.maxPending = options.maxPending ?? 10_000;
    this.codesPerMinute = options.codesPerMinute ?? 10;
    this.wrongCodesPerMinute = options.wrongCodesPerMinute ?? 10;
    this.limiter = new RateLimiter({ now: options.now });
  }

  /** Pending (unexpired, undelivered) logins. */
  get size(): number {
    this.prune(this.now());
    return this.pending.size;
  }

  /**
   * A new login for a client address: a device code (32 random bytes, base64url) for the tool only, and
   * a user code (8 letters of USER_CODE_ALPHABET, shown XXXX-XXXX) for the account holder to type.
   * Throws 429 rate_limit_exceeded (with Retry-After) past the address's budget (`codesPerMinute`), 503
   * service_unavailable when `maxPending` logins are already pending.
   */
  start(input: { readonly address: string | undefined } & Pick<ReportedMachine, "machineName"> & Partial<ReportedMachine>): StartedLogin {
    const now = this.now();
    this.prune(now);
    const decision = this.limiter.check(`code:${addressSubject(input.address)}`, { rpm: this.codesPerMinute, tpm: null }, { tokens: 0 });
    if (!decision.ok) {
      throw Errors.rateLimited(
        `too many device codes from this address: at most ${this.codesPerMinute} per minute`,
        decision.retryAfterSeconds,
      );
    }
    if (this.pending.size >= this.maxPending) {
      throw Errors.serviceUnavailable("too many device logins are pending; try again in a minute", undefined, { "retry-after": "60" });
    }
    let userCode = randomUserCode();
    while (this.byUserCode.has(userCode)) userCode = randomUserCode();
    const deviceCode = randomBytes(32).toString("base64url");
    const deviceHash = hashDeviceCode(deviceCode);
    this.pending.set(deviceHash, {
      deviceHash,
      userCode,
      machineName: input.machineName,
      models: input.models ?? null,
      trustLevel: input.trustLevel ?? null,
      requestedAt: now,
      expiresAt: now + this.expiresInSeconds * 1000,
      interval: this.intervalSeconds,
      lastPollAt: undefined,
      decision: undefined,
    });
    this.byUserCode.set(userCode, deviceHash);
    return { deviceCode, userCode: formatUserCode(userCode), expiresIn: this.expiresInSeconds, interval: this.intervalSeconds };
  }

  /**
   * The pending login of a user code, for the account holder to check before deciding. Throws as
   * `decide` does (400, 429, 404), and 409 device_code_already_decided once it was decided.
   */
  preview(input: Asker): LoginPreview {
    const entry = this.lookup(input);
    if (entry.decision) throw Errors.deviceCodeAlreadyDecided("this device login was already approved or denied", "user_code");
    return {
      userCode: formatUserCode(entry.userCode),
      machineName: entry.machineName,
      models: entry.models,
      trustLevel: entry.trustLevel,
      requestedAt: entry.requestedAt,
      expiresAt: entry.expiresAt,
    };
  }

  /**
   * The account holder's decision on a user code; an approval may set the device token's lifetime.
   * Throws 400 invalid_value (param user_code) for a string that cannot be a user code; 429 when the
   * credential or the address made too many wrong guesses (checked before the lookup, so a blocked
   * caller learns nothing); 404 device_code_not_found for an unknown or expired code (one answer for
   * both); 409 device_code_already_decided.
   */
  decide(
    input: Asker & { readonly decision: Decision; readonly accountId: string; readonly tokenExpiresInSeconds?: number | null },
  ): DecidedLogin {
    const entry = this.lookup(input);
    if (entry.decision) throw Errors.deviceCodeAlreadyDecided("this device login was already approved or denied", "user_code");
    const tokenExpiresInSeconds = input.decision === "approve" ? (input.tokenExpiresInSeconds ?? null) : null;
    entry.decision = { kind: input.decision, accountId: input.accountId, tokenExpiresInSeconds };
    return {
      userCode: formatUserCode(entry.userCode),
      decision: input.decision,
      accountId: input.accountId,
      machineName: entry.machineName,
      tokenExpiresInSeconds,
    };
  }

  /**
   * The pending entry of a user code, through the wrong-code limits (`wrongCodesPerMinute` per credential
   * and per client address, previews and decisions together), checked before the code is even looked
   * up: one "token" per guess from the address's and the credential's buckets, refunded when the code
   * exists, so only wrong codes use up the budget. Throws 400, 429 or 404 (see `decide`).
   */
  private lookup(input: Asker): Pending {
    const letters = normalizeUserCode(input.userCode);
    if (letters === undefined) {
      throw Errors.invalidValue(`'user_code' must be ${USER_CODE_LENGTH} letters of ${USER_CODE_ALPHABET}, as XXXX-XXXX`, "user_code");
    }
    const now = this.now();
    this.prune(now);
    const limits = { rpm: null, tpm: this.wrongCodesPerMinute };
    const byAddress = this.limiter.check(`guess:${addressSubject(input.address)}`, limits, { tokens: 1 });
    const byCredential = byAddress.ok ? this.limiter.check(`guess-credential:${input.credential}`, limits, { tokens: 1 }) : undefined;
    if (!byAddress.ok || !byCredential?.ok) {
      if (byAddress.ok) this.limiter.trueUp(byAddress.handle, 0);
      const wait = Math.max(
        byAddress.ok ? 0 : byAddress.retryAfterSeconds,
        byCredential && !byCredential.ok ? byCredential.retryAfterSeconds : 0,
      );
      throw Errors.rateLimited(`too many wrong user codes: at most ${this.wrongCodesPerMinute} per minute`, wait);
    }
    const hash = this.byUserCode.get(letters);
    const found = hash === undefined ? undefined : this.pending.get(hash);
    const entry = input.viewer !== undefined && found?.decision && found.decision.accountId !== input.viewer ? undefined : found;
    if (!entry) throw Errors.deviceCodeNotFound("no pending device login has this user code (it may have expired)", "user_code");
    this.limiter.trueUp(byAddress.handle, 0);
    this.limiter.trueUp(byCredential.handle, 0);
    return entry;
  }

  /**
   * The tool's poll with its device code (RFC 8628 section 3.4): pending, slow_down (sooner than the
   * interval after its previous poll; the interval then grows by SLOW_DOWN_STEP_SECONDS), denied,
   * expired, or approved exactly once: the approved answer removes the entry, so the code is dead.
   */
  poll(deviceCode: string): PollResult {
    const now = this.now();
    this.prune(now);
    const hash = hashDeviceCode(deviceCode);
    const entry = this.pending.get(hash);
    if (!entry) return { status: this.expired.has(hash) ? "expired_token" : "invalid_grant" };
    if (entry.decision?.kind === "approve") {
      this.remove(entry);
      return {
        status: "approved",
        accountId: entry.decision.accountId,
        machineName: entry.machineName,
        tokenExpiresInSeconds: entry.decision.tokenExpiresInSeconds,
      };
    }
    if (entry.decision?.kind === "deny") return { status: "access_denied" };
    const early = entry.lastPollAt !== undefined && now - entry.lastPollAt < entry.interval * 1000 - POLL_SLACK_MS;
    entry.lastPollAt = now;
    if (early) {
      entry.interval += SLOW_DOWN_STEP_SECONDS;
      return { status: "slow_down", interval: entry.interval };
    }
    return { status: "authorization_pending", interval: entry.interval };
  }

  private remove(entry: Pending): void {
    this.pending.delete(entry.deviceHash);
    this.byUserCode.delete(entry.userCode);
  }

  /**
   * An entry lives `expiresInSeconds`, then is a tombstone (polls answer expired_token) for as long
   * again, then is forgotten (invalid_grant). Entries expire in creation order, so both walks start at
   * the oldest and stop at the first live one.
   */
  private prune(now: number): void {
    for (const entry of this.pending.values()) {
      if (entry.expiresAt > now) break;
      this.remove(entry);
      this.expired.set(entry.deviceHash, entry.expiresAt + this.expiresInSeconds * 1000);
    }
    for (const [hash, forgetAt] of this.expired) {
      if (forgetAt > now && this.expired.size <= this.maxPending) break;
      this.expired.delete(hash);
    }
  }
}
