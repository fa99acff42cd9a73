/**
 * The OpenAPI document itself (src/api/openapi/): valid OpenAPI 3.1 structure, every `$ref` resolving,
 * every schema compiling with Ajv 2020-12, the error vocabulary and the spec's error table covered, and
 * served at GET /v1/openapi.json without auth. Then that the checks bite: a document drifted from the
 * code (a renamed field, a narrowed code list, a missing status) fails against real answers, and so does
 * an answer carrying a field the document does not name. The answers of every route are checked in
 * openapi-conformance.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { openApiDocument } from "../../src/api/openapi/document.ts";
import { ERROR_STATUSES } from "../../src/api/openapi/errors.ts";
import { VERSION } from "../../src/version.ts";
import { seedAccount, seedCatalog, testApp } from "../support/harness.ts";
import { documentProblems, OpenApiChecker } from "../support/openapi-check.ts";

type Json = Record<string, unknown>;
/** The document as a client receives it (JSON), a fresh copy each time. */
const doc = (): Json => JSON.parse(JSON.stringify(openApiDocument()));
const at = (value: unknown, ...keys: string[]): Json => keys.reduce((v, k) => (v as Json)[k], value) as Json;

describe("the document", () => {
  test("is OpenAPI 3.1 with the product version, and nothing in it is malformed", () => {
    const d = doc();
    expect([d.openapi, at(d, "info").version]).toEqual(["3.1.0", VERSION]);
    expect(documentProblems(d)).toEqual([]);
  });

  test("documents the consumer routes, each public or behind the bearer scheme", () => {
    const d = doc();
    const security = Object.entries(at(d, "paths")).map(([path, item]) => [
      path,
      Object.entries(item as Json).map(([m, o]) => [m, (o as Json).security]),
    ]);
    const bearer = [{ bearerAuth: [] }];
    expect(security).toEqual([
      ["/v1/models", [["get", bearer]]],
      ["/v1/models/{id}", [["get", bearer]]],
      ["/v1/pricing", [["get", []]]],
      ["/v1/chat/completions", [["post", bearer]]],
      ["/v1/attestation", [["get", []]]],
      ["/v1/providers/attestation", [["get", []]]],
      ["/v1/openapi.json", [["get", []]]],
      ["/healthz", [["get", []]]],
      ["/readyz", [["get", []]]],
    ]);
    expect(at(d, "components", "securitySchemes", "bearerAuth")).toEqual(expect.objectContaining({ type: "http", scheme: "bearer" }));
  });

  test("chat lists every status of the spec's error table, each with its envelope", () => {
    const responses = at(doc(), "paths", "/v1/chat/completions", "post", "responses");
    expect(Object.keys(responses)).toEqual([
      "200",
      "400",
      "401",
      "402",
      "403",
      "404",
      "409",
      "413",
      "422",
      "429",
      "500",
      "502",
      "503",
      "504",
      "default",
    ]);
    for (const status of ERROR_STATUSES) {
      expect(at(responses, String(status), "content", "application/json", "schema")).toEqual({
        $ref: `#/components/schemas/Error${status}`,
      });
    }
    expect(at(responses, "429", "headers", "Retry-After")).toEqual({ $ref: "#/components/headers/RetryAfter" });
  });

  test("the envelope schemas carry the vocabulary's types and codes", () => {
    const schemas = at(doc(), "components", "schemas");
    const error = (status: number) => at(schemas, `Error${status}`, "properties", "error", "properties");
    expect([error(402).type, error(402).code]).toEqual([
      { type: "string", enum: ["insufficient_funds", "insufficient_quota"] },
      { type: "string", enum: ["insufficient_quota"] },
    ]);
    expect(error(404).code).toEqual({ type: "string", enum: ["model_not_found", "not_found", "device_code_not_found"] });
    expect(Object.keys(schemas).filter((k) => /^Error\d+$/.test(k))).toEqual(ERROR_STATUSES.map((s) => `Error${s}`));
  });

  test("the structure check finds a $ref that does not resolve, a path parameter left undeclared, a repeated operationId, a field OpenAPI 3.1 does not have", () => {
    const d = doc();
    at(d, "components", "schemas", "Model").properties = { metadata: { $ref: "#/components/schemas/Nowhere" } };
    at(d, "paths", "/v1/models/{id}", "get").parameters = [];
    at(d, "paths", "/v1/pricing", "get").operationId = "listModels";
    at(d, "paths", "/v1/pricing", "get", "responses", "200", "content", "application/json").itemSchema = {};
    expect(documentProblems(d)).toEqual([
      "#/components/schemas/Model/properties/metadata: $ref #/components/schemas/Nowhere does not resolve",
      'GET /v1/models/{id}: path parameters [], the template\'s ["id"]',
      "GET /v1/pricing: operationId missing or repeated",
      "GET /v1/pricing 200 application/json: media has no field itemSchema",
      "schema Model does not compile: can't resolve reference urn:umbra:openapi#/$defs/Nowhere from id urn:umbra:openapi",
      "schema ModelList does not compile: can't resolve reference urn:umbra:openapi#/$defs/Nowhere from id urn:umbra:openapi",
    ]);
  });
});

describe("GET /v1/openapi.json", () => {
  test("serves the document without a credential, as JSON a cache may keep", async () => {
    await using t = await testApp();
    const r = await t.call("GET", "/v1/openapi.json");
    expect({ status: r.status, type: r.headers.get("content-type"), cache: r.headers.get("cache-control"), body: r.body }).toEqual({
      status: 200,
      type: "application/json",
      cache: "public, max-age=300",
      body: doc(),
    });
    const checker = new OpenApiChecker(doc());
    expect(checker.response("GET", "/v1/openapi.json", { status: r.status, headers: r.headers, text: JSON.stringify(r.body) })).toEqual([]);
  });
});

describe("drift between the document and the code fails the check", () => {
  /** A real model answer and a real 404 from the route, in-process. */
  async function answers() {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    const model = await t.call("GET", "/v1/models/org/model", { token: apiKey });
    const missing = await t.call("GET", "/v1/models/org/none", { token: apiKey });
    const toAnswer = (r: typeof model) => ({ status: r.status, headers: r.headers, text: JSON.stringify(r.body) });
    return { model: toAnswer(model), missing: toAnswer(missing) };
  }

  test("the document as it is accepts both answers", async () => {
    const { model, missing } = await answers();
    const checker = new OpenApiChecker(doc());
    expect([...checker.response("GET", "/v1/models/{id}", model), ...checker.response("GET", "/v1/models/{id}", missing)]).toEqual([]);
  });

  test("a field renamed in the document (owned_by -> owner)", async () => {
    const d = doc();
    const model = at(d, "components", "schemas", "Model");
    const properties = model.properties as Json;
    properties.owner = properties.owned_by;
    delete properties.owned_by;
    model.required = (model.required as string[]).map((f) => (f === "owned_by" ? "owner" : f));
    const problems = new OpenApiChecker(d).response("GET", "/v1/models/{id}", (await answers()).model);
    expect(problems.join()).toContain("must have required property 'owner'");
    expect(problems.join()).toContain("must NOT have additional properties");
  });

  test("a code the route gives left out of the document's envelope", async () => {
    const d = doc();
    at(d, "components", "schemas", "Error404", "properties", "error", "properties").code = { type: "string", enum: ["not_found"] };
    const problems = new OpenApiChecker(d).response("GET", "/v1/models/{id}", (await answers()).missing);
    expect(problems.join()).toContain("must be equal to one of the allowed values");
  });

  test("a status the route gives missing from the operation", async () => {
    const d = doc();
    delete at(d, "paths", "/v1/models/{id}", "get", "responses")["404"];
    expect(new OpenApiChecker(d).response("GET", "/v1/models/{id}", (await answers()).missing)).toEqual([
      "GET /v1/models/{id} 404: status not documented",
    ]);
  });

  test("a field the code adds that the document does not name", async () => {
    const { model } = await answers();
    const added = { ...model, text: JSON.stringify({ ...JSON.parse(model.text), context_window: 8192 }) };
    expect(new OpenApiChecker(doc()).response("GET", "/v1/models/{id}", added).join()).toContain(
      'must NOT have additional properties {"additionalProperty":"context_window"}',
    );
  });
});

describe("an event stream is checked event by event", () => {
  const chunk = (choice: Json) => ({
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 1,
    model: "org/model",
    choices: [choice],
  });
  const stream = (...events: unknown[]) => ({
    status: 200,
    headers: new Headers({ "content-type": "text/event-stream", "x-request-id": "req_1" }),
    text: events.map((e) => `data: ${typeof e === "string" ? e : JSON.stringify(e)}\n\n`).join(""),
  });
  const check = (answer: ReturnType<typeof stream>) => new OpenApiChecker(doc()).response("POST", "/v1/chat/completions", answer);

  test("content, the usage chunk, the terminal chunk and [DONE] pass; so does an in-band error", () => {
    const usage = { ...chunk({}), choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };
    const content = chunk({ index: 0, delta: { role: "assistant", content: "hi" }, finish_reason: null });
    expect(check(stream(content, usage, chunk({ index: 0, delta: {}, finish_reason: "stop" }), "[DONE]"))).toEqual([]);
    expect(check(stream(content, { error: { message: "m", type: "provider_error", code: "provider_error" } }))).toEqual([]);
  });

  test("a chunk field the document does not name, or a missing finish_reason, fails", () => {
    const extra = chunk({ index: 0, delta: { content: "hi" }, finish_reason: null, logprobs: null });
    expect(check(stream(extra, "[DONE]")).join()).toContain('{"additionalProperty":"logprobs"}');
    expect(check(stream(chunk({ index: 0, delta: { content: "hi" } }))).join()).toContain("must have required property 'finish_reason'");
  });

  test("a required header missing fails", () => {
    const answer = stream("[DONE]");
    answer.headers.delete("x-request-id");
    expect(check(answer)).toEqual(["POST /v1/chat/completions 200: required header x-request-id missing"]);
  });
});

describe("the documented request schema accepts what the chat route accepts", () => {
  const HISTORY = [
    { role: "developer", content: [{ type: "text", text: "be brief" }], name: "ops" },
    {
      role: "user",
      content: [
        { type: "text", text: "weather?" },
        { type: "image_url", image_url: { url: "data:image/png;base64,AA", detail: "low" } },
      ],
    },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "call_1", content: "21" },
    { role: "assistant", refusal: "no" },
    { role: "user", content: "thanks", extra_field: "dropped" },
  ];
  const tool = { type: "function", function: { name: "get_weather", description: null, parameters: { type: "object" }, strict: false } };

  test.each<[string, Json]>([
    ["a tool loop with images, text parts, a refusal and a dropped field", { messages: HISTORY, tools: [tool], tool_choice: "auto" }],
    [
      "nulls for the optional fields",
      { stream: null, n: null, tools: null, tool_choice: null, max_tokens: null, stop: null, self_route: null },
    ],
    [
      "sampling, pass-through and identity fields",
      { temperature: 0.2, top_p: 1, stop: ["\n"], seed: 7, user: "u", metadata: { a: 1 }, n: 1 },
    ],
    [
      "a named tool choice and a json_object format",
      { tools: [tool], tool_choice: { type: "function", function: { name: "get_weather" } }, response_format: { type: "json_object" } },
    ],
    [
      "both budgets, 0 and the largest int64",
      { max_tokens: 0, max_completion_tokens: 9007199254740991, stream: false, stream_options: {} },
    ],
  ])("%s", async (_, fields) => {
    await using t = await testApp();
    await seedCatalog(t);
    await t.app.admin.upsertModel("org/vision", { input_modalities: ["text", "image"] });
    const { apiKey } = await seedAccount(t, {}, 1_000_000_000_000);
    const body = { model: "org/vision", messages: [{ role: "user", content: "hi" }], ...fields };
    expect(new OpenApiChecker(doc()).request("POST", "/v1/chat/completions", "application/json", body)).toEqual([]);
    // Accepted: it goes on to dispatch, where no provider serves the model.
    const r = await t.call("POST", "/v1/chat/completions", { token: apiKey, body });
    expect([r.status, (r.body as { error: { code: string } }).error.code]).toEqual([503, "model_unavailable"]);
  });
});
