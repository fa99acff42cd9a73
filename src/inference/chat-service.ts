/**
 * One chat request end to end (DESIGN.md section 4):
 *   validate -> resolve the model (alias -> build) -> key allowlist (403) -> image parts only for a model
 *   whose input_modalities list "image" (400) -> compile the request's JSON Schemas (422) -> budget rules ->
 *   rate limit (429, per key: requests and estimated tokens) -> reserve the worst-case cost (402) ->
 *   dispatch with failover (self-route: own machines only) -> answer as JSON or an event stream ->
 *   settle the real cost (durable before the answer's last bytes) and true up the token limit.
 * No request reaches a provider without a reservation, except self-routed ones, which cost nothing.
 * The request timeout covers the whole answer; after commit it ends the stream with an in-band error.
 */
import { randomBytes } from "node:crypto";
import { modelFilter, type Principal } from "../auth/authenticator.ts";
import { type Billing, estimatedUsage, promptTokenEstimate, type RequestMoney, reservationFor } from "../billing/billing.ts";
import type { PricingService } from "../billing/pricing.ts";
import { usageLimits } from "../billing/usage-bounds.ts";
import type { Hold } from "../billing/wallets.ts";
import type { CatalogService } from "../catalog/catalog.ts";
import { Errors } from "../errors/api-error.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { RateHeaders, RateLimiter } from "../limits/rate-limiter.ts";
import type { Logger } from "../observability/logger.ts";
import type { Metrics } from "../observability/metrics.ts";
import type { Usage } from "../protocol/messages.ts";
import type { Store } from "../store/types.ts";
import { effectiveBudget, engineBody, parseChatRequest } from "./chat-request.ts";
import { type DispatchSettings, dispatch } from "./dispatch.ts";
import { collectCompletion, completionId, type Outcome, type ResponseContext, streamCompletion } from "./responses.ts";
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
  readonly billing: Billing;
  readonly limiter: RateLimiter;
  readonly store: Store;
  /** The app's JSON Schema compiler (tools, response_format) and its verdict cache. */
  readonly schemas: ToolSchemas;
  readonly settings: ChatSettings;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly now: () => number;
}

const NO_HEADERS: RateHeaders = Object.freeze({});

export class ChatService {
  /** Requests between their start and the end of their answer (settled, last bytes queued). */
  private inFlight = 0;
  private draining = false;
  private idleWaiters: (() => void)[] = [];

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
    if (this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  async complete(body: unknown, principal: Principal, signal: AbortSignal): Promise<ChatResult> {
    if (this.draining) throw Errors.serviceUnavailable("the coordinator is shutting down; retry the request");
    this.inFlight++;
    let ended = false;
    let streamEnded: (() => void) | undefined;
    const end = () => {
      if (ended) return;
      ended = true;
      streamEnded?.();
      if (--this.inFlight === 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const resolve of waiters) resolve();
      }
    };
    try {
      const result = await this.run(body, principal, signal, end, (resolve) => {
        if (ended) resolve();
        else streamEnded = resolve;
      });
      // A JSON answer has ended (and settled) by now; a stream ends when its last event is written.
      if (result.kind === "json") end();
      return result;
    } catch (e) {
      end();
      throw e;
    }
  }

  private async run(
    body: unknown,
    principal: Principal,
    signal: AbortSignal,
    end: () => void,
    onEnded: (resolve: () => void) => void,
  ): Promise<ChatResult> {
    const { catalog, pricing, fleet, billing, limiter, schemas, settings, logger, metrics, now } = this.deps;
    const started = now();
    const request = parseChatRequest(body);
    const resolved = await catalog.resolve(request.model);
    // Never echo the requested id: a client can put anything there (docs/security.md).
    if (!resolved) throw Errors.modelNotFound("the model does not exist", "model");
    const filter = modelFilter(principal);
    if (filter && !filter(resolved.id, resolved.build.id)) {
      throw Errors.modelNotAllowed("this API key may not use this model", "model");
    }
    if (request.imageParam !== undefined && !resolved.build.inputModalities?.includes("image")) {
      throw Errors.unsupportedValue("this model does not take image input (its input_modalities)", request.imageParam);
    }
    await schemas.check(request.schemas);
    const selfRoute = principal.selfRouteOnly || request.selfRoute;
    if (selfRoute && !(await this.hasLinkedMachine(principal.accountId))) {
      throw Errors.selfRouteConflict("self-route needs a provider machine linked to this account (a provider device token)");
    }
    const maxTokens = effectiveBudget(request.requestedMaxTokens, settings.defaultMaxTokens, resolved.build.maxOutputLength);
    const promptEstimate = promptTokenEstimate(request.messages);

    // Rate limit: one request and its estimated tokens, trued up from real usage at the end.
    let headers = NO_HEADERS;
    let trueUp: ((tokens: number) => void) | undefined;
    if (settings.metering) {
      const subject = principal.keyId ?? `account:${principal.accountId}`;
      const decision = limiter.check(
        subject,
        { rpm: principal.rpm ?? settings.defaultRpm, tpm: principal.tpm ?? settings.defaultTpm },
        { tokens: promptEstimate + maxTokens },
      );
      headers = decision.headers;
      if (!decision.ok) {
        throw Errors.rateLimited(`rate limit reached for ${decision.dimension} per minute`, decision.retryAfterSeconds, decision.headers);
      }
      const handle = decision.handle;
      trueUp = (tokens) => limiter.trueUp(handle, tokens);
    }

    // Reserve the worst case before anything reaches a provider: the prompt bound is the one the
    // provider's report is held to (messages, forwarded fields such as tool definitions, template text).
    const forwarded = engineBody(request, maxTokens);
    const limits = usageLimits(forwarded);
    const rates = await pricing.ratesFor(resolved.id, resolved.build.id);
    let hold: Hold | undefined;
    if (settings.metering && !selfRoute) {
      try {
        hold = await billing.reserve({
          accountId: principal.accountId,
          keyId: principal.keyId,
          spendCap: principal.spendCap,
          amount: reservationFor(limits.promptTokens, maxTokens, rates),
        });
      } catch (e) {
        trueUp?.(0);
        throw e;
      }
    }
    // Time first, then randomness: rows keyed by request id are appended near the end of their
    // indexes instead of scattered over them, which keeps settlement writes cheap.
    const requestId = `req_${started.toString(36).padStart(9, "0")}${randomBytes(9).toString("base64url")}`;
    // The request id names the usage row and ledger entries of this answer (x-request-id).
    headers = { ...headers, "x-request-id": requestId };
    const money: RequestMoney = {
      requestId,
      accountId: principal.accountId,
      keyId: principal.keyId,
      model: request.model,
      buildId: resolved.build.id,
      rates,
      startedAt: started,
      hold,
      free: selfRoute,
    };
    let committed: Awaited<ReturnType<typeof dispatch>>;
    try {
      committed = await dispatch(
        fleet,
        settings,
        {
          requestId,
          buildId: resolved.build.id,
          body: forwarded,
          limits,
          signal,
          requestDeadline: started + settings.requestTimeoutMs,
          selfRoute,
          ...(selfRoute ? { accept: (s) => s.identity.accountId === principal.accountId } : {}),
        },
        now,
      );
    } catch (e) {
      // Nothing was generated: nothing is charged; the attempt is still recorded.
      trueUp?.(0);
      if (settings.metering) {
        void billing.settle(money, {
          outcome: "failed",
          usage: { prompt_tokens: 0, completion_tokens: 0 },
          providerId: null,
          providerAccountId: null,
          firstContentMs: null,
          endedAt: now(),
        });
      }
      throw e;
    }

    const attempt = committed.attempt;
    // The request deadline stops the provider and, for a stream, ends the answer even if its consumer
    // stopped reading after the provider finished (its reservation is then settled, not held).
    const deadline = new AbortController();
    const timer = setTimeout(
      () => {
        attempt.cancel("deadline");
        deadline.abort();
      },
      Math.max(1, settings.requestTimeoutMs - (now() - started)),
    );
    const ctx: ResponseContext = { id: completionId(), model: request.model, maxTokens, created: Math.floor(started / 1000) };
    const finish = async (o: Outcome): Promise<void> => {
      clearTimeout(timer);
      const usage: Usage = o.usage ?? estimatedUsage(promptEstimate, o.completionChars, maxTokens);
      trueUp?.(usage.prompt_tokens + usage.completion_tokens);
      metrics.observeChat(o.status, request.stream);
      logger.debug("chat request ended", {
        request_id: requestId,
        account_id: principal.accountId,
        key_id: principal.keyId ?? undefined,
        model: request.model,
        build_id: resolved.build.id,
        provider_id: attempt.providerId,
        status: o.status,
        duration_ms: now() - started,
      });
      if (!settings.metering) return;
      await billing.settle(money, {
        outcome: o.status,
        usage,
        providerId: attempt.providerId,
        providerAccountId: attempt.providerAccountId,
        firstContentMs: attempt.firstContentAt === undefined ? null : attempt.firstContentAt - started,
        endedAt: now(),
      });
    };
    // The request counts as in flight (shutdown drain) until its outcome is settled.
    const onEnd = async (o: Outcome): Promise<void> => {
      try {
        await finish(o);
      } finally {
        end();
      }
    };
    if (!request.stream) {
      const onAbort = () => attempt.cancel("client_gone");
      signal.addEventListener("abort", onAbort, { once: true });
      try {
        return { kind: "json", body: await collectCompletion(committed, ctx, onEnd), headers };
      } finally {
        signal.removeEventListener("abort", onAbort);
      }
    }
    const stream = await streamCompletion(committed, ctx, onEnd, deadline.signal);
    return { kind: "stream", stream, ended: new Promise<void>(onEnded), headers };
  }

  /** A self-routing account must have linked a machine: a live (unrevoked) provider device token. */
  private async hasLinkedMachine(accountId: string): Promise<boolean> {
    return (await this.deps.store.providerTokens.list(accountId)).some((t) => t.revokedAt === null);
  }
}
