/**
 * The OpenAPI document's operations: every consumer route (docs/api.md) with its parameters, request body,
 * answers and every error status it can give (the spec's Errors table, narrowed to what each route's code
 * can reach), plus the health probes and this document itself.
 *
 * Every error status is listed explicitly with its envelope; `default` covers only the refusals of any
 * route (errors.ts DEFAULT_ERROR). The 503 of every route but /healthz and /v1/attestation includes the
 * provisioning gate (src/api/http.ts).
 */
import { PAGE_LIMIT } from "../../fleet/public-list.ts";
import { DEFAULT_ERROR, errorResponse, RATE_LIMIT_HEADERS, SEALED_JSON, UNAVAILABLE } from "./errors.ts";
import { type JsonSchema, ref } from "./schema.ts";

export const OPENAPI_PATH = "/v1/openapi.json";

const BEARER = [{ bearerAuth: [] }];
const PUBLIC: JsonSchema[] = [];
const json = (schema: JsonSchema) => ({ "application/json": { schema } });
const ok = (description: string, schema: JsonSchema, headers?: Record<string, JsonSchema>) => ({
  description,
  ...(headers ? { headers } : {}),
  content: json(schema),
});
const INTERNAL = "Internal error (its message never says more).";
const UNAUTHORIZED = "Missing or invalid credential (`invalid_api_key`; `invalid_token` for a JWT). A provider device token is refused.";

interface Operation {
  readonly operationId: string;
  readonly summary: string;
  readonly description?: string;
  readonly tags: readonly string[];
  readonly security: readonly JsonSchema[];
  readonly parameters?: readonly JsonSchema[];
  readonly requestBody?: JsonSchema;
  readonly responses: Record<string, JsonSchema>;
}

const op = (o: Operation): Operation => ({ ...o, responses: { ...o.responses, default: DEFAULT_ERROR } });

export function paths(): Record<string, Record<string, Operation>> {
  return {
    "/v1/models": {
      get: op({
        operationId: "listModels",
        summary: "List models with capacity metadata",
        description:
          "Sorted by id. An alias hides the build it names unless `include_builds=1`. A key's allowlist filters the list; a " +
          "self-route-only key sees only the live models its own machines serve. Listing does not guarantee availability.",
        tags: ["models"],
        security: BEARER,
        parameters: [
          {
            name: "include_builds",
            in: "query",
            required: false,
            description: "Exactly `1`: list the builds that aliases hide too. Any other value is 400.",
            schema: { type: "string", enum: ["1"] },
          },
        ],
        responses: {
          "200": ok("The models.", ref("ModelList")),
          "400": errorResponse(400, "`include_builds` other than `1` (`invalid_value`, param `include_builds`)."),
          "401": errorResponse(401, UNAUTHORIZED),
          "500": errorResponse(500, INTERNAL),
          "503": errorResponse(503, UNAVAILABLE),
        },
      }),
    },
    "/v1/models/{id}": {
      get: op({
        operationId: "retrieveModel",
        summary: "Retrieve one model",
        description: "A build hidden by an alias is retrievable by its exact id.",
        tags: ["models"],
        security: BEARER,
        parameters: [
          {
            name: "id",
            in: "path",
            required: true,
            description:
              "The whole model id, possibly with slashes: the entire trailing path is the id, so `/v1/models/org/model` and " +
              "`/v1/models/org%2Fmodel` are the same model.",
            schema: { type: "string" },
          },
        ],
        responses: {
          "200": ok("The model.", ref("Model")),
          "401": errorResponse(401, UNAUTHORIZED),
          "404": errorResponse(404, "Unknown id, or one the key may not use (`model_not_found`, param `model`)."),
          "500": errorResponse(500, INTERNAL),
          "503": errorResponse(503, UNAVAILABLE),
        },
      }),
    },
    "/v1/pricing": {
      get: op({
        operationId: "listPricing",
        summary: "Public prices",
        description: "Effective rates per model in µUSD per million tokens; a model without a stored row uses the fallback.",
        tags: ["pricing"],
        security: PUBLIC,
        responses: {
          "200": ok("The price list.", ref("PricingResponse")),
          "500": errorResponse(500, INTERNAL),
          "503": errorResponse(503, UNAVAILABLE),
        },
      }),
    },
    "/v1/chat/completions": { post: chatOperation() },
    "/v1/attestation": {
      get: op({
        operationId: "getCoordinatorAttestation",
        summary: "The coordinator's attestation",
        description: "Hardware evidence that the coordinator runs the published image and holds the keys it presents (docs/security.md).",
        tags: ["attestation"],
        security: PUBLIC,
        responses: {
          "200": ok("The attestation document.", ref("CoordinatorAttestation")),
          "500": errorResponse(500, INTERNAL),
          "503": errorResponse(503, "This host cannot attest (`--attestation none`, or no configfs-tsm); the message says which."),
        },
      }),
    },
    "/v1/providers/attestation": {
      get: op({
        operationId: "listProviderAttestations",
        summary: "The connected providers' verified attestation",
        description: "Providers at or above the routing floor, ordered by `provider_id`, one page at a time; a page is a snapshot.",
        tags: ["attestation"],
        security: PUBLIC,
        parameters: [
          {
            name: "limit",
            in: "query",
            required: false,
            schema: { type: "integer", minimum: PAGE_LIMIT.min, maximum: PAGE_LIMIT.max, default: PAGE_LIMIT.fallback },
          },
          {
            name: "after",
            in: "query",
            required: false,
            description: "A `provider_id`: only entries after it.",
            schema: { type: "string", minLength: 1, maxLength: 256 },
          },
          {
            name: "identity_key_sha256",
            in: "query",
            required: false,
            description: "Only the providers with this identity key (a receipt's `metadata.provider_key_id`).",
            schema: { type: "string", pattern: "^[0-9a-f]{64}$" },
          },
        ],
        responses: {
          "200": ok("One page.", ref("ProviderAttestationList")),
          "400": errorResponse(400, "A bad query value (`invalid_value`, param naming it)."),
          "500": errorResponse(500, INTERNAL),
          "503": errorResponse(503, UNAVAILABLE),
        },
      }),
    },
    [OPENAPI_PATH]: {
      get: op({
        operationId: "getOpenApiDocument",
        summary: "This document",
        description: "The machine-readable form of docs/api.md's consumer API (OpenAPI 3.1).",
        tags: ["meta"],
        security: PUBLIC,
        responses: {
          "200": ok("The OpenAPI document.", { type: "object", required: ["openapi", "info", "paths"] }),
          "503": errorResponse(503, UNAVAILABLE),
        },
      }),
    },
    "/healthz": {
      get: op({
        operationId: "getHealth",
        summary: "Liveness",
        tags: ["health"],
        security: PUBLIC,
        responses: { "200": ok("The process serves.", ref("Health")) },
      }),
    },
    "/readyz": {
      get: op({
        operationId: "getReadiness",
        summary: "Readiness",
        tags: ["health"],
        security: PUBLIC,
        responses: {
          "200": ok("The database answers and the coordinator takes requests.", ref("Ready")),
          "503": {
            description: "Shutting down, the database does not answer, or (error envelope) the coordinator awaits provisioning.",
            content: json({ oneOf: [ref("NotReady"), ref("Error503")] }),
          },
        },
      }),
    },
  };
}

function chatOperation(): Operation {
  const sealed = { sealed: true };
  return op({
    operationId: "createChatCompletion",
    summary: "Create a chat completion",
    description:
      "JSON answer, or an event stream when `stream` is true: status 200 is sent only once first content exists; a failure before " +
      "is a JSON error with its real status, a failure after is one in-band error event and no `[DONE]`. No keepalive comments. " +
      "Each event's data follows the media type's `x-sse-data` schema. With content type `application/vnd.umbra.sealed+json` the " +
      'body is a sealed envelope (docs/api.md, "Sealed transport") and, once it opened, every answer is sealed back.',
    tags: ["chat"],
    security: BEARER,
    requestBody: {
      required: true,
      content: {
        "application/json": { schema: ref("ChatRequest") },
        [SEALED_JSON]: { schema: ref("SealedRequest") },
      },
    },
    responses: {
      "200": {
        description: "The answer: JSON (stream false), an event stream (stream true), or either sealed.",
        headers: {
          "x-request-id": { $ref: "#/components/headers/RequestId" },
          "x-umbra-response-nonce": { $ref: "#/components/headers/ResponseNonce" },
          ...RATE_LIMIT_HEADERS,
        },
        content: {
          "application/json": { schema: ref("ChatCompletion") },
          "text/event-stream": {
            schema: { type: "string" },
            "x-sse-data": { anyOf: [ref("ChatStreamEvent"), ref("SealedStreamEvent")], description: "Plain events, or sealed ones." },
          },
          [SEALED_JSON]: { schema: ref("SealedBody") },
        },
      },
      "400": errorResponse(
        400,
        "Malformed JSON, fields, budget, `n`, messages, tools or images; a malformed, stale, replayed or unopenable sealed envelope.",
        sealed,
      ),
      "401": errorResponse(401, UNAUTHORIZED),
      "402": errorResponse(
        402,
        "The account balance (`insufficient_funds`) or the key's spend cap (`insufficient_quota`) cannot cover the reservation.",
        sealed,
      ),
      "403": errorResponse(403, "The key's allowlist excludes the model (`model_not_allowed`).", sealed),
      "404": errorResponse(404, "Unknown model (`model_not_found`, param `model`).", sealed),
      "409": errorResponse(409, "`self_route` without a live machine linked to the account (`self_route_conflict`).", sealed),
      "413": errorResponse(413, "The body exceeds UMBRA_MAX_BODY_BYTES (`request_too_large`), or the prompt an allowed size.", sealed),
      "422": errorResponse(422, "A JSON Schema among tools or response_format cannot be compiled (`tool_schema_invalid`).", sealed),
      "429": errorResponse(
        429,
        "Rate limit (`rate_limit_exceeded`), queue full (`capacity_exhausted`), no content within the first-content deadline " +
          "(`first_content_timeout`), or the sealed replay cache full.",
        { ...sealed, headers: RATE_LIMIT_HEADERS },
      ),
      "500": errorResponse(500, INTERNAL, sealed),
      "502": errorResponse(
        502,
        "Every provider tried failed (`provider_error`), or its output failed verification (`invalid_provider_output`).",
        sealed,
      ),
      "503": errorResponse(
        503,
        `No provider serves the model (\`model_unavailable\`), all are busy, shutting down; or: ${UNAVAILABLE}`,
        sealed,
      ),
      "504": errorResponse(504, "The request timed out, or the body did not arrive within UMBRA_BODY_TIMEOUT_MS (`timeout`).", sealed),
    },
  });
}
