/**
 * What users run, end to end: the official `openai` npm client and the `ai` SDK's OpenAI-compatible
 * provider, streaming and not, against a coordinator on a real socket with real `umbra-provider start`
 * processes (echo engine). Also the two failures only a real process shows: a provider killed before
 * first content (the answer arrives from another provider) and killed mid-stream (one in-band error
 * event, no [DONE]).
 */
import { describe, expect, test } from "bun:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText } from "ai";
import OpenAI from "openai";
import { chatEnv } from "../support/chat-env.ts";
import { parseSse, readSse } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const _BUILD = "org/base-build-4bit";
const MODEL = "org/model";

describe("official clients against real provider processes", () => {
  test("openai: non-streaming and streaming; the model echoes the alias", async () => {
    await using ctx = await chatEnv();
    await ctx.providerProcess();
    const client = new OpenAI({ baseURL: `${ctx.server.url}/v1`, apiKey: ctx.apiKey, maxRetries: 0 });

    const answer = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "alpha beta gamma" }] });
    expect([answer.model, answer.choices[0]?.message.content, answer.choices[0]?.finish_reason, answer.usage?.completion_tokens]).toEqual([
      MODEL,
      "alpha beta gamma",
      "stop",
      3,
    ]);

    const stream = await client.chat.completions.create({
      model: MODEL,
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 2,
      messages: [{ role: "user", content: "one two three four" }],
    });
    let text = "";
    let finish: string | null | undefined;
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
      expect(chunk.model).toBe(MODEL);
    }
    expect({ text, finish, completion: usage?.completion_tokens }).toEqual({ text: "one two ", finish: "length", completion: 2 });
  });

  test("ai SDK (OpenAI-compatible provider): generateText and streamText", async () => {
    await using ctx = await chatEnv();
    await ctx.providerProcess();
    const umbra = createOpenAICompatible({ name: "umbra", baseURL: `${ctx.server.url}/v1`, apiKey: ctx.apiKey, includeUsage: true });

    const generated = await generateText({ model: umbra(MODEL), prompt: "delta epsilon zeta", maxRetries: 0 });
    expect([generated.text, generated.finishReason, generated.usage.outputTokens]).toEqual(["delta epsilon zeta", "stop", 3]);

    const streamed = streamText({ model: umbra(MODEL), prompt: "eta theta iota kappa", maxRetries: 0 });
    let text = "";
    for await (const part of streamed.textStream) text += part;
    expect([text, await streamed.finishReason, (await streamed.usage).outputTokens]).toEqual(["eta theta iota kappa", "stop", 4]);
  });
});

describe("provider processes killed", () => {
  test("killed before first content: the answer arrives from another provider", async () => {
    await using ctx = await chatEnv();
    const slow = await ctx.providerProcess(["--echo-first-token-delay-ms", "60000"]);
    const pending = fetch(`${ctx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${ctx.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: "user", content: "saved by failover" }] }),
    });
    // The slow provider holds the request; a second provider joins; then the first dies.
    await waitFor(() => ctx.t.app.fleet.list().some((s) => s.active === 1), "the slow provider holds the request");
    await ctx.providerProcess();
    slow.proc.kill("SIGKILL");
    const response = await pending;
    expect(response.status).toBe(200);
    const events = (await readSse(response)).data;
    const text = events
      .filter((d) => d !== "[DONE]")
      .map((d) => (JSON.parse(d) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta?.content ?? "")
      .join("");
    expect([text, events.at(-1)]).toEqual(["saved by failover", "[DONE]"]);
  });

  test("killed mid-stream: the chunks so far, then one in-band error event and no [DONE]", async () => {
    await using ctx = await chatEnv();
    const provider = await ctx.providerProcess(["--echo-tokens-per-second", "20"]);
    const words = Array.from({ length: 200 }, (_, i) => `w${i}`).join(" ");
    const response = await fetch(`${ctx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${ctx.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: "user", content: words }] }),
    });
    expect([response.status, response.headers.get("content-type")]).toEqual([200, "text/event-stream"]);
    const reader = response.body?.getReader();
    if (!reader) throw new Error("no body");
    const decoder = new TextDecoder();
    let text = decoder.decode((await reader.read()).value);
    provider.proc.kill("SIGKILL");
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    const { data } = parseSse(text);
    const errors = data.filter((d) => d.startsWith('{"error"'));
    expect(errors).toHaveLength(1);
    expect(JSON.parse(errors[0] as string)).toEqual({
      error: { message: expect.any(String), type: "provider_error", code: "provider_error" },
    });
    expect(data.at(-1)).toBe(errors[0] as string);
    expect(data).not.toContain("[DONE]");
    expect(data.length).toBeGreaterThan(1);
  });
});
