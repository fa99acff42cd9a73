/**
 * The provider agent's tool-call frames (src/provider/attempts.ts) against a fake coordinator: engine
 * tool_call events become `tool_call` frames in one seq with the chunks, `complete.seq` counts both,
 * argument fragments produced in the same turn share a frame, long arguments are split under the frame
 * budget, and an engine breaking the call order fails the attempt with `engine_error`.
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { Inference, ToolCallDelta } from "../../src/protocol/frames.ts";
import { type Agent, startAgent } from "../../src/provider/agent.ts";
import { MAX_CHUNK_CHARS } from "../../src/provider/attempts.ts";
import { createEchoEngine } from "../../src/provider/engines/echo.ts";
import type { Engine, EngineEvent } from "../../src/provider/engines/engine.ts";
import { FakeCoordinator } from "../support/fake-coordinator.ts";
import { waitFor } from "../support/wait.ts";

const agents: Agent[] = [];
afterEach(async () => {
  await Promise.all(agents.splice(0).map((a) => a.stop()));
});

function agentFor(fake: FakeCoordinator, engine: Engine): Agent {
  const agent = startAgent({
    url: fake.connectUrl,
    token: "device-token",
    engine,
    maxConcurrency: 4,
    backoff: { initialMs: 10, maxMs: 80 },
  });
  agents.push(agent);
  return agent;
}

const inference = (requestId: string, request: Record<string, unknown>): Inference => ({
  type: "inference",
  request_id: requestId,
  attempt: 0,
  model: "org/echo",
  first_content_deadline_ms: 30_000,
  request: { messages: [{ role: "user", content: "x" }], max_tokens: 100, ...request } as Inference["request"],
});

/** An engine that yields the given events in one turn (no await between them), then done. */
function scripted(events: readonly EngineEvent[]): Engine {
  return {
    name: "scripted",
    models: () => [{ build_id: "org/echo" }],
    warmModels: () => ["org/echo"],
    async *generate() {
      yield* events;
      yield { type: "done", finishReason: "tool_calls", usage: { prompt_tokens: 1, completion_tokens: events.length } };
    },
  };
}

async function answer(fake: FakeCoordinator, agent: Agent, request: Record<string, unknown>) {
  await waitFor(() => agent.state().connected, "welcome");
  fake.send(inference("req_1", request));
  await waitFor(() => fake.framesFor("req_1").some((f) => f.type === "complete" || f.type === "error"), "the attempt's end");
  return fake.framesFor("req_1");
}

describe("the agent's tool_call frames", () => {
  test("echo tool mode: tool_call frames with seq 0, 1, 2, ... and complete.seq counting them; fragments join into the arguments", async () => {
    await using fake = new FakeCoordinator();
    const agent = agentFor(fake, createEchoEngine({ models: ["org/echo"] }));
    const tools = [
      {
        type: "function",
        function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } }, required: ["q"] } },
      },
    ];
    const frames = await answer(fake, agent, { messages: [{ role: "user", content: "lookup the words" }], tools });
    const calls = frames.filter((f) => f.type === "tool_call");
    expect(frames[0]).toEqual({ type: "accepted", request_id: "req_1", attempt: 0 });
    expect(calls.map((f) => f.seq)).toEqual(calls.map((_, i) => i));
    expect(calls.length).toBeGreaterThan(1);
    expect(calls.map((f) => f.tool_call.arguments ?? "").join("")).toBe('{"q":"lookup the words"}');
    expect(calls[0]?.tool_call).toEqual({ index: 0, id: expect.stringMatching(/^call_0_/), name: "lookup", arguments: expect.any(String) });
    expect(frames.at(-1)).toEqual({
      type: "complete",
      request_id: "req_1",
      attempt: 0,
      seq: calls.length,
      finish_reason: "tool_calls",
      usage: { prompt_tokens: 7, completion_tokens: calls.length },
    });
  });

  test("text and tool calls of one turn: text first, then a call's argument fragments merged into one frame, one seq", async () => {
    await using fake = new FakeCoordinator();
    const call = (c: ToolCallDelta): EngineEvent => ({ type: "tool_call", call: c });
    const agent = agentFor(
      fake,
      scripted([
        { type: "delta", delta: { content: "Let me " } },
        { type: "delta", delta: { content: "look." } },
        call({ index: 0, id: "a", name: "f", arguments: "{" }),
        call({ index: 0, arguments: '"k":' }),
        call({ index: 0, arguments: "1}" }),
        call({ index: 1, id: "b", name: "g" }),
        call({ index: 1, arguments: "" }),
      ]),
    );
    const frames = await answer(fake, agent, {});
    expect(
      frames.slice(1).map((f) => (f.type === "chunk" ? [f.seq, f.delta] : f.type === "tool_call" ? [f.seq, f.tool_call] : [f.type])),
    ).toEqual([
      [0, { content: "Let me look." }],
      [1, { index: 0, id: "a", name: "f", arguments: '{"k":1}' }],
      [2, { index: 1, id: "b", name: "g" }],
      ["complete"],
    ]);
    expect(frames.at(-1)).toMatchObject({ type: "complete", seq: 3 });
  });

  test("arguments longer than a frame's text budget are split, id and name on the first piece only", async () => {
    await using fake = new FakeCoordinator();
    const long = "x".repeat(MAX_CHUNK_CHARS + 10);
    const agent = agentFor(fake, scripted([{ type: "tool_call", call: { index: 0, id: "a", name: "f", arguments: long } }]));
    const calls = (await answer(fake, agent, {})).filter((f) => f.type === "tool_call").map((f) => f.tool_call);
    expect(calls).toEqual([
      { index: 0, id: "a", name: "f", arguments: "x".repeat(MAX_CHUNK_CHARS) },
      { index: 0, arguments: "x".repeat(10) },
    ]);
  });

  test.each<[string, ToolCallDelta[]]>([
    ["a continuation first", [{ index: 0, arguments: "{}" }]],
    ["index 1 first", [{ index: 1, id: "a", name: "f" }]],
    [
      "going back to an earlier call",
      [
        { index: 0, id: "a", name: "f" },
        { index: 1, id: "b", name: "g" },
        { index: 0, arguments: "{}" },
      ],
    ],
  ])("an engine breaking the order (%s) fails the attempt with engine_error", async (_, calls) => {
    await using fake = new FakeCoordinator();
    const agent = agentFor(fake, scripted(calls.map((call) => ({ type: "tool_call", call }))));
    expect((await answer(fake, agent, {})).at(-1)).toEqual({
      type: "error",
      request_id: "req_1",
      attempt: 0,
      code: "engine_error",
      message: "engine produced tool calls out of order",
    });
  });
});
