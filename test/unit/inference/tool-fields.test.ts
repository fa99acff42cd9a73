/**
 * tools, tool_choice, parallel_tool_calls and response_format as OpenAI defines them (tool-fields.ts, via
 * parseChatRequest): malformed shapes are 400 with OpenAI's dotted `param`; valid ones pass through as sent
 * and list their JSON Schemas for compiling.
 */
import { describe, expect, test } from "bun:test";
import { ApiError } from "../../../src/errors/api-error.ts";
import { engineBody, parseChatRequest } from "../../../src/inference/chat-request.ts";
import { MAX_TOOLS } from "../../../src/inference/tool-fields.ts";

const CANARY = "canary-91b2-secret-tool-schema";
const PARAMS = { type: "object", properties: { city: { type: "string", description: CANARY } }, required: ["city"] };
const tool = (name = "get_weather", fn: Record<string, unknown> = {}) => ({
  type: "function",
  function: { name, parameters: PARAMS, ...fn },
});
const base = (extra: Record<string, unknown>) => ({ model: "org/model", messages: [{ role: "user", content: "hi" }], ...extra });

function rejection(extra: Record<string, unknown>) {
  try {
    parseChatRequest(base(extra));
    return undefined;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    expect(JSON.stringify(e.toEnvelope())).not.toContain(CANARY);
    return { status: e.status as number, code: e.code as string, param: e.param };
  }
}

describe("valid fields pass through as sent, and their schemas are listed", () => {
  test("tools, tool_choice, parallel_tool_calls and a strict json_schema response format", () => {
    const schema = { type: "object", properties: { a: { type: "string" } }, required: ["a"], additionalProperties: false };
    const fields = {
      tools: [tool(), tool("lookup-2", { description: "d", strict: true }), { type: "function", function: { name: "no_params" } }],
      tool_choice: { type: "function", function: { name: "lookup-2" } },
      parallel_tool_calls: false,
      response_format: { type: "json_schema", json_schema: { name: "answer", description: "d", schema, strict: true } },
    };
    const request = parseChatRequest(base(fields));
    expect({ schemas: request.schemas, forwarded: engineBody(request, 7) }).toEqual({
      schemas: [
        { param: "tools[0].function.parameters", schema: PARAMS, strict: false },
        { param: "tools[1].function.parameters", schema: PARAMS, strict: true },
        { param: "response_format.json_schema.schema", schema, strict: true },
      ],
      forwarded: { ...fields, messages: [{ role: "user", content: "hi" }], max_tokens: 7 },
    });
  });

  test.each<[string, Record<string, unknown>]>([
    ["tool_choice none without tools", { tool_choice: "none" }],
    ["tool_choice auto without tools", { tool_choice: "auto" }],
    ["tool_choice required with tools", { tools: [tool()], tool_choice: "required" }],
    ["parallel_tool_calls true", { parallel_tool_calls: true }],
    ["nulls", { tools: null, tool_choice: null, parallel_tool_calls: null, response_format: null }],
    ["response_format text", { response_format: { type: "text" } }],
    ["response_format json_object", { response_format: { type: "json_object" } }],
    ["json_schema without schema", { response_format: { type: "json_schema", json_schema: { name: "x" } } }],
    ["a tool with strict null", { tools: [tool("f", { strict: null })] }],
    [`${MAX_TOOLS} tools`, { tools: Array.from({ length: MAX_TOOLS }, (_, i) => tool(`t${i}`)) }],
    ["a 64-character name", { tools: [tool("a".repeat(64))] }],
  ])("%s", (_name, extra) => {
    expect(rejection(extra)).toBeUndefined();
  });
});

describe("malformed shapes -> 400 with param", () => {
  test.each<[string, Record<string, unknown>, string, string]>([
    ["tools an object", { tools: tool() }, "invalid_value", "tools"],
    ["tools empty", { tools: [] }, "invalid_value", "tools"],
    ["too many tools", { tools: Array.from({ length: MAX_TOOLS + 1 }, (_, i) => tool(`t${i}`)) }, "invalid_value", "tools"],
    ["tool a string", { tools: ["get_weather"] }, "invalid_value", "tools[0]"],
    ["tool without type", { tools: [{ function: { name: "f" } }] }, "missing_field", "tools[0].type"],
    ["custom tool", { tools: [{ type: "custom", custom: { name: "f" } }] }, "unsupported_value", "tools[0].type"],
    ["unknown tool type", { tools: [{ type: "retrieval" }] }, "invalid_value", "tools[0].type"],
    ["tool without function", { tools: [{ type: "function" }] }, "missing_field", "tools[0].function"],
    ["function an array", { tools: [{ type: "function", function: [] }] }, "invalid_value", "tools[0].function"],
    ["function without name", { tools: [{ type: "function", function: { parameters: {} } }] }, "missing_field", "tools[0].function.name"],
    ["name with a space", { tools: [tool(), tool("get weather")] }, "invalid_value", "tools[1].function.name"],
    ["name with a dot", { tools: [tool("a.b")] }, "invalid_value", "tools[0].function.name"],
    ["name of 65 characters", { tools: [tool("a".repeat(65))] }, "invalid_value", "tools[0].function.name"],
    ["name empty", { tools: [tool("")] }, "invalid_value", "tools[0].function.name"],
    ["duplicate names", { tools: [tool("f"), tool("g"), tool("f")] }, "invalid_value", "tools[2].function.name"],
    ["description a number", { tools: [tool("f", { description: 1 })] }, "invalid_value", "tools[0].function.description"],
    ["parameters an array", { tools: [tool("f", { parameters: [CANARY] })] }, "invalid_value", "tools[0].function.parameters"],
    ["parameters a boolean schema", { tools: [tool("f", { parameters: true })] }, "invalid_value", "tools[0].function.parameters"],
    ["strict a string", { tools: [tool("f", { strict: "yes" })] }, "invalid_value", "tools[0].function.strict"],
    ["tool_choice unknown string", { tools: [tool()], tool_choice: "any" }, "invalid_value", "tool_choice"],
    ["tool_choice required without tools", { tool_choice: "required" }, "invalid_value", "tool_choice"],
    ["tool_choice a number", { tools: [tool()], tool_choice: 1 }, "invalid_value", "tool_choice"],
    [
      "tool_choice without type",
      { tools: [tool()], tool_choice: { function: { name: "get_weather" } } },
      "missing_field",
      "tool_choice.type",
    ],
    [
      "tool_choice allowed_tools",
      { tools: [tool()], tool_choice: { type: "allowed_tools", allowed_tools: {} } },
      "unsupported_value",
      "tool_choice.type",
    ],
    ["tool_choice of unknown type", { tools: [tool()], tool_choice: { type: "tool" } }, "invalid_value", "tool_choice.type"],
    ["tool_choice without function", { tools: [tool()], tool_choice: { type: "function" } }, "missing_field", "tool_choice.function"],
    [
      "tool_choice without name",
      { tools: [tool()], tool_choice: { type: "function", function: {} } },
      "missing_field",
      "tool_choice.function.name",
    ],
    [
      "tool_choice naming no tool",
      { tools: [tool()], tool_choice: { type: "function", function: { name: "other" } } },
      "invalid_value",
      "tool_choice.function.name",
    ],
    [
      "tool_choice naming a tool without tools",
      { tool_choice: { type: "function", function: { name: "f" } } },
      "invalid_value",
      "tool_choice.function.name",
    ],
    ["parallel_tool_calls a string", { parallel_tool_calls: "false" }, "invalid_value", "parallel_tool_calls"],
    ["response_format a string", { response_format: "json" }, "invalid_value", "response_format"],
    ["response_format without type", { response_format: {} }, "missing_field", "response_format.type"],
    ["response_format of unknown type", { response_format: { type: "xml" } }, "invalid_value", "response_format.type"],
    ["json_schema missing", { response_format: { type: "json_schema" } }, "missing_field", "response_format.json_schema"],
    [
      "json_schema a string",
      { response_format: { type: "json_schema", json_schema: "{}" } },
      "invalid_value",
      "response_format.json_schema",
    ],
    [
      "json_schema without name",
      { response_format: { type: "json_schema", json_schema: { schema: {} } } },
      "missing_field",
      "response_format.json_schema.name",
    ],
    [
      "json_schema bad name",
      { response_format: { type: "json_schema", json_schema: { name: "a b" } } },
      "invalid_value",
      "response_format.json_schema.name",
    ],
    [
      "json_schema description a number",
      { response_format: { type: "json_schema", json_schema: { name: "a", description: 2 } } },
      "invalid_value",
      "response_format.json_schema.description",
    ],
    [
      "json_schema schema a string",
      { response_format: { type: "json_schema", json_schema: { name: "a", schema: CANARY } } },
      "invalid_value",
      "response_format.json_schema.schema",
    ],
    [
      "json_schema strict a number",
      { response_format: { type: "json_schema", json_schema: { name: "a", strict: 1 } } },
      "invalid_value",
      "response_format.json_schema.strict",
    ],
  ])("%s", (_name, extra, code, param) => {
    expect(rejection(extra)).toEqual({ status: 400, code, param });
  });
});
