/** POST /v1/chat/completions: JSON or an event stream (status 200 only once first content arrived). */
import { Elysia } from "elysia";
import type { Authenticator } from "../auth/authenticator.ts";
import type { ChatService } from "../inference/chat-service.ts";
import { consumerAuth } from "./auth.ts";
import { readJsonBody } from "./errors.ts";

const SSE_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" };

export function chatRoutes(deps: { chat: ChatService; authenticate: Authenticator; maxBodyBytes: number }) {
  return new Elysia({ name: "chat" }).use(consumerAuth(deps.authenticate)).post(
    "/v1/chat/completions",
    async ({ request, principal }) => {
      const body = await readJsonBody(request, deps.maxBodyBytes);
      const result = await deps.chat.complete(body, principal, request.signal);
      if (result.kind === "stream") return new Response(result.stream, { status: 200, headers: SSE_HEADERS });
      return new Response(JSON.stringify(result.body), { status: 200, headers: { "content-type": "application/json" } });
    },
    { parse: "none" },
  );
}
