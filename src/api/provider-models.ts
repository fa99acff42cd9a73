/**
 * GET /v1/provider/models: the catalog's builds, each with the aliases that name it, for provider
 * machines. Requests are routed by build, so a provider must serve build ids: `umbra-provider doctor`
 * checks its --model ids against this list and names the build behind an alias.
 *
 * Auth: a live provider device token (as GET /v1/provider/me), else 401 `invalid_token`. Answer:
 * `{"object": "list", "data": [{"id", "aliases"}]}`, sorted by id, aliases sorted; ids only (prices
 * and capacity are the consumer's /v1/models).
 */
import { Elysia } from "elysia";
import type { CatalogService } from "../catalog/catalog.ts";

export interface ProviderModelsDeps {
  readonly catalog: CatalogService;
  /** The provider device token's check: throws a 401 unless it is live. */
  readonly authenticateProvider: (authorization: string | null) => Promise<unknown>;
}

export function providerModelRoutes(deps: ProviderModelsDeps) {
  return new Elysia({ name: "provider-models" }).get("/v1/provider/models", async ({ request }) => {
    await deps.authenticateProvider(request.headers.get("authorization"));
    const data = await deps.catalog.buildsWithAliases();
    return Response.json({ object: "list", data }, { headers: { "cache-control": "no-store" } });
  });
}
