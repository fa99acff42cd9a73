/**
 * Dispatch with failover: sends a request to the best candidate and waits for its first content (a chunk
 * with content, a tool call, or `complete`), which commits that attempt.
 *
 * Before first content, a provider error, refusal, disconnect or silence (no `accepted` within the accept
 * timeout) cancels the attempt and moves the request to the next candidate, up to `maxAttempts` providers.
 * The first-content deadline covers all attempts together. When every provider is busy the request waits
 * for a slot in a bounded per-model queue, within the deadline. Without a free local slot, a provider on
 * another replica (RemoteProviders: cluster/) is tried the same way, except for self-routed requests.
 * dispatch() lists what it throws.
 */
import type { UsageLimits } from "../billing/usage-bounds.ts";
import { Errors } from "../errors/api-error.ts";
import type { Attempt, AttemptEvent, AttemptListener } from "../fleet/attempt.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { ProviderSession } from "../fleet/session.ts";
import type { EngineRequestBody, Inference } from "../protocol/frames.ts";

export interface DispatchSettings {
  readonly firstContentTimeoutMs: number;
  readonly acceptTimeoutMs: number;
  readonly maxAttempts: number;
  /** Requests that may wait for a free slot per model (0: answer 503 at once when all are busy). */
  readonly maxQueuedPerModel: number;
}

export interface DispatchRequest {
  readonly requestId: string;
  readonly buildId: string;
  readonly body: EngineRequestBody;
  /** The body's usage bounds (billing/usage-bounds.ts), computed once for the reservation and every attempt. */
  readonly limits: UsageLimits;
  readonly signal: AbortSignal;
  /** When the whole request times out (Unix ms); before first content it ends the wait with 504. */
  readonly requestDeadline: number;
  /**
   * Self-route: only the machines linked to this account, on this replica or another, never a queue:
   * busy is 429 at once.
   */
  readonly selfRoute?: { readonly accountId: string };
}

/** A provider connected to another replica, as its digest names it. */
export interface RemoteTarget {
  readonly providerId: string;
  readonly accountId: string;
  /** The provider's device token id, when its replica tells it (usage rows name it). */
  readonly deviceTokenId?: string;
}

/** Providers connected to other replicas (src/cluster/node.ts's ClusterNode is one). */
export interface RemoteProviders {
  /** Those serving the build with a free slot at their replica's last digest, best first; of `accountId` only when given. */
  candidates(buildId: string, accountId?: string): readonly RemoteTarget[];
  /** True when a routable provider on another replica (of `accountId` when given) serves the build, free slot or not. */
  serves(buildId: string, accountId?: string): boolean;
  /** Sends one attempt to the replica that owns the provider; failures are the attempt's events. */
  forward(target: RemoteTarget, frame: Inference): Attempt;
}

export interface Committed {
  readonly attempt: Attempt;
  /** The event that committed: a chunk with content, a tool call, or `complete`. */
  readonly first: Extract<AttemptEvent, { type: "chunk" } | { type: "tool_call" } | { type: "complete" }>;
}

/** The client disconnected before the answer was ready. */
export class ClientGone extends Error {
  override readonly name = "ClientGone";
}

/** Provider errors after which another provider may well succeed. */
const RETRYABLE = new Set(["busy", "draining", "model_not_loaded", "engine_error", "engine_unavailable", "timeout", "cancelled"]);
const BUSY = new Set(["busy", "draining"]);

/**
 * Returns the committed attempt, or throws:
 * - no provider serves the model: 503 model_unavailable;
 * - no free slot and a full queue (or self-route): 429 capacity_exhausted; no queue at all (bound 0): 503
 *   service_unavailable; both with Retry-After;
 * - every tried provider failed: 502 provider_error (503 when all of them were merely busy);
 * - the deadline passed: 429 first_content_timeout with Retry-After (504 timeout when the request's own
 *   timeout is the earlier of the two);
 * - the runtime refused the request itself (context length, invalid request): 400;
 * - a sealed frame failed verification (reordered, replayed, tampered, plaintext): 502
 *   invalid_provider_output, without failover (the session ends and the provider is cut off);
 * - the client went away: ClientGone (nobody reads the answer);
 * - the session could not serialize the request: its RequestEncodingError as it is (a 500 at the error
 *   boundary), without failover; no provider is blamed.
 */
export async function dispatch(
  fleet: Fleet,
  settings: DispatchSettings,
  request: DispatchRequest,
  now: () => number,
  remote?: RemoteProviders,
): Promise<Committed> {
  const firstContentDeadline = now() + settings.firstContentTimeoutMs;
  const deadline = Math.min(firstContentDeadline, request.requestDeadline);
  const timedOut = () =>
    deadline < firstContentDeadline
      ? Errors.timeout("the request timed out before the provider produced content")
      : Errors.firstContentTimeout("no provider produced content before the first-content deadline", 1);
  const tried = new Set<string>();
  let current: Attempt | undefined;
  let failures = 0;
  let busyFailures = 0;
  const onAbort = () => current?.cancel("client_gone");
  const own = request.selfRoute?.accountId;
  const accept = own === undefined ? undefined : (s: ProviderSession) => s.identity.accountId === own;
  request.signal.addEventListener("abort", onAbort, { once: true });
  try {
    let n = 0;
    while (n < settings.maxAttempts) {
      if (request.signal.aborted) throw new ClientGone();
      const session = fleet.candidates(request.buildId, (s) => !tried.has(s.id) && (!accept || accept(s)))[0];
      const away = session ? undefined : remote?.candidates(request.buildId, own).find((c) => !tried.has(c.providerId));
      if (!session && !away) {
        // Nobody free. Wait for a slot only when someone could give one and nobody failed yet.
        if (failures > 0 || !fleet.hasRoutable(request.buildId, accept)) break;
        if (request.selfRoute) throw Errors.capacityExhausted("every one of your provider machines serving this model is busy", 1);
        if (settings.maxQueuedPerModel === 0) break;
        if (fleet.waiting(request.buildId) >= settings.maxQueuedPerModel) {
          throw Errors.capacityExhausted("too many requests are waiting for this model", 1);
        }
        if (!(await fleet.waitForSlot(request.buildId, deadline - now(), request.signal))) {
          if (request.signal.aborted) throw new ClientGone();
          throw timedOut();
        }
        continue;
      }
      const frame: Inference = {
        type: "inference",
        request_id: request.requestId,
        attempt: n,
        model: request.buildId,
        first_content_deadline_ms: Math.max(1, deadline - now()),
        request: request.body,
      };
      tried.add(session ? session.id : (away as RemoteTarget).providerId);
      const attempt = session
        ? await session.dispatch(frame, request.limits)
        : (remote as RemoteProviders).forward(away as RemoteTarget, frame);
      n++;
      current = attempt;
      const outcome = await untilFirstContent(attempt, settings, deadline, now);
      if (outcome.kind === "committed") return { attempt, first: outcome.first };
      if (request.signal.aborted) throw new ClientGone();
      if (outcome.kind === "deadline") {
        attempt.cancel("deadline");
        throw timedOut();
      }
      // Output that failed verification is the provider's fault, not bad luck: no failover.
      if (outcome.kind === "invalid") throw Errors.invalidProviderOutput("the provider's output failed verification");
      attempt.cancel("failover");
      if (outcome.kind === "refused") {
        if (outcome.code === "context_length_exceeded") {
          throw Errors.invalidValue("the prompt and output budget exceed the model's context length", "messages");
        }
        throw Errors.invalidValue("the model runtime rejected the request parameters");
      }
      failures++;
      if (outcome.kind === "failed" && BUSY.has(outcome.code)) busyFailures++;
      if (now() >= deadline) throw timedOut();
    }
  } finally {
    request.signal.removeEventListener("abort", onAbort);
  }
  if (failures > 0 && failures === busyFailures) {
    if (request.selfRoute) throw Errors.capacityExhausted("every one of your provider machines serving this model is busy", 1);
    throw Errors.serviceUnavailable("every provider for this model is busy", undefined, { "retry-after": "1" });
  }
  if (failures > 0) throw Errors.providerError("the provider failed before producing content");
  const elsewhere = remote?.serves(request.buildId, own) === true;
  if (!elsewhere && (!fleet.serves(request.buildId) || !fleet.hasRoutable(request.buildId, accept))) {
    throw Errors.modelUnavailable("no provider is serving this model right now", "model");
  }
  throw Errors.serviceUnavailable("every provider for this model is busy", undefined, { "retry-after": "1" });
}

type Outcome =
  | { kind: "committed"; first: Committed["first"] }
  | { kind: "failed"; code: string }
  | { kind: "refused"; code: string }
  | { kind: "lost" }
  | { kind: "invalid" }
  | { kind: "silent" }
  | { kind: "deadline" };

/** How the wait for an attempt's first content ended. */
function untilFirstContent(attempt: Attempt, settings: DispatchSettings, deadline: number, now: () => number): Promise<Outcome> {
  const outcome = Promise.withResolvers<Outcome>();
  new FirstContentWait(attempt, settings.acceptTimeoutMs, deadline, now, outcome.resolve).take();
  return outcome.promise;
}

/**
 * The wait for first content: the events already queued at once, then the attempt's listener with one
 * timer at a time (the accept timeout until `accepted`, then the deadline): no promise or closure per wait.
 * A wait that timed out leaves nothing behind: later events stay queued on the attempt.
 */
class FirstContentWait implements AttemptListener {
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly attempt: Attempt,
    private readonly acceptTimeoutMs: number,
    private readonly deadline: number,
    private readonly now: () => number,
    private readonly resolve: (outcome: Outcome) => void,
  ) {}

  /** Takes `event` and the queued events until one decides; with none left, waits for the next or the timer. */
  take(event?: AttemptEvent): void {
    let next = event;
    for (;;) {
      if (next !== undefined) {
        const outcome = outcomeOf(next);
        if (outcome !== undefined) {
          this.resolve(outcome);
          return;
        }
      }
      const remaining = this.deadline - this.now();
      const limit = this.attempt.acceptedAt === undefined ? Math.min(this.acceptTimeoutMs, remaining) : remaining;
      if (limit <= 0) {
        this.resolve(this.timedOut(remaining));
        return;
      }
      next = this.attempt.poll();
      if (next === undefined) {
        this.attempt.wait(this);
        this.timer = setTimeout(FirstContentWait.expire, limit, this, remaining);
        return;
      }
    }
  }

  attemptEvent(event: AttemptEvent): void {
    clearTimeout(this.timer);
    this.take(event);
  }

  private static expire(self: FirstContentWait, remaining: number): void {
    self.attempt.unwait(self);
    self.resolve(self.timedOut(remaining));
  }

  /** Silent before accepting with time left (failover), else the deadline. */
  private timedOut(remaining: number): Outcome {
    return this.attempt.acceptedAt === undefined && remaining > this.acceptTimeoutMs ? { kind: "silent" } : { kind: "deadline" };
  }
}

/** What an event before first content means for the attempt; undefined: keep waiting. */
function outcomeOf(event: AttemptEvent): Outcome | undefined {
  switch (event.type) {
    case "accepted":
      return undefined;
    case "chunk":
      if (!event.delta.content && !event.delta.reasoning_content) return undefined;
      return { kind: "committed", first: event };
    case "tool_call":
    case "complete":
      return { kind: "committed", first: event };
    case "error":
      return RETRYABLE.has(event.code) ? { kind: "failed", code: event.code } : { kind: "refused", code: event.code };
    case "lost":
      return { kind: "lost" };
    case "invalid":
      return { kind: "invalid" };
  }
}
