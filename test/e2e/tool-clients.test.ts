/**
 * Tool calling and structured output as users run them (issue 24): the official `openai` client
 * (tool calls in JSON and in streams, parallel calls, a full two-turn loop, `chat.completions.parse` with
 * a zod-derived json_schema response format) and the `ai` SDK (`generateText` and `streamText` with tools,
 * several steps) against a coordinator on a real socket and real `umbra-provider start` processes (the
 * echo engine's deterministic tool mode: it calls the tools the last user message names, with arguments
 * built to validate against their schema, and answers a tool turn with "tool result: ..."). Also what such
 * clients get for malformed tools and schemas (400 with param, 422 tool_schema_invalid), and tool calls
 * through the sealed consumer transport.
 */
import { describe, expect, test } from "bun:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, stepCountIs, streamText, tool } from "ai";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import { sealedChat } from "../../docs/examples/sealed-chat.ts";
import { type ChatEnv, chatEnv } from "../support/chat-env.ts";

const _BUILD = "org/base-build-4bit";
const MODEL = "org/model";

/** The chat environment with one provider process (echo engine) and an OpenAI client for it. */
async function setup(): Promise<ChatEnv & { readonly client: OpenAI }> {
  const ctx = await chatEnv();
  try {
    await ctx.providerProcess();
    return Object.assign(ctx, { client: new OpenAI({ baseURL: `${ctx.server.url}/v1`, apiKey: ctx.apiKey, maxRetries: 0 }) });
  } catch (e) {
    await ctx[Symbol.asyncDispose]();
    throw e;
  }
}

const WEATHER: OpenAI.ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
    strict: true,
  },
};
const TIME: OpenAI.ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_time",
    description: "The local time in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

/** What the openai client throws, as status, code and param. */
async function apiError(call: () => Promise<unknown>) {
  try {
    await call();
  } catch (e) {
    if (e instanceof OpenAI.APIError) return { status: e.status, type: e.type, code: e.code, param: e.param ?? undefined };
    throw e;
  }
  throw new Error("the call succeeded");
}

describe("openai client: tool calls", () => {
  test("JSON: one call, OpenAI's shape, finish_reason tool_calls, arguments valid for the schema", async () => {
    await using ctx = await setup();
    const answer = await ctx.client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "get_weather for Paris" }],
      tools: [WEATHER, TIME],
    });
    const choice = answer.choices[0];
    expect(choice?.finish_reason).toBe("tool_calls");
    expect(choice?.message.content).toBe("");
    const calls = choice?.message.tool_calls ?? [];
    expect(calls).toHaveLength(1);
    const call = calls[0];
    if (call?.type !== "function") throw new Error("a function call was expected");
    expect(call.id).toMatch(/^call_/);
    expect(call.function.name).toBe("get_weather");
    const args = JSON.parse(call.function.arguments) as Record<string, unknown>;
    expect(Object.keys(args).sort()).toEqual(["city", "unit"]);
    expect(typeof args.city).toBe("string");
    expect(args.unit).toBe("celsius");
  });

  test("stream: two parallel calls keep their indexes; id and name in the first fragment, arguments after", async () => {
    await using ctx = await setup();
    const stream = await ctx.client.chat.completions.create({
      model: MODEL,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "get_weather and get_time in Oslo" }],
      tools: [WEATHER, TIME],
    });
    const fragments: OpenAI.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null | undefined;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      for (const c of chunk.choices[0]?.delta.tool_calls ?? []) fragments.push(c);
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    expect(finish).toBe("tool_calls");
    expect(usage?.completion_tokens).toBeGreaterThan(0);
    expect([...new Set(fragments.map((f) => f.index))]).toEqual([0, 1]);
    for (const index of [0, 1]) {
      const mine = fragments.filter((f) => f.index === index);
      expect(mine.length).toBeGreaterThan(1);
      expect(mine[0]?.id).toMatch(/^call_/);
      expect(mine[0]?.type).toBe("function");
      expect(mine.slice(1).every((f) => f.id === undefined && f.function?.name === undefined)).toBe(true);
      const args = mine.map((f) => f.function?.arguments ?? "").join("");
      expect(() => JSON.parse(args)).not.toThrow();
    }
    expect(fragments.filter((f) => f.function?.name !== undefined).map((f) => f.function?.name)).toEqual(["get_weather", "get_time"]);
  });

  test("the stream helper assembles the same calls as the JSON answer", async () => {
    await using ctx = await setup();
    const body = {
      model: MODEL,
      messages: [{ role: "user" as const, content: "get_time in Lima" }],
      tools: [WEATHER, TIME],
    };
    const json = await ctx.client.chat.completions.create(body);
    const final = await ctx.client.chat.completions.stream(body).finalChatCompletion();
    const shape = (c: OpenAI.ChatCompletion) =>
      c.choices[0]?.message.tool_calls?.map((t) => (t.type === "function" ? [t.id, t.function.name, t.function.arguments] : []));
    expect(shape(final)).toEqual(shape(json));
    expect(final.choices[0]?.finish_reason).toBe("tool_calls");
  });

  test("a full two-turn loop: the assistant turn with tool_calls and null content, the tool turn, the answer", async () => {
    await using ctx = await setup();
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "get_weather in Rome" }];
    const first = await ctx.client.chat.completions.create({ model: MODEL, messages, tools: [WEATHER] });
    const assistant = first.choices[0]?.message;
    if (!assistant?.tool_calls) throw new Error("a tool call was expected");
    messages.push({ role: "assistant", content: null, tool_calls: assistant.tool_calls });
    for (const call of assistant.tool_calls) messages.push({ role: "tool", tool_call_id: call.id, content: "sunny, 24 degrees" });
    const second = await ctx.client.chat.completions.create({ model: MODEL, messages, tools: [WEATHER] });
    expect([second.choices[0]?.message.content, second.choices[0]?.finish_reason, second.choices[0]?.message.tool_calls]).toEqual([
      "tool result: sunny, 24 degrees",
      "stop",
      undefined,
    ]);
  });

  test("chat.completions.parse with a zod json_schema response format", async () => {
    await using ctx = await setup();
    const Person = z.object({ name: z.string(), age: z.number().int(), tags: z.array(z.string()), role: z.enum(["admin", "user"]) });
    const completion = await ctx.client.chat.completions.parse({
      model: MODEL,
      messages: [{ role: "user", content: "describe a person" }],
      response_format: zodResponseFormat(Person, "person"),
    });
    const parsed = completion.choices[0]?.message.parsed;
    expect(Person.safeParse(parsed).success).toBe(true);
  });
});

describe("openai client: what malformed tools get", () => {
  test.each([
    ["a tool without a function", { tools: [{ type: "function" }] }, 400, "tools[0].function"],
    ["a tool name with a space", { tools: [{ type: "function", function: { name: "get weather" } }] }, 400, "tools[0].function.name"],
    [
      "tool_choice naming no tool",
      { tools: [TIME], tool_choice: { type: "function", function: { name: "nope" } } },
      400,
      "tool_choice.function.name",
    ],
    ["parallel_tool_calls not a boolean", { tools: [TIME], parallel_tool_calls: "yes" }, 400, "parallel_tool_calls"],
    ["an unknown response_format type", { response_format: { type: "xml" } }, 400, "response_format.type"],
  ])("%s", async (_, extra, status, param) => {
    await using ctx = await setup();
    const error = await apiError(() =>
      ctx.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }], ...(extra as object) }),
    );
    expect({ status: error.status, param: error.param }).toEqual({ status, param });
  });

  test("uncompilable, remote-referencing, oversized and deeply nested schemas -> 422 tool_schema_invalid (a body nested beyond 64 levels: 400)", async () => {
    await using ctx = await setup();
    const withParameters = (parameters: unknown) =>
      apiError(() =>
        ctx.client.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: "hi" }],
          tools: [{ type: "function", function: { name: "f", parameters: parameters as OpenAI.FunctionParameters } }],
        }),
      );
    expect(await withParameters({ type: "object", properties: { a: { type: "strng" } } })).toEqual({
      status: 422,
      type: "invalid_request_error",
      code: "tool_schema_invalid",
      param: "tools[0].function.parameters",
    });
    expect(await withParameters({ $ref: "https://example.invalid/schema.json" })).toMatchObject({
      status: 422,
      code: "tool_schema_invalid",
    });
    const nested = (levels: number) => {
      let schema: Record<string, unknown> = { type: "string" };
      for (let i = 0; i < levels; i++) schema = { type: "object", properties: { a: schema } };
      return schema;
    };
    // 20 levels: within the body's nesting bound (64), beyond the schema depth bound (32): 422.
    expect(await withParameters(nested(20))).toMatchObject({
      status: 422,
      code: "tool_schema_invalid",
      param: "tools[0].function.parameters",
    });
    // 40 levels: beyond the body's nesting bound itself: 400 before any schema is read.
    expect(await withParameters(nested(40))).toMatchObject({ status: 400, code: "invalid_value", param: "tools" });
    const wide = {
      type: "object",
      properties: Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`p${i}`, { type: "string" }])),
    };
    expect(await withParameters(wide)).toMatchObject({ status: 422, code: "tool_schema_invalid", param: "tools[0].function.parameters" });
  });
});

describe("ai SDK: tools over several steps", () => {
  const provider = (ctx: ChatEnv) => createOpenAICompatible({ name: "umbra", baseURL: `${ctx.server.url}/v1`, apiKey: ctx.apiKey });
  const weather = (calls: string[]) =>
    tool({
      description: "The weather in a city",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        calls.push(city);
        return "cloudy";
      },
    });

  test("generateText: a tool call, its execution, then the answer", async () => {
    await using ctx = await setup();
    const calls: string[] = [];
    const result = await generateText({
      model: provider(ctx)(MODEL),
      tools: { get_weather: weather(calls) },
      stopWhen: stepCountIs(3),
      prompt: "get_weather in Berlin",
    });
    expect(calls).toHaveLength(1);
    expect(result.steps.map((s) => s.finishReason)).toEqual(["tool-calls", "stop"]);
    expect(result.text).toBe("tool result: cloudy");
  });

  test("streamText: tool-call, tool-result and text parts in order", async () => {
    await using ctx = await setup();
    const calls: string[] = [];
    const result = streamText({
      model: provider(ctx)(MODEL),
      tools: { get_weather: weather(calls) },
      stopWhen: stepCountIs(3),
      prompt: "get_weather in Madrid",
    });
    const kinds: string[] = [];
    for await (const part of result.fullStream)
      if (["tool-call", "tool-result", "text-delta", "finish"].includes(part.type)) kinds.push(part.type);
    expect(calls).toHaveLength(1);
    const firstText = kinds.indexOf("text-delta");
    expect([kinds.indexOf("tool-call") < kinds.indexOf("tool-result"), kinds.indexOf("tool-result") < firstText]).toEqual([true, true]);
    expect(await result.text).toBe("tool result: cloudy");
  });
});

describe("tool calls through the sealed consumer transport", () => {
  test("JSON and stream: the calls arrive sealed and open intact", async () => {
    await using ctx = await setup();
    const body = { model: MODEL, messages: [{ role: "user", content: "get_time in Quito" }], tools: [TIME] };
    const json = await sealedChat(ctx.server.url, ctx.apiKey, body);
    expect(json.sealed).toBe(true);
    const message = (json.json as OpenAI.ChatCompletion).choices[0]?.message;
    expect(message?.tool_calls?.map((c) => (c.type === "function" ? c.function.name : ""))).toEqual(["get_time"]);
    const streamed = await sealedChat(ctx.server.url, ctx.apiKey, { ...body, stream: true });
    const events = streamed.events ?? [];
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as OpenAI.ChatCompletionChunk);
    const names = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []).flatMap((t) => t.function?.name ?? []);
    expect(names).toEqual(["get_time"]);
  });
});
