/**
 * POST /v1/chat/completions: JSON or an event stream (status 200 only once first content arrived).
 * A client that left before the answer gets nothing (nobody reads it); the status recorded for it in
 * metrics is 499, the customary "client closed request", not an error of ours.
 */
import { Elysia } from "elysia";
import type { Authenticator } from "../auth/authenticator.ts";
import type { ChatService } from "../inference/chat-service.ts";
import { ClientGone } from "../inference/dispatch.ts";
import { consumerAuth } from "./auth.ts";
import { readJsonBody } from "./errors.ts";

const CLIENT_CLOSED = 499;
const SSE_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" };

export function chatRoutes(deps: { chat: ChatService; authenticate: Authenticator; maxBodyBytes: number }) {
  return new Elysia({ name: "chat" }).use(consumerAuth(deps.authenticate)).post(
    "/v1/chat/completions",
    async ({ request, principal }) => {
      const body = await readJsonBody(request, deps.maxBodyBytes);
      let result: Awaited<ReturnType<ChatService["complete"]>>;
      try {
        result = await deps.chat.complete(body, principal, request.signal);
      } catch (e) {
        if (e instanceof ClientGone) return new Response(null, { status: CLIENT_CLOSED });
        throw e;
      }
      if (result.kind === "stream") return new Response(result.stream, { status: 200, headers: { ...SSE_HEADERS, ...result.headers } });
      return new Response(JSON.stringify(result.body), { status: 200, headers: { "content-type": "application/json", ...result.headers } });
    },
    { parse: "none" },
  );
}
