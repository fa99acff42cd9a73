/**
 * Freshness and single use of sealed consumer requests (consumer-seal.ts, version 2): an envelope is
 * accepted only within SEALED_WINDOW_SECONDS of the coordinator's clock, and each `enc` only once within
 * that window. One instance per app (created in createApp, reading the app's clock); no module state.
 *
 * Steps (per sealed request):
 *   1. check(enc, timestamp), before opening: refuse a timestamp more than the window from now ("stale",
 *      "future"), an `enc` already recorded ("replayed"), and, when the cache holds maxEntries, any request
 *      ("full", with the seconds until the oldest entry expires). Nothing is recorded.
 *   2. open the envelope (HPKE); only then
 *   3. record(enc, timestamp): the same refusals again (another copy may have been recorded while this one
 *      was opening), else the entry is kept until timestamp + window, when its envelope goes stale anyway.
 *
 * Invariants:
 * - Time is whole seconds: now_s = floor(clock / 1000); an envelope is fresh while
 *   |now_s - timestamp| <= window, so an entry lives at most 2 x window seconds (timestamp up to window
 *   ahead of now) and is dropped once now_s > timestamp + window.
 * - Bounded: at most maxEntries entries (about 200 bytes each: a 43-character key in a Set and in its
 *   expiry bucket), and at most 2 x window + 1 buckets. A full cache refuses new requests rather than
 *   forgetting entries early: forgetting would let a captured envelope through again.
 * - Only envelopes that opened are recorded, so garbage cannot fill the cache; only someone who can seal
 *   for a valid credential can.
 */

/** How far (seconds) an envelope's timestamp may be from the coordinator's clock, either way. */
export const SEALED_WINDOW_SECONDS = 120;
/** Default bound on remembered `enc` values: ~50 MiB at most; 2,184 sealed requests a second sustained. */
export const SEALED_REPLAY_MAX_ENTRIES = 262_144;

export type Admission =
  | { readonly ok: true }
  | { readonly ok: false; readonly reason: "stale" | "future"; readonly nowSeconds: number }
  | { readonly ok: false; readonly reason: "replayed" }
  | { readonly ok: false; readonly reason: "full"; readonly retryAfterSeconds: number };

export interface ReplayCacheOptions {
  /** Unix milliseconds (the app's clock). */
  readonly now: () => number;
  readonly windowSeconds?: number;
  readonly maxEntries?: number;
}

const ADMITTED: Admission = Object.freeze({ ok: true });

export class SealedReplayCache {
  readonly windowSeconds: number;
  readonly maxEntries: number;
  private readonly now: () => number;
  private readonly seen = new Set<string>();
  /** Expiry second (timestamp + window) -> the `enc` values that expire then. */
  private readonly expiring = new Map<number, string[]>();
  /** The second of the last sweep: buckets expire by whole seconds, so one sweep a second suffices. */
  private sweptAt = Number.NEGATIVE_INFINITY;

  constructor(options: ReplayCacheOptions) {
    this.now = options.now;
    this.windowSeconds = options.windowSeconds ?? SEALED_WINDOW_SECONDS;
    this.maxEntries = options.maxEntries ?? SEALED_REPLAY_MAX_ENTRIES;
    if (!Number.isSafeInteger(this.windowSeconds) || this.windowSeconds < 1)
      throw new RangeError("windowSeconds must be a positive integer");
    if (!Number.isSafeInteger(this.maxEntries) || this.maxEntries < 1) throw new RangeError("maxEntries must be a positive integer");
  }

  /** Entries held now (after dropping expired ones). */
  get size(): number {
    this.expire(this.nowSeconds());
    return this.seen.size;
  }

  /** Before opening: may this envelope be opened? Records nothing. */
  check(enc: string, timestamp: number): Admission {
    const now = this.nowSeconds();
    this.expire(now);
    if (timestamp < now - this.windowSeconds) return { ok: false, reason: "stale", nowSeconds: now };
    if (timestamp > now + this.windowSeconds) return { ok: false, reason: "future", nowSeconds: now };
    if (this.seen.has(enc)) return { ok: false, reason: "replayed" };
    if (this.seen.size >= this.maxEntries) return { ok: false, reason: "full", retryAfterSeconds: this.untilFirstExpiry(now) };
    return ADMITTED;
  }

  /** After a successful open: records `enc` until its envelope goes stale, unless check() now refuses it. */
  record(enc: string, timestamp: number): Admission {
    const admission = this.check(enc, timestamp);
    if (!admission.ok) return admission;
    const expiry = timestamp + this.windowSeconds;
    this.seen.add(enc);
    const bucket = this.expiring.get(expiry);
    if (bucket === undefined) this.expiring.set(expiry, [enc]);
    else bucket.push(enc);
    return ADMITTED;
  }

  private nowSeconds(): number {
    return Math.floor(this.now() / 1000);
  }

  /** Drops every bucket whose envelopes are stale at `now` (at most 2 x window + 1 buckets), once a second. */
  private expire(now: number): void {
    if (now === this.sweptAt) return;
    this.sweptAt = now;
    for (const [expiry, encs] of this.expiring) {
      if (expiry >= now) continue;
      for (const enc of encs) this.seen.delete(enc);
      this.expiring.delete(expiry);
    }
  }

  /** Seconds until the earliest entry is dropped (at least 1). */
  private untilFirstExpiry(now: number): number {
    let first = Number.POSITIVE_INFINITY;
    for (const expiry of this.expiring.keys()) first = Math.min(first, expiry);
    return Math.max(1, first + 1 - now);
  }
}
