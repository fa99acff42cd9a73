/**
 * The "direct" side of the chat-path benchmark: the same echo engine the provider runs, served as an
 * OpenAI-compatible /v1/chat/completions (JSON and SSE) with no coordinator in between.
 * Usage: bun bench/echo-server.ts  (prints {"url": ...} on stdout once listening)
 */
import type { ChatMessage } from "../src/protocol/chat-messages.ts";
import { createEchoEngine } from "../src/provider/engines/echo.ts";

const engine = createEchoEngine({ models: ["bench/echo"] });
const encoder = new TextEncoder();

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  idleTimeout: 0,
  async fetch(request) {
    const body = (await request.json()) as { messages: ChatMessage[]; max_tokens?: number; stream?: boolean };
    const events = engine.generate(
      { model: "bench/echo", body: { messages: body.messages, max_tokens: body.max_tokens ?? 4096 } },
      request.signal,
    );
    const id = "chatcmpl-direct";
    const created = Math.floor(Date.now() / 1000);
    if (!body.stream) {
      let content = "";
      let finish = "stop";
      let usage = { prompt_tokens: 0, completion_tokens: 0 };
      for await (const e of events) {
        if (e.type === "delta") content += e.delta.content ?? "";
        else if (e.type === "done") {
          finish = e.finishReason;
          usage = e.usage;
        }
      }
      return Response.json({
        id,
        object: "chat.completion",
        created,
        model: "bench/echo",
        choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: finish }],
        usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
      });
    }
    const head = `{"id":"${id}","object":"chat.completion.chunk","created":${created},"model":"bench/echo",`;
    const stream = new ReadableStream<Uint8Array>({
      async start(controller) {
        for await (const e of events) {
          if (e.type === "delta") {
            controller.enqueue(
              encoder.encode(`data: ${head}"choices":[{"index":0,"delta":${JSON.stringify(e.delta)},"finish_reason":null}]}\n\n`),
            );
          } else if (e.type === "done") {
            controller.enqueue(encoder.encode(`data: ${head}"choices":[],"usage":${JSON.stringify(e.usage)}}\n\n`));
            controller.enqueue(encoder.encode(`data: ${head}"choices":[{"index":0,"delta":{},"finish_reason":"${e.finishReason}"}]}\n\n`));
          }
        }
        controller.enqueue(encoder.encode("data: [DONE]\n\n"));
        controller.close();
      },
    });
    return new Response(stream, { headers: { "content-type": "text/event-stream" } });
  },
});
process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${server.port}` })}\n`);
