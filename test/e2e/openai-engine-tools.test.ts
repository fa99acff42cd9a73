/**
 * The OpenAI-compatible engine's tool calls against a mock upstream (Bun.serve, port 0) streaming
 * `delta.tool_calls` the ways runtimes do: llama.cpp and vLLM (id and name first, then argument
 * fragments, parallel calls by index), Ollama (whole calls, every one at index 0, finish `stop`), mlx-lm
 * style (no index, no id), content before the calls; and the malformed ones (interleaved calls, a call
 * without a function name). The upstream model name selects the mock's stream.
 */
import { afterAll, describe, expect, test } from "bun:test";
import type { EngineRequestBody } from "../../src/protocol/frames.ts";
import { type Engine, EngineError, type EngineEvent } from "../../src/provider/engines/engine.ts";
import { createOpenAIEngine } from "../../src/provider/engines/openai.ts";

const sse = (events: readonly unknown[]): string =>
  events.map((e) => `data: ${typeof e === "string" ? e : JSON.stringify(e)}\n\n`).join("");
const chunk = (delta: Record<string, unknown> | null, finish_reason: string | null = null) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  choices: [{ index: 0, delta, finish_reason }],
});
const calls = (...tool_calls: Record<string, unknown>[]) => chunk({ tool_calls });
const USAGE = { id: "chatcmpl-1", choices: [], usage: { prompt_tokens: 40, completion_tokens: 20 } };

const STREAMS: Record<string, readonly unknown[]> = {
  // llama.cpp / vLLM: the first fragment names the call (empty arguments), arguments follow in pieces.
  "llama-cpp": [
    chunk({
      role: "assistant",
      content: null,
      tool_calls: [{ index: 0, id: "call_w", type: "function", function: { name: "get_weather", arguments: "" } }],
    }),
    calls({ index: 0, function: { arguments: '{"city":' } }),
    calls({ index: 0, function: { arguments: '"Paris"}' } }),
    calls({ index: 1, id: "call_t", type: "function", function: { name: "get_time", arguments: "{}" } }),
    chunk({}, "tool_calls"),
    USAGE,
    "[DONE]",
  ],
  // Ollama: each call whole in its own chunk, every one at index 0 with its own id; older versions say stop.
  ollama: [
    calls({ id: "call_1", index: 0, type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }),
    calls({ id: "call_2", index: 0, type: "function", function: { name: "get_time", arguments: "{}" } }),
    chunk({ content: "" }, "stop"),
    USAGE,
    "[DONE]",
  ],
  // No index, no id; arguments given as an object.
  "no-index": [
    chunk({ content: "Let me check." }),
    calls({ type: "function", function: { name: "get_weather", arguments: { city: "Paris" } } }),
    chunk({}, "tool_calls"),
    "[DONE]",
  ],
  interleaved: [
    calls({ index: 0, id: "a", function: { name: "f", arguments: "{" } }),
    calls({ index: 1, id: "b", function: { name: "g", arguments: "{" } }),
    calls({ index: 0, function: { arguments: "}" } }),
    "[DONE]",
  ],
  "no-name": [calls({ index: 0, id: "a", function: { arguments: "{}" } }), "[DONE]"],
  "not-a-list": [chunk({ tool_calls: { index: 0 } }), "[DONE]"],
};

const upstream = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: async (req) => {
    const body = (await req.json()) as { model: string };
    const events = STREAMS[body.model];
    if (!events) return new Response("unknown model", { status: 500 });
    return new Response(sse(events), { headers: { "content-type": "text/event-stream" } });
  },
});
afterAll(() => upstream.stop(true));

function engineFor(upstreamName: string): Engine {
  return createOpenAIEngine({ upstream: `http://127.0.0.1:${upstream.port}/v1`, models: [{ buildId: "org/build", upstreamName }] });
}

const BODY: EngineRequestBody = {
  messages: [{ role: "user", content: "weather and time in Paris?" }],
  max_tokens: 64,
  tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }],
};

async function run(engine: Engine, body: EngineRequestBody = BODY): Promise<EngineEvent[]> {
  const events: EngineEvent[] = [];
  for await (const e of engine.generate({ model: "org/build", body }, new AbortController().signal)) events.push(e);
  return events;
}

describe("openai engine: tool calls", () => {
  test("llama.cpp / vLLM: id and name first, argument fragments in order, a parallel call by index", async () => {
    expect(await run(engineFor("llama-cpp"))).toEqual([
      { type: "tool_call", call: { index: 0, id: "call_w", name: "get_weather" } },
      { type: "tool_call", call: { index: 0, arguments: '{"city":' } },
      { type: "tool_call", call: { index: 0, arguments: '"Paris"}' } },
      { type: "tool_call", call: { index: 1, id: "call_t", name: "get_time", arguments: "{}" } },
      { type: "done", finishReason: "tool_calls", usage: { prompt_tokens: 40, completion_tokens: 20 } },
    ]);
  });

  test("Ollama: whole calls, every one at index 0 with its own id, renumbered 0, 1; its `stop` after calls is tool_calls", async () => {
    expect(await run(engineFor("ollama"))).toEqual([
      { type: "tool_call", call: { index: 0, id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' } },
      { type: "tool_call", call: { index: 1, id: "call_2", name: "get_time", arguments: "{}" } },
      { type: "done", finishReason: "tool_calls", usage: { prompt_tokens: 40, completion_tokens: 20 } },
    ]);
  });

  test("content before a call without index or id: the id is made up, object arguments serialized, usage estimated", async () => {
    const events = await run(engineFor("no-index"));
    expect(events).toEqual([
      { type: "delta", delta: { content: "Let me check." } },
      {
        type: "tool_call",
        call: { index: 0, id: expect.stringMatching(/^call_[0-9a-f]{24}$/), name: "get_weather", arguments: '{"city":"Paris"}' },
      },
      { type: "done", finishReason: "tool_calls", usage: { prompt_tokens: expect.any(Number), completion_tokens: 2 } },
    ]);
  });

  test("the usage estimate reads every message shape (null content beside tool calls, text parts)", async () => {
    const loop = {
      ...BODY,
      messages: [
        { role: "user", content: "abcd" },
        { role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "c", content: [{ type: "text", text: "abcdefgh" }] },
      ],
    } as unknown as EngineRequestBody;
    const tools = JSON.stringify([{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }]).length;
    const parts = JSON.stringify([{ type: "text", text: "abcdefgh" }]).length - 2;
    expect((await run(engineFor("no-index"), loop)).at(-1)).toEqual({
      type: "done",
      finishReason: "tool_calls",
      usage: { prompt_tokens: 1 + 4 + Math.ceil(tools / 4) + 4 + Math.ceil(parts / 4) + 4, completion_tokens: 2 },
    });
  });

  test.each([
    ["interleaved calls (a fragment going back to an earlier call)", "interleaved"],
    ["a call whose first fragment has no function name", "no-name"],
    ["tool_calls that is not a list", "not-a-list"],
  ])("%s: engine_error, a malformed stream", async (_, model) => {
    let error: unknown;
    try {
      await run(engineFor(model));
    } catch (e) {
      error = e;
    }
    expect(error instanceof EngineError ? { code: error.code, message: error.message } : error).toEqual({
      code: "engine_error",
      message: "malformed upstream stream",
    });
  });
});
