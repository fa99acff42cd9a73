/**
 * Reliability, consumer faults (issue 7 point 2 b): a consumer that goes away at every phase of a chat
 * request (before its body is complete, while queued for a provider slot, after dispatch before first
 * content, mid-stream, before its JSON answer is written), one that never reads its stream while the
 * provider floods, and thousands of idle or half-sent connections. For each: the provider's work is
 * cancelled, what was generated is settled (nothing before content), no reservation is left, memory
 * stays bounded (coordinator RSS from /proc), and the coordinator keeps serving.
 *
 * One coordinator process for the file (every case its own account, build and providers), and
 * in-process servers with a 2 s idle timeout for what the idle timeout does to stalled connections and to
 * connections kept (idle, or unread) after their answer, and what the body deadline does to bodies
 * trickled under it. Those last three and the thousands of idle connections (which touch only the
 * coordinator process, and only their own tenant there) run at the same time: they mostly wait.
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { listen } from "../../src/coordinator/server.ts";
import type { Inference } from "../../src/protocol/frames.ts";
import { connectFakeProvider, echo, type FakeProvider, type Step } from "../support/fake-provider.ts";
import { ADMIN_TOKEN, seedAccount, seedCatalog, testApp } from "../support/harness.ts";
import { chatBody, postChat, providerToken, sseReader } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";
import { reliabilityCase } from "./report.ts";
import {
  type Coordinator,
  chat,
  chatRequestBytes,
  connectFlooder,
  coordinatorProcess,
  estimatedTokens,
  fakes,
  isCancel,
  isInference,
  messages,
  parseHttp,
  type RawConnection,
  rawConnection,
  servesNormally,
  settledExactly,
  streamed,
  usageRows,
} from "./support.ts";

const GROUP = "consumer faults";
const MiB = 1024 * 1024;

let c: Coordinator;
let builds = 0;

beforeAll(async () => {
  c = await coordinatorProcess();
});

afterAll(async () => {
  await c?.[Symbol.asyncDispose]();
});

const tenant = () => c.seed(`org/consumer-fault-${++builds}`);

/** A provider behaviour: attempts whose message is `content` accept, then follow `after`; others echo. */
function holding(content: string, after: (inf: Inference) => readonly Step[]) {
  return (inf: Inference): readonly Step[] =>
    inf.request.messages.at(-1)?.content === content ? [{ do: "accept" }, ...after(inf)] : echo(inf);
}

/** The head of a POST sent by hand over a raw connection; `framing` is its length or chunked header. */
function postHead(url: string, path: string, auth: string, framing: string): string {
  const { host } = new URL(url);
  return `POST ${path} HTTP/1.1\r\nhost: ${host}\r\nauthorization: Bearer ${auth}\r\ncontent-type: application/json\r\n${framing}\r\n\r\n`;
}

/** An in-process coordinator (seeded catalog and account) listening with a 2 s idle timeout. */
async function shortIdleCoordinator(env: Record<string, string>) {
  const app = await testApp({ env });
  await seedCatalog(app);
  const { accountId, apiKey } = await seedAccount(app);
  const server = listen(app.app, "127.0.0.1", 0, { idleTimeoutSeconds: 2 });
  return {
    app,
    accountId,
    apiKey,
    server,
    async [Symbol.asyncDispose]() {
      app.app.close();
      await server.stop();
      await app[Symbol.asyncDispose]();
    },
  };
}

reliabilityCase(
  GROUP,
  "disconnects before the body is sent completely",
  async (r) => {
    r.tried("50 consumers send the head and half the body of a chat request (content-length), then close the connection");
    const t = await tenant();
    await using f = fakes(c.url);
    const p = await f.connect(t);
    const request = chatRequestBytes(c.url, t, { messages: messages("never complete") });
    await Promise.all(
      Array.from({ length: 50 }, async () => {
        const conn = await rawConnection(c.url);
        conn.write(request.head);
        conn.write(request.body.subarray(0, request.body.byteLength >> 1));
        conn.close();
        await conn.closed;
      }),
    );
    await servesNormally(c.url, t);
    expect(p.received.filter(isInference)).toHaveLength(1);
    const rows = await usageRows(c, t.accountId, 1);
    expect(rows.map((row) => row.outcome)).toEqual(["completed"]);
    await settledExactly(c, t);
    expect(c.logTail().filter((line) => line.includes('"level":"error"'))).toEqual([]);
    r.held("nothing reached the provider, nothing was reserved or recorded, nothing logged as an error; the next request is served");
  },
  30_000,
);

reliabilityCase(
  GROUP,
  "disconnects while queued for a provider",
  async (r) => {
    r.tried("a provider with one slot is busy; a second request waits in the admission queue and its consumer leaves");
    const t = await tenant();
    await using f = fakes(c.url);
    let open: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const p = await f.connect(
      t,
      holding("hold", () => [{ do: "until", ready: gate }, { do: "chunk", delta: { content: "held" } }, { do: "complete" }]),
      {
        maxConcurrency: 1,
      },
    );
    const held = chat(c.url, t, { messages: messages("hold") });
    await p.waitFor(isInference);
    const oneHold = (await c.money(t.accountId)).reserved;
    const leaving = new AbortController();
    const queued = chat(c.url, t, { messages: messages("queued"), stream: true }, leaving.signal).catch((e: unknown) => e);
    await waitFor(async () => (await c.money(t.accountId)).reserved > oneHold, "the queued request's reservation");
    leaving.abort();
    expect(await queued).toBeInstanceOf(Error);
    await waitFor(async () => (await c.money(t.accountId)).reserved === oneHold, "the queued request's reservation released");
    r.held("the queued request's reservation is released while the first request still runs");
    open();
    expect((await held).status).toBe(200);
    await servesNormally(c.url, t);
    expect(p.received.filter(isInference).map((inf) => inf.request.messages.at(-1)?.content === "queued")).toEqual([false, false]);
    r.held("the request that left never reached the provider; the freed slot served the next request");
    const rows = await usageRows(c, t.accountId, 3);
    expect(rows.map((row) => [row.outcome, row.cost_micro_usd > 0])).toEqual([
      ["completed", true],
      ["failed", false],
      ["completed", true],
    ]);
    await settledExactly(c, t);
    r.held("recorded as failed at no cost; no reservation left; books balance");
  },
  30_000,
);

reliabilityCase(
  GROUP,
  "disconnects after dispatch, before first content",
  async (r) => {
    r.tried("a provider accepts and stays silent; the consumer (stream and JSON) leaves before any content");
    const t = await tenant();
    await using f = fakes(c.url);
    const p = await f.connect(
      t,
      holding("silent", () => [{ do: "hang" }]),
    );
    for (const stream of [true, false]) {
      const leaving = new AbortController();
      const pending = chat(c.url, t, { messages: messages("silent"), stream }, leaving.signal).catch((e: unknown) => e);
      await waitFor(() => p.received.filter(isInference).length === (stream ? 1 : 2), "the dispatch");
      leaving.abort();
      expect(await pending).toBeInstanceOf(Error);
    }
    await waitFor(() => p.received.filter(isCancel("client_gone")).length === 2, "two cancels");
    r.held("the provider is told to cancel each attempt (client_gone)");
    const rows = await usageRows(c, t.accountId, 2);
    expect(rows.map((row) => [row.outcome, row.cost_micro_usd])).toEqual([
      ["failed", 0],
      ["failed", 0],
    ]);
    await settledExactly(c, t);
    await servesNormally(c.url, t, true);
    r.held("nothing generated, nothing charged; no reservation left; books balance; the same provider serves the next request");
  },
  30_000,
);

reliabilityCase(
  GROUP,
  "disconnects mid-stream",
  async (r) => {
    r.tried("a consumer reads the first event of a stream and leaves; the provider keeps sending afterwards");
    const t = await tenant();
    await using f = fakes(c.url);
    let provider: FakeProvider | undefined;
    provider = await f.connect(
      t,
      holding("long", () => [
        { do: "chunk", delta: { content: "part one " } },
        { do: "until", ready: (provider as FakeProvider).waitFor(isCancel("client_gone")) },
        { do: "chunk", delta: { content: "late part" } },
        { do: "complete", usage: { prompt_tokens: 3, completion_tokens: 50 } },
      ]),
    );
    const leaving = new AbortController();
    const response = await chat(c.url, t, { messages: messages("long"), stream: true }, leaving.signal);
    const reader = sseReader(response);
    expect(streamed([(await reader.next()) ?? ""]).content).toBe("part one ");
    leaving.abort();
    await provider.waitFor(isCancel("client_gone"));
    r.held("the provider is told to cancel (client_gone)");
    const [row] = await usageRows(c, t.accountId, 1);
    expect([row?.outcome, row?.completion_tokens]).toEqual(["cancelled", estimatedTokens("part one ".length)]);
    expect(row?.cost_micro_usd).toBeGreaterThan(0);
    await settledExactly(c, t);
    r.held("charged for the relayed text (not the provider's later report); no reservation left; books balance");
    await servesNormally(c.url, t, true);
    r.held("the provider's late frames were ignored: the same session serves the next request");
  },
  30_000,
);

reliabilityCase(
  GROUP,
  "disconnects before a JSON answer is written",
  async (r) => {
    r.tried("a JSON request whose provider produced content and then stalls; the consumer leaves before the answer is complete");
    const t = await tenant();
    await using f = fakes(c.url);
    const p = await f.connect(
      t,
      holding("generating", () => [{ do: "chunk", delta: { content: "generated text" } }, { do: "hang" }]),
    );
    const leaving = new AbortController();
    const pending = chat(c.url, t, { messages: messages("generating") }, leaving.signal).catch((e: unknown) => e);
    await p.waitFor(isInference);
    // Frames of one provider are handled in order: once a later request on it is answered, the content
    // of the first has reached the coordinator (the answer is committed).
    await servesNormally(c.url, t);
    leaving.abort();
    expect(await pending).toBeInstanceOf(Error);
    await p.waitFor(isCancel("client_gone"));
    r.held("the provider is told to cancel (client_gone)");
    const rows = await usageRows(c, t.accountId, 2);
    const left = rows.find((row) => row.outcome !== "completed");
    expect([left?.outcome, left?.completion_tokens]).toEqual(["cancelled", estimatedTokens("generated text".length)]);
    expect(left?.cost_micro_usd).toBeGreaterThan(0);
    await settledExactly(c, t);
    r.held("what was generated is charged (cancelled), once; no reservation left; books balance");
  },
  30_000,
);

reliabilityCase(
  GROUP,
  "never reads a stream while the provider floods",
  async (r) => {
    const first = 32 * MiB;
    const more = 96 * MiB;
    r.tried(
      `a consumer opens a stream and never reads a byte; its provider sends 32 KiB chunks, ${(first + more) / MiB} Mi characters in all, ignoring the cancel`,
    );
    const t = await tenant();
    await using p = await connectFlooder(c.url, t);
    await servesNormally(c.url, t, true);
    const before = c.rssKiB();
    const conn = await rawConnection(c.url, { paused: true });
    const request = chatRequestBytes(c.url, t, { messages: messages("flood"), stream: true, max_tokens: 1_000_000 });
    conn.write(request.head);
    conn.write(request.body);
    const inf = await waitFor(() => p.inferences[1], "the inference");
    let seq = 0;
    /** Floods `chars` in 8 Mi steps; returns the peak RSS seen (KiB). Stops if the provider was cut off. */
    const send = async (chars: number) => {
      let peak = 0;
      for (let sent = 0; sent < chars; ) {
        const part = await p.flood(inf, { frameChars: 32_768, maxChars: 8 * MiB, firstSeq: seq });
        if (part === 0) throw new Error("the provider connection was closed during the flood");
        sent += part;
        seq += part / 32_768;
        peak = Math.max(peak, c.rssKiB());
      }
      return peak;
    };
    const afterFirst = await send(first);
    expect(p.cancels.map((x) => x.reason)).toEqual(["client_gone"]);
    r.held("the coordinator cancelled the attempt (client_gone) within the first 32 Mi characters, and ignored the frames after it");
    const peak = await send(more);
    const [plateau, overall] = [Math.round((peak - afterFirst) / 1024), Math.round((Math.max(peak, afterFirst) - before) / 1024)];
    expect(plateau).toBeLessThan(24);
    expect(overall).toBeLessThan(64);
    r.held(
      `coordinator RSS grew by ${overall} MiB in all and by ${plateau} MiB over the last ${more / MiB} Mi characters (bounds 64 and 24 MiB: it does not grow with the volume)`,
    );
    const [, row] = await usageRows(c, t.accountId, 2);
    expect(row?.outcome).toBe("cancelled");
    await settledExactly(c, t);
    expect(conn.isClosed()).toBe(false);
    r.held("settled (cancelled, for what was relayed) and the reservation released while the consumer is still connected");
    conn.close();
    const started = performance.now();
    await servesNormally(c.url, t, true);
    expect(performance.now() - started).toBeLessThan(10_000);
    r.held("the next request is served");
  },
  40_000,
);

reliabilityCase.concurrent(
  GROUP,
  "thousands of idle connections",
  async (r) => {
    r.tried("2,000 TCP connections that send nothing, 200 with half a request head, 200 chat requests with half a body");
    const t = await tenant();
    await using f = fakes(c.url);
    await f.connect(t);
    await servesNormally(c.url, t);
    const before = c.rssKiB();
    const request = chatRequestBytes(c.url, t, { messages: messages("half sent") });
    const open = async (n: number, send: (conn: RawConnection) => void) => {
      const all: RawConnection[] = [];
      for (let i = 0; i < n; i += 100) {
        all.push(...(await Promise.all(Array.from({ length: Math.min(100, n - i) }, () => rawConnection(c.url)))));
      }
      for (const conn of all) send(conn);
      return all;
    };
    const idle = await open(2_000, () => {});
    const halfHeads = await open(200, (conn) => conn.write(request.head.slice(0, 60)));
    const halfBodies = await open(200, (conn) => {
      conn.write(request.head);
      conn.write(request.body.subarray(0, 10));
    });
    const all = [...idle, ...halfHeads, ...halfBodies];
    try {
      const started = performance.now();
      await servesNormally(c.url, t);
      await servesNormally(c.url, t, true);
      const took = performance.now() - started;
      expect(took).toBeLessThan(10_000);
      r.held(`with 2,400 stalled connections open, a JSON and a streamed request are answered (in ${Math.round(took)} ms; bound 10 s)`);
      const grownMiB = Math.round((c.rssKiB() - before) / 1024);
      expect(grownMiB).toBeLessThan(64);
      r.held(`coordinator RSS grew by ${grownMiB} MiB for 2,400 connections (bound 64 MiB, about 27 KiB each)`);
      await waitFor(() => [...idle, ...halfHeads].every((conn) => conn.isClosed()), "the server closing the idle connections", 30_000);
      r.held("the server closed every connection that never completed a request head (uWebSockets' 10 s timeout for a request head)");
      expect(halfBodies.some((conn) => conn.isClosed())).toBe(false);
      r.held(
        "chat requests with a stalled body stay open meanwhile (they fall under the 120 s idle timeout, shown with a short one below)",
      );
      const rows = await usageRows(c, t.accountId, 3);
      expect(rows).toHaveLength(3);
      await settledExactly(c, t);
      r.held("no stalled request reached billing; no reservation held");
    } finally {
      for (const conn of all) conn.close();
    }
  },
  60_000,
);

reliabilityCase.concurrent(
  GROUP,
  "what the idle timeout does",
  async (r) => {
    r.tried(
      "an in-process coordinator with a 2 s idle timeout: a chat request with half its body, another route with half its body, and a stream whose provider stays silent for longer than the timeout",
    );
    await using c = await shortIdleCoordinator({ UMBRA_FIRST_CONTENT_TIMEOUT_MS: "30000" });
    const { app, accountId, apiKey, server } = c;
    let open: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    await using p = await connectFakeProvider({
      url: server.url,
      token: await providerToken(app, accountId),
      models: ["org/base-build-4bit"],
      behave: (inf) =>
        inf.request.messages[0]?.content === "quiet" ? [{ do: "accept" }, { do: "until", ready: gate }, ...echo(inf).slice(1)] : echo(inf),
    });
    const quiet = postChat(server.url, apiKey, chatBody("quiet", { stream: true }));
    const body = JSON.stringify(chatBody("half"));
    const head = (path: string) => postHead(server.url, path, apiKey, `content-length: ${body.length}`);
    const chatConn = await rawConnection(server.url);
    chatConn.write(head("/v1/chat/completions") + body.slice(0, 20));
    const otherConn = await rawConnection(server.url);
    otherConn.write(head("/v1/provider/device/code") + body.slice(0, 20));
    await waitFor(() => chatConn.isClosed() && otherConn.isClosed(), "the stalled requests closed", 15_000);
    r.held("a stalled chat body is closed by the idle timeout like any other route's (it is exempt only once its body is in)");
    // One more idle period for the quiet stream, measured by another stalled request being closed.
    const clock = await rawConnection(server.url);
    clock.write(head("/v1/provider/device/code"));
    await waitFor(() => clock.isClosed(), "one more idle timeout", 15_000);
    expect(p.received.filter(isInference)).toHaveLength(1);
    open();
    const response = await quiet;
    expect([response.status, streamed(await sseReader(response).rest())]).toEqual([200, { content: "quiet", last: "[DONE]", done: 1 }]);
    r.held("the stream that waited longer than the idle timeout for its first content was not cut and ended with [DONE]");
  },
  30_000,
);

reliabilityCase.concurrent(
  GROUP,
  "keeps its connection after the answer",
  async (r) => {
    r.tried(
      "an in-process coordinator with a 2 s idle timeout: consumers that keep their connection open, idle, after a JSON answer, a streamed answer and an error answer, and one that never reads a stream far larger than the socket buffers",
    );
    await using c = await shortIdleCoordinator({});
    const { app, accountId, apiKey, server } = c;
    // The flooding provider answers other requests with their message; only "flood" floods. Its build
    // has no output bound (the seeded alias's would end a flood as output past the budget).
    const PLAIN = "other/plain";
    const tenant = {
      accountId,
      apiKey,
      providerToken: await providerToken(app, accountId),
      providerAccountId: accountId,
      build: PLAIN,
    };
    await using p = await connectFlooder(server.url, tenant);
    const send = (conn: RawConnection, body: Record<string, unknown>) => {
      const json = JSON.stringify(body);
      conn.write(postHead(server.url, "/v1/chat/completions", apiKey, `content-length: ${Buffer.byteLength(json)}`) + json);
    };
    const cases = [
      { label: "JSON", body: chatBody("kept open", { model: PLAIN }), status: 200, ends: '"object":"chat.completion"' },
      { label: "stream", body: chatBody("kept open", { model: PLAIN, stream: true }), status: 200, ends: "data: [DONE]\n\n" },
      { label: "error", body: chatBody("kept open", { model: "org/not-in-the-catalog" }), status: 404, ends: '"code":"model_not_found"' },
    ];
    // The kept-alive connections and the consumer that never reads run side by side: each waits for an
    // idle timeout of its own, and the two waits overlap.
    const keptAlive = async () => {
      const open = await Promise.all(
        cases.map(async (k) => {
          const conn = await rawConnection(server.url);
          send(conn, k.body);
          return conn;
        }),
      );
      await waitFor(() => open.every((conn) => parseHttp(conn.received())?.complete), "the three answers", 10_000);
      const answers = open.map((conn) => parseHttp(conn.received()));
      expect(answers.map((a) => a?.status)).toEqual(cases.map((k) => k.status));
      expect(cases.every((k, i) => answers[i]?.body.includes(k.ends))).toBe(true);
      await waitFor(() => open.every((conn) => conn.isClosed()), "the idle connections closed", 15_000);
    };
    const neverReads = async () => {
      const stalled = await rawConnection(server.url, { paused: true });
      send(stalled, chatBody("flood", { model: PLAIN, stream: true, max_tokens: 1_000_000 }));
      const inf = await waitFor(() => p.inferences.find((i) => i.request.messages.at(-1)?.content === "flood"), "the flood's inference");
      await p.flood(inf, { frameChars: 32_768, maxChars: 64 * MiB, until: () => p.cancels.length > 0 });
      expect(p.cancels.map((x) => x.reason)).toEqual(["client_gone"]);
      await waitFor(async () => (await app.app.admin.getAccount(accountId)).reserved_micro_usd === 0, "the stopped answer settled");
      expect(await stalled.serverEnd()).toBe("established");
      await waitFor(async () => (await stalled.serverEnd()) !== "established", "the server closing the stalled connection", 15_000);
      stalled.resume();
      await stalled.closed;
      const rest = parseHttp(stalled.received());
      expect([rest?.status, rest?.complete]).toEqual([200, false]);
      return stalled.received().length;
    };
    const [, unread] = await Promise.all([keptAlive(), neverReads()]);
    r.held("each got its answer whole (200 JSON, 200 stream ending with [DONE], 404 envelope) on a kept-alive connection");
    r.held("each connection was then closed by the idle timeout (the timeout lifted for the answer is restored once it ended)");
    r.held("the consumer that never reads: its answer was stopped at the backlog bound and settled, the connection still open");
    r.held("an idle timeout later the coordinator closed its end of the connection, though the consumer still had not read a byte");
    r.held(
      `reading afterwards, it gets what was already in its socket (${Math.round(unread / MiB)} MiB), then the end of a cut connection: no [DONE], an error for its client, never a hang`,
    );
  },
  60_000,
);

reliabilityCase.concurrent(
  GROUP,
  "trickles its body under the idle timeout",
  async (r) => {
    r.tried(
      "an in-process coordinator with a 2 s idle timeout and a 1 s body deadline: chat bodies (declared length, and chunked) and an admin and a device-login body sent one byte every 150 ms, never idle long enough for the idle timeout",
    );
    await using c = await shortIdleCoordinator({ UMBRA_BODY_TIMEOUT_MS: "1000" });
    const { app, accountId, apiKey, server } = c;
    // Each request with the byte it sends every 150 ms (a chunked body's bytes must stay valid chunks).
    const trickles: { conn: RawConnection; unit: string }[] = [];
    const timer = setInterval(() => {
      for (const { conn, unit } of trickles) if (!conn.isClosed()) conn.write(unit);
    }, 150);
    try {
      await using p = await connectFakeProvider({
        url: server.url,
        token: await providerToken(app, accountId),
        models: ["org/base-build-4bit"],
        behave: echo,
      });
      const head = (path: string, auth: string, framing: string) => postHead(server.url, path, auth, framing);
      const sent = [
        { what: "chat, declared length", text: `${head("/v1/chat/completions", apiKey, "content-length: 100000")}{"model":`, unit: " " },
        {
          what: "chat, chunked",
          text: `${head("/v1/chat/completions", apiKey, "transfer-encoding: chunked")}1\r\n{\r\n`,
          unit: "1\r\n \r\n",
        },
        { what: "admin", text: `${head("/admin/v1/accounts", ADMIN_TOKEN, "content-length: 100000")}{`, unit: " " },
        { what: "device login", text: `${head("/v1/provider/device/code", "-", "content-length: 4000")}{`, unit: " " },
      ];
      const started = performance.now();
      for (const { text, unit } of sent) {
        const conn = await rawConnection(server.url);
        conn.write(text);
        trickles.push({ conn, unit });
      }
      await waitFor(() => trickles.every(({ conn }) => conn.isClosed()), "every trickled connection closed", 15_000);
      const elapsed = performance.now() - started;
      for (const [i, { conn }] of trickles.entries()) {
        const answer = parseHttp(conn.received());
        expect([sent[i]?.what, answer?.status, answer?.headers.get("connection")]).toEqual([sent[i]?.what, 504, "close"]);
        expect(JSON.parse(answer?.body ?? "")).toEqual({
          error: { message: "the request body did not arrive within 1000 ms", type: "timeout", code: "timeout" },
        });
      }
      expect(elapsed).toBeLessThan(10_000);
      r.held(
        `each got 504 timeout in the spec's envelope and its connection closed (all within ${Math.round(elapsed)} ms), though none was ever idle`,
      );
      expect(p.received.filter(isInference)).toHaveLength(0);
      expect(app.app.wallets.reservedFor(accountId)).toBe(0);
      const ok = await postChat(server.url, apiKey, chatBody("after the trickles"));
      expect(ok.status).toBe(200);
      await ok.arrayBuffer();
      r.held("nothing reached the provider, nothing is reserved, and the next chat request is served");
    } finally {
      clearInterval(timer);
      for (const { conn } of trickles) conn.close();
    }
  },
  30_000,
);
