/**
 * The OpenAPI document's chat request: TextChatRequest as src/inference/chat-request.ts reads it, messages
 * as src/protocol/chat-messages.ts reads them per role, tools, tool_choice and response_format as
 * src/inference/tool-fields.ts checks them, and the sealed transport's request envelope.
 *
 * What the readers treat as absent (null) is allowed as null here. The request object is open: other
 * fields pass through to the runtime; messages and content parts are open too (other fields are dropped).
 * Rules a schema cannot say (a `tool_choice` naming one of `tools`, unique tool names, the int64 bound
 * read from the digits) are in the descriptions; the route answers 400 with `param` for them.
 */

import { MAX_TOOLS, NAME } from "../../inference/tool-fields.ts";
import { DETAILS } from "../../protocol/chat-messages.ts";
import { MAX_TOKENS_LIMIT } from "../../protocol/frames.ts";
import { MAX_JSON_DEPTH } from "../../validation/fields.ts";
import { type JsonSchema, object, orNull, ref, string } from "./schema.ts";

const toolName: JsonSchema = { type: "string", pattern: NAME.source, description: "1 to 64 characters of a-z, A-Z, 0-9, _ and -." };
const nonEmpty = (description?: string): JsonSchema => ({ type: "string", minLength: 1, ...(description ? { description } : {}) });
const role = (...roles: string[]): JsonSchema =>
  roles.length === 1 ? { type: "string", const: roles[0] } : { type: "string", enum: roles };
const textContent: JsonSchema = {
  anyOf: [{ type: "string" }, { type: "array", minItems: 1, items: ref("TextPart") }],
  description: "A string, or an array of text parts.",
};
const budget = (name: string): JsonSchema => ({
  type: ["integer", "null"],
  format: "int64",
  minimum: 0,
  description:
    `Output token budget. Omitted, null or 0: the server default. A positive value requests that budget, clamped to the model's ` +
    `max_output_length (and ${MAX_TOKENS_LIMIT}). Negative, fractional or above 9223372036854775807 (read from the digits): 400 ` +
    `with param \`${name}\`. A positive max_tokens wins, else a positive max_completion_tokens is used.`,
});
const identity = (description: string): JsonSchema => ({ description: `${description} Accepted and dropped: never forwarded.` });

export function chatRequestSchemas(): Record<string, JsonSchema> {
  return {
    ChatRequest: {
      ...object(
        {
          model: { type: "string", minLength: 1, maxLength: 256, description: "An id from GET /v1/models (alias or build)." },
          messages: { type: "array", minItems: 1, items: ref("ChatMessage") },
          stream: orNull({ type: "boolean", default: false, description: "True answers with an event stream." }),
          stream_options: orNull({ type: "object", description: "Accepted; usage is always reported." }),
          max_tokens: budget("max_tokens"),
          max_completion_tokens: budget("max_completion_tokens"),
          temperature: orNull({ type: "number", description: "Passed to the runtime." }),
          top_p: orNull({ type: "number", description: "Passed to the runtime." }),
          stop: {
            anyOf: [{ type: "string" }, { type: "array", items: { type: "string" } }, { type: "null" }],
            description: "Passed to the runtime.",
          },
          n: orNull({ type: "integer", minimum: 1, maximum: 1, description: "Only 1: greater is 400 `unsupported_value`." }),
          tools: orNull({
            type: "array",
            minItems: 1,
            maxItems: MAX_TOOLS,
            items: ref("Tool"),
            description: "Function names unique in the request.",
          }),
          tool_choice: { anyOf: [ref("ToolChoice"), { type: "null" }] },
          parallel_tool_calls: orNull({ type: "boolean", description: "Passed to the runtime." }),
          response_format: { anyOf: [ref("ResponseFormat"), { type: "null" }] },
          self_route: orNull({
            type: "boolean",
            description:
              "Umbra extension, not forwarded: serve only on provider machines linked to the caller's account, free of charge " +
              "(409 `self_route_conflict` without one).",
          }),
          user: identity("Identity field."),
          safety_identifier: identity("Identity field."),
          metadata: identity("Identity field."),
          store: identity("Identity field."),
        },
        ["model", "messages"],
        `Open: other fields (seed, penalties ...) pass through to the runtime as sent. Objects and arrays nest at most ` +
          `${MAX_JSON_DEPTH} levels (the body being level 1).`,
      ),
      additionalProperties: true,
    },
    ChatMessage: {
      oneOf: [ref("SystemMessage"), ref("UserMessage"), ref("AssistantMessage"), ref("ToolMessage")],
      description: "OpenAI's shapes, by role; other fields of a message are dropped. The role `function` is retired (400).",
    },
    SystemMessage: object({ role: role("system", "developer"), content: textContent, name: string() }, ["role", "content"]),
    UserMessage: object(
      {
        role: role("user"),
        content: {
          anyOf: [{ type: "string" }, { type: "array", minItems: 1, items: { oneOf: [ref("TextPart"), ref("ImagePart")] } }],
          description: "Image parts only for models whose input_modalities include `image` (else 400).",
        },
        name: string(),
      },
      ["role", "content"],
    ),
    AssistantMessage: {
      ...object(
        {
          role: role("assistant"),
          content: { anyOf: [{ type: "string" }, { type: "array", minItems: 1, items: ref("TextPart") }, { type: "null" }] },
          name: string(),
          refusal: orNull(string()),
          tool_calls: orNull({ type: "array", items: ref("ToolCall") }),
        },
        ["role"],
        "Needs `content` unless it has a tool call or a `refusal`.",
      ),
      anyOf: [
        { required: ["content"], properties: { content: { not: { type: "null" } } } },
        { required: ["tool_calls"], properties: { tool_calls: { type: "array", minItems: 1 } } },
        { required: ["refusal"], properties: { refusal: { type: "string" } } },
      ],
    },
    ToolMessage: object({ role: role("tool"), content: textContent, tool_call_id: nonEmpty() }, ["role", "content", "tool_call_id"]),
    TextPart: object({ type: { type: "string", const: "text" }, text: { type: "string" } }, ["type", "text"]),
    ImagePart: object(
      {
        type: { type: "string", const: "image_url" },
        image_url: object(
          {
            url: nonEmpty("An https or data: URL, read by the provider's runtime."),
            detail: orNull({ type: "string", enum: [...DETAILS] }),
          },
          ["url"],
        ),
      },
      ["type", "image_url"],
    ),
    ToolCall: object(
      {
        id: nonEmpty(),
        type: { type: "string", const: "function" },
        function: object({ name: nonEmpty(), arguments: string("JSON text as the model produced it; not parsed.") }, ["name", "arguments"]),
      },
      ["id", "type", "function"],
    ),
    Tool: object(
      {
        type: { type: "string", const: "function", description: "`custom` is 400 `unsupported_value`." },
        function: object(
          {
            name: toolName,
            description: orNull(string()),
            parameters: orNull({
              type: "object",
              description: "A JSON Schema (2020-12, or draft-07 by `$schema`), compiled before dispatch (422).",
            }),
            strict: orNull({ type: "boolean", description: "OpenAI's strict subset is enforced on `parameters`." }),
          },
          ["name"],
        ),
      },
      ["type", "function"],
    ),
    ToolChoice: {
      oneOf: [
        { type: "string", enum: ["none", "auto", "required"], description: "`required` needs `tools`." },
        object(
          { type: { type: "string", const: "function" }, function: object({ name: toolName }, ["name"]) },
          ["type", "function"],
          "Names one of `tools`.",
        ),
      ],
    },
    ResponseFormat: {
      oneOf: [
        object({ type: { type: "string", const: "text" } }, ["type"]),
        object({ type: { type: "string", const: "json_object" } }, ["type"]),
        object(
          {
            type: { type: "string", const: "json_schema" },
            json_schema: object(
              {
                name: toolName,
                description: orNull(string()),
                schema: orNull({ type: "object", description: "A JSON Schema, compiled before dispatch (422 `tool_schema_invalid`)." }),
                strict: orNull({ type: "boolean" }),
              },
              ["name"],
            ),
          },
          ["type", "json_schema"],
        ),
      ],
    },
    SealedRequest: object(
      {
        version: { type: "integer", const: 2, description: "Version 1 is refused (400 `unsupported_value`)." },
        timestamp: {
          type: "integer",
          minimum: 0,
          description: "When it was sealed, Unix seconds; within 120 s of the coordinator's clock.",
        },
        enc: {
          type: "string",
          pattern: "^[A-Za-z0-9_-]{43}$",
          description: "HPKE encapsulated key, 32 bytes, unpadded base64url; accepted once.",
        },
        ciphertext: { type: "string", pattern: "^[A-Za-z0-9_-]+$", description: "The sealed ChatRequest, unpadded base64url." },
      },
      ["version", "timestamp", "enc", "ciphertext"],
      'The sealed transport\'s envelope (docs/api.md, "Sealed transport"): HPKE to the attested `sealing_public_key`, bound to the path, the bearer and the timestamp.',
    ),
  };
}
