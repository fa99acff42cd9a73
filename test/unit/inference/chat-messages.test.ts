/**
 * Message shapes of a chat request (src/protocol/chat-messages.ts), as the coordinator reads them
 * (parseChatRequest: 400 with OpenAI's dotted `param`) and as the provider reads them again
 * (parseEngineRequest: a protocol error): tool-calling history, text parts, images, dropped fields.
 */
import { describe, expect, test } from "bun:test";
import { ApiError } from "../../../src/errors/api-error.ts";
import { engineBody, parseChatRequest } from "../../../src/inference/chat-request.ts";
import { type ChatMessage, messageText } from "../../../src/protocol/chat-messages.ts";
import { ProtocolError, parseEngineRequest } from "../../../src/protocol/parse.ts";

const CANARY = "canary-5d1e-secret-tool-content";
const body = (messages: unknown) => ({ model: "org/model", messages });

function rejection(messages: unknown) {
  try {
    parseChatRequest(body(messages));
    return undefined;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return { status: e.status as number, code: e.code as string, param: e.param };
  }
}

const call = (over: Record<string, unknown> = {}, fn: Record<string, unknown> = {}) => ({
  id: "call_1",
  type: "function",
  function: { name: "get_weather", arguments: `{"city":"${CANARY}"}`, ...fn },
  ...over,
});
const user = { role: "user", content: "weather?" };

/** A two-turn tool loop as the openai SDK sends it back (assistant message as received, extras included). */
const HISTORY = [
  { role: "system", content: [{ type: "text", text: "be brief" }] },
  user,
  { role: "assistant", content: null, refusal: null, audio: null, function_call: null, annotations: [], tool_calls: [call()] },
  { role: "tool", tool_call_id: "call_1", content: [{ type: "text", text: `{"temp":21,"note":"${CANARY}"}` }] },
  { role: "developer", content: "developer note", name: "ops" },
];

describe("accepted shapes, forwarded intact", () => {
  test("a tool-calling history: assistant tool_calls with null content, tool message with tool_call_id, text parts", () => {
    const request = parseChatRequest({ ...body(HISTORY), tools: [{ type: "function", function: { name: "get_weather" } }] });
    const expected: ChatMessage[] = [
      { role: "system", content: [{ type: "text", text: "be brief" }] },
      { role: "user", content: "weather?" },
      {
        role: "assistant",
        content: null,
        refusal: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: `{"city":"${CANARY}"}` } }],
      },
      { role: "tool", content: [{ type: "text", text: `{"temp":21,"note":"${CANARY}"}` }], tool_call_id: "call_1" },
      { role: "developer", content: "developer note", name: "ops" },
    ];
    expect(engineBody(request, 10)).toEqual({
      tools: [{ type: "function", function: { name: "get_weather" } }],
      messages: expected,
      max_tokens: 10,
    });
  });

  test.each<[string, unknown, ChatMessage]>([
    [
      "assistant without content but with tool_calls",
      { role: "assistant", tool_calls: [call()] },
      { role: "assistant", tool_calls: [call()] } as ChatMessage,
    ],
    ["assistant with a refusal only", { role: "assistant", refusal: "no" }, { role: "assistant", refusal: "no" }],
    [
      "assistant with text parts and a name",
      { role: "assistant", content: [{ type: "text", text: "a" }], name: "bot" },
      { role: "assistant", content: [{ type: "text", text: "a" }], name: "bot" },
    ],
    [
      "assistant with empty tool_calls and content",
      { role: "assistant", content: "", tool_calls: [] },
      { role: "assistant", content: "", tool_calls: [] },
    ],
    [
      "tool call with unknown fields (dropped)",
      { role: "assistant", tool_calls: [call({ index: 0, extra: 1 }, { extra: 2 })] },
      { role: "assistant", tool_calls: [call()] } as ChatMessage,
    ],
    [
      "user with text and image parts (detail kept, unknown part fields dropped)",
      {
        role: "user",
        content: [
          { type: "text", text: "what is this", cache_control: {} },
          { type: "image_url", image_url: { url: "https://img.example/a.png", detail: "low", x: 1 } },
        ],
      },
      {
        role: "user",
        content: [
          { type: "text", text: "what is this" },
          { type: "image_url", image_url: { url: "https://img.example/a.png", detail: "low" } },
        ],
      },
    ],
    [
      "tool message drops a name (not OpenAI's field for tool)",
      { role: "tool", tool_call_id: "c", content: "r", name: "n" },
      { role: "tool", tool_call_id: "c", content: "r" },
    ],
  ])("%s", (_name, message, expected) => {
    expect(parseChatRequest(body([message])).messages).toEqual([expected]);
  });

  test("the first image part is named for the modality check", () => {
    const image = { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } };
    expect(parseChatRequest(body([user, { role: "user", content: [{ type: "text", text: "x" }, image, image] }])).imageParam).toBe(
      "messages[1].content[1]",
    );
    expect(parseChatRequest(body(HISTORY)).imageParam).toBeUndefined();
  });

  test("messageText: string content, or text parts joined with ''; images and tool calls left out", () => {
    expect([
      messageText({ role: "user", content: "a b" }),
      messageText({
        role: "user",
        content: [
          { type: "text", text: "a" },
          { type: "image_url", image_url: { url: "u" } },
          { type: "text", text: "b" },
        ],
      }),
      messageText({ role: "assistant", content: null, tool_calls: [call() as never] }),
      messageText({ role: "assistant", tool_calls: [] }),
    ]).toEqual(["a b", "ab", "", ""]);
  });
});

describe("malformed shapes -> 400 with OpenAI's param", () => {
  test.each<[string, unknown[], string, string]>([
    ["unknown role", [{ role: "robot", content: "x" }], "invalid_value", "messages[0].role"],
    ["retired function role", [{ role: "function", name: "f", content: "x" }], "unsupported_value", "messages[0].role"],
    ["role empty", [{ role: "", content: "x" }], "invalid_value", "messages[0].role"],
    ["role null", [{ role: null, content: "x" }], "missing_field", "messages[0].role"],
    ["system content null", [{ role: "system", content: null }], "missing_field", "messages[0].content"],
    ["user content an object", [{ role: "user", content: { type: "text", text: "x" } }], "invalid_value", "messages[0].content"],
    ["content parts empty", [{ role: "user", content: [] }], "invalid_value", "messages[0].content"],
    ["part without type", [{ role: "user", content: [{ text: "x" }] }], "missing_field", "messages[0].content[0].type"],
    ["part of unknown type", [{ role: "user", content: [{ type: "video", text: "x" }] }], "invalid_value", "messages[0].content[0].type"],
    [
      "audio part",
      [{ role: "user", content: [{ type: "input_audio", input_audio: {} }] }],
      "unsupported_value",
      "messages[0].content[0].type",
    ],
    ["text part without text", [{ role: "user", content: [{ type: "text" }] }], "missing_field", "messages[0].content[0].text"],
    ["text part with a number", [{ role: "user", content: [{ type: "text", text: 1 }] }], "invalid_value", "messages[0].content[0].text"],
    [
      "image part in a system message",
      [{ role: "system", content: [{ type: "image_url", image_url: { url: "https://x" } }] }],
      "unsupported_value",
      "messages[0].content[0].type",
    ],
    [
      "image part in a tool message",
      [{ role: "tool", tool_call_id: "c", content: [{ type: "image_url", image_url: { url: "https://x" } }] }],
      "unsupported_value",
      "messages[0].content[0].type",
    ],
    [
      "image part without image_url",
      [{ role: "user", content: [{ type: "image_url" }] }],
      "missing_field",
      "messages[0].content[0].image_url",
    ],
    [
      "image_url a string",
      [{ role: "user", content: [{ type: "image_url", image_url: "https://x" }] }],
      "invalid_value",
      "messages[0].content[0].image_url",
    ],
    [
      "image url empty",
      [{ role: "user", content: [{ type: "image_url", image_url: { url: "" } }] }],
      "invalid_value",
      "messages[0].content[0].image_url.url",
    ],
    [
      "image detail unknown",
      [{ role: "user", content: [{ type: "image_url", image_url: { url: "u", detail: "max" } }] }],
      "invalid_value",
      "messages[0].content[0].image_url.detail",
    ],
    ["name a number", [{ role: "user", content: "x", name: 5 }], "invalid_value", "messages[0].name"],
    ["assistant with neither content nor tool_calls", [{ role: "assistant" }], "missing_field", "messages[0].content"],
    [
      "assistant with null content and empty tool_calls",
      [{ role: "assistant", content: null, tool_calls: [] }],
      "missing_field",
      "messages[0].content",
    ],
    ["assistant refusal a number", [{ role: "assistant", content: "x", refusal: 1 }], "invalid_value", "messages[0].refusal"],
    ["tool_calls an object", [user, { role: "assistant", tool_calls: call() }], "invalid_value", "messages[1].tool_calls"],
    ["tool call a string", [user, { role: "assistant", tool_calls: ["x"] }], "invalid_value", "messages[1].tool_calls[0]"],
    [
      "tool call without id",
      [user, { role: "assistant", tool_calls: [call({ id: undefined })] }],
      "missing_field",
      "messages[1].tool_calls[0].id",
    ],
    [
      "tool call with an empty id",
      [user, { role: "assistant", tool_calls: [call({ id: "" })] }],
      "invalid_value",
      "messages[1].tool_calls[0].id",
    ],
    [
      "tool call without type",
      [user, { role: "assistant", tool_calls: [call({ type: undefined })] }],
      "missing_field",
      "messages[1].tool_calls[0].type",
    ],
    [
      "tool call of another type",
      [user, { role: "assistant", tool_calls: [call({ type: "custom" })] }],
      "invalid_value",
      "messages[1].tool_calls[0].type",
    ],
    [
      "tool call without function",
      [user, { role: "assistant", tool_calls: [call({ function: undefined })] }],
      "missing_field",
      "messages[1].tool_calls[0].function",
    ],
    [
      "tool call function a string",
      [user, { role: "assistant", tool_calls: [call({ function: "f" })] }],
      "invalid_value",
      "messages[1].tool_calls[0].function",
    ],
    [
      "tool call without name",
      [user, { role: "assistant", tool_calls: [call({}, { name: undefined })] }],
      "missing_field",
      "messages[1].tool_calls[0].function.name",
    ],
    [
      "tool call arguments an object",
      [user, { role: "assistant", tool_calls: [call({}, { arguments: { city: CANARY } })] }],
      "invalid_value",
      "messages[1].tool_calls[0].function.arguments",
    ],
    [
      "tool call without arguments",
      [user, { role: "assistant", tool_calls: [call({}, { arguments: undefined })] }],
      "missing_field",
      "messages[1].tool_calls[0].function.arguments",
    ],
    [
      "second tool call malformed",
      [user, { role: "assistant", tool_calls: [call(), call({}, { arguments: 7 })] }],
      "invalid_value",
      "messages[1].tool_calls[1].function.arguments",
    ],
    ["tool message without tool_call_id", [{ role: "tool", content: "r" }], "missing_field", "messages[0].tool_call_id"],
    [
      "tool message with a numeric tool_call_id",
      [{ role: "tool", content: "r", tool_call_id: 1 }],
      "invalid_value",
      "messages[0].tool_call_id",
    ],
    ["tool message without content", [{ role: "tool", tool_call_id: "c" }], "missing_field", "messages[0].content"],
  ])("%s", (_name, messages, code, param) => {
    expect(rejection(messages)).toEqual({ status: 400, code, param });
  });

  test("messages never quote the content they refuse", () => {
    for (const messages of [
      [user, { role: "assistant", tool_calls: [call({}, { arguments: { x: CANARY } })] }],
      [{ role: CANARY, content: CANARY }],
      [{ role: "user", content: [{ type: CANARY, text: CANARY }] }],
    ]) {
      try {
        parseChatRequest(body(messages));
        throw new Error("accepted");
      } catch (e) {
        expect(e).toBeInstanceOf(ApiError);
        expect(JSON.stringify((e as ApiError).toEnvelope())).not.toContain(CANARY);
      }
    }
  });
});

describe("the provider reads the same shapes (parseEngineRequest)", () => {
  test("a forwarded tool-calling history comes out as it went in", () => {
    const sent = engineBody(parseChatRequest(body(HISTORY)), 5);
    expect(parseEngineRequest(JSON.parse(JSON.stringify(sent)))).toEqual(sent);
  });

  test("a malformed message is a protocol error naming the field, not the value", () => {
    const bad = {
      messages: [{ role: "assistant", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: { a: CANARY } } }] }],
      max_tokens: 5,
    };
    let error: unknown;
    try {
      parseEngineRequest(bad);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ProtocolError);
    expect((error as Error).message).toBe("'request.messages[0].tool_calls[0].function.arguments' must be a string");
  });
});
