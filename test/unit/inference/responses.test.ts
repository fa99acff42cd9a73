/**
 * The response writers on a hand-driven Attempt: exact SSE bytes (content, usage-only chunk, terminal
 * chunk, one [DONE]), the in-band error event without [DONE], cancellation when the reader goes away,
 * and the non-streaming collector's errors. No sockets.
 */
import { describe, expect, test } from "bun:test";
import { ApiError } from "../../../src/errors/api-error.ts";
import { Attempt, type AttemptOwner } from "../../../src/fleet/attempt.ts";
import type { Committed } from "../../../src/inference/dispatch.ts";
import { collectCompletion, finishReason, type Outcome, usageJson } from "../../../src/inference/responses.ts";
import { streamCompletion } from "../../../src/inference/stream-pump.ts";
import type { CancelReason } from "../../../src/protocol/frames.ts";

const CTX = { id: "chatcmpl-test", model: "org/model", maxTokens: 10, created: 1_700_000_000 };
const HEAD = `{"id":"chatcmpl-test","object":"chat.completion.chunk","created":1700000000,"model":"org/model",`;

function attempt() {
  const released: (CancelReason | undefined)[] = [];
  const owner: AttemptOwner = { release: (_a, cancel) => released.push(cancel) };
  return { attempt: new Attempt("req_1", 0, "prov_1", "acct_provider", 0, owner), released };
}

function committed(a: Attempt, content: string): Committed {
  return { attempt: a, first: { type: "chunk", delta: { content } } };
}

async function readAll(stream: ReadableStream<Uint8Array>): Promise<string> {
  return new Response(stream).text();
}

describe("streamCompletion", () => {
  test("exact bytes of a successful stream", async () => {
    const { attempt: a, released } = attempt();
    const outcomes: Outcome[] = [];
    a.push({ type: "chunk", delta: {} });
    a.push({ type: "chunk", delta: { content: ' "quoted"\n' } });
    a.push({ type: "complete", finishReason: "stop", usage: { prompt_tokens: 3, completion_tokens: 2 } });
    const text = await readAll(await streamCompletion(committed(a, "Hi"), CTX, async (o) => void outcomes.push(o)));
    expect(text).toBe(
      [
        `data: ${HEAD}"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n`,
        `data: ${HEAD}"choices":[{"index":0,"delta":{"content":" \\"quoted\\"\\n"},"finish_reason":null}]}\n\n`,
        `data: ${HEAD}"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n`,
        `data: ${HEAD}"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`,
        "data: [DONE]\n\n",
      ].join(""),
    );
    expect(outcomes).toEqual([
      { status: "completed", usage: { prompt_tokens: 3, completion_tokens: 2 }, completionChars: 12, finishReason: "stop" },
    ]);
    expect(released).toEqual([undefined]);
  });

  test("events already received leave in one write; a short answer in one batch is one write, once its charge is settled", async () => {
    const { attempt: a } = attempt();
    let settle: () => void = () => {};
    const settled = new Promise<void>((resolve) => {
      settle = resolve;
    });
    a.push({ type: "chunk", delta: { content: " there" } });
    a.push({ type: "complete", finishReason: "stop", usage: { prompt_tokens: 3, completion_tokens: 2 } });
    const ready = streamCompletion(committed(a, "Hi"), CTX, () => settled);
    const early = await Promise.race([ready.then(() => "ready"), Bun.sleep(20).then(() => "waiting")]);
    expect(early).toBe("waiting");
    settle();
    const reader = (await ready).getReader();
    const text = new TextDecoder().decode((await reader.read()).value);
    expect(text.split("\n\n").filter(Boolean)).toEqual([
      `data: ${HEAD}"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`,
      `data: ${HEAD}"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]}`,
      `data: ${HEAD}"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
      `data: ${HEAD}"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
      "data: [DONE]",
    ]);
    expect((await reader.read()).done).toBe(true);
  });

  test("content is written as soon as nothing more is waiting behind it", async () => {
    const { attempt: a } = attempt();
    const reader = (await streamCompletion(committed(a, "Hi"), CTX, async () => {})).getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe(
      `data: ${HEAD}"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n`,
    );
    const next = reader.read();
    a.push({ type: "chunk", delta: { content: "!" } });
    expect(new TextDecoder().decode((await next).value)).toContain(`"content":"!"`);
    a.push({ type: "chunk", delta: { content: "a" } });
    a.push({ type: "chunk", delta: { content: "b" } });
    a.push({ type: "error", code: "engine_error" });
    const last = new TextDecoder()
      .decode((await reader.read()).value)
      .split("\n\n")
      .filter(Boolean);
    expect(last.map((e) => (JSON.parse(e.slice("data: ".length)) as { error?: unknown }).error === undefined)).toEqual([true, true, false]);
    expect((await reader.read()).done).toBe(true);
  });

  test("an alias with characters needing escapes is JSON-encoded in every chunk", async () => {
    const { attempt: a } = attempt();
    a.push({ type: "complete", finishReason: "stop", usage: { prompt_tokens: 1, completion_tokens: 1 } });
    const text = await readAll(await streamCompletion(committed(a, "x"), { ...CTX, model: 'org/"odd"' }, async () => {}));
    for (const line of text.split("\n\n").filter((l) => l && l !== "data: [DONE]")) {
      expect((JSON.parse(line.slice(6)) as { model: string }).model).toBe('org/"odd"');
    }
  });

  test.each<[string, Parameters<Attempt["push"]>[0], { type: string; code: string }]>([
    ["a disconnect", { type: "lost", reason: "provider disconnected" }, { type: "provider_error", code: "provider_error" }],
    ["an engine error", { type: "error", code: "engine_error" }, { type: "provider_error", code: "provider_error" }],
    ["a provider timeout", { type: "error", code: "timeout" }, { type: "timeout", code: "timeout" }],
  ])("a failure after commit (%s) is one error event and no [DONE]", async (_name, failure, expected) => {
    const { attempt: a } = attempt();
    const outcomes: Outcome[] = [];
    a.push(failure);
    const text = await readAll(await streamCompletion(committed(a, "Hi"), CTX, async (o) => void outcomes.push(o)));
    const events = text.split("\n\n").filter(Boolean);
    expect(events).toHaveLength(2);
    expect(JSON.parse(events[1]?.slice("data: ".length) ?? "")).toEqual({ error: { message: expect.any(String), ...expected } });
    expect(text).not.toContain("[DONE]");
    expect(outcomes.map((o) => o.status)).toEqual(["failed"]);
  });

  test("the request deadline (cancel with reason deadline) ends the stream with a timeout error", async () => {
    const { attempt: a, released } = attempt();
    const stream = await streamCompletion(committed(a, "Hi"), CTX, async () => {});
    const reader = stream.getReader();
    await reader.read();
    const pending = reader.read();
    a.cancel("deadline");
    const { value } = await pending;
    expect(JSON.parse(new TextDecoder().decode(value).slice("data: ".length))).toEqual({
      error: { message: expect.any(String), type: "timeout", code: "timeout" },
    });
    expect((await reader.read()).done).toBe(true);
    expect(released).toEqual(["deadline"]);
  });

  test("a hold lost while events waited (a stalled replica resumed): none of them is relayed, one in-band error", async () => {
    const { attempt: a, released } = attempt();
    const outcomes: Outcome[] = [];
    let held = true;
    const stream = await streamCompletion(committed(a, "Hi"), { ...CTX, held: () => held }, async (o) => void outcomes.push(o));
    const reader = stream.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    // Received while the replica was stopped, found after its hold's deadline: not relayed.
    held = false;
    a.push({ type: "chunk", delta: { content: "late" } });
    a.push({ type: "chunk", delta: { content: "later" } });
    const rest = new TextDecoder().decode((await reader.read()).value);
    expect({
      first: first.includes('"content":"Hi"'),
      rest: JSON.parse(rest.slice("data: ".length)),
      done: (await reader.read()).done,
      released,
      outcomes,
    }).toEqual({
      first: true,
      rest: { error: { message: expect.stringContaining("reservation"), type: "service_unavailable", code: "service_unavailable" } },
      done: true,
      released: ["deadline"],
      outcomes: [{ status: "failed", usage: undefined, completionChars: 2, finishReason: undefined }],
    });
  });

  test("a reader that goes away cancels the attempt (client_gone) once", async () => {
    const { attempt: a, released } = attempt();
    const outcomes: Outcome[] = [];
    const stream = await streamCompletion(committed(a, "Hi"), CTX, async (o) => void outcomes.push(o));
    const reader = stream.getReader();
    await reader.read();
    await reader.cancel();
    a.push({ type: "chunk", delta: { content: "late" } });
    expect(released).toEqual(["client_gone"]);
    expect(outcomes.map((o) => o.status)).toEqual(["cancelled"]);
  });
});

describe("collectCompletion", () => {
  test("throws a 502 provider_error when the attempt fails before complete", async () => {
    const { attempt: a } = attempt();
    a.push({ type: "lost", reason: "provider disconnected" });
    const error = await collectCompletion(committed(a, "Hi"), CTX, async () => {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect([(error as ApiError).status, (error as ApiError).code]).toEqual([502, "provider_error"]);
  });

  test("a hold lost before complete: a 504 timeout, the complete answer not returned, the attempt cancelled", async () => {
    const { attempt: a, released } = attempt();
    let held = true;
    const outcomes: Outcome[] = [];
    const pending = collectCompletion(committed(a, "Hi"), { ...CTX, held: () => held }, async (o) => void outcomes.push(o)).catch(
      (e: unknown) => e,
    );
    held = false;
    a.push({ type: "chunk", delta: { content: " there" } });
    const error = (await pending) as ApiError;
    expect([error.status, error.code, released, outcomes.map((o) => [o.status, o.completionChars])]).toEqual([
      504,
      "timeout",
      ["deadline"],
      [["failed", 2]],
    ]);
  });

  test("throws a 504 timeout when the request deadline cancels it", async () => {
    const { attempt: a } = attempt();
    const pending = collectCompletion(committed(a, "Hi"), CTX, async () => {}).catch((e: unknown) => e);
    a.cancel("deadline");
    const error = await pending;
    expect([(error as ApiError).status, (error as ApiError).code]).toEqual([504, "timeout"]);
  });
});

describe("finishReason and usageJson", () => {
  test.each([
    ["stop", 9, 10, "stop"],
    ["stop", 10, 10, "length"],
    ["stop", 11, 10, "length"],
    ["tool_calls", 3, 10, "tool_calls"],
    ["length", 3, 10, "stop"],
    ["length", 10, 10, "length"],
  ])("%s with %d of %d tokens -> %s", (reported, used, budget, expected) => {
    expect(finishReason(reported, { prompt_tokens: 1, completion_tokens: used }, budget)).toBe(expected);
  });

  test("usage details only when reported", () => {
    expect(usageJson({ prompt_tokens: 4, completion_tokens: 6 })).toEqual({ prompt_tokens: 4, completion_tokens: 6, total_tokens: 10 });
    expect(usageJson({ prompt_tokens: 4, completion_tokens: 6, cached_tokens: 0, reasoning_tokens: 2 })).toEqual({
      prompt_tokens: 4,
      completion_tokens: 6,
      total_tokens: 10,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 2 },
    });
  });
});

describe("tool calls (OpenAI's shapes)", () => {
  const weather = { index: 0, id: "call_a", name: "get_weather", arguments: '{"city":' };
  const push = (a: Attempt) => {
    a.push({ type: "tool_call", call: { index: 0, arguments: '"Paris"}' } });
    a.push({ type: "tool_call", call: { index: 1, id: "call_b", name: "get_time" } });
    a.push({ type: "complete", finishReason: "tool_calls", usage: { prompt_tokens: 3, completion_tokens: 4 } });
  };

  test("stream: exact bytes; a call's first fragment with id, type and name, later ones arguments only, indexes kept", async () => {
    const { attempt: a } = attempt();
    push(a);
    const outcomes: Outcome[] = [];
    const first = { type: "tool_call" as const, call: weather };
    const text = await readAll(await streamCompletion({ attempt: a, first }, CTX, async (o) => void outcomes.push(o)));
    expect(text).toBe(
      [
        `data: ${HEAD}"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\\"city\\":"}}]},"finish_reason":null}]}\n\n`,
        `data: ${HEAD}"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]},"finish_reason":null}]}\n\n`,
        `data: ${HEAD}"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}}]},"finish_reason":null}]}\n\n`,
        `data: ${HEAD}"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}\n\n`,
        `data: ${HEAD}"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n`,
        "data: [DONE]\n\n",
      ].join(""),
    );
    expect(outcomes).toEqual([
      { status: "completed", usage: { prompt_tokens: 3, completion_tokens: 4 }, completionChars: 35, finishReason: "tool_calls" },
    ]);
  });

  test("JSON: message.tool_calls in index order with arguments joined, content null without text", async () => {
    const { attempt: a } = attempt();
    push(a);
    const body = await collectCompletion({ attempt: a, first: { type: "tool_call", call: weather } }, CTX, async () => {});
    expect(body.choices).toEqual([
      {
        index: 0,
        message: {
          role: "assistant",
          content: "",
          tool_calls: [
            { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
            { id: "call_b", type: "function", function: { name: "get_time", arguments: "" } },
          ],
        },
        finish_reason: "tool_calls",
      },
    ]);
  });

  test("JSON: text beside the calls stays the content", async () => {
    const { attempt: a } = attempt();
    a.push({ type: "tool_call", call: weather });
    push(a);
    const body = await collectCompletion(committed(a, "Checking. "), CTX, async () => {});
    expect(body.choices[0]?.message).toEqual({
      role: "assistant",
      content: "Checking. ",
      tool_calls: [
        { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
        { id: "call_b", type: "function", function: { name: "get_time", arguments: "" } },
      ],
    });
  });
});
