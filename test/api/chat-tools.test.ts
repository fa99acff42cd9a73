/**
 * Tool calling and structured output through the chat route, in-process: malformed tool shapes are 400,
 * uncompilable or oversized JSON Schemas 422 tool_schema_invalid, image parts 400 unless the model's
 * input_modalities list "image", each in the API's envelope. A request that passes every check goes on
 * to dispatch (here 503 model_unavailable: no provider is connected).
 */
import { describe, expect, test } from "bun:test";
import { MAX_SCHEMA_BYTES } from "../../src/inference/tool-schemas.ts";
import { seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";

const CANARY = "canary-48e1-secret-tool-route";
const PASSED = {
  status: 503,
  body: { error: { message: expect.any(String), type: "service_unavailable", code: "model_unavailable", param: "model" } },
};
const tool = (parameters: unknown, name = "get_weather") => ({ type: "function", function: { name, description: CANARY, parameters } });

async function post(t: TestApp, apiKey: string, body: Record<string, unknown>) {
  const r = await t.call("POST", "/v1/chat/completions", { token: apiKey, body: { model: "org/model", ...body } });
  expect(JSON.stringify(r.body)).not.toContain(CANARY);
  return { status: r.status, body: r.body };
}

/** The test app with a vision build and a well-funded key; disposable like the app. */
async function setup() {
  const t = await testApp();
  await seedCatalog(t);
  await t.app.admin.upsertModel("org/vision", { input_modalities: ["text", "image"] });
  const { apiKey } = await seedAccount(t, {}, 1_000_000_000_000);
  return Object.assign(t, { apiKey });
}

const HISTORY = [
  { role: "user", content: [{ type: "text", text: `weather in ${CANARY}?` }] },
  {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: `{"city":"${CANARY}"}` } }],
  },
  { role: "tool", tool_call_id: "call_1", content: `{"temp":21,"note":"${CANARY}"}` },
];

describe("accepted: a tool loop's second turn reaches dispatch", () => {
  test("assistant tool_calls with null content, a tool message, text parts, tools and a strict json_schema", async () => {
    await using t = await setup();
    const { apiKey } = t;
    const strict = { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false };
    expect(
      await post(t, apiKey, {
        messages: HISTORY,
        tools: [tool(strict)],
        tool_choice: "auto",
        parallel_tool_calls: false,
        response_format: { type: "json_schema", json_schema: { name: "answer", schema: strict, strict: true } },
      }),
    ).toEqual(PASSED);
  });
});

describe("refused before dispatch", () => {
  const image = { type: "image_url", image_url: { url: `https://${CANARY}.example/a.png` } };
  test.each<[string, Record<string, unknown>, number, Record<string, unknown>]>([
    [
      "a tool call's arguments as an object",
      {
        messages: [
          HISTORY[0],
          { ...HISTORY[1], tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: { city: CANARY } } }] },
        ],
      },
      400,
      {
        message: "'messages[1].tool_calls[0].function.arguments' must be a string",
        type: "invalid_request_error",
        code: "invalid_value",
        param: "messages[1].tool_calls[0].function.arguments",
      },
    ],
    [
      "a tool name OpenAI refuses",
      { messages: HISTORY, tools: [tool({}, "get weather")] },
      400,
      {
        message: "'tools[0].function.name' must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
        type: "invalid_request_error",
        code: "invalid_value",
        param: "tools[0].function.name",
      },
    ],
    [
      "tool_choice naming a tool that is not there",
      { messages: HISTORY, tools: [tool({})], tool_choice: { type: "function", function: { name: "other" } } },
      400,
      {
        message: "'tool_choice.function.name' names no tool in 'tools'",
        type: "invalid_request_error",
        code: "invalid_value",
        param: "tool_choice.function.name",
      },
    ],
    [
      "a parameters schema that is not a JSON Schema",
      { messages: HISTORY, tools: [tool({ type: "object" }, "a"), tool({ type: "objec", description: CANARY }, "b")] },
      422,
      {
        message: "'tools[1].function.parameters' is not a valid JSON Schema (2020-12): its 'type' keyword is malformed",
        type: "invalid_request_error",
        code: "tool_schema_invalid",
        param: "tools[1].function.parameters",
      },
    ],
    [
      "a response format schema with a remote $ref",
      {
        messages: HISTORY,
        response_format: { type: "json_schema", json_schema: { name: "r", schema: { $ref: `https://${CANARY}.example/s.json` } } },
      },
      422,
      {
        message:
          "'response_format.json_schema.schema' has a $ref that does not resolve within the schema (remote references are never fetched)",
        type: "invalid_request_error",
        code: "tool_schema_invalid",
        param: "response_format.json_schema.schema",
      },
    ],
    [
      "a strict tool outside OpenAI's strict subset",
      {
        messages: HISTORY,
        tools: [{ type: "function", function: { name: "f", strict: true, parameters: { type: "object", properties: { a: {} } } } }],
      },
      422,
      {
        message: "'tools[0].function.parameters' is strict: every object schema needs 'additionalProperties': false",
        type: "invalid_request_error",
        code: "tool_schema_invalid",
        param: "tools[0].function.parameters",
      },
    ],
    [
      "an oversized schema",
      { messages: HISTORY, tools: [tool({ description: CANARY.repeat(Math.ceil(MAX_SCHEMA_BYTES / CANARY.length)) })] },
      422,
      {
        message: `'tools[0].function.parameters' is larger than ${MAX_SCHEMA_BYTES} bytes`,
        type: "invalid_request_error",
        code: "tool_schema_invalid",
        param: "tools[0].function.parameters",
      },
    ],
    [
      "an image part for a text-only model",
      { messages: [{ role: "user", content: [{ type: "text", text: "what is it" }, image] }] },
      400,
      {
        message: "this model does not take image input (its input_modalities)",
        type: "invalid_request_error",
        code: "unsupported_value",
        param: "messages[0].content[1]",
      },
    ],
  ])("%s", async (_name, body, status, error) => {
    await using t = await setup();
    const { apiKey } = t;
    expect(await post(t, apiKey, body)).toEqual({ status, body: { error } });
  });

  test("an image part for a model whose input_modalities list image goes on", async () => {
    await using t = await setup();
    const { apiKey } = t;
    expect(
      await post(t, apiKey, { model: "org/vision", messages: [{ role: "user", content: [{ type: "text", text: "what is it" }, image] }] }),
    ).toEqual(PASSED);
  });

  test("an unknown model is 404 before its schemas are compiled", async () => {
    await using t = await setup();
    const { apiKey } = t;
    expect((await post(t, apiKey, { model: "org/none", messages: HISTORY, tools: [tool({ type: "objec" })] })).status).toBe(404);
  });
});
