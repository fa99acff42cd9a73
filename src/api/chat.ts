/**
 * POST /v1/chat/completions: JSON or an event stream (status 200 only once first content arrived), behind
 * the sealed consumer transport (sealed-transport.ts). A client that left before the answer gets nothing
 * (nobody reads it); the status recorded for it in metrics is 499, the customary "client closed request",
 * not an error of ours.
 *
 * The connection's idle timeout is lifted once the body is in (and opened) until the answer has ended: a
 * provider may take longer than the timeout to first content. It is restored on return, or for a stream
 * once its outcome is settled (ChatResult `ended`), not when the consumer has read it: one that stops
 * reading is then disconnected like any other idle connection.
 */
import { Elysia } from "elysia";
import type { Authenticator, Principal } from "../auth/authenticator.ts";
import { BUDGET_FIELDS } from "../inference/chat-request.ts";
import type { ChatResult, ChatService } from "../inference/chat-service.ts";
import { ClientGone } from "../inference/dispatch.ts";
import { consumerAuth } from "./auth.ts";
import { parseJson, readBody } from "./body.ts";
import type { Connection } from "./connection.ts";
import { type SealedTransportDeps, sealedTransport } from "./sealed-transport.ts";

const CLIENT_CLOSED = 499;
export const CHAT_PATH = "/v1/chat/completions";
const SSE_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" };

interface ChatDeps extends SealedTransportDeps {
  readonly chat: ChatService;
  readonly authenticate: Authenticator;
  readonly maxBodyBytes: number;
  readonly bodyTimeoutMs: number;
  /** The request's connection: told when the body was read and when the answer ended (idle timeout). */
  readonly connection?: (request: Request) => Pick<Connection, "bodyRead" | "answered"> | undefined;
}

interface Exchange {
  readonly request: Request;
  readonly principal: Principal;
}

export function chatRoutes(deps: ChatDeps) {
  const handle = chatHandler(deps);
  return new Elysia({ name: "chat" })
    .use(consumerAuth(deps.authenticate))
    .post(CHAT_PATH, ({ request, principal }) => handle(request, principal), { parse: "none" });
}

/**
 * POST /v1/chat/completions once authenticated: the body (bounded), the sealed transport, the answer.
 * http.ts calls it directly for that path (after the same auth and with the same error boundary as the
 * routed app), the hot path without a router's per-request context; the Elysia route serves the rest.
 */
export function chatHandler(deps: ChatDeps): (request: Request, principal: Principal) => Promise<Response> {
  const limits = { maxBytes: deps.maxBodyBytes, timeoutMs: deps.bodyTimeoutMs };
  const handle = sealedTransport(deps, CHAT_PATH, (body: Uint8Array, exchange: Exchange) => answer(deps, body, exchange));
  return async (request, principal) => handle(await readBody(request, limits), { request, principal });
}

/** The answer to a (plaintext) body; tells the connection when it has ended. */
async function answer(deps: ChatDeps, body: Uint8Array, { request, principal }: Exchange): Promise<Response> {
  const connection = deps.connection?.(request);
  connection?.bodyRead?.();
  let result: ChatResult;
  try {
    result = await deps.chat.complete(parseJson(body, BUDGET_FIELDS), principal, request.signal);
  } catch (e) {
    connection?.answered?.();
    if (e instanceof ClientGone) return new Response(null, { status: CLIENT_CLOSED });
    throw e;
  }
  if (result.kind === "stream") {
    // Bound, not a closure: the stream does not keep this request's body and state alive.
    if (connection?.answered) void result.ended.then(connection.answered.bind(connection));
    return new Response(result.stream, { status: 200, headers: { ...SSE_HEADERS, ...result.headers } });
  }
  connection?.answered?.();
  return new Response(JSON.stringify(result.body), { status: 200, headers: { "content-type": "application/json", ...result.headers } });
}
