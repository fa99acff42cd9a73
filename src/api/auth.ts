/** The consumer authentication guard: resolves `principal` from the bearer credential, or answers 401. */
import { Elysia } from "elysia";
import type { Authenticator } from "../auth/authenticator.ts";

export function consumerAuth(authenticate: Authenticator) {
  return new Elysia({ name: "consumer-auth" }).resolve({ as: "scoped" }, async ({ request }) => ({
    principal: await authenticate(request.headers.get("authorization")),
  }));
}
