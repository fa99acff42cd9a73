/** Liveness, readiness and Prometheus metrics. No authentication; nothing here reveals data. */
import { Elysia } from "elysia";
import type { Metrics } from "../observability/metrics.ts";
import type { Store } from "../store/types.ts";

export function healthRoutes(deps: { store: Store; metrics: Metrics; chat: { readonly isDraining: boolean } }) {
  return new Elysia({ name: "health" })
    .get("/healthz", () => ({ status: "ok" }))
    .get("/readyz", async ({ set }) => {
      // A stopping coordinator finishes what it has but takes nothing new: load balancers move on.
      if (deps.chat.isDraining) {
        set.status = 503;
        return { status: "unavailable", reason: "shutting down" };
      }
      try {
        await deps.store.ping();
        return { status: "ready" };
      } catch {
        set.status = 503;
        return { status: "unavailable", reason: "store" };
      }
    })
    .get(
      "/metrics",
      async () =>
        new Response(await deps.metrics.render(), {
          headers: { "content-type": deps.metrics.registry.contentType },
        }),
    );
}
