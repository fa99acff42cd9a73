/**
 * Per-subject rate limits (docs/api.md, "Money and limits"): requests and tokens per minute as
 * continuous token buckets, per subject (an API key id, or the account id for JWT callers). `check` runs
 * once per request (synchronous, O(1) amortized, no I/O, no timers); `trueUp` settles the real token
 * count. A null limit means no bucket and no headers for that dimension.
 *
 * Invariants: a level never exceeds its capacity and is negative (debt) only after an over-capacity cost
 * or a true-up charge; a rejected check changes no level, an admitted one debits both dimensions; every
 * request passes eventually (a cost above capacity waits for a full bucket); `trueUp` applies once per
 * handle. A subject whose buckets are all full equals one never seen, so it is forgotten.
 */

/**
 * Units per request or token: one minute in milliseconds, so a bucket with limit L (per minute) holds
 * L x UNIT when full and refills L units per ms. With integer limits, costs and a millisecond clock every
 * level is an integer (exact below 2^53, so for limits below about 1.5 x 10^11).
 */
export const UNIT = 60_000;

export interface RateLimits {
  /** Requests per minute; null = unlimited. */
  readonly rpm: number | null;
  /** Tokens per minute; null = unlimited. */
  readonly tpm: number | null;
}

export interface RateCost {
  /** Estimated tokens of this request (prompt plus output budget); trued up later. */
  readonly tokens: number;
}

export type RateDimension = "requests" | "tokens";

/** Header name -> value, e.g. "x-ratelimit-remaining-requests" -> "59". */
export type RateHeaders = Record<string, string>;

/** Proof of an admitted request, for `trueUp`. */
export interface RateHandle {
  readonly subject: string;
  /** The token cost debited by `check`. */
  readonly estimatedTokens: number;
}

export type Decision =
  | { readonly ok: true; readonly handle: RateHandle; readonly headers: RateHeaders }
  | { readonly ok: false; readonly retryAfterSeconds: number; readonly headers: RateHeaders; readonly dimension: RateDimension };

/**
 * What the chat path calls. The in-process limiter answers synchronously (its callers add no await); a
 * shared one (limits/global-limiter.ts) answers with a promise. `trueUp` never throws for I/O.
 */
export interface Limiter {
  check(subject: string, limits: RateLimits, cost: RateCost): Decision | Promise<Decision>;
  trueUp(handle: RateHandle, actualTokens: number): void;
}

export interface RateLimiterOptions {
  /** Unix ms. */
  readonly now: () => number;
  /** Most subjects remembered at once (least recently used evicted beyond). Default 100,000. */
  readonly maxSubjects?: number;
  /** Entries the idle sweep examines per `check`. Default 2. */
  readonly sweepPerCall?: number;
}

/** One subject's buckets. A limit of 0 means that dimension has no bucket. Levels in units. */
class Buckets {
  at: number;
  requestLimit = 0;
  requestLevel = 0;
  tokenLimit = 0;
  tokenLevel = 0;

  constructor(at: number) {
    this.at = at;
  }

  /** Levels brought to `now` at the current rates, capped at capacity. */
  refill(now: number): void {
    if (now <= this.at) return; // a clock that goes back never refills twice
    const elapsed = now - this.at;
    this.at = now;
    if (this.requestLimit > 0) this.requestLevel = Math.min(this.requestLimit * UNIT, this.requestLevel + elapsed * this.requestLimit);
    if (this.tokenLimit > 0) this.tokenLevel = Math.min(this.tokenLimit * UNIT, this.tokenLevel + elapsed * this.tokenLimit);
  }

  /** True when every bucket would be full at `now` (without changing anything). */
  fullAt(now: number): boolean {
    const elapsed = now > this.at ? now - this.at : 0;
    if (this.requestLimit > 0 && this.requestLevel + elapsed * this.requestLimit < this.requestLimit * UNIT) return false;
    if (this.tokenLimit > 0 && this.tokenLevel + elapsed * this.tokenLimit < this.tokenLimit * UNIT) return false;
    return true;
  }
}

class Ticket implements RateHandle {
  settled = false;

  constructor(
    readonly owner: RateLimiter,
    readonly subject: string,
    readonly buckets: Buckets,
    readonly estimatedTokens: number,
    /** Whether a token bucket was debited (false when tpm was unlimited at check time). */
    readonly charged: boolean,
  ) {}
}

export class RateLimiter implements Limiter {
  private readonly now: () => number;
  private readonly maxSubjects: number;
  private readonly sweepPerCall: number;
  /** Least recently used first. */
  private readonly subjects = new Map<string, Buckets>();
  private cursor: MapIterator<[string, Buckets]>;

  /** Throws RangeError when `maxSubjects` < 1 or `sweepPerCall` < 0. */
  constructor(options: RateLimiterOptions) {
    this.now = options.now;
    this.maxSubjects = options.maxSubjects ?? 100_000;
    this.sweepPerCall = options.sweepPerCall ?? 2;
    if (!Number.isInteger(this.maxSubjects) || this.maxSubjects < 1) throw new RangeError("maxSubjects must be an integer >= 1");
    if (!Number.isInteger(this.sweepPerCall) || this.sweepPerCall < 0) throw new RangeError("sweepPerCall must be an integer >= 0");
    this.cursor = this.subjects.entries();
  }

  /** Subjects currently remembered. */
  get size(): number {
    return this.subjects.size;
  }

  /**
   * Admits and debits both dimensions, or neither. First refills the subject's buckets to `now` at their
   * old rates, then applies `limits` (a new limit clamps the level to its capacity; a limit that appears
   * starts full; one that disappears drops). Each dimension admits when its level covers the cost: 1
   * request, `cost.tokens` tokens; a cost above the whole capacity only from a full bucket, leaving debt.
   * A refusal debits nothing: `retryAfterSeconds` = ceil(exact wait until both would admit), `dimension`
   * the one that waits longer (requests on a tie). Headers are taken after the debit.
   * Throws RangeError for a limit that is not a positive finite number or a token cost that is not a
   * finite number >= 0.
   */
  check(subject: string, limits: RateLimits, cost: RateCost): Decision {
    const rpm = limitOf(limits.rpm, "rpm");
    const tpm = limitOf(limits.tpm, "tpm");
    const tokens = tokensOf(cost.tokens);
    const now = this.now();
    this.sweep(now);

    let buckets = this.subjects.get(subject);
    if (rpm === 0 && tpm === 0) {
      if (buckets !== undefined) this.subjects.delete(subject);
      return { ok: true, handle: new Ticket(this, subject, buckets ?? new Buckets(now), tokens, false), headers: {} };
    }
    if (buckets === undefined) {
      buckets = new Buckets(now);
      if (this.subjects.size >= this.maxSubjects) this.evictOldest();
    } else {
      buckets.refill(now);
      this.subjects.delete(subject); // re-inserted below: most recently used last
    }
    this.subjects.set(subject, buckets);
    applyLimits(buckets, rpm, tpm);

    // Units each dimension must hold; a cost above capacity needs a full bucket.
    const requestNeed = Math.min(UNIT, rpm * UNIT);
    const tokenNeed = Math.min(tokens * UNIT, tpm * UNIT);
    const requestWait = rpm > 0 && buckets.requestLevel < requestNeed ? (requestNeed - buckets.requestLevel) / rpm : 0;
    const tokenWait = tpm > 0 && buckets.tokenLevel < tokenNeed ? (tokenNeed - buckets.tokenLevel) / tpm : 0;

    if (requestWait > 0 || tokenWait > 0) {
      const wait = Math.max(requestWait, tokenWait);
      return {
        ok: false,
        retryAfterSeconds: Math.max(0, Math.ceil(wait / 1000)),
        headers: headersOf(buckets),
        dimension: requestWait >= tokenWait ? "requests" : "tokens",
      };
    }
    if (rpm > 0) buckets.requestLevel -= UNIT;
    if (tpm > 0) buckets.tokenLevel -= tokens * UNIT;
    return { ok: true, handle: new Ticket(this, subject, buckets, tokens, tpm > 0), headers: headersOf(buckets) };
  }

  /**
   * Replaces the handle's estimated token cost by `actualTokens`: refunds or charges the difference (a
   * charge may leave debt; a refund never passes capacity). Applies once per handle; later calls and
   * handles whose check had no tpm limit are ignored. Throws TypeError for a handle not issued by this
   * limiter, RangeError for `actualTokens` not a finite number >= 0.
   */
  trueUp(handle: RateHandle, actualTokens: number): void {
    if (!(handle instanceof Ticket) || handle.owner !== this) throw new TypeError("rate limit handle not issued by this limiter");
    const tokens = tokensOf(actualTokens);
    if (handle.settled) return;
    handle.settled = true;
    if (!handle.charged) return;

    let buckets = this.subjects.get(handle.subject);
    if (buckets === undefined) {
      // Swept (full) or evicted since the check: its last state is still the right starting point.
      buckets = handle.buckets;
      if (this.subjects.size >= this.maxSubjects) this.evictOldest();
      this.subjects.set(handle.subject, buckets);
    }
    if (buckets.tokenLimit === 0) return; // tpm removed since the check
    buckets.refill(this.now());
    const capacity = buckets.tokenLimit * UNIT;
    buckets.tokenLevel = Math.min(capacity, buckets.tokenLevel - (tokens - handle.estimatedTokens) * UNIT);
  }

  /**
   * Examines up to `sweepPerCall` entries from a cursor that walks the map round and round, and forgets
   * full ones: idle subjects go without an O(n) pause.
   */
  private sweep(now: number): void {
    for (let i = 0; i < this.sweepPerCall; i++) {
      let step = this.cursor.next();
      if (step.done === true) {
        if (this.subjects.size === 0) return;
        this.cursor = this.subjects.entries();
        step = this.cursor.next();
        if (step.done === true) return;
      }
      const [subject, buckets] = step.value;
      if (buckets.fullAt(now)) this.subjects.delete(subject);
    }
  }

  /**
   * Evicts the least recently used subject, full or not, to make room beyond `maxSubjects`: lenient (that
   * subject starts again with full buckets), and only under that many simultaneously active subjects.
   */
  private evictOldest(): void {
    const oldest = this.subjects.keys().next();
    if (oldest.done !== true) this.subjects.delete(oldest.value);
  }
}

/** A limit in effect: a positive finite number, or 0 for "no bucket". */
export function limitOf(value: number | null, name: string): number {
  if (value === null) return 0;
  if (!(value > 0) || !Number.isFinite(value)) throw new RangeError(`${name} must be a positive number or null`);
  return value;
}

export function tokensOf(value: number): number {
  if (!(value >= 0) || !Number.isFinite(value)) throw new RangeError("token cost must be a finite number >= 0");
  return value;
}

/** Switches the buckets to the current limits (levels already refilled at the old rates). */
function applyLimits(buckets: Buckets, rpm: number, tpm: number): void {
  if (buckets.requestLimit !== rpm) {
    buckets.requestLevel = buckets.requestLimit === 0 ? rpm * UNIT : Math.min(buckets.requestLevel, rpm * UNIT);
    buckets.requestLimit = rpm;
  }
  if (buckets.tokenLimit !== tpm) {
    buckets.tokenLevel = buckets.tokenLimit === 0 ? tpm * UNIT : Math.min(buckets.tokenLevel, tpm * UNIT);
    buckets.tokenLimit = tpm;
  }
}

function headersOf(buckets: Buckets): RateHeaders {
  return headersFor(buckets.requestLimit, buckets.requestLevel, buckets.tokenLimit, buckets.tokenLevel);
}

/**
 * OpenAI's headers, only for dimensions with a limit (0 = none): x-ratelimit-limit-requests (the rpm
 * limit), x-ratelimit-remaining-requests (floor of the level, at least "0"), x-ratelimit-reset-requests
 * (time until the bucket is full again, `formatResetDuration`), and the same three with -tokens.
 */
export function headersFor(requestLimit: number, requestLevel: number, tokenLimit: number, tokenLevel: number): RateHeaders {
  const headers: RateHeaders = {};
  if (requestLimit > 0) {
    headers["x-ratelimit-limit-requests"] = String(requestLimit);
    headers["x-ratelimit-remaining-requests"] = String(Math.max(0, Math.floor(requestLevel / UNIT)));
    headers["x-ratelimit-reset-requests"] = formatResetDuration((requestLimit * UNIT - requestLevel) / requestLimit);
  }
  if (tokenLimit > 0) {
    headers["x-ratelimit-limit-tokens"] = String(tokenLimit);
    headers["x-ratelimit-remaining-tokens"] = String(Math.max(0, Math.floor(tokenLevel / UNIT)));
    headers["x-ratelimit-reset-tokens"] = formatResetDuration((tokenLimit * UNIT - tokenLevel) / tokenLimit);
  }
  return headers;
}

/**
 * A duration in ms as Go's time.Duration text at millisecond resolution, rounded up (OpenAI's
 * x-ratelimit-reset-* format): 0 -> "0s", 350 -> "350ms", 1500 -> "1.5s", 360000 -> "6m0s",
 * 3723004 -> "1h2m3.004s". Negative or non-finite input counts as 0.
 */
export function formatResetDuration(ms: number): string {
  const total = Number.isFinite(ms) && ms > 0 ? Math.ceil(ms) : 0;
  if (total === 0) return "0s";
  if (total < 1000) return `${total}ms`;
  const hours = Math.floor(total / 3_600_000);
  const minutes = Math.floor((total % 3_600_000) / 60_000);
  const millis = total % 60_000;
  const whole = Math.floor(millis / 1000);
  const fraction = millis % 1000;
  let seconds = String(whole);
  if (fraction !== 0) {
    if (fraction % 100 === 0) seconds += `.${fraction / 100}`;
    else if (fraction % 10 === 0) seconds += `.${String(fraction / 10).padStart(2, "0")}`;
    else seconds += `.${String(fraction).padStart(3, "0")}`;
  }
  if (hours > 0) return `${hours}h${minutes}m${seconds}s`;
  if (minutes > 0) return `${minutes}m${seconds}s`;
  return `${seconds}s`;
}
