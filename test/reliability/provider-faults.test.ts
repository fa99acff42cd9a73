/**
 * Reliability, provider faults (issue 7 point 2 a): a provider killed before first content or
 * mid-stream (real `umbra-provider` processes, kill -9), one that hangs, one slower than the deadlines,
 * one sending malformed or oversized frames or far more output than the budget, one flooding chunks
 * faster than the consumer reads. For each: the consumer gets the spec's error (JSON envelope with its
 * real status before the stream is committed, one in-band error event and no [DONE] after), nothing is
 * charged for what was not generated (a failure before content costs nothing; after content, what was
 * relayed), no reservation is held afterwards, and the coordinator serves the next request.
 *
 * One coordinator process for the file (tight deadlines: accept 1.2 s, first content 2.5 s, whole
 * request 4 s); every case has its own account, build and providers. The two cases that wait for
 * deadlines (hangs forever, answers slower than the deadline) run at the same time.
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { CLOSE, encode, type Inference } from "../../src/protocol/frames.ts";
import { echo, type FakeProvider, type Step } from "../support/fake-provider.ts";
import { startProvider } from "../support/processes.ts";
import { errorOf, parseSse, sseReader } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";
import { reliabilityCase } from "./report.ts";
import {
  type Coordinator,
  chat,
  chatRequestBytes,
  connectFlooder,
  coordinatorProcess,
  envelope,
  estimatedTokens,
  fakes,
  isCancel,
  messages,
  parseHttp,
  providerHome,
  providerState,
  rawConnection,
  servesNormally,
  settledExactly,
  streamed,
  type Tenant,
  usageRows,
} from "./support.ts";

const GROUP = "provider faults";
const ACCEPT_TIMEOUT_MS = 1_200;
const FIRST_CONTENT_TIMEOUT_MS = 2_500;
const REQUEST_TIMEOUT_MS = 4_000;

let c: Coordinator;
let builds = 0;

beforeAll(async () => {
  c = await coordinatorProcess({
    env: {
      UMBRA_ACCEPT_TIMEOUT_MS: String(ACCEPT_TIMEOUT_MS),
      UMBRA_FIRST_CONTENT_TIMEOUT_MS: String(FIRST_CONTENT_TIMEOUT_MS),
      UMBRA_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
    },
  });
});

afterAll(async () => {
  await c?.[Symbol.asyncDispose]();
});

const tenant = () => c.seed(`org/provider-fault-${++builds}`);

/** The real provider's command line for `t`. */
const providerArgs = (t: Tenant, ...extra: string[]) => [
  "--coordinator",
  c.url,
  "--token",
  t.providerToken,
  "--engine",
  "echo",
  "--model",
  t.build,
  ...extra,
];

reliabilityCase(
  GROUP,
  "killed before first content",
  async (r) => {
    r.tried("a real provider process (echo, first token after 60 s) accepts a streamed request and is killed -9 before any content");
    const t = await tenant();
    using home = providerHome();
    await using provider = startProvider(providerArgs(t, "--echo-first-token-delay-ms", "60000"), { UMBRA_PROVIDER_HOME: home.path });
    await provider.connected;
    const pending = chat(c.url, t, { messages: messages("an answer that never starts"), stream: true });
    await waitFor(() => providerState(home.path)?.active === 1, "the provider running the attempt");
    provider.proc.kill("SIGKILL");
    expect(await errorOf(await pending)).toEqual({
      status: 502,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("provider_error", "provider_error"),
    });
    r.held("502 provider_error as a JSON envelope, not a stream (nothing was committed)");
    const [row] = await usageRows(c, t.accountId, 1);
    expect([row?.outcome, row?.completion_tokens, row?.cost_micro_usd]).toEqual(["failed", 0, 0]);
    await settledExactly(c, t);
    r.held("the attempt is recorded as failed and costs nothing; no reservation is left; the books balance");
    await using f = fakes(c.url);
    await f.connect(t);
    await servesNormally(c.url, t, true);
    r.held("the next request on the same model is served");
  },
  40_000,
);

reliabilityCase(
  GROUP,
  "killed mid-stream",
  async (r) => {
    r.tried("a real provider process (echo, 20 tokens/s) serves a stream and a JSON request; killed -9 after the stream relayed 3 events");
    const t = await tenant();
    using home = providerHome();
    await using provider = startProvider(providerArgs(t, "--echo-tokens-per-second", "20"), { UMBRA_PROVIDER_HOME: home.path });
    await provider.connected;
    const long = Array.from({ length: 300 }, (_, i) => `w${i}`).join(" ");
    const streaming = await chat(c.url, t, { messages: messages(long), stream: true, max_tokens: 300 });
    expect(streaming.status).toBe(200);
    const json = chat(c.url, t, { messages: messages(long), max_tokens: 300 });
    const reader = sseReader(streaming);
    const first = [await reader.next(), await reader.next(), await reader.next()].filter((d): d is string => d !== undefined);
    await waitFor(() => providerState(home.path)?.active === 2, "both attempts running");
    provider.proc.kill("SIGKILL");
    const events = [...first, ...(await reader.rest())];
    const s = streamed(events);
    expect({ last: s.last, done: s.done }).toEqual({ last: envelope("provider_error", "provider_error"), done: 0 });
    expect(s.content.length).toBeGreaterThan(0);
    r.held("the stream: 200, the relayed content, then one in-band provider_error event and no [DONE]");
    expect(await errorOf(await json)).toEqual({
      status: 502,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("provider_error", "provider_error"),
    });
    r.held("the JSON request: 502 provider_error envelope (its answer was never written)");
    const rows = await usageRows(c, t.accountId, 2);
    const streamRow = rows.find((row) => row.request_id === streaming.headers.get("x-request-id"));
    expect([streamRow?.outcome, streamRow?.completion_tokens]).toEqual(["failed", estimatedTokens(s.content.length)]);
    expect(streamRow?.cost_micro_usd).toBeGreaterThan(0);
    expect(rows.map((row) => row.outcome)).toEqual(["failed", "failed"]);
    await settledExactly(c, t);
    r.held(
      "the stream is charged for exactly the text it relayed (estimated tokens), both rows failed; no reservation left; books balance",
    );
    await using f = fakes(c.url);
    await f.connect(t);
    await servesNormally(c.url, t, true);
    r.held("the next request is served");
  },
  40_000,
);

reliabilityCase.concurrent(
  GROUP,
  "hangs forever",
  async (r) => {
    r.tried(
      "four providers that go silent: before accepting, after accepting, after the first content of a stream, after the first content of a JSON answer",
    );
    const [silent, accepted, midStream, midJson] = await Promise.all([tenant(), tenant(), tenant(), tenant()]);
    await using f = fakes(c.url);
    const hang: Step = { do: "hang" };
    const part: Step = { do: "chunk", delta: { content: "partial answer" } };
    const providers = await Promise.all([
      f.connect(silent, () => [hang]),
      f.connect(accepted, () => [{ do: "accept" }, hang]),
      f.connect(midStream, () => [{ do: "accept" }, part, hang]),
      f.connect(midJson, () => [{ do: "accept" }, part, hang]),
    ]);
    const [a, b, s, j] = await Promise.all([
      chat(c.url, silent, { messages: messages("x"), stream: true }).then(errorOf),
      chat(c.url, accepted, { messages: messages("x"), stream: true }).then(errorOf),
      chat(c.url, midStream, { messages: messages("x"), stream: true }).then(async (response) => ({
        status: response.status,
        events: streamed((await sseReaderAll(response)) ?? []),
      })),
      chat(c.url, midJson, { messages: messages("x") }).then(errorOf),
    ]);
    expect(a).toEqual({
      status: 502,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("provider_error", "provider_error"),
    });
    r.held("silent before accepting: cancelled (failover) after the accept timeout, then 502 provider_error JSON");
    expect(b).toEqual({
      status: 429,
      contentType: "application/json",
      retryAfter: expect.stringMatching(/^\d+$/),
      body: envelope("rate_limit_error", "first_content_timeout"),
    });
    r.held("silent after accepting: 429 first_content_timeout with an integer Retry-After, as JSON although stream=true");
    expect(s).toEqual({ status: 200, events: { content: "partial answer", last: envelope("timeout", "timeout"), done: 0 } });
    r.held("silent mid-stream: the relayed content, then one in-band timeout event at the request deadline, no [DONE]");
    expect(j).toEqual({ status: 504, contentType: "application/json", retryAfter: null, body: envelope("timeout", "timeout") });
    r.held("silent mid-JSON: 504 timeout JSON at the request deadline");
    const [pa, pb, ps, pj] = providers as [FakeProvider, FakeProvider, FakeProvider, FakeProvider];
    await Promise.all([
      pa.waitFor(isCancel("failover")),
      pb.waitFor(isCancel("deadline")),
      ps.waitFor(isCancel("deadline")),
      pj.waitFor(isCancel("deadline")),
    ]);
    r.held("every silent provider was told to cancel (failover, deadline)");
    for (const [t, cost] of [
      [silent, 0],
      [accepted, 0],
      [midStream, "some"],
      [midJson, "some"],
    ] as const) {
      const [row] = await usageRows(c, t.accountId, 1);
      expect(row?.outcome).toBe("failed");
      if (cost === 0) expect(row?.cost_micro_usd).toBe(0);
      else expect([row?.completion_tokens, row?.cost_micro_usd]).toEqual([estimatedTokens("partial answer".length), expect.any(Number)]);
      await settledExactly(c, t);
    }
    r.held("no content, no charge; after content, the relayed text is charged; no reservation left; books balance");
    await f[Symbol.asyncDispose]();
    await using healthy = fakes(c.url);
    for (const t of [silent, accepted, midStream, midJson]) await healthy.connect(t);
    await Promise.all([silent, accepted, midStream, midJson].map((t) => servesNormally(c.url, t)));
    r.held("each model serves the next request");
  },
  40_000,
);

/** Every event of a stream (undefined when the response has no body). */
async function sseReaderAll(response: Response): Promise<string[] | undefined> {
  if (!response.body) return undefined;
  return sseReader(response).rest();
}

reliabilityCase.concurrent(
  GROUP,
  "answers slower than the deadline",
  async (r) => {
    r.tried(
      "a provider accepts and sends its answer only after the coordinator cancelled it at the first-content deadline (stream and JSON)",
    );
    const t = await tenant();
    await using f = fakes(c.url);
    let provider: FakeProvider | undefined;
    provider = await f.connect(t, (inf) =>
      inf.request.messages[0]?.content === "slow"
        ? [
            { do: "accept" },
            { do: "until", ready: (provider as FakeProvider).waitFor((fr) => fr.type === "cancel" && fr.request_id === inf.request_id) },
            { do: "chunk", delta: { content: "too late" } },
            { do: "complete", usage: { prompt_tokens: 3, completion_tokens: 2 } },
          ]
        : echo(inf),
    );
    const answers = await Promise.all([
      chat(c.url, t, { messages: messages("slow"), stream: true }).then(errorOf),
      chat(c.url, t, { messages: messages("slow") }).then(errorOf),
    ]);
    const late = {
      status: 429,
      contentType: "application/json",
      retryAfter: expect.stringMatching(/^\d+$/),
      body: envelope("rate_limit_error", "first_content_timeout"),
    };
    expect(answers).toEqual([late, late]);
    r.held("both get 429 first_content_timeout with Retry-After");
    const cancels = await waitFor(() => {
      const all = (provider as FakeProvider).received.filter((fr) => fr.type === "cancel");
      return all.length >= 2 ? all : undefined;
    }, "two cancels");
    expect(cancels.map((fr) => (fr as { reason: string }).reason)).toEqual(["deadline", "deadline"]);
    await servesNormally(c.url, t);
    await servesNormally(c.url, t, true);
    const rows = await usageRows(c, t.accountId, 4);
    expect(rows.map((row) => [row.outcome, row.outcome === "failed" ? row.cost_micro_usd : "charged"])).toEqual([
      ["failed", 0],
      ["failed", 0],
      ["completed", "charged"],
      ["completed", "charged"],
    ]);
    await settledExactly(c, t);
    r.held("the late answers were dropped (not relayed, not charged) and the same provider session serves the next requests");
  },
  30_000,
);

/** A frame of `type` for `inf` with the given fields. */
const frame = (inf: Inference, fields: Record<string, unknown>) =>
  JSON.stringify({ request_id: inf.request_id, attempt: inf.attempt, ...fields });

reliabilityCase(
  GROUP,
  "sends malformed frames",
  async (r) => {
    const variants: [string, (inf: Inference) => string][] = [
      ["not JSON", () => "{this is not json"],
      ["an unknown frame type", (inf) => frame(inf, { type: "shout" })],
      ["a mistyped field", (inf) => frame(inf, { type: "chunk", seq: "0", delta: { content: "x" } })],
      ["a seq gap", (inf) => frame(inf, { type: "chunk", seq: 3, delta: { content: "x" } })],
      ["a frame for an attempt never dispatched", (inf) => frame({ ...inf, request_id: "req_someone_else" }, { type: "accepted" })],
      ["a second accepted", (inf) => frame(inf, { type: "accepted" })],
    ];
    r.tried(`providers that accept, then send ${variants.map(([name]) => name).join(", ")} (before content); and one after content`);
    const t = await tenant();
    await using f = fakes(c.url);
    for (const [name, bad] of variants) {
      const p = await f.connect(t, (inf) => [{ do: "accept" }, { do: "raw", text: bad(inf) }]);
      const answer = await errorOf(await chat(c.url, t, { messages: messages("x"), stream: true }));
      expect({ name, answer, closed: (await p.closed).code }).toEqual({
        name,
        answer: { status: 502, contentType: "application/json", retryAfter: null, body: envelope("provider_error", "provider_error") },
        closed: CLOSE.protocolError,
      });
    }
    r.held("before content: 502 provider_error JSON, and the coordinator closed each provider's connection with 1002");
    const mid = await f.connect(t, () => [
      { do: "accept" },
      { do: "chunk", delta: { content: "good start" } },
      { do: "raw", text: "{this is not json" },
    ]);
    const response = await chat(c.url, t, { messages: messages("x"), stream: true });
    expect([response.status, streamed(await sseReader(response).rest())]).toEqual([
      200,
      { content: "good start", last: envelope("provider_error", "provider_error"), done: 0 },
    ]);
    expect((await mid.closed).code).toBe(CLOSE.protocolError);
    r.held("after content: the relayed text, one in-band provider_error event, no [DONE]; connection closed with 1002");
    const rows = await usageRows(c, t.accountId, variants.length + 1);
    expect(rows.map((row) => [row.outcome, row.cost_micro_usd > 0])).toEqual([...variants.map(() => ["failed", false]), ["failed", true]]);
    expect(rows.at(-1)?.completion_tokens).toBe(estimatedTokens("good start".length));
    await settledExactly(c, t);
    r.held("nothing charged before content, the relayed text after it; no reservation left; books balance");
    await f.connect(t);
    await servesNormally(c.url, t, true);
    r.held("the next request is served");
  },
  30_000,
);

reliabilityCase(
  GROUP,
  "sends oversized frames or output",
  async (r) => {
    r.tried(
      "a provider sends a chunk frame over the 1 MiB frame limit (before and after content); another floods a JSON answer (max_tokens 16) with 32 KiB chunks",
    );
    const t = await tenant();
    await using f = fakes(c.url);
    const huge = (inf: Inference, seq: number) =>
      encode({ type: "chunk", request_id: inf.request_id, attempt: inf.attempt, seq, delta: { content: "y".repeat(1_100_000) } });
    const before = await f.connect(t, (inf) => [{ do: "accept" }, { do: "raw", text: huge(inf, 0) }]);
    expect(await errorOf(await chat(c.url, t, { messages: messages("x"), stream: true }))).toEqual({
      status: 502,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("provider_error", "provider_error"),
    });
    expect((await before.closed).code).toBe(CLOSE.tooBig);
    r.held("oversized frame before content: 502 provider_error JSON; the connection closed with 1009");
    const after = await f.connect(t, (inf) => [
      { do: "accept" },
      { do: "chunk", delta: { content: "fine so far" } },
      { do: "raw", text: huge(inf, 1) },
    ]);
    const response = await chat(c.url, t, { messages: messages("x"), stream: true });
    expect([response.status, streamed(await sseReader(response).rest())]).toEqual([
      200,
      { content: "fine so far", last: envelope("provider_error", "provider_error"), done: 0 },
    ]);
    expect((await after.closed).code).toBe(CLOSE.tooBig);
    r.held("oversized frame after content: the relayed text, one in-band provider_error event, no [DONE]; closed with 1009");

    await using flooder = await connectFlooder(c.url, t);
    const pending = chat(c.url, t, { messages: messages("flood"), max_tokens: 16 });
    const inf = await waitFor(() => flooder.inferences[0], "the inference");
    const sent = await flooder.flood(inf, { frameChars: 32_768, maxChars: 64 * 1024 * 1024 });
    expect(await errorOf(await pending)).toEqual({
      status: 502,
      contentType: "application/json",
      retryAfter: null,
      body: envelope("provider_error", "invalid_provider_output"),
    });
    expect((await flooder.closed).code).toBe(CLOSE.protocolError);
    expect(sent).toBeLessThan(8 * 1024 * 1024);
    r.held("output far beyond the budget: 502 invalid_provider_output, the provider cut off (1002) long before 8 Mi characters");
    const rows = await usageRows(c, t.accountId, 3);
    expect(rows.map((row) => row.outcome)).toEqual(["failed", "failed", "failed"]);
    expect(rows[0]?.cost_micro_usd).toBe(0);
    await settledExactly(c, t);
    r.held("no charge before content; no reservation left; books balance");
    await f.connect(t);
    await servesNormally(c.url, t);
    r.held("the next request is served");
  },
  30_000,
);

reliabilityCase(
  GROUP,
  "floods chunks faster than the consumer reads",
  async (r) => {
    r.tried(
      "a consumer reads the first event of a stream, then stops reading; the provider sends 32 KiB chunks as fast as it can (up to 48 Mi characters)",
    );
    const t = await tenant();
    await using p = await connectFlooder(c.url, t);
    const conn = await rawConnection(c.url);
    const request = chatRequestBytes(c.url, t, { messages: messages("flood"), stream: true, max_tokens: 1_000_000 });
    conn.write(request.head);
    conn.write(request.body);
    const inf = await waitFor(() => p.inferences[0], "the inference");
    p.send({ type: "chunk", request_id: inf.request_id, attempt: inf.attempt, seq: 0, delta: { content: "first" } });
    await waitFor(() => parseHttp(conn.received())?.body.includes("first"), "the first event");
    conn.pause();
    const cancelled = () => p.cancels.some((x) => x.reason === "client_gone");
    const sent = await p.flood(inf, { frameChars: 32_768, maxChars: 48 * 1024 * 1024, firstSeq: 1, until: cancelled });
    expect(cancelled()).toBe(true);
    r.held(
      `the coordinator cancelled the attempt (client_gone) after ${Math.round(sent / 1024 / 1024)} Mi characters instead of buffering them`,
    );
    conn.resume();
    await conn.closed;
    const answer = parseHttp(conn.received());
    const s = streamed(parseSse(answer?.body ?? "").data);
    expect({ status: answer?.status, complete: answer?.complete, last: s.last, done: s.done }).toEqual({
      status: 200,
      complete: true,
      last: envelope("timeout", "timeout"),
      done: 0,
    });
    expect(s.content.length).toBeLessThan(sent);
    r.held("the consumer, reading again, gets what was relayed and then one in-band timeout event, no [DONE]");
    const [row] = await usageRows(c, t.accountId, 1);
    // The estimate of the relayed text (4 characters per token), at most the output budget.
    expect([row?.outcome, row?.completion_tokens]).toEqual(["cancelled", Math.min(1_000_000, estimatedTokens(s.content.length))]);
    await settledExactly(c, t);
    r.held("charged for exactly the relayed text, at most the budget (not the dropped backlog); no reservation left; books balance");
    await servesNormally(c.url, t, true);
    expect(p.inferences).toHaveLength(2);
    r.held("the same provider session serves the next request");
  },
  30_000,
);
