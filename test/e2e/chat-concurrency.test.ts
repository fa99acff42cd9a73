/**
 * 1,000 concurrent streamed chat requests over three fake providers. Every request is in flight at
 * once: the providers accept and hold each attempt until all 1,000 were dispatched, then the test sends
 * the answers word by word, round-robin over every attempt, so chunks of different requests interleave
 * on each provider socket as much as possible. Checks: each answer is its own request's content (no
 * cross-talk), every stream is 200 and ends with exactly one [DONE], the least-loaded ordering spread
 * the requests evenly over the three providers, and every slot was released.
 */
import { expect, test } from "bun:test";
import { messageText } from "../../src/protocol/chat-messages.ts";
import { encode, type Inference } from "../../src/protocol/frames.ts";
import { connectFakeProvider, type FakeProvider } from "../support/fake-provider.ts";
import { seedAccount, seedCatalog, testApp } from "../support/harness.ts";
import { chatBody, parseSse, providerToken, rawHttp, startServer } from "../support/server.ts";

const BUILD = "org/base-build-4bit";
const REQUESTS = 1_000;

test("1,000 concurrent streams over 3 providers: no cross-talk, one [DONE] each, evenly spread", async () => {
  await using t = await testApp({ env: { UMBRA_LOG_LEVEL: "warn" } });
  await seedCatalog(t);
  const { accountId, apiKey } = await seedAccount(t);
  const token = await providerToken(t, accountId);
  await using server = startServer(t);

  let dispatched = 0;
  let allDispatched: () => void = () => {};
  const barrier = new Promise<void>((resolve) => {
    allDispatched = resolve;
  });
  const providers: FakeProvider[] = [];
  for (let i = 0; i < 3; i++) {
    const behave = () => {
      if (++dispatched === REQUESTS) allDispatched();
      return [{ do: "accept" } as const];
    };
    providers.push(await connectFakeProvider({ url: server.url, token, models: [BUILD], maxConcurrency: 400, heartbeat: false, behave }));
  }
  await using _providers = {
    async [Symbol.asyncDispose]() {
      for (const p of providers) await p[Symbol.asyncDispose]();
    },
  };

  const contents = Array.from({ length: REQUESTS }, (_, i) => `req-${i} alpha-${i} beta-${(i * 7919) % 1000} omega-${i}`);
  const pending = contents.map((content) =>
    rawHttp(
      server.url,
      "POST",
      "/v1/chat/completions",
      { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      JSON.stringify(chatBody(content, { stream: true })),
    ),
  );

  await barrier;
  expect(t.app.fleet.list().reduce((sum, s) => sum + s.active, 0)).toBe(REQUESTS);
  const perProvider = providers.map((p) => p.received.filter((f): f is Inference => f.type === "inference"));
  // Least loaded first: with nothing finished yet the three loads never differ by more than one.
  const counts = perProvider.map((list) => list.length);
  expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
  expect(perProvider.flat()).toHaveLength(REQUESTS);

  // Answer word by word, round-robin over every attempt on every provider.
  const words = perProvider.map((list) =>
    list.map((inf) => messageText(inf.request.messages[0] ?? { role: "user", content: "" }).split(" ")),
  );
  const longest = Math.max(...words.flat().map((w) => w.length));
  for (let w = 0; w < longest; w++) {
    providers.forEach((p, pi) => {
      perProvider[pi]?.forEach((inf, ii) => {
        const mine = words[pi]?.[ii] ?? [];
        if (w >= mine.length) return;
        const text = w === mine.length - 1 ? (mine[w] ?? "") : `${mine[w]} `;
        p.send(encode({ type: "chunk", request_id: inf.request_id, attempt: inf.attempt, seq: w, delta: { content: text } }));
      });
    });
  }
  providers.forEach((p, pi) => {
    perProvider[pi]?.forEach((inf, ii) => {
      const n = words[pi]?.[ii]?.length ?? 0;
      p.send(
        encode({
          type: "complete",
          request_id: inf.request_id,
          attempt: inf.attempt,
          seq: n,
          finish_reason: "stop",
          usage: { prompt_tokens: 3, completion_tokens: n },
        }),
      );
    });
  });

  const responses = await Promise.all(pending);
  const outcomes = responses.map((r, i) => {
    const { data } = parseSse(r.body);
    let content = "";
    for (const d of data) {
      if (d === "[DONE]") continue;
      content += (JSON.parse(d) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta?.content ?? "";
    }
    return {
      i,
      status: r.status,
      contentType: r.headers.get("content-type"),
      content,
      done: data.filter((d) => d === "[DONE]").length,
      last: data.at(-1),
    };
  });
  const wrong = outcomes.filter(
    (o) => o.status !== 200 || o.contentType !== "text/event-stream" || o.content !== contents[o.i] || o.done !== 1 || o.last !== "[DONE]",
  );
  expect(wrong.slice(0, 3)).toEqual([]);
  expect(outcomes).toHaveLength(REQUESTS);
  // Each slot was freed when its complete frame arrived, before its [DONE] was written.
  expect(t.app.fleet.list().map((s) => s.active)).toEqual([0, 0, 0]);
}, 60_000);
