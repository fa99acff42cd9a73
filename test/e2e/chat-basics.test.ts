/**
 * POST /v1/chat/completions through a real socket with a fake provider: the ChatCompletion shape, the
 * event stream (order, [DONE], no keepalives), finish_reason correction, the inference frame the provider
 * receives (budget rules, pass-through, identity fields dropped), request errors and a quiet stream.
 */
import { describe, expect, test } from "bun:test";
import { connect } from "node:net";
import { messageText } from "../../src/protocol/chat-messages.ts";
import type { Inference } from "../../src/protocol/frames.ts";
import { chatEnv } from "../support/chat-env.ts";
import { connectFakeProvider, type Step } from "../support/fake-provider.ts";
import type { TestApp } from "../support/harness.ts";
import { chatBody, errorOf, postChat, readSse, sseReader } from "../support/server.ts";

const BUILD = "org/base-build-4bit";

/**
 * Fixed answer: accept, "Hello", ", world" (and padding, so that up to 2,048 completion tokens stay within
 * the bytes relayed: src/billing/usage-bounds.ts), complete with the given finish reason and usage.
 */
function fixed(finishReason = "stop", completionTokens = 2): () => readonly Step[] {
  return () => [
    { do: "accept" },
    { do: "chunk", delta: { content: "Hello" } },
    { do: "chunk", delta: { content: ", world" } },
    ...(completionTokens > 12 ? [{ do: "chunk", delta: { content: " ".repeat(completionTokens) } } as const] : []),
    { do: "complete", finishReason, usage: { prompt_tokens: 7, completion_tokens: completionTokens } },
  ];
}

describe("non-streaming", () => {
  test("returns one ChatCompletion echoing the alias", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider({ behave: fixed() });

    const response = await postChat(server.url, apiKey, chatBody("hi"));
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toStartWith("application/json");
    expect(await response.json()).toEqual({
      id: expect.stringMatching(/^chatcmpl-/),
      object: "chat.completion",
      created: expect.any(Number),
      model: "org/model",
      choices: [{ index: 0, message: { role: "assistant", content: "Hello, world" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 },
    });
  });

  test("created is the current Unix time in seconds", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider();
    const before = Math.floor(Date.now() / 1000);
    const body = (await (await postChat(server.url, apiKey, chatBody("a b"))).json()) as { created: number };
    expect(body.created).toBeGreaterThanOrEqual(before);
    expect(body.created).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
  });

  test("finish_reason is corrected to length when the budget was used up", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider({ behave: fixed("stop", 2) });
    const body = (await (await postChat(server.url, apiKey, chatBody("hi", { max_tokens: 2 }))).json()) as {
      choices: { finish_reason: string }[];
    };
    expect(body.choices[0]?.finish_reason).toBe("length");
  });
});

describe("answer details", () => {
  const reasoning: () => readonly Step[] = () => [
    { do: "accept" },
    { do: "chunk", delta: { reasoning_content: "thinking" } },
    { do: "chunk", delta: { content: "answer" } },
    { do: "complete", usage: { prompt_tokens: 10, completion_tokens: 3, cached_tokens: 4, reasoning_tokens: 1 } },
  ];

  test("reasoning content and usage details (non-streaming)", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider({ behave: reasoning });
    const body = (await (await postChat(server.url, apiKey, chatBody("x"))).json()) as Record<string, unknown>;
    expect({ choices: body.choices, usage: body.usage }).toEqual({
      choices: [{ index: 0, message: { role: "assistant", content: "answer", reasoning_content: "thinking" }, finish_reason: "stop" }],
      usage: {
        prompt_tokens: 10,
        completion_tokens: 3,
        total_tokens: 13,
        prompt_tokens_details: { cached_tokens: 4 },
        completion_tokens_details: { reasoning_tokens: 1 },
      },
    });
  });

  test("reasoning content and usage details (streaming)", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider({ behave: reasoning });
    const { data } = await readSse(await postChat(server.url, apiKey, chatBody("x", { stream: true })));
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as { choices: unknown[]; usage?: unknown });
    expect(chunks.map((c) => ({ choices: c.choices, usage: c.usage }))).toEqual([
      { choices: [{ index: 0, delta: { role: "assistant", reasoning_content: "thinking" }, finish_reason: null }], usage: undefined },
      { choices: [{ index: 0, delta: { content: "answer" }, finish_reason: null }], usage: undefined },
      {
        choices: [],
        usage: {
          prompt_tokens: 10,
          completion_tokens: 3,
          total_tokens: 13,
          prompt_tokens_details: { cached_tokens: 4 },
          completion_tokens_details: { reasoning_tokens: 1 },
        },
      },
      { choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: undefined },
    ]);
    expect(data.at(-1)).toBe("[DONE]");
  });

  test("an answer without any chunk: empty content, usage, terminal chunk, [DONE]", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider({ behave: () => [{ do: "accept" }, { do: "complete", usage: { prompt_tokens: 3, completion_tokens: 0 } }] });
    const json = (await (await postChat(server.url, apiKey, chatBody("x"))).json()) as { choices: unknown[] };
    expect(json.choices).toEqual([{ index: 0, message: { role: "assistant", content: "" }, finish_reason: "stop" }]);
    const { data } = await readSse(await postChat(server.url, apiKey, chatBody("x", { stream: true })));
    expect(data.map((d) => (d === "[DONE]" ? d : (JSON.parse(d) as { choices: unknown[] }).choices))).toEqual([
      [],
      [{ index: 0, delta: {}, finish_reason: "stop" }],
      "[DONE]",
    ]);
  });

  test.each([
    [2047, "stop"],
    [2048, "length"],
  ])("finish_reason against the clamped default budget: %p completion tokens -> %p", async (completionTokens, expected) => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider({ behave: fixed("stop", completionTokens) });
    const body = (await (await postChat(server.url, apiKey, chatBody("x"))).json()) as { choices: { finish_reason: string }[] };
    expect(body.choices[0]?.finish_reason).toBe(expected);
  });

  test("a provider-reported reason other than length is kept below the budget", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider({ behave: fixed("content_filter", 2) });
    const body = (await (await postChat(server.url, apiKey, chatBody("x", { max_tokens: 100 }))).json()) as {
      choices: { finish_reason: string }[];
    };
    expect(body.choices[0]?.finish_reason).toBe("content_filter");
  });
});

describe("streaming", () => {
  test("content chunks, usage chunk, terminal chunk, one [DONE], nothing else", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider({ behave: fixed() });

    const response = await postChat(server.url, apiKey, chatBody("hi", { stream: true }));
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toStartWith("text/event-stream");
    const { data, comments, raw } = await readSse(response);

    expect(comments).toEqual([]);
    expect(raw.split("\n").filter((line) => line.startsWith(":"))).toEqual([]);
    expect(raw.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(data.at(-1)).toBe("[DONE]");
    expect(data.filter((d) => d === "[DONE]")).toHaveLength(1);

    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Record<string, unknown>);
    const head = {
      id: expect.stringMatching(/^chatcmpl-/),
      object: "chat.completion.chunk",
      created: expect.any(Number),
      model: "org/model",
    };
    expect(chunks).toEqual([
      { ...head, choices: [{ index: 0, delta: { role: "assistant", content: "Hello" }, finish_reason: null }] },
      { ...head, choices: [{ index: 0, delta: { content: ", world" }, finish_reason: null }] },
      { ...head, choices: [], usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } },
      { ...head, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] },
    ]);
    // One completion id for the whole stream.
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  test("finish_reason is corrected to length when completion_tokens reaches max_tokens", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    await ctx.provider({ behave: fixed("stop", 5) });

    const under = await readSse(await postChat(server.url, apiKey, chatBody("hi", { stream: true, max_tokens: 6 })));
    const at = await readSse(await postChat(server.url, apiKey, chatBody("hi", { stream: true, max_tokens: 5 })));
    const finish = (data: string[]) =>
      (JSON.parse(data.at(-2) ?? "{}") as { choices: { finish_reason: string }[] }).choices[0]?.finish_reason;
    expect([finish(under.data), finish(at.data)]).toEqual(["stop", "length"]);
  });
});

describe("the inference frame", () => {
  async function inferenceFor(t: TestApp, apiKey: string, token: string, url: string, body: Record<string, unknown>): Promise<Inference> {
    await using p = await connectFakeProvider({ url, token, models: [BUILD] });
    const response = await postChat(url, apiKey, body);
    expect(response.status).toBe(200);
    await response.arrayBuffer();
    const frame = p.received.find((f) => f.type === "inference");
    if (frame?.type !== "inference") throw new Error(`no inference frame (${t.logs.length} log lines)`);
    return frame;
  }

  test("carries the build, the budget after the rules and the pass-through fields, never identity fields", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_DEFAULT_MAX_TOKENS: "777", UMBRA_FIRST_CONTENT_TIMEOUT_MS: "9000" } });
    const { t, apiKey, token, server } = ctx;
    const frame = await inferenceFor(
      t,
      apiKey,
      token,
      server.url,
      chatBody("one two", {
        temperature: 0.3,
        top_p: 0.8,
        stop: ["END"],
        seed: 11,
        user: "user-42",
        metadata: { tag: "x" },
        safety_identifier: "sid",
        store: false,
      }),
    );
    expect(frame).toEqual({
      type: "inference",
      request_id: expect.any(String),
      attempt: 0,
      model: BUILD,
      first_content_deadline_ms: expect.any(Number),
      request: {
        messages: [{ role: "user", content: "one two" }],
        max_tokens: 777,
        temperature: 0.3,
        top_p: 0.8,
        stop: ["END"],
        seed: 11,
      },
    });
    expect(frame.first_content_deadline_ms).toBeGreaterThan(8000);
    expect(frame.first_content_deadline_ms).toBeLessThanOrEqual(9000);
  });

  test.each<[string, Record<string, unknown>, number]>([
    ["default above the model limit -> clamped to 2048", {}, 2048],
    ["max_tokens 100", { max_tokens: 100 }, 100],
    ["max_tokens 5000 -> clamped to 2048", { max_tokens: 5000 }, 2048],
    ["max_completion_tokens 300 copied", { max_completion_tokens: 300 }, 300],
    ["max_tokens wins over max_completion_tokens", { max_tokens: 50, max_completion_tokens: 300 }, 50],
    ["max_tokens 0 -> default, clamped", { max_tokens: 0 }, 2048],
  ])("%s", async (_name, fields, expected) => {
    await using ctx = await chatEnv();
    const { t, apiKey, token, server } = ctx;
    const frame = await inferenceFor(t, apiKey, token, server.url, chatBody("x", fields));
    expect(frame.request.max_tokens).toBe(expected);
    expect(Object.keys(frame.request)).not.toContain("max_completion_tokens");
  });

  test("the server default applies when under the model limit", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_DEFAULT_MAX_TOKENS: "64" } });
    const { t, apiKey, token, server } = ctx;
    expect((await inferenceFor(t, apiKey, token, server.url, chatBody("x"))).request.max_tokens).toBe(64);
  });
});

describe("request errors", () => {
  test("413 for a body over UMBRA_MAX_BODY_BYTES with content-length", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MAX_BODY_BYTES: "1024" } });
    const { apiKey, server } = ctx;
    const response = await postChat(server.url, apiKey, chatBody("x".repeat(2000)));
    expect(await errorOf(response)).toEqual({
      status: 413,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "request_too_large", code: "request_too_large" } },
    });
  });

  test("413 in the envelope for a declared length beyond Bun's own 128 MiB limit, before any body byte", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    const { port } = new URL(server.url);
    const head = [
      "POST /v1/chat/completions HTTP/1.1",
      "host: localhost",
      `authorization: Bearer ${apiKey}`,
      "content-type: application/json",
      `content-length: ${10 * 1024 ** 3}`,
    ].join("\r\n");
    const text = await new Promise<string>((resolve) => {
      let received = "";
      const socket = connect(Number(port), "127.0.0.1", () => socket.write(`${head}\r\n\r\n`));
      socket.on("data", (data) => {
        received += data.toString();
        if (received.endsWith("}}")) socket.destroy();
      });
      socket.on("close", () => resolve(received));
    });
    expect(text.split("\r\n")[0]).toStartWith("HTTP/1.1 413");
    expect(JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4))).toEqual({
      error: { message: expect.any(String), type: "request_too_large", code: "request_too_large" },
    });
  });

  test("413 for a chunked body of unknown length that grows past the limit", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MAX_BODY_BYTES: "1024" } });
    const { apiKey, server } = ctx;
    const piece = new TextEncoder().encode(JSON.stringify(chatBody("y".repeat(400))));
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent >= 8) {
          controller.close();
          return;
        }
        sent++;
        controller.enqueue(piece);
      },
    });
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body,
    });
    expect(await errorOf(response)).toEqual({
      status: 413,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "request_too_large", code: "request_too_large" } },
    });
  });

  test("a body at the limit is accepted (the limit is not off by one)", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MAX_BODY_BYTES: "1024" } });
    const { apiKey, server } = ctx;
    await ctx.provider();
    const empty = JSON.stringify(chatBody(""));
    const body = JSON.stringify(chatBody("z".repeat(1024 - empty.length)));
    expect(body.length).toBe(1024);
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body,
    });
    expect(response.status).toBe(200);
  });

  test.each([
    ["not JSON", "{ nope"],
    ["truncated JSON", '{"model":"org/model","messages":['],
    ["empty body", ""],
  ])("400 invalid_json for %s", async (_name, body) => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body,
    });
    expect(await errorOf(response)).toEqual({
      status: 400,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_json" } },
    });
  });

  test("401 without a key, with a wrong key, and with a provider token", async () => {
    await using ctx = await chatEnv();
    const { token, server } = ctx;
    const statuses: number[] = [];
    const variants: Record<string, string>[] = [{}, { authorization: "Bearer sk-umbra-wrong" }, { authorization: `Bearer ${token}` }];
    for (const headers of variants) {
      const response = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: JSON.stringify(chatBody("x")),
      });
      const body = (await response.json()) as { error: { type: string } };
      statuses.push(response.status);
      expect(body.error.type).toBe("authentication_error");
    }
    expect(statuses).toEqual([401, 401, 401]);
  });

  test("404 model_not_found with param model for an unknown model", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    const response = await postChat(server.url, apiKey, { ...chatBody("x"), model: "org/unknown" });
    expect(await errorOf(response)).toEqual({
      status: 404,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "not_found_error", code: "model_not_found", param: "model" } },
    });
  });

  test("403 model_not_allowed for a key whose allowed_models excludes the model", async () => {
    await using ctx = await chatEnv();
    const { t, accountId, server } = ctx;
    const p = await ctx.provider();
    const restricted = await t.app.admin.createKey({ account_id: accountId, allowed_models: ["other/plain"] });
    const response = await postChat(server.url, restricted.key, chatBody("x", { stream: true }));
    expect(await errorOf(response)).toEqual({
      status: 403,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "permission_error", code: "model_not_allowed", param: "model" } },
    });
    expect(p.received.filter((f) => f.type === "inference")).toEqual([]);
  });

  test("400 with param for a malformed budget, before any provider is asked", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    const p = await ctx.provider();
    const response = await postChat(server.url, apiKey, chatBody("x", { max_tokens: -5, stream: true }));
    expect(await errorOf(response)).toEqual({
      status: 400,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_value", param: "max_tokens" } },
    });
    expect(p.received.filter((f) => f.type === "inference")).toEqual([]);
  });
});

describe("privacy", () => {
  test("neither prompts nor answers reach the logs (debug level), on success or failure", async () => {
    const CANARY = "canary-b81c-do-not-log";
    await using ctx = await chatEnv({ env: { UMBRA_FIRST_CONTENT_TIMEOUT_MS: "200" } });
    const { t, apiKey, server } = ctx;
    await ctx.provider({
      behave: (inf) => {
        const first = inf.request.messages[0];
        const mode = first && messageText(first).split(" ")[0];
        if (mode === "hang") return [{ do: "accept" }, { do: "hang" }];
        if (mode === "break") return [{ do: "accept" }, { do: "chunk", delta: { content: CANARY } }, { do: "error", code: "engine_error" }];
        return [{ do: "accept" }, { do: "chunk", delta: { content: CANARY } }, { do: "complete" }];
      },
    });
    const statuses: number[] = [];
    for (const [mode, stream] of [
      ["ok", false],
      ["ok", true],
      ["hang", true],
      ["break", true],
      ["break", false],
    ] as const) {
      const response = await postChat(server.url, apiKey, chatBody(`${mode} ${CANARY}`, { stream, user: CANARY }));
      statuses.push(response.status);
      await response.text();
    }
    expect(statuses).toEqual([200, 200, 429, 200, 502]);
    const bad = await postChat(server.url, apiKey, { model: "org/model", messages: [{ role: CANARY }] });
    expect(bad.status).toBe(400);
    expect(await bad.text()).not.toContain(CANARY);
    expect(t.logs.length).toBeGreaterThan(0);
    expect(t.logs.filter((line) => line.includes(CANARY))).toEqual([]);
  });
});

describe("a quiet stream", () => {
  // A connection idle for the server's idle timeout is cut; chat requests must be exempt once their body
  // is in. A 1 s timeout here (120 s in service); one idle period is measured by a stalled request on
  // another connection being cut while the stream is quiet.
  test("a provider silent for longer than the idle timeout between two chunks still completes", async () => {
    await using ctx = await chatEnv({ listen: { idleTimeoutSeconds: 1 } });
    const { apiKey, server } = ctx;
    let resume: () => void = () => {};
    const quiet = new Promise<void>((resolve) => {
      resume = resolve;
    });
    await ctx.provider({
      behave: () => [
        { do: "accept" },
        { do: "chunk", delta: { content: "before " } },
        { do: "until", ready: quiet },
        { do: "chunk", delta: { content: "after" } },
        { do: "complete" },
      ],
    });
    const events = sseReader(await postChat(server.url, apiKey, chatBody("x", { stream: true })));
    const first = [await events.next()];
    while (!first.some((d) => d?.includes("before"))) first.push(await events.next());
    const { port } = new URL(server.url);
    await new Promise<void>((resolve, reject) => {
      const stalled = connect(Number(port), "127.0.0.1", () =>
        stalled.write("POST /v1/provider/device/code HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"),
      );
      stalled.on("error", reject);
      stalled.on("close", () => resolve());
    });
    resume();
    const data = [...first, ...(await events.rest())] as string[];
    const content = data
      .slice(0, -1)
      .map((d) => (JSON.parse(d) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta?.content ?? "")
      .join("");
    expect(content).toBe("before after");
    expect(data.at(-1)).toBe("[DONE]");
  }, 30_000);
});
