/** Liveness, readiness and Prometheus metrics. No authentication; nothing here reveals data. */
import { Elysia } from "elysia";
import type { Metrics } from "../observability/metrics.ts";
import type { Store } from "../store/types.ts";

export function healthRoutes(deps: { store: Store; metrics: Metrics }) {
  return new Elysia({ name: "health" })
    .get("/healthz", () => ({ status: "ok" }))
    .get("/readyz", async ({ set }) => {
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
