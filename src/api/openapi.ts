/**
 * GET /v1/openapi.json, no auth: the OpenAPI 3.1 document of the consumer API (src/api/openapi/), serialized
 * once per app. It changes only with a release, so caches may keep it a few minutes.
 */
import { Elysia } from "elysia";
import { openApiDocument } from "./openapi/document.ts";
import { OPENAPI_PATH } from "./openapi/paths.ts";

const HEADERS = { "content-type": "application/json", "cache-control": "public, max-age=300" };

export function openApiRoutes() {
  const body = JSON.stringify(openApiDocument());
  return new Elysia({ name: "openapi" }).get(OPENAPI_PATH, () => new Response(body, { headers: HEADERS }));
}
