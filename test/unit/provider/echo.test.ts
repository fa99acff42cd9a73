import { describe, expect, test } from "bun:test";
import type { EngineRequestBody } from "../../../src/protocol/frames.ts";
import { createEchoEngine } from "../../../src/provider/engines/echo.ts";
import { AbortableDelays, type Engine, EngineError, type EngineEvent } from "../../../src/provider/engines/engine.ts";

async function collect(
  engine: Engine,
  body: EngineRequestBody,
  signal = new AbortController().signal,
  model = "org/echo",
): Promise<EngineEvent[]> {
  const events: EngineEvent[] = [];
  for await (const e of engine.generate({ model, body }, signal)) events.push(e);
  return events;
}

const user = (content: string, max_tokens = 100): EngineRequestBody => ({ messages: [{ role: "user", content }], max_tokens });

describe("echo engine", () => {
  const engine = createEchoEngine({ models: ["org/echo", "org/echo-2"] });

  test("models and warm models", () => {
    expect([engine.name, engine.models(), engine.warmModels()]).toEqual([
      "echo",
      [{ build_id: "org/echo" }, { build_id: "org/echo-2" }],
      ["org/echo", "org/echo-2"],
    ]);
  });

  test("echoes the last message word by word, with usage", async () => {
    const body: EngineRequestBody = {
      messages: [
        { role: "system", content: "be  brief" },
        { role: "user", content: "  one two\tthree\n" },
      ],
      max_tokens: 10,
    };
    expect(await collect(engine, body)).toEqual([
      { type: "delta", delta: { content: "one " } },
      { type: "delta", delta: { content: "two " } },
      { type: "delta", delta: { content: "three" } },
      { type: "done", finishReason: "stop", usage: { prompt_tokens: 2 + 4 + 3 + 4, completion_tokens: 3 } },
    ]);
  });

  test("max_tokens cuts the reply: finish_reason length, a prefix of the full reply", async () => {
    expect(await collect(engine, user("a b c d e", 2))).toEqual([
      { type: "delta", delta: { content: "a " } },
      { type: "delta", delta: { content: "b " } },
      { type: "done", finishReason: "length", usage: { prompt_tokens: 9, completion_tokens: 2 } },
    ]);
  });

  test.each([
    ["exactly the budget", "x y", 2, "stop", 2],
    ["an empty message", "   ", 5, "stop", 0],
  ])("%s", async (_, content, max, reason, completion) => {
    const events = await collect(engine, user(content, max));
    expect(events.at(-1)).toEqual({
      type: "done",
      finishReason: reason,
      usage: { prompt_tokens: content.trim() === "" ? 4 : 6, completion_tokens: completion },
    });
  });

  test("identical input gives identical output", async () => {
    const body = user("the quick brown fox jumps over the lazy dog", 5);
    expect(await collect(engine, body)).toEqual(await collect(engine, body));
  });

  test("a model it does not serve is model_not_loaded", async () => {
    const error = await collect(engine, user("x"), undefined, "org/other").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineError);
    expect((error as EngineError).code).toBe("model_not_loaded");
  });

  test("an abort during the first-token delay ends it at once", async () => {
    const slow = createEchoEngine({ models: ["org/echo"], firstTokenDelayMs: 3_600_000 });
    const controller = new AbortController();
    const pending = collect(slow, user("never sent"), controller.signal).catch((e: unknown) => e);
    controller.abort();
    const error = await pending;
    expect(error).toBeInstanceOf(EngineError);
    expect((error as EngineError).code).toBe("cancelled");
  });

  test("an abort between rate-limited tokens ends it at once", async () => {
    const slow = createEchoEngine({ models: ["org/echo"], tokensPerSecond: 1 / 3600 });
    const controller = new AbortController();
    const events: EngineEvent[] = [];
    let error: unknown;
    try {
      for await (const e of slow.generate({ model: "org/echo", body: user("first second third") }, controller.signal)) {
        events.push(e);
        controller.abort();
      }
    } catch (e) {
      error = e;
    }
    expect(events).toEqual([{ type: "delta", delta: { content: "first " } }]);
    expect((error as EngineError).code).toBe("cancelled");
  });

  test("the rate spaces tokens out", async () => {
    const paced = createEchoEngine({ models: ["org/echo"], tokensPerSecond: 50 });
    const started = performance.now();
    await collect(paced, user("a b c d e f"));
    // five gaps of 20 ms after the first token
    expect(performance.now() - started).toBeGreaterThanOrEqual(95);
  });
});

describe("AbortableDelays (an engine call's pacing)", () => {
  test("delays one after another resolve; an abort mid-delay rejects at once; later waits reject", async () => {
    const controller = new AbortController();
    using delays = new AbortableDelays(controller.signal);
    await delays.wait(1);
    await delays.wait(0);
    const started = performance.now();
    const pending = delays.wait(60_000);
    setTimeout(() => controller.abort(), 5);
    const error = await pending.catch((e: unknown) => e);
    expect(performance.now() - started).toBeLessThan(5_000);
    expect((error as EngineError).code).toBe("cancelled");
    expect(((await delays.wait(1).catch((e: unknown) => e)) as EngineError).code).toBe("cancelled");
  });

  test("disposed, it lets go of the signal: a later abort touches no delay", async () => {
    const controller = new AbortController();
    let rejected = false;
    {
      using delays = new AbortableDelays(controller.signal);
      await delays.wait(1);
      // A delay left pending at disposal never settles (its timer is cleared), and an abort does not reject it.
      void delays.wait(60_000).catch(() => {
        rejected = true;
      });
    }
    controller.abort();
    await Bun.sleep(5);
    expect(rejected).toBe(false);
  });
});
