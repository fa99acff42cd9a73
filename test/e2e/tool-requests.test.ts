/**
 * Tool-calling requests end to end: a real coordinator process and a real provider process (openai
 * engine, sealed hop) in front of a mock OpenAI-compatible runtime that records what it receives. The
 * second turn of a tool loop (assistant tool_calls with null content, a tool message with its
 * tool_call_id, text parts) reaches the runtime intact, with tools, tool_choice, parallel_tool_calls and
 * response_format as sent; unknown message fields and identity fields do not. Image parts are refused
 * for a text-only model and forwarded for one whose input_modalities list image. A schema's remote
 * $ref is refused (422) without the coordinator fetching it.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { startCoordinator, startProvider } from "../support/processes.ts";

const received: Record<string, unknown>[] = [];
const sse = (events: readonly unknown[]) => events.map((e) => `data: ${typeof e === "string" ? e : JSON.stringify(e)}\n\n`).join("");
const runtime = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: async (req) => {
    received.push((await req.json()) as Record<string, unknown>);
    const chunk = (delta: Record<string, unknown>, finish_reason: string | null = null) => ({
      id: "chatcmpl-mock",
      object: "chat.completion.chunk",
      choices: [{ index: 0, delta, finish_reason }],
    });
    const body = sse([
      chunk({ role: "assistant", content: "sunny" }),
      chunk({}, "stop"),
      { id: "chatcmpl-mock", choices: [], usage: { prompt_tokens: 40, completion_tokens: 1 } },
      "[DONE]",
    ]);
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  },
});
/** A server a schema's $ref points at: the coordinator must never ask it for anything. */
const schemaHost: string[] = [];
const schemaServer = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: (req) => {
    schemaHost.push(new URL(req.url).pathname);
    return Response.json({ type: "string" });
  },
});
afterAll(() => {
  runtime.stop(true);
  schemaServer.stop(true);
});

const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather",
      strict: true,
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
    },
  },
];
const FORMAT = {
  type: "json_schema",
  json_schema: {
    name: "report",
    schema: { $schema: "http://json-schema.org/draft-07/schema#", type: "object", properties: { t: { type: "number" } } },
  },
};

describe("tool-calling requests through coordinator and provider processes", () => {
  test("a tool loop's second turn reaches the runtime intact; images by modality; remote $ref never fetched", async () => {
    await using coordinator = await startCoordinator();
    const { apiKey, providerToken } = await coordinator.seed(["org/tools", "org/vision"]);
    await coordinator.admin("PUT", "/models/org/vision", { input_modalities: ["text", "image"] });
    await using provider = startProvider([
      "--coordinator",
      coordinator.url,
      "--token",
      providerToken,
      "--engine",
      "openai",
      "--upstream",
      `${runtime.url.origin}/v1`,
      "--model",
      "org/tools=runtime-tools",
      "--model",
      "org/vision=runtime-vision",
    ]);
    await provider.connected;
    const chat = async (body: Record<string, unknown>) => {
      const r = await fetch(`${coordinator.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      return { status: r.status, body: (await r.json()) as Record<string, unknown> };
    };

    // Turn two of a tool loop, as the openai SDK sends it back (assistant message with its extra fields).
    const turn = await chat({
      model: "org/tools",
      messages: [
        { role: "system", content: [{ type: "text", text: "Answer with the tool's data." }] },
        {
          role: "user",
          content: [
            { type: "text", text: "Weather in " },
            { type: "text", text: "Paris?" },
          ],
          name: "ana",
        },
        {
          role: "assistant",
          content: null,
          refusal: null,
          audio: null,
          annotations: [],
          tool_calls: [
            { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
            { id: "call_b", type: "function", function: { name: "get_weather", arguments: '{"city": "Lyon"}' } },
          ],
        },
        { role: "tool", tool_call_id: "call_a", content: '{"t":21}' },
        { role: "tool", tool_call_id: "call_b", content: [{ type: "text", text: '{"t":19}' }], name: "dropped" },
      ],
      tools: TOOLS,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: true,
      response_format: FORMAT,
      temperature: 0,
      user: "identity-dropped",
      metadata: { dropped: true },
    });
    expect(turn.status).toBe(200);
    expect((turn.body.choices as { message: { content: string } }[])[0]?.message.content).toBe("sunny");
    const { stream_options: _o, ...upstream } = received.at(-1) as Record<string, unknown>;
    expect(upstream).toEqual({
      model: "runtime-tools",
      stream: true,
      max_tokens: 4096,
      temperature: 0,
      tools: TOOLS,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: true,
      response_format: FORMAT,
      messages: [
        { role: "system", content: [{ type: "text", text: "Answer with the tool's data." }] },
        {
          role: "user",
          content: [
            { type: "text", text: "Weather in " },
            { type: "text", text: "Paris?" },
          ],
          name: "ana",
        },
        {
          role: "assistant",
          content: null,
          refusal: null,
          tool_calls: [
            { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
            { id: "call_b", type: "function", function: { name: "get_weather", arguments: '{"city": "Lyon"}' } },
          ],
        },
        { role: "tool", content: '{"t":21}', tool_call_id: "call_a" },
        { role: "tool", content: [{ type: "text", text: '{"t":19}' }], tool_call_id: "call_b" },
      ],
    });

    // Images: refused for a text-only model, forwarded as sent to one that takes them.
    const image = { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=", detail: "low" } };
    const imageTurn = (model: string) =>
      chat({ model, messages: [{ role: "user", content: [{ type: "text", text: "What is it?" }, image] }] });
    const before = received.length;
    expect(await imageTurn("org/tools")).toEqual({
      status: 400,
      body: {
        error: {
          message: "this model does not take image input (its input_modalities)",
          type: "invalid_request_error",
          code: "unsupported_value",
          param: "messages[0].content[1]",
        },
      },
    });
    expect(received.length).toBe(before);
    expect((await imageTurn("org/vision")).status).toBe(200);
    expect((received.at(-1) as { messages: unknown }).messages).toEqual([
      { role: "user", content: [{ type: "text", text: "What is it?" }, image] },
    ]);

    // A remote $ref: 422, nothing fetched, nothing sent to the provider.
    const remote = await chat({
      model: "org/tools",
      messages: [{ role: "user", content: "hi" }],
      tools: [{ type: "function", function: { name: "f", parameters: { $ref: `${schemaServer.url.origin}/schema.json` } } }],
    });
    expect({ remote, fetched: schemaHost, sentToRuntime: received.length - before }).toEqual({
      remote: {
        status: 422,
        body: {
          error: {
            message:
              "'tools[0].function.parameters' has a $ref that does not resolve within the schema (remote references are never fetched)",
            type: "invalid_request_error",
            code: "tool_schema_invalid",
            param: "tools[0].function.parameters",
          },
        },
      },
      fetched: [],
      sentToRuntime: 1,
    });
  }, 60_000);
});
