/**
 * A deterministic OpenAI-compatible upstream for the overhead benchmark (bench/overhead.ts): the same
 * server is called directly, through Umbra (the provider's `openai` engine) and through Portkey.
 *
 * `POST /v1/chat/completions`, whatever the prompt: an answer of MOCK_WORDS (16) fixed words.
 * - `stream` false: one `chat.completion` JSON with `usage`.
 * - `stream` true: `text/event-stream`, one `chat.completion.chunk` per word (the first also carries
 *   `role`), then the finish chunk (`delta: {}`, `finish_reason: "stop"`), then, when
 *   `stream_options.include_usage` is true, a usage chunk (`choices: []`, `usage`), then `data: [DONE]`.
 *   Each event is enqueued on its own, as a runtime emitting tokens would, but without delay.
 * Usage: prompt_tokens = the number of whitespace-separated words in the messages' text (deterministic,
 * no tokenizer), completion_tokens = MOCK_WORDS. `model` echoes the request's.
 * Anything else: 404. A body that is not a JSON object with a `messages` array: 400.
 * The answer bytes are built once per model name and reused, so the mock's own cost per request is a
 * JSON parse of the request and a copy: it is the same server for every side, not the thing measured.
 *
 * Usage: bun bench/mock-upstream.ts  (prints {"url": "http://127.0.0.1:PORT"} once listening; the API is under /v1)
 * Environment: MOCK_WORDS (16); MOCK_EVENT_DELAY_MS (0): with a delay, the stream's events leave one at a
 * time that far apart, as from a runtime decoding one token after another (each its own read downstream).
 */

const WORDS = Number(process.env.MOCK_WORDS ?? 16);
const EVENT_DELAY_MS = Number(process.env.MOCK_EVENT_DELAY_MS ?? 0);
/** The answer: "alpha0 alpha1 ...", one streamed chunk per word (a space before every word but the first). */
const pieces = Array.from({ length: WORDS }, (_, i) => `${i === 0 ? "" : " "}alpha${i}`);
const MOCK_ANSWER = pieces.join("");

const ID = "chatcmpl-mock";
const CREATED = 1_800_000_000;
const encoder = new TextEncoder();

interface Answer {
  readonly json: (promptTokens: number) => string;
  /** Every stream event, pre-encoded; the usage chunk is built per request (it depends on the prompt). */
  readonly events: readonly Uint8Array[];
  readonly head: string;
}

const answers = new Map<string, Answer>();

function answerFor(model: string): Answer {
  const cached = answers.get(model);
  if (cached) return cached;
  const head = `{"id":"${ID}","object":"chat.completion.chunk","created":${CREATED},"model":${JSON.stringify(model)},`;
  const events = pieces.map((piece, i) =>
    encoder.encode(
      `data: ${head}"choices":[{"index":0,"delta":${JSON.stringify(i === 0 ? { role: "assistant", content: piece } : { content: piece })},"finish_reason":null}]}\n\n`,
    ),
  );
  events.push(encoder.encode(`data: ${head}"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`));
  const message = JSON.stringify({ role: "assistant", content: MOCK_ANSWER });
  const jsonHead = `{"id":"${ID}","object":"chat.completion","created":${CREATED},"model":${JSON.stringify(model)},"choices":[{"index":0,"message":${message},"finish_reason":"stop"}],`;
  const answer: Answer = { json: (p) => `${jsonHead}"usage":${usage(p)}}`, events, head };
  if (answers.size < 64) answers.set(model, answer);
  return answer;
}

const usage = (prompt: number) => `{"prompt_tokens":${prompt},"completion_tokens":${WORDS},"total_tokens":${prompt + WORDS}}`;
const DONE = encoder.encode("data: [DONE]\n\n");

function promptWords(messages: unknown[]): number {
  let n = 0;
  for (const m of messages) {
    const content = (m as { content?: unknown }).content;
    if (typeof content === "string") n += content.split(/\s+/).filter((w) => w.length > 0).length;
  }
  return n;
}

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: Number(process.env.MOCK_PORT ?? 0),
  idleTimeout: 0,
  async fetch(request) {
    const path = new URL(request.url).pathname;
    if (request.method !== "POST" || path !== "/v1/chat/completions") return new Response("not found", { status: 404 });
    let body: { model?: unknown; messages?: unknown; stream?: unknown; stream_options?: { include_usage?: unknown } };
    try {
      body = (await request.json()) as typeof body;
    } catch {
      return Response.json({ error: { message: "invalid JSON", type: "invalid_request_error" } }, { status: 400 });
    }
    if (typeof body !== "object" || body === null || !Array.isArray(body.messages)) {
      return Response.json({ error: { message: "messages is required", type: "invalid_request_error" } }, { status: 400 });
    }
    const answer = answerFor(typeof body.model === "string" ? body.model : "mock");
    const prompt = promptWords(body.messages);
    if (body.stream !== true) {
      return new Response(answer.json(prompt), { headers: { "content-type": "application/json" } });
    }
    const withUsage = body.stream_options?.include_usage === true;
    const tail = [...(withUsage ? [encoder.encode(`data: ${answer.head}"choices":[],"usage":${usage(prompt)}}\n\n`)] : []), DONE];
    const stream = new ReadableStream<Uint8Array>({
      async start(controller) {
        try {
          for (const event of answer.events) {
            controller.enqueue(event);
            if (EVENT_DELAY_MS > 0) await Bun.sleep(EVENT_DELAY_MS);
          }
          for (const event of tail) controller.enqueue(event);
          controller.close();
        } catch {
          // the client went away while the events were paced
        }
      },
    });
    return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } });
  },
});
process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${server.port}` })}\n`);
