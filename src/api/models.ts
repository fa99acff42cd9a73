/** GET /v1/models and GET /v1/models/{id} (the whole trailing path is the id; %2F is decoded). */
import { Elysia } from "elysia";
import { type Authenticator, modelFilter } from "../auth/authenticator.ts";
import type { CatalogService } from "../catalog/catalog.ts";
import { Errors } from "../errors/api-error.ts";
import { consumerAuth } from "./auth.ts";
import { pathId } from "./errors.ts";

export function modelRoutes(deps: { catalog: CatalogService; authenticate: Authenticator }) {
  return new Elysia({ name: "models" })
    .use(consumerAuth(deps.authenticate))
    .get("/v1/models", async ({ query, principal }) => {
      const include = query.include_builds;
      if (include !== undefined && include !== "1") {
        throw Errors.invalidValue("'include_builds' accepts only the value 1", "include_builds");
      }
      return { object: "list", data: await deps.catalog.list(include === "1", modelFilter(principal)) };
    })
    .get("/v1/models/*", async ({ params, principal }) => {
      const id = pathId(params["*"]);
      const model = id === undefined ? undefined : await deps.catalog.retrieve(id, modelFilter(principal));
      if (!model) throw Errors.modelNotFound(`the model '${(id ?? "").slice(0, 256)}' does not exist`, "model");
      return model;
    });
}
