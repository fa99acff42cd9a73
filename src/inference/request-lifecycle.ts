/**
 * What one chat request owes from its start to the end of its answer, each exactly once:
 *   - in flight (the shutdown drain waits for it) from construction until `end`, which is idempotent;
 *     `ended()` resolves then;
 *   - the rate limit's estimate (`limited`) trued up: to 0 when nothing will be generated, otherwise to
 *     the usage reported (or estimated from the characters relayed);
 *   - the money settled: a failed dispatch is recorded with nothing charged (not waited for); an
 *     answer's outcome is durable before its last bytes (`finish` settles, then ends);
 *   - the request deadline (`armDeadline`) stops the attempt and aborts its signal; `finish` clears it;
 *     `stop` does the same at once, the signal's reason the error to end with (a hold that was lost).
 */
import { type Billing, estimatedUsage, type RequestMoney } from "../billing/billing.ts";
import type { ApiError } from "../errors/api-error.ts";
import type { Attempt } from "../fleet/attempt.ts";
import type { Logger } from "../observability/logger.ts";
import type { Metrics } from "../observability/metrics.ts";
import type { Usage } from "../protocol/frames.ts";
import type { Outcome } from "./responses.ts";

/** Requests in flight, and who waits for there to be none. */
export class InFlight {
  private count = 0;
  private waiters: (() => void)[] = [];

  enter(): void {
    this.count++;
  }

  leave(): void {
    if (--this.count > 0) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Resolves once no request is in flight. */
  idle(): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }
}

export interface LifecycleDeps {
  readonly billing: Pick<Billing, "settle">;
  readonly metrics: Metrics;
  readonly logger: Logger;
  readonly now: () => number;
  readonly settings: { readonly metering: boolean };
}

/** What settling an answer needs of its request. */
export interface Answering {
  readonly money: RequestMoney;
  readonly attempt: Attempt;
  readonly promptEstimate: number;
  readonly maxTokens: number;
  readonly stream: boolean;
}

export class RequestLifecycle {
  readonly startedAt: number;
  private trueUp: ((tokens: number) => void) | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** The attempt the deadline stops, once armed; and the signal it aborts (streams only). */
  private deadlineAttempt: Attempt | undefined;
  private deadlineController: AbortController | undefined;
  /** Where this request is listed while it is answered (`listIn`), and under which key. */
  private registry: Map<string, RequestLifecycle> | undefined;
  private registryKey = "";
  private isEnded = false;
  private whenEnded: Promise<void> | undefined;
  private resolveEnded: (() => void) | undefined;

  constructor(
    private readonly deps: LifecycleDeps,
    private readonly inFlight: InFlight,
  ) {
    inFlight.enter();
    this.startedAt = deps.now();
  }

  /** The rate limit admitted the request; `trueUp` replaces its estimate with the tokens really used. */
  limited(trueUp: (tokens: number) => void): void {
    this.trueUp = trueUp;
  }

  /** Nothing will be generated (the reservation failed): the rate limit's estimate is given back. */
  unlimit(): void {
    this.trueUp?.(0);
  }

  /** The dispatch failed: nothing was generated and nothing is charged; the attempt is still recorded. */
  dispatchFailed(money: RequestMoney): void {
    this.trueUp?.(0);
    if (!this.deps.settings.metering) return;
    void this.deps.billing.settle(money, {
      outcome: "failed",
      usage: { prompt_tokens: 0, completion_tokens: 0 },
      providerId: null,
      providerAccountId: null,
      firstContentMs: null,
      endedAt: this.deps.now(),
    });
  }

  /**
   * Stops `attempt` once the request's time is up. With `signal` (a stream, which ends on it) returns a
   * signal that aborts then; a JSON answer needs none (its attempt's `lost` ends it).
   */
  armDeadline(attempt: Attempt, timeoutMs: number, signal: true): AbortSignal;
  armDeadline(attempt: Attempt, timeoutMs: number, signal: false): undefined;
  armDeadline(attempt: Attempt, timeoutMs: number, signal: boolean): AbortSignal | undefined {
    this.deadlineAttempt = attempt;
    if (signal) this.deadlineController = new AbortController();
    this.timer = setTimeout(expire, Math.max(1, timeoutMs - (this.deps.now() - this.startedAt)), this);
    return this.deadlineController?.signal;
  }

  /** The deadline came, or `stop`: the attempt is stopped and the signal aborted with `reason`. */
  expire(reason: ApiError | undefined): void {
    clearTimeout(this.timer);
    this.deadlineAttempt?.cancel("deadline");
    this.deadlineController?.abort(reason);
  }

  /** Ends the answer now as the deadline would, a stream with `error` in band (no-op before `armDeadline`). */
  stop(error: ApiError): void {
    if (!this.isEnded && this.deadlineAttempt !== undefined) this.expire(error);
  }

  /** Keeps this request in `registry` under `key` until it ends (the answers a lost hold may stop). */
  listIn(registry: Map<string, RequestLifecycle>, key: string): void {
    if (this.isEnded) return;
    registry.set(key, this);
    this.registry = registry;
    this.registryKey = key;
  }

  /** Settles an answer's outcome (the request stays in flight until it is settled), then ends it. */
  async finish(o: Outcome, answering: Answering): Promise<void> {
    try {
      await this.settle(o, answering);
    } finally {
      this.end();
    }
  }

  /** The request is no longer in flight. Idempotent. */
  end(): void {
    if (this.isEnded) return;
    this.isEnded = true;
    this.inFlight.leave();
    if (this.registry?.get(this.registryKey) === this) this.registry.delete(this.registryKey);
    this.resolveEnded?.();
  }

  /** Resolves once the request has ended (a stream: its outcome settled, its last bytes follow at once). */
  ended(): Promise<void> {
    if (this.isEnded) return Promise.resolve();
    this.whenEnded ??= new Promise((resolve) => {
      this.resolveEnded = resolve;
    });
    return this.whenEnded;
  }

  private async settle(o: Outcome, { money, attempt, promptEstimate, maxTokens, stream }: Answering): Promise<void> {
    const { billing, metrics, logger, now, settings } = this.deps;
    clearTimeout(this.timer);
    const usage: Usage = o.usage ?? estimatedUsage(promptEstimate, o.completionChars, maxTokens);
    this.trueUp?.(usage.prompt_tokens + usage.completion_tokens);
    metrics.observeChat(o.status, stream);
    if (logger.enabled?.("debug") !== false) logDebugEnd(logger, money, attempt, o, now() - this.startedAt);
    if (!settings.metering) return;
    await billing.settle(money, {
      outcome: o.status,
      usage,
      // The machine's device token (the console's per-machine figures); the session id only when a
      // replica's digest did not name the token (an older replica).
      providerId: attempt.deviceTokenId ?? attempt.providerId,
      providerAccountId: attempt.providerAccountId,
      firstContentMs: attempt.firstContentAt === undefined ? null : attempt.firstContentAt - this.startedAt,
      endedAt: now(),
    });
  }
}

/** The debug line of an ended request (built only when debug lines are written). */
function logDebugEnd(logger: Logger, money: RequestMoney, attempt: Attempt, o: Outcome, durationMs: number): void {
  logger.debug("chat request ended", {
    request_id: money.requestId,
    account_id: money.accountId,
    key_id: money.keyId ?? undefined,
    model: money.model,
    build_id: money.buildId,
    provider_id: attempt.providerId,
    status: o.status,
    duration_ms: durationMs,
  });
}

/** The deadline's timer callback (module-level: no closure per request). */
function expire(life: RequestLifecycle): void {
  life.expire(undefined);
}
