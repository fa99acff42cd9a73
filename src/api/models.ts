/**
 * GET /v1/models and GET /v1/models/{id} (the whole trailing path is the id; %2F is decoded). A key's
 * allowlist filters both; a self-route-only key sees only the live models its own machines serve.
 */
import { Elysia } from "elysia";
import { type Authenticator, modelFilter, type Principal } from "../auth/authenticator.ts";
import type { CatalogService } from "../catalog/catalog.ts";
import { Errors } from "../errors/api-error.ts";
import type { Fleet } from "../fleet/fleet.ts";
import { consumerAuth } from "./auth.ts";
import { pathId } from "./body.ts";

export function modelRoutes(deps: {
  catalog: CatalogService;
  authenticate: Authenticator;
  fleet: Fleet;
  buildsOf?: (accountId: string) => ReadonlySet<string>;
}) {
  const buildsOf = deps.buildsOf ?? ((accountId: string) => deps.fleet.buildsOf(accountId));
  const filterFor = (principal: Principal) => modelFilter(principal, principal.selfRouteOnly ? buildsOf(principal.accountId) : undefined);
  return new Elysia({ name: "models" })
    .use(consumerAuth(deps.authenticate))
    .get("/v1/models", async ({ query, principal }) => {
      const include = query.include_builds;
      if (include !== undefined && include !== "1") {
        throw Errors.invalidValue("'include_builds' accepts only the value 1", "include_builds");
      }
      return { object: "list", data: await deps.catalog.list(include === "1", filterFor(principal)) };
    })
    .get("/v1/models/*", async ({ params, principal }) => {
      const id = pathId(params["*"]);
      const model = id === undefined ? undefined : await deps.catalog.retrieve(id, filterFor(principal));
      // The id is not echoed: an error body never quotes what the client sent (docs/security.md).
      if (!model) throw Errors.modelNotFound("the model does not exist", "model");
      return model;
    });
}
