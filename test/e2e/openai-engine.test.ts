/**
 * The OpenAI-compatible engine against a mock upstream (Bun.serve, port 0) that streams SSE chunks the
 * way llama.cpp, Ollama and vLLM do, answers error statuses, and records what it received.
 * The upstream model name selects the mock's behaviour.
 */
import { afterAll, describe, expect, test } from "bun:test";
import type { EngineRequestBody } from "../../src/protocol/frames.ts";
import { type Engine, EngineError, type EngineEvent } from "../../src/provider/engines/engine.ts";
import { createOpenAIEngine } from "../../src/provider/engines/openai.ts";
import { waitFor } from "../support/wait.ts";

const SECRET = "the-secret-prompt-phrase";
const encoder = new TextEncoder();

const received: Record<string, unknown>[] = [];
let hangAborted = false;

const sse = (events: readonly unknown[]): string =>
  events.map((e) => `data: ${typeof e === "string" ? e : JSON.stringify(e)}\n\n`).join("");
const chunk = (delta: Record<string, unknown> | null, finish_reason: string | null = null) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  choices: [{ index: 0, delta, finish_reason }],
});
const streamResponse = (body: string | ReadableStream<Uint8Array>) =>
  new Response(body, { headers: { "content-type": "text/event-stream; charset=utf-8" } });

const upstream = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: async (req) => {
    if (new URL(req.url).pathname !== "/v1/chat/completions" || req.method !== "POST") return new Response("nope", { status: 404 });
    const body = (await req.json()) as Record<string, unknown>;
    received.push(body);
    const model = String(body.model);
    const status = /^status-(\d{3})/.exec(model)?.[1];
    if (status !== undefined) {
      const message = model.endsWith("-ctx")
        ? `This model's maximum context length is 4096 tokens. However, your messages resulted in 9000 tokens: ${SECRET}`
        : `bad request near '${SECRET}'`;
      return Response.json({ error: { message, type: "invalid_request_error" } }, { status: Number(status) });
    }
    switch (model) {
      case "stream-ok":
        return streamResponse(
          // Split mid-event to exercise the parser's buffering.
          new ReadableStream({
            start(controller) {
              const text = sse([
                chunk({ role: "assistant", content: "" }),
                chunk({ reasoning_content: "thinking" }),
                chunk({ content: "Hel" }),
                chunk({ content: "lo" }),
                chunk({}, "stop"),
                {
                  id: "chatcmpl-1",
                  choices: [],
                  usage: { prompt_tokens: 11, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 4 } },
                },
                "[DONE]",
              ]);
              const cut = Math.floor(text.length / 2) + 3;
              controller.enqueue(encoder.encode(text.slice(0, cut)));
              controller.enqueue(encoder.encode(text.slice(cut)));
              controller.close();
            },
          }),
        );
      case "ollama-reasoning":
        return streamResponse(sse([chunk({ reasoning: "hmm" }), chunk({ content: "ok" }, "length"), "[DONE]"]));
      case "no-usage":
        return streamResponse(sse([chunk({ content: "a" }), chunk({ content: "b" }), chunk({ content: "c" }, "stop")]));
      case "malformed":
        return streamResponse(sse([chunk({ content: "a" }), "{not json"]));
      case "early-end":
        return streamResponse(sse([chunk({ content: "a" })]));
      case "stream-error":
        return streamResponse(sse([chunk({ content: "a" }), { error: { message: `failed on ${SECRET}` } }]));
      case "stream-error-ctx":
        return streamResponse(sse([{ error: { message: "prompt exceeds the context window" } }]));
      case "not-a-stream":
        return Response.json({ choices: [{ message: { content: "whole" } }] });
      case "hang":
        return streamResponse(
          new ReadableStream({
            start(controller) {
              controller.enqueue(encoder.encode(sse([chunk({ content: "first" })])));
            },
            cancel() {
              hangAborted = true;
            },
          }),
        );
      default:
        return new Response("unknown model", { status: 500 });
    }
  },
});

afterAll(() => upstream.stop(true));

const base = `http://127.0.0.1:${upstream.port}/v1`;

function engineFor(upstreamName: string, url = base): Engine {
  return createOpenAIEngine({ upstream: url, models: [{ buildId: "org/build", upstreamName }] });
}

const BODY: EngineRequestBody = { messages: [{ role: "user", content: `Say hello ${SECRET}` }], max_tokens: 64 };

async function run(engine: Engine, body: EngineRequestBody = BODY, signal = new AbortController().signal): Promise<EngineEvent[]> {
  const events: EngineEvent[] = [];
  for await (const e of engine.generate({ model: "org/build", body }, signal)) events.push(e);
  return events;
}

async function failure(engine: Engine, body: EngineRequestBody = BODY): Promise<{ code: string; message: string }> {
  try {
    await run(engine, body);
  } catch (e) {
    if (e instanceof EngineError) return { code: e.code, message: e.message };
    throw e;
  }
  throw new Error("expected an EngineError");
}

describe("openai engine", () => {
  test("streams content and reasoning deltas, then done with the runtime's usage", async () => {
    expect(await run(engineFor("stream-ok"))).toEqual([
      { type: "delta", delta: { reasoning_content: "thinking" } },
      { type: "delta", delta: { content: "Hel" } },
      { type: "delta", delta: { content: "lo" } },
      { type: "done", finishReason: "stop", usage: { prompt_tokens: 11, completion_tokens: 3, cached_tokens: 4 } },
    ]);
  });

  test("forwards sampling parameters as-is and sets model, budget and streaming itself", async () => {
    const body: EngineRequestBody = {
      ...BODY,
      temperature: 0.3,
      top_p: 0.9,
      stop: ["\n\n", "END"],
      seed: 7,
      presence_penalty: 0.5,
      frequency_penalty: 0.25,
      response_format: { type: "json_object" },
      max_completion_tokens: 999,
      stream: false,
      model: "ignored",
    };
    const before = received.length;
    await run(engineFor("stream-ok"), body);
    expect(received.slice(before)).toEqual([
      {
        temperature: 0.3,
        top_p: 0.9,
        stop: ["\n\n", "END"],
        seed: 7,
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        response_format: { type: "json_object" },
        model: "stream-ok",
        messages: BODY.messages,
        max_tokens: 64,
        stream: true,
        stream_options: { include_usage: true },
      },
    ]);
  });

  test("Ollama's `reasoning` field and a length finish", async () => {
    const events = await run(engineFor("ollama-reasoning"));
    expect(events.slice(0, 2)).toEqual([
      { type: "delta", delta: { reasoning_content: "hmm" } },
      { type: "delta", delta: { content: "ok" } },
    ]);
    expect(events[2]).toMatchObject({ type: "done", finishReason: "length" });
  });

  test("without a usage chunk (and without [DONE]) usage is estimated", async () => {
    const events = await run(engineFor("no-usage"));
    const prompt = Math.ceil(`Say hello ${SECRET}`.length / 4) + 4;
    expect(events.at(-1)).toEqual({ type: "done", finishReason: "stop", usage: { prompt_tokens: prompt, completion_tokens: 3 } });
  });

  test("models and warm models; a model_not_loaded answer makes the build cold until it serves again", async () => {
    const engine = createOpenAIEngine({
      upstream: base,
      models: [
        { buildId: "org/a", upstreamName: "status-404" },
        { buildId: "org/b", upstreamName: "stream-ok" },
      ],
    });
    expect([engine.name, engine.models(), engine.warmModels()]).toEqual([
      "openai",
      [{ build_id: "org/a" }, { build_id: "org/b" }],
      ["org/a", "org/b"],
    ]);
    const error = await (async () => {
      for await (const _ of engine.generate({ model: "org/a", body: BODY }, new AbortController().signal)) {
      }
    })().catch((e: unknown) => e);
    expect((error as EngineError).code).toBe("model_not_loaded");
    expect(engine.warmModels()).toEqual(["org/b"]);
  });

  describe.each([
    ["HTTP 404", "status-404", "model_not_loaded", "upstream answered 404"],
    ["HTTP 400 naming the context length", "status-400-ctx", "context_length_exceeded", "upstream answered 400: context length exceeded"],
    ["HTTP 400", "status-400", "invalid_request", "upstream answered 400: request refused"],
    ["HTTP 422", "status-422", "invalid_request", "upstream answered 422: request refused"],
    ["HTTP 429", "status-429", "busy", "upstream answered 429: busy"],
    ["HTTP 503", "status-503", "busy", "upstream answered 503: busy"],
    ["HTTP 500", "status-500", "engine_error", "upstream answered 500"],
    ["HTTP 502", "status-502", "engine_error", "upstream answered 502"],
    ["HTTP 401", "status-401", "engine_unavailable", "upstream answered 401: not authorized"],
    ["a malformed stream", "malformed", "engine_error", "malformed upstream stream"],
    ["a stream that ends early", "early-end", "engine_error", "upstream stream ended early"],
    ["an error inside the stream", "stream-error", "engine_error", "upstream stream error"],
    ["a context error inside the stream", "stream-error-ctx", "context_length_exceeded", "upstream stream error: context length exceeded"],
    ["a JSON answer instead of a stream", "not-a-stream", "engine_error", "upstream did not answer with an event stream"],
  ])("%s", (_, model, code, message) => {
    test(`-> ${code}, with a fixed message that quotes no content`, async () => {
      const error = await failure(engineFor(model));
      expect(error).toEqual({ code, message });
      expect(error.message).not.toContain(SECRET);
    });
  });

  test("an unreachable upstream -> engine_unavailable", async () => {
    const closed = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const port = closed.port;
    await closed.stop(true);
    expect(await failure(engineFor("stream-ok", `http://127.0.0.1:${port}/v1`))).toEqual({
      code: "engine_unavailable",
      message: "upstream unreachable",
    });
  });

  test("abort mid-stream -> cancelled, and the upstream request is cancelled", async () => {
    const controller = new AbortController();
    const events: EngineEvent[] = [];
    let error: unknown;
    try {
      for await (const e of engineFor("hang").generate({ model: "org/build", body: BODY }, controller.signal)) {
        events.push(e);
        controller.abort();
      }
    } catch (e) {
      error = e;
    }
    expect(events).toEqual([{ type: "delta", delta: { content: "first" } }]);
    expect((error as EngineError).code).toBe("cancelled");
    await waitFor(() => hangAborted, "the upstream to see the request cancelled");
  });

  test("a build it does not serve -> model_not_loaded without calling the upstream", async () => {
    const before = received.length;
    const engine = engineFor("stream-ok");
    const error = await (async () => {
      for await (const _ of engine.generate({ model: "org/other", body: BODY }, new AbortController().signal)) {
      }
    })().catch((e: unknown) => e);
    expect((error as EngineError).code).toBe("model_not_loaded");
    expect(received.length).toBe(before);
  });
});
