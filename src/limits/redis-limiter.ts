/**
 * Rate limits shared by every replica through Redis: the same contract and answers as the in-process
 * RateLimiter (limits/rate-limiter.ts), one EVALSHA per check (limits/gcra-scripts.ts). True-ups wait
 * (`trueUpDelayMs`, 5 ms unless given) and are summed per subject: the subject's next check carries
 * them, applied before it decides (no admission is decided without them), or one EVALSHA of TRUE_UP
 * sends them when no check comes first. Scripts are called by their SHA-1 and loaded again (SCRIPT
 * LOAD) when the server answers NOSCRIPT. Keys: `{prefix:subject}:req` and `{prefix:subject}:tok`. A subject with no limit at all
 * costs no Redis call. Redis failures reject with RedisUnavailableError (limits/global-limiter.ts falls
 * back); bad limits or costs throw RangeError before any call.
 */
import { createHash } from "node:crypto";
import { CHECK_SCRIPT, TRUE_UP_SCRIPT } from "./gcra-scripts.ts";
import { type Decision, headersFor, limitOf, type RateCost, type RateHandle, type RateLimits, tokensOf, UNIT } from "./rate-limiter.ts";
import { NoScriptError, type RedisScripts, RedisUnavailableError } from "./redis-client.ts";

export interface RedisLimiterOptions {
  readonly client: RedisScripts;
  /** Key prefix (a deployment's or a test's own). */
  readonly prefix: string;
  /** Tests only: the scripts' clock (Unix ms) instead of the server's TIME. */
  readonly clock?: () => number;
  /** How long a true-up waits for its subject's next check before it is sent alone; 5 ms unless given. */
  readonly trueUpDelayMs?: number;
}

/** The true-ups' delta is in Redis: their promises resolve. */
const applied = (owed: Owed) => {
  for (const w of owed.waiters) w.resolve();
};
/** Their delta did not reach Redis: their promises reject with the call's error. */
const failed = (owed: Owed, error: unknown) => {
  for (const w of owed.waiters) w.reject(error);
};

/** True-ups of one subject not sent yet, and the promises waiting for them. */
interface Owed {
  delta: number;
  tpm: number;
  readonly waiters: { resolve: () => void; reject: (e: unknown) => void }[];
}

interface Script {
  readonly text: string;
  sha: string;
}

class RedisTicket implements RateHandle {
  settled = false;

  constructor(
    readonly owner: RedisRateLimiter,
    readonly subject: string,
    readonly estimatedTokens: number,
    /** The tpm at check time (0: none, nothing to true up). */
    readonly tpm: number,
  ) {}
}

const NO_LIMIT_HEADERS = Object.freeze({});

export class RedisRateLimiter {
  private readonly client: RedisScripts;
  private readonly prefix: string;
  private readonly clock: (() => number) | undefined;
  private readonly checkScript: Script = { text: CHECK_SCRIPT, sha: sha1(CHECK_SCRIPT) };
  private readonly trueUpScript: Script = { text: TRUE_UP_SCRIPT, sha: sha1(TRUE_UP_SCRIPT) };
  private readonly owed = new Map<string, Owed>();
  private readonly trueUpDelayMs: number;
  private flushTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: RedisLimiterOptions) {
    this.client = options.client;
    this.prefix = options.prefix;
    this.clock = options.clock;
    this.trueUpDelayMs = options.trueUpDelayMs ?? 5;
  }

  /** Loads both scripts: resolves when Redis answers (the fallback's probe). */
  async ready(): Promise<void> {
    await this.load(this.checkScript);
    await this.load(this.trueUpScript);
  }

  /** Whether `handle` came from this limiter. */
  owns(handle: RateHandle): boolean {
    return handle instanceof RedisTicket && handle.owner === this;
  }

  /** RateLimiter.check's contract, on the shared state. Rejects with RedisUnavailableError. */
  async check(subject: string, limits: RateLimits, cost: RateCost): Promise<Decision> {
    const rpm = limitOf(limits.rpm, "rpm");
    const tpm = limitOf(limits.tpm, "tpm");
    const tokens = tokensOf(cost.tokens);
    if (rpm === 0 && tpm === 0) return { ok: true, handle: new RedisTicket(this, subject, tokens, 0), headers: NO_LIMIT_HEADERS };
    const owed = this.owed.get(subject);
    this.owed.delete(subject);
    let reply: unknown;
    try {
      reply = await this.run(
        this.checkScript,
        [this.key(subject, "req"), this.key(subject, "tok")],
        [String(rpm), String(tpm), String(tokens), this.now(), String(owed?.delta ?? 0)],
      );
    } catch (e) {
      if (owed) failed(owed, e);
      throw e;
    }
    if (owed) applied(owed);
    if (!Array.isArray(reply) || reply.length !== 3) throw new RedisUnavailableError("error");
    const requestLevel = Number(reply[1]);
    const tokenLevel = Number(reply[2]);
    const headers = headersFor(rpm, requestLevel, tpm, tokenLevel);
    if (Number(reply[0]) === 1) return { ok: true, handle: new RedisTicket(this, subject, tokens, tpm), headers };
    const requestNeed = Math.min(UNIT, rpm * UNIT);
    const tokenNeed = Math.min(tokens * UNIT, tpm * UNIT);
    const requestWait = rpm > 0 && requestLevel < requestNeed ? (requestNeed - requestLevel) / rpm : 0;
    const tokenWait = tpm > 0 && tokenLevel < tokenNeed ? (tokenNeed - tokenLevel) / tpm : 0;
    return {
      ok: false,
      retryAfterSeconds: Math.max(0, Math.ceil(Math.max(requestWait, tokenWait) / 1000)),
      headers,
      dimension: requestWait >= tokenWait ? "requests" : "tokens",
    };
  }

  /**
   * RateLimiter.trueUp's contract: once per handle, nothing for a check without tpm. Throws (at once)
   * TypeError for a foreign handle, RangeError for a bad count; the promise rejects only with
   * RedisUnavailableError.
   */
  trueUp(handle: RateHandle, actualTokens: number): Promise<void> {
    if (!(handle instanceof RedisTicket) || handle.owner !== this) throw new TypeError("rate limit handle not issued by this limiter");
    const tokens = tokensOf(actualTokens);
    if (handle.settled || handle.tpm === 0 || tokens === handle.estimatedTokens) {
      handle.settled = true;
      return Promise.resolve();
    }
    handle.settled = true;
    return new Promise<void>((resolve, reject) => {
      const owed = this.owed.get(handle.subject) ?? { delta: 0, tpm: handle.tpm, waiters: [] };
      owed.delta += tokens - handle.estimatedTokens;
      owed.tpm = handle.tpm;
      owed.waiters.push({ resolve, reject });
      this.owed.set(handle.subject, owed);
      if (this.flushTimer === undefined) {
        this.flushTimer = setTimeout(() => this.flush(), this.trueUpDelayMs);
        this.flushTimer.unref?.();
      }
    });
  }

  /** Sends the true-ups no check has carried, one EVALSHA per subject. */
  private flush(): void {
    this.flushTimer = undefined;
    const all = [...this.owed];
    this.owed.clear();
    for (const [subject, owed] of all) {
      if (owed.delta === 0) {
        applied(owed);
        continue;
      }
      const keys = [this.key(subject, "req"), this.key(subject, "tok")];
      this.run(this.trueUpScript, keys, [String(owed.delta), String(owed.tpm), this.now()]).then(
        () => applied(owed),
        (e: unknown) => failed(owed, e),
      );
    }
  }

  private key(subject: string, dimension: "req" | "tok"): string {
    return `{${this.prefix}:${subject}}:${dimension}`;
  }

  private now(): string {
    return this.clock === undefined ? "" : String(this.clock());
  }

  private async load(script: Script): Promise<void> {
    script.sha = await this.client.load(script.text);
  }

  /** EVALSHA; on NOSCRIPT, SCRIPT LOAD and once more. */
  private async run(script: Script, keys: readonly string[], args: readonly string[]): Promise<unknown> {
    try {
      return await this.client.evalsha(script.sha, keys, args);
    } catch (e) {
      if (!(e instanceof NoScriptError)) throw e;
      await this.load(script);
      try {
        return await this.client.evalsha(script.sha, keys, args);
      } catch {
        throw new RedisUnavailableError("error");
      }
    }
  }
}

function sha1(text: string): string {
  return createHash("sha1").update(text).digest("hex");
}
