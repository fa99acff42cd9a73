/**
 * One chat request end to end (DESIGN.md section 4), in four steps read top-down in `complete`:
 *   admit: validate -> resolve the model (alias -> build) -> key allowlist (403) -> image parts only for a
 *     model whose input_modalities list "image" (400) -> compile the request's JSON Schemas (422) -> budget;
 *   reserve: rate limit (429, per key: requests and estimated tokens) -> the worst-case cost (402);
 *   dispatchOrRecordFailure: failover (self-route: own machines only); a failure is recorded, not charged;
 *   answer: JSON or an event stream; the real cost settled (durable before the answer's last bytes).
 * What must happen once per request (in flight, true-up, settlement, deadline) is request-lifecycle.ts.
 * No request reaches a provider without a reservation, except self-routed ones, which cost nothing.
 * The request timeout covers the whole answer; after commit it ends the stream with an in-band error.
 */
import { randomBytes } from "node:crypto";
import { modelFilter, type Principal } from "../auth/authenticator.ts";
import { type Billing, promptTokenEstimate, type RequestMoney, reservationFor } from "../billing/billing.ts";
import type { PricingService } from "../billing/pricing.ts";
import { type UsageLimits, usageLimits } from "../billing/usage-bounds.ts";
import type { Hold } from "../billing/wallets.ts";
import type { CatalogService, ResolvedModel } from "../catalog/catalog.ts";
import { Errors } from "../errors/api-error.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { Limiter, RateHeaders } from "../limits/rate-limiter.ts";
import type { Logger } from "../observability/logger.ts";
import type { Metrics } from "../observability/metrics.ts";
import type { EngineRequestBody } from "../protocol/frames.ts";
import type { Store } from "../store/types.ts";
import { type ChatRequest, effectiveBudget, engineBody, parseChatRequest } from "./chat-request.ts";
import { type Committed, type DispatchSettings, dispatch, type RemoteProviders } from "./dispatch.ts";
import { type Answering, InFlight, RequestLifecycle } from "./request-lifecycle.ts";
import { collectCompletion, completionId, type Outcome, type ResponseContext, unheldError } from "./responses.ts";
import { streamCompletion } from "./stream-pump.ts";
import type { ToolSchemas } from "./tool-schemas.ts";

export interface ChatSettings extends DispatchSettings {
  readonly defaultMaxTokens: number;
  readonly requestTimeoutMs: number;
  /** Billing and rate limits on (off only in development, for benchmarks). */
  readonly metering: boolean;
  readonly defaultRpm: number | null;
  readonly defaultTpm: number | null;
}

export type ChatResult =
  | { readonly kind: "json"; readonly body: unknown; readonly headers: RateHeaders }
  | {
      readonly kind: "stream";
      readonly stream: ReadableStream<Uint8Array>;
      /** Resolves once the answer has ended: its outcome settled, its last bytes queued. */
      readonly ended: Promise<void>;
      readonly headers: RateHeaders;
    };

export interface ChatDeps {
  readonly catalog: CatalogService;
  readonly pricing: PricingService;
  readonly fleet: Fleet;
  /** Providers on other replicas (cluster/); absent: this replica's own only. */
  readonly remote?: RemoteProviders;
  readonly billing: Billing;
  readonly limiter: Limiter;
  readonly store: Store;
  /** The app's JSON Schema compiler (tools, response_format) and its verdict cache. */
  readonly schemas: ToolSchemas;
  readonly settings: ChatSettings;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly now: () => number;
  /**
   * Cluster mode: false once a request's hold is past its deadline (lost); asked before each event an
   * answer relays, so that nothing is relayed after it even when the hold keeper has not run yet.
   */
  readonly held?: (requestId: string) => boolean;
}

const NO_HEADERS: RateHeaders = Object.freeze({});

/** A request that passed validation and the model's and key's rules. */
interface Admitted {
  readonly request: ChatRequest;
  readonly resolved: ResolvedModel;
  readonly selfRoute: boolean;
  readonly maxTokens: number;
  readonly promptEstimate: number;
}

/** What was reserved for it: rate limit and money, and the body the provider gets under those bounds. */
interface Reserved {
  readonly headers: RateHeaders;
  readonly money: RequestMoney;
  readonly forwarded: EngineRequestBody;
  readonly limits: UsageLimits;
}

export class ChatService {
  /** Requests between their start and the end of their answer (settled, last bytes queued). */
  private readonly inFlight = new InFlight();
  /** Committed answers by request id, until they end (`stopUnheld`). */
  private readonly answering = new Map<string, RequestLifecycle>();
  private draining = false;

  constructor(private readonly deps: ChatDeps) {}

  /** Shutdown: new requests get 503 from now on; those in flight go on (`idle` resolves when they end). */
  drain(): void {
    this.draining = true;
  }

  get isDraining(): boolean {
    return this.draining;
  }

  /** Resolves once no request is in flight. */
  idle(): Promise<void> {
    return this.inFlight.idle();
  }

  /**
   * Holds the money authority could not keep (store/pg/hold-keeper.ts): each answer still running ends
   * now, a stream with the in-band error, the provider cancelled; it settles for what it relayed.
   */
  stopUnheld(requestIds: readonly string[]): void {
    const lost = unheldError();
    for (const id of requestIds) this.answering.get(id)?.stop(lost);
  }

  async complete(body: unknown, principal: Principal, signal: AbortSignal): Promise<ChatResult> {
    if (this.draining) throw Errors.serviceUnavailable("the coordinator is shutting down; retry the request");
    const life = new RequestLifecycle(this.deps, this.inFlight);
    try {
      const admitted = await this.admit(body, principal);
      const reserved = await this.reserve(admitted, principal, life);
      const committed = await this.dispatchOrRecordFailure(admitted, reserved, principal, signal, life);
      return await this.answer(admitted, reserved, committed, signal, life);
    } catch (e) {
      life.end();
      throw e;
    }
  }

  /** Validation, model, allowlist (403), image input (400), JSON Schemas (422), self-route, budget. */
  private async admit(body: unknown, principal: Principal): Promise<Admitted> {
    const { catalog, schemas, settings } = this.deps;
    const request = parseChatRequest(body);
    // No await for the store's synchronous answer (SQLite's cache): an await is a promise and a turn.
    const resolving = catalog.resolve(request.model);
    const resolved = resolving instanceof Promise ? await resolving : resolving;
    // Never echo the requested id: a client can put anything there (docs/security.md).
    if (!resolved) throw Errors.modelNotFound("the model does not exist", "model");
    const filter = modelFilter(principal);
    if (filter && !filter(resolved.id, resolved.build.id)) {
      throw Errors.modelNotAllowed("this API key may not use this model", "model");
    }
    if (request.imageParam !== undefined && !resolved.build.inputModalities?.includes("image")) {
      throw Errors.unsupportedValue("this model does not take image input (its input_modalities)", request.imageParam);
    }
    // Most requests carry no schema: no call (an async one is a promise and a turn of the microtask queue).
    if (request.schemas.length > 0) await schemas.check(request.schemas);
    const selfRoute = principal.selfRouteOnly || request.selfRoute;
    if (selfRoute && !(await this.hasLinkedMachine(principal.accountId))) {
      throw Errors.selfRouteConflict("self-route needs a provider machine linked to this account (a provider device token)");
    }
    const maxTokens = effectiveBudget(request.requestedMaxTokens, settings.defaultMaxTokens, resolved.build.maxOutputLength);
    return { request, resolved, selfRoute, maxTokens, promptEstimate: promptTokenEstimate(request.messages) };
  }

  /** Rate limit (429; one request and its estimated tokens), then the worst-case cost (402). */
  private async reserve(admitted: Admitted, principal: Principal, life: RequestLifecycle): Promise<Reserved> {
    const { limiter, settings } = this.deps;
    const { maxTokens, promptEstimate } = admitted;
    let headers = NO_HEADERS;
    if (settings.metering) {
      const subject = principal.keyId ?? `account:${principal.accountId}`;
      const pending = limiter.check(
        subject,
        { rpm: principal.rpm ?? settings.defaultRpm, tpm: principal.tpm ?? settings.defaultTpm },
        { tokens: promptEstimate + maxTokens },
      );
      // No await for the in-process limiter's synchronous answer: its path costs what it did.
      const decision = pending instanceof Promise ? await pending : pending;
      headers = decision.headers;
      if (!decision.ok) {
        throw Errors.rateLimited(`rate limit reached for ${decision.dimension} per minute`, decision.retryAfterSeconds, decision.headers);
      }
      const handle = decision.handle;
      life.limited((tokens) => limiter.trueUp(handle, tokens));
    }

    // The worst case is reserved before anything reaches a provider: the prompt bound is the one the
    // provider's report is held to (messages, forwarded fields such as tool definitions, template text).
    // Whatever fails from here on (pricing's store, the reservation) gives the rate-limit estimate back.
    try {
      return await this.hold(admitted, principal, life, headers);
    } catch (e) {
      life.unlimit();
      throw e;
    }
  }

  /** The reservation of the worst-case cost (402 when the money is not there), after the rate limit. */
  private async hold(admitted: Admitted, principal: Principal, life: RequestLifecycle, headers: RateHeaders): Promise<Reserved> {
    const { pricing, billing, settings } = this.deps;
    const { request, resolved, selfRoute, maxTokens } = admitted;
    const forwarded = engineBody(request, maxTokens);
    const limits = usageLimits(forwarded);
    const pricingRates = pricing.ratesFor(resolved.id, resolved.build.id);
    const rates = pricingRates instanceof Promise ? await pricingRates : pricingRates;
    // Time first, then randomness: rows keyed by request id are appended near the end of their
    // indexes instead of scattered over them, which keeps settlement writes cheap.
    const requestId = `req_${life.startedAt.toString(36).padStart(9, "0")}${randomBytes(9).toString("base64url")}`;
    const hold: Hold | undefined =
      settings.metering && !selfRoute
        ? await billing.reserve({
            requestId,
            accountId: principal.accountId,
            keyId: principal.keyId,
            spendCap: principal.spendCap,
            amount: reservationFor(limits.promptTokens, maxTokens, rates),
          })
        : undefined;
    const money: RequestMoney = {
      requestId,
      accountId: principal.accountId,
      keyId: principal.keyId,
      model: request.model,
      buildId: resolved.build.id,
      rates,
      startedAt: life.startedAt,
      hold,
      free: selfRoute,
    };
    // The request id names the usage row and ledger entries of this answer (x-request-id).
    return { headers: { ...headers, "x-request-id": requestId }, money, forwarded, limits };
  }

  /** Dispatch with failover (self-route: own machines only); a failure charges nothing but is recorded. */
  private async dispatchOrRecordFailure(
    admitted: Admitted,
    reserved: Reserved,
    principal: Principal,
    signal: AbortSignal,
    life: RequestLifecycle,
  ): Promise<Committed> {
    const { fleet, settings, now, remote } = this.deps;
    const { selfRoute } = admitted;
    try {
      return await dispatch(
        fleet,
        settings,
        {
          requestId: reserved.money.requestId,
          buildId: admitted.resolved.build.id,
          body: reserved.forwarded,
          limits: reserved.limits,
          signal,
          requestDeadline: life.startedAt + settings.requestTimeoutMs,
          ...(selfRoute ? { selfRoute: { accountId: principal.accountId } } : {}),
        },
        now,
        remote,
      );
    } catch (e) {
      life.dispatchFailed(reserved.money);
      throw e;
    }
  }

  /** The committed attempt as JSON or an event stream; the lifecycle settles its outcome and ends it. */
  private async answer(
    admitted: Admitted,
    reserved: Reserved,
    committed: Committed,
    signal: AbortSignal,
    life: RequestLifecycle,
  ): Promise<ChatResult> {
    const { request, maxTokens, promptEstimate } = admitted;
    const { attempt } = committed;
    const requestId = reserved.money.requestId;
    life.listIn(this.answering, requestId);
    const held = this.deps.held;
    const ctx: ResponseContext = {
      id: completionId(),
      model: request.model,
      maxTokens,
      created: Math.floor(life.startedAt / 1000),
      ...(held && reserved.money.hold ? { held: heldCheck(held, requestId) } : {}),
    };
    const answering: Answering = { money: reserved.money, attempt, promptEstimate, maxTokens, stream: request.stream };
    const onEnd = onEndOf(life, answering);
    // The request deadline stops the provider and, for a stream, ends the answer even if its consumer
    // stopped reading after the provider finished (its reservation is then settled, not held).
    if (request.stream) {
      const deadline = life.armDeadline(attempt, this.deps.settings.requestTimeoutMs, true);
      const stream = await streamCompletion(committed, ctx, onEnd, deadline);
      return { kind: "stream", stream, ended: life.ended(), headers: reserved.headers };
    }
    life.armDeadline(attempt, this.deps.settings.requestTimeoutMs, false);
    const onAbort = () => attempt.cancel("client_gone");
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      return { kind: "json", body: await collectCompletion(committed, ctx, onEnd), headers: reserved.headers };
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /** A self-routing account must have linked a machine: a live (unrevoked) provider device token. */
  private async hasLinkedMachine(accountId: string): Promise<boolean> {
    return (await this.deps.store.providerTokens.list(accountId)).some((t) => t.revokedAt === null);
  }
}

// A stream outlives this file's functions: what it keeps is made here, so that it closes over the
// lifecycle, the answer or the request id alone, not over the request's whole state.

function onEndOf(life: RequestLifecycle, answering: Answering): (o: Outcome) => Promise<void> {
  return (o) => life.finish(o, answering);
}

function heldCheck(held: (requestId: string) => boolean, requestId: string): () => boolean {
  return () => held(requestId);
}
