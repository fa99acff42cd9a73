/**
 * The OpenAPI 3.1 document of the consumer API, assembled from its parts (paths.ts, the schema files,
 * errors.ts): what GET /v1/openapi.json serves. `info.version` is the product version (src/version.ts);
 * the consumer contract's own version is in the description.
 *
 * Extension: a `text/event-stream` media type carries `x-sse-data`, the schema of each event's data
 * (JSON text, except the literal `[DONE]`), since OpenAPI 3.1 has no keyword for it.
 */
import { VERSION } from "../../version.ts";
import { chatRequestSchemas } from "./chat-request-schemas.ts";
import { completionSchemas } from "./completion-schemas.ts";
import { errorSchemas, headerComponents } from "./errors.ts";
import { paths } from "./paths.ts";
import { resourceSchemas } from "./resource-schemas.ts";
import type { JsonSchema } from "./schema.ts";

/** The consumer contract's version (docs/api.md, the specification). */
export const CONSUMER_API_VERSION = "2026-10-12";

export function openApiDocument(): JsonSchema {
  return {
    openapi: "3.1.0",
    jsonSchemaDialect: "https://spec.openapis.org/oas/3.1/dialect/base",
    info: {
      title: "Umbra consumer API",
      version: VERSION,
      summary: "Private text inference: models, public prices, chat completions, attestation.",
      description:
        `Consumer API version ${CONSUMER_API_VERSION}, served by Umbra ${VERSION}. The machine-readable form of docs/api.md for ` +
        "consumers. Bodies are JSON; timestamps are Unix seconds; money is integer micro-USD. Every error is " +
        '`{"error": {"message", "type", "code", "param"?}}` with its HTTP status. An event stream\'s data follows its media type\'s ' +
        "`x-sse-data` schema (JSON, except the literal `[DONE]`). Admin, provider and provisioning routes are not part of this document.",
    },
    servers: [
      { url: "/", description: "This coordinator; SDKs that follow the chat-completions convention take `<origin>/v1` as base URL." },
    ],
    tags: [
      { name: "models", description: "The model catalog." },
      { name: "pricing", description: "Public prices." },
      { name: "chat", description: "Chat completions, plain or over the sealed transport." },
      { name: "attestation", description: "What a client verifies before trusting the coordinator and its providers." },
      { name: "health", description: "Probes for load balancers." },
      { name: "meta", description: "This document." },
    ],
    paths: paths(),
    components: {
      securitySchemes: {
        bearerAuth: {
          type: "http",
          scheme: "bearer",
          description:
            "An API key (`sk-umbra-` and 43 base64url characters), or a JWT of the account's identity provider. A provider " +
            "device token (`umbra-pt-...`) is never a consumer credential.",
        },
      },
      headers: headerComponents(),
      schemas: {
        ...errorSchemas(),
        ...resourceSchemas(),
        ...chatRequestSchemas(),
        ...completionSchemas(),
      },
    },
  };
}
