/**
 * One chat request end to end (DESIGN.md section 4): validate, resolve the model (alias -> build),
 * check the key's allowlist, apply the budget rules, dispatch with failover, then answer as JSON or
 * as an event stream. The request timeout covers the whole answer; after commit it ends the stream
 * with an in-band `timeout` error.
 */
import { randomBytes } from "node:crypto";
import { modelFilter, type Principal } from "../auth/authenticator.ts";
import type { CatalogService } from "../catalog/catalog.ts";
import { Errors } from "../errors/api-error.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { Logger } from "../observability/logger.ts";
import type { Metrics } from "../observability/metrics.ts";
import { effectiveBudget, engineBody, parseChatRequest } from "./chat-request.ts";
import { type DispatchSettings, dispatch } from "./dispatch.ts";
import { collectCompletion, completionId, type Outcome, type ResponseContext, streamCompletion } from "./responses.ts";

export interface ChatSettings extends DispatchSettings {
  readonly defaultMaxTokens: number;
  readonly requestTimeoutMs: number;
}

export type ChatResult =
  | { readonly kind: "json"; readonly body: unknown }
  | { readonly kind: "stream"; readonly stream: ReadableStream<Uint8Array> };

export interface ChatDeps {
  readonly catalog: CatalogService;
  readonly fleet: Fleet;
  readonly settings: ChatSettings;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly now: () => number;
}

export class ChatService {
  constructor(private readonly deps: ChatDeps) {}

  async complete(body: unknown, principal: Principal, signal: AbortSignal): Promise<ChatResult> {
    const { catalog, fleet, settings, logger, metrics, now } = this.deps;
    const started = now();
    const request = parseChatRequest(body);
    const resolved = await catalog.resolve(request.model);
    if (!resolved) throw Errors.modelNotFound(`the model '${request.model}' does not exist`, "model");
    const filter = modelFilter(principal);
    if (filter && !filter(resolved.id, resolved.build.id)) {
      throw Errors.modelNotAllowed("this API key may not use this model", "model");
    }
    const maxTokens = effectiveBudget(request.requestedMaxTokens, settings.defaultMaxTokens, resolved.build.maxOutputLength);
    const requestId = `req_${randomBytes(12).toString("base64url")}`;

    const committed = await dispatch(
      fleet,
      settings,
      {
        requestId,
        buildId: resolved.build.id,
        body: engineBody(request, maxTokens),
        signal,
        requestDeadline: started + settings.requestTimeoutMs,
      },
      now,
    );

    const timer = setTimeout(() => committed.attempt.cancel("deadline"), Math.max(1, settings.requestTimeoutMs - (now() - started)));
    const ctx: ResponseContext = { id: completionId(), model: request.model, maxTokens, created: Math.floor(started / 1000) };
    const onEnd = (o: Outcome) => {
      clearTimeout(timer);
      metrics.observeChat(o.status, request.stream);
      logger.debug("chat request ended", {
        request_id: requestId,
        account_id: principal.accountId,
        key_id: principal.keyId ?? undefined,
        model: request.model,
        build_id: resolved.build.id,
        provider_id: committed.attempt.providerId,
        status: o.status,
        duration_ms: now() - started,
      });
    };
    if (!request.stream) {
      const onAbort = () => committed.attempt.cancel("client_gone");
      signal.addEventListener("abort", onAbort, { once: true });
      try {
        return { kind: "json", body: await collectCompletion(committed, ctx, onEnd) };
      } finally {
        signal.removeEventListener("abort", onAbort);
      }
    }
    return { kind: "stream", stream: streamCompletion(committed, ctx, onEnd) };
  }
}
