/**
 * GET /v1/openapi.json, no auth: the OpenAPI 3.1 document of the consumer API (src/api/openapi/), built and
 * serialized once per app, on the first request rather than at start (about a millisecond of every start,
 * and 55 KB a coordinator keeps only once somebody asks). It changes only with a release, so caches may
 * keep it a few minutes.
 */
import { Elysia } from "elysia";
import { OPENAPI_PATH } from "./openapi/paths.ts";

const HEADERS = { "content-type": "application/json", "cache-control": "public, max-age=300" };

export function openApiRoutes() {
  let body: Promise<string> | undefined;
  const serialized = () => (body ??= import("./openapi/document.ts").then(({ openApiDocument }) => JSON.stringify(openApiDocument())));
  return new Elysia({ name: "openapi" }).get(OPENAPI_PATH, async () => new Response(await serialized(), { headers: HEADERS }));
}
