/**
 * Bad input against a real coordinator process over real sockets (issue 7 point 2 d): the fuzzed bodies,
 * headers and model ids of fuzz.test.ts in smaller numbers, with a real provider process (echo engine);
 * malformed HTTP on raw sockets; bodies far over the limit, declared or chunked, plain or on the sealed
 * transport. Afterwards the coordinator is still alive, serves a normal request, and its own metrics
 * record no 500 for anything it was sent.
 *
 * Body limits: a declared Content-Length over UMBRA_MAX_BODY_BYTES is answered 413 before a byte of the
 * body is sent (also beyond Bun's own 128 MiB limit, which would answer without the error envelope); a
 * chunked body of 512 MiB, streamed chunk by chunk as the socket drains, is answered 413 while the client
 * is still sending, and the coordinator's resident memory (/proc/<pid>/status) grows by a small fraction
 * of the body; bodies that no handler reads (a GET, a 401, an unknown route) are drained, not kept.
 */
import { afterAll, beforeAll, describe, expect } from "bun:test";
import { connect, type Socket } from "node:net";
import fc from "fast-check";
import { MiB, mib, rssBytes } from "../../bench/lib/proc.ts";
import { type CoordinatorProcess, type ProviderProcess, startCoordinator, startProvider } from "../support/processes.ts";
import { parseSse } from "../support/server.ts";
import {
  type Answer,
  chatBody,
  checkChat,
  type Expected,
  echoReply,
  expectEnvelope,
  expectedChat,
  FUZZ_ALIAS,
  FUZZ_BUILD,
  FUZZ_BUILD_LIMIT,
  FUZZ_DEFAULT_MAX_TOKENS,
  FUZZ_PLAIN,
  headerSet,
  KNOWN_MODELS,
  modelId,
  parseBody,
  rawBody,
  runsOf,
  seedOf,
} from "./fuzz-inputs.ts";
import { reliabilityCase } from "./report.ts";

const GROUP = "bad input (coordinator process)";
const SEALED = "application/vnd.umbra.sealed+json";
/** UMBRA_MAX_BODY_BYTES of the coordinator under test (its default). */
const LIMIT = 4 * MiB;

interface World {
  readonly coordinator: CoordinatorProcess;
  readonly provider: ProviderProcess;
  readonly apiKey: string;
}

let world: World;

beforeAll(async () => {
  const coordinator = await startCoordinator({ UMBRA_DEFAULT_MAX_TOKENS: String(FUZZ_DEFAULT_MAX_TOKENS) });
  await coordinator.admin("PUT", `/models/${FUZZ_BUILD}`, { max_output_length: FUZZ_BUILD_LIMIT });
  await coordinator.admin("PUT", `/models/${FUZZ_PLAIN}`, {});
  await coordinator.admin("PUT", `/aliases/${FUZZ_ALIAS}`, { build_id: FUZZ_BUILD });
  const consumer = await coordinator.admin<{ id: string }>("POST", "/accounts", { name: "fuzz" });
  await coordinator.admin("POST", `/accounts/${consumer.id}/credit`, { amount_micro_usd: 1_000_000_000_000 });
  const key = await coordinator.admin<{ key: string }>("POST", "/keys", { account_id: consumer.id });
  const host = await coordinator.admin<{ id: string }>("POST", "/accounts", { name: "host" });
  const token = await coordinator.admin<{ token: string }>("POST", "/provider-tokens", { account_id: host.id });
  const provider = startProvider([
    "--coordinator",
    coordinator.url,
    "--token",
    token.token,
    "--engine",
    "echo",
    "--model",
    FUZZ_BUILD,
    "--model",
    FUZZ_PLAIN,
    "--max-concurrency",
    "16",
  ]);
  await provider.connected;
  world = { coordinator, provider, apiKey: key.key };
}, 60_000);

afterAll(async () => {
  await world.provider[Symbol.asyncDispose]();
  await world.coordinator[Symbol.asyncDispose]();
});

async function send(method: string, path: string, headers: Record<string, string>, body?: Uint8Array): Promise<Answer> {
  const response = await fetch(`${world.coordinator.url}${path}`, { method, headers, ...(body === undefined ? {} : { body }) });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, body: parsed };
}

function contentOf(answer: Answer, expected: Expected): string | undefined {
  if (answer.status !== 200 || expected.kind !== "ok") return undefined;
  if (!expected.stream) return (answer.body as { choices: { message: { content: string } }[] }).choices[0]?.message.content;
  const { data } = parseSse(String(answer.body));
  expect(data.at(-1)).toBe("[DONE]");
  return data
    .slice(0, -1)
    .map((d) => (JSON.parse(d) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? "")
    .join("");
}

async function checkBytes(bytes: Uint8Array, headers: Record<string, string>): Promise<void> {
  let value: unknown;
  let parsed = false;
  try {
    const text = new TextDecoder().decode(bytes);
    value = parseBody(text);
    parsed = text.length > 0;
  } catch {}
  const expected = expectedChat(value, parsed);
  const answer = await send("POST", "/v1/chat/completions", headers, bytes);
  checkChat(expected, answer, contentOf(answer, expected), (ok) => echoReply(value as Record<string, unknown>, ok.budget));
}

const chatHeaders = () => ({ authorization: `Bearer ${world.apiKey}`, "content-type": "application/json" });

// ---------------------------------------------------------------- raw sockets

interface RawAnswer {
  /** Status of the first response, undefined when the server closed without answering. */
  readonly status: number | undefined;
  readonly headers: Headers;
  readonly body: string;
  /** Body bytes the client had written when the answer (or the close) came. */
  readonly sent: number;
}

/**
 * One exchange on a raw TCP connection: writes `head` (and `body`), optionally half-closes, or streams a
 * chunked body of `stream.total` bytes as the socket drains, stopping when the answer arrives. Resolves
 * with the first response (complete by Content-Length) or whatever came before the server closed.
 */
function rawExchange(
  head: string,
  options: { body?: string; halfClose?: boolean; stream?: { total: number; chunk: number }; whole?: boolean } = {},
): Promise<RawAnswer> {
  const { hostname, port } = new URL(world.coordinator.url);
  return new Promise((resolve) => {
    let received = Buffer.alloc(0);
    let sent = 0;
    let answered = false;
    let settled = false;
    const socket: Socket = connect(Number(port), hostname);
    const finish = () => {
      if (settled) return;
      settled = true;
      socket.destroy();
      resolve(parse(received, sent));
    };
    socket.on("connect", () => {
      socket.write(head);
      if (options.body !== undefined) {
        socket.write(options.body);
        sent += Buffer.byteLength(options.body);
      }
      if (options.halfClose) socket.end();
      const stream = options.stream;
      if (!stream) return;
      const frame = Buffer.concat([Buffer.from(`${stream.chunk.toString(16)}\r\n`), Buffer.alloc(stream.chunk, 0x61), Buffer.from("\r\n")]);
      const pump = () => {
        // One chunk per turn of the event loop, and only as fast as the server takes them; unless the
        // whole body is to be sent, stop at the answer.
        if (settled || (answered && !options.whole)) return;
        if (sent >= stream.total) {
          socket.write("0\r\n\r\n");
          if (options.whole) socket.end();
          return;
        }
        sent += stream.chunk;
        if (socket.write(frame)) setImmediate(pump);
        else socket.once("drain", pump);
      };
      pump();
    });
    socket.on("data", (data: Buffer) => {
      received = Buffer.concat([received, data]);
      answered = true;
      const split = received.indexOf("\r\n\r\n");
      if (split < 0) return;
      const length = /\r\ncontent-length: *(\d+)/i.exec(received.subarray(0, split).toString("latin1"));
      if (length && received.byteLength >= split + 4 + Number(length[1]) && !(options.whole && sent < (options.stream?.total ?? 0)))
        finish();
    });
    socket.on("close", finish);
    socket.on("error", finish);
  });
}

function parse(received: Buffer, sent: number): RawAnswer {
  const text = received.toString("utf8");
  const split = text.indexOf("\r\n\r\n");
  const lines = (split < 0 ? text : text.slice(0, split)).split("\r\n");
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "")?.[1];
  const headers = new Headers();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    if (colon > 0) headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
  }
  return { status: status === undefined ? undefined : Number(status), headers, body: split < 0 ? "" : text.slice(split + 4), sent };
}

function asAnswer(raw: RawAnswer): Answer {
  let body: unknown = raw.body;
  try {
    body = JSON.parse(raw.body);
  } catch {}
  return { status: raw.status ?? 0, headers: raw.headers, body };
}

function chatHead(extra: string, contentType = "application/json"): string {
  return `POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer ${world.apiKey}\r\ncontent-type: ${contentType}\r\n${extra}\r\n`;
}

const expect413 = (raw: RawAnswer) =>
  expect({ status: raw.status, code: expectEnvelope(asAnswer(raw)).code }).toEqual({ status: 413, code: "request_too_large" });

/** Every umbra_http_requests_total series with status 500 (there must be none). */
async function serverErrors(): Promise<string[]> {
  const metrics = await (await fetch(`${world.coordinator.url}/metrics`)).text();
  return metrics.split("\n").filter((l) => l.startsWith("umbra_http_requests_total") && l.includes('status="500"'));
}

describe(GROUP, () => {
  reliabilityCase(
    GROUP,
    "chat bodies over a socket",
    async (c) => {
      const seed = seedOf(7101);
      const runs = runsOf(60);
      c.tried(
        `${runs} fast-check chat bodies (seed ${seed}) over HTTP to the coordinator process, served by a provider process (echo engine)`,
      );
      const outcomes = new Map<string, number>();
      await fc.assert(
        fc.asyncProperty(chatBody, async (body) => {
          await checkBytes(new TextEncoder().encode(JSON.stringify(body)), chatHeaders());
          const kind = expectedChat(parseBody(JSON.stringify(body)), true).kind;
          outcomes.set(kind, (outcomes.get(kind) ?? 0) + 1);
        }),
        { seed, numRuns: runs },
      );
      c.held(
        `every answer as the contract says (${[...outcomes].map(([k, n]) => `${k} ${n}`).join(", ")}); valid requests answered 200 with the echo of their last message within the spec's budget`,
      );
    },
    60_000,
  );

  reliabilityCase(
    GROUP,
    "raw bodies, headers and model ids over a socket",
    async (c) => {
      const seed = seedOf(7102);
      const runs = runsOf(40);
      c.tried(`${runs} raw bodies, ${runs} header sets and ${runs} model ids (seed ${seed}) over HTTP`);
      await fc.assert(
        fc.asyncProperty(rawBody, async (bytes) => checkBytes(bytes, chatHeaders())),
        { seed, numRuns: runs },
      );
      await fc.assert(
        fc.asyncProperty(headerSet, async (h) => {
          const headers: Record<string, string> = { ...h.extra };
          if (h.authorization !== undefined) headers.authorization = h.authorization.replaceAll("KEY", world.apiKey);
          if (h.contentType !== undefined) headers["content-type"] = h.contentType;
          const body = { model: FUZZ_ALIAS, messages: [{ role: "user", content: "alpha beta" }] };
          const answer = await send("POST", "/v1/chat/completions", headers, new TextEncoder().encode(JSON.stringify(body)));
          if (answer.status === 200) {
            expect(h.authorization?.includes("KEY") && h.contentType?.startsWith(SEALED) !== true).toBe(true);
            return;
          }
          expect([400, 401]).toContain(answer.status);
          expectEnvelope(answer);
        }),
        { seed, numRuns: runs },
      );
      await fc.assert(
        fc.asyncProperty(modelId, async (id) => {
          if (id === "" || id === "." || id === "..") return;
          let path: string;
          try {
            path = encodeURIComponent(id);
          } catch {
            return;
          }
          const answer = await send("GET", `/v1/models/${path}`, { authorization: `Bearer ${world.apiKey}` });
          if (KNOWN_MODELS.has(id)) expect(answer.status).toBe(200);
          else expect({ status: answer.status, code: expectEnvelope(answer).code }).toEqual({ status: 404, code: "model_not_found" });
        }),
        { seed, numRuns: runs },
      );
      c.held("no 500: every error in the envelope with a listed status, type and code; known ids 200, others 404 model_not_found");
    },
    60_000,
  );

  reliabilityCase(GROUP, "malformed HTTP on raw sockets", async (c) => {
    const h = chatHead("");
    const cases: [string, string][] = [
      ["garbage request line", "GARBAGE\r\n\r\n"],
      ["no Host", "GET /v1/pricing HTTP/1.1\r\n\r\n"],
      ["empty Host", "GET /v1/pricing HTTP/1.1\r\nhost: \r\n\r\n"],
      ["short Host (a container name on port 80)", "GET /v1/pricing HTTP/1.1\r\nhost: api\r\n\r\n"],
      ["one-letter Host", "GET /v1/pricing HTTP/1.1\r\nhost: x\r\n\r\n"],
      ["absolute-form target", "GET http://elsewhere.example/v1/pricing HTTP/1.1\r\nhost: localhost\r\n\r\n"],
      ["HTTP/1.0 without Host", "GET /v1/pricing HTTP/1.0\r\n\r\n"],
      ["NUL in the path", "GET /v1/models/a\u0000b HTTP/1.1\r\nhost: localhost\r\n\r\n"],
      ["a 200 KB header", `GET /v1/pricing HTTP/1.1\r\nhost: localhost\r\nx-big: ${"a".repeat(200_000)}\r\n\r\n`],
      ["body shorter than its Content-Length", `${h.slice(0, -2)}content-length: 100\r\n\r\n{"model":`],
      ["chunked body cut mid-chunk", `${h.slice(0, -2)}transfer-encoding: chunked\r\n\r\n20\r\n{"model":`],
      ["bad chunk size", `${h.slice(0, -2)}transfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`],
      [
        "Content-Length and chunked together",
        `${h.slice(0, -2)}content-length: 4\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`,
      ],
      ["two Content-Lengths", `${h.slice(0, -2)}content-length: 2\r\ncontent-length: 9\r\n\r\n{}`],
      ["negative Content-Length", `${h.slice(0, -2)}content-length: -5\r\n\r\n`],
      ["Content-Length not a number", `${h.slice(0, -2)}content-length: 1e3\r\n\r\n`],
      ["Content-Length beyond 2^64", `${h.slice(0, -2)}content-length: 99999999999999999999999\r\n\r\n`],
    ];
    c.tried(`${cases.length} malformed requests, each written whole and then half-closed: ${cases.map(([n]) => n).join("; ")}`);
    const seen: string[] = [];
    for (const [name, head] of cases) {
      const raw = await rawExchange(head, { halfClose: true });
      seen.push(`${name}: ${raw.status ?? "closed"}`);
      // Whatever the HTTP layer refuses it answers without a body; anything the app answered is the envelope.
      if (raw.status !== undefined && raw.status !== 200 && raw.body.length > 0) expectEnvelope(asAnswer(raw));
      expect(raw.status).not.toBe(500);
    }
    expect(seen.filter((s) => s.includes("Host") && !s.endsWith(": 200") && !s.endsWith(": 400"))).toEqual([]);
    const shortHost = await rawExchange("GET /v1/pricing HTTP/1.1\r\nhost: api\r\n\r\n", { halfClose: true });
    expect(shortHost.status).toBe(200);
    expect(world.coordinator.proc.exitCode).toBeNull();
    expect(await serverErrors()).toEqual([]);
    c.held(`no 500 and no crash (${seen.join(", ")}); a short Host routes normally; the coordinator's metrics record no 500`);
  });

  reliabilityCase(GROUP, "declared Content-Length over the limit", async (c) => {
    const lengths = [LIMIT + 1, 64 * MiB, 200 * MiB, 10 * 1024 * MiB];
    c.tried(
      `POST /v1/chat/completions with Content-Length ${lengths.map(mib).join(", ")} (the limit is ${mib(LIMIT)}; Bun's own is 128 MiB), JSON and sealed, no body bytes sent`,
    );
    for (const type of ["application/json", SEALED]) {
      for (const length of lengths) {
        const raw = await rawExchange(chatHead(`content-length: ${length}\r\n`, type));
        expect(raw.sent).toBe(0);
        expect413(raw);
      }
    }
    c.held("413 request_too_large in the envelope, answered from the headers alone (before any body byte), for plain and sealed bodies");
  });

  reliabilityCase(
    GROUP,
    "a 512 MiB chunked body",
    async (c) => {
      const total = 512 * MiB;
      const pid = world.coordinator.proc.pid;
      c.tried(
        `${mib(total)} chunked (no Content-Length) streamed in 64 KiB chunks as the socket drains, plain JSON and sealed; the coordinator's VmRSS before and after`,
      );
      const results: string[] = [];
      for (const type of ["application/json", SEALED]) {
        const before = rssBytes(pid);
        const raw = await rawExchange(chatHead("transfer-encoding: chunked\r\n", type), { stream: { total, chunk: 64 * 1024 } });
        const after = rssBytes(pid);
        expect413(raw);
        expect(raw.sent).toBeLessThan(total / 4);
        expect(after - before).toBeLessThan(64 * MiB);
        results.push(`${type === SEALED ? "sealed" : "json"}: answered after ${mib(raw.sent)} sent, RSS ${mib(before)} -> ${mib(after)}`);
      }
      c.held(
        `413 request_too_large while the client was still sending, RSS growth under 64 MiB for a ${mib(total)} body (${results.join("; ")})`,
      );
    },
    120_000,
  );

  reliabilityCase(
    GROUP,
    "bodies nobody reads",
    async (c) => {
      const total = 256 * MiB;
      const pid = world.coordinator.proc.pid;
      const heads = [
        ["a GET with a body", "GET /v1/pricing HTTP/1.1\r\nhost: localhost\r\ntransfer-encoding: chunked\r\n\r\n"],
        [
          "a chat request without credentials",
          "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ntransfer-encoding: chunked\r\n\r\n",
        ],
        ["an unknown route", "POST /v1/nowhere HTTP/1.1\r\nhost: localhost\r\ntransfer-encoding: chunked\r\n\r\n"],
      ] as const;
      c.tried(`${mib(total)} chunked bodies sent whole to routes that answer without reading them: ${heads.map(([n]) => n).join(", ")}`);
      const seen: string[] = [];
      for (const [name, head] of heads) {
        const before = rssBytes(pid);
        const raw = await rawExchange(head, { stream: { total, chunk: 64 * 1024 }, whole: true });
        const after = rssBytes(pid);
        expect(raw.status).toBeDefined();
        expect(after - before).toBeLessThan(64 * MiB);
        seen.push(`${name}: ${raw.status} after ${mib(raw.sent)} sent, RSS ${mib(before)} -> ${mib(after)}`);
      }
      c.held(`answered, and the unread bodies were drained, not kept (Bun's own body limit is lifted in server.ts): ${seen.join("; ")}`);
    },
    120_000,
  );

  reliabilityCase(GROUP, "still serving afterwards", async (c) => {
    c.tried("after all of the above: a normal chat request, and the coordinator's metrics");
    expect(world.coordinator.proc.exitCode).toBeNull();
    const body = { model: FUZZ_ALIAS, messages: [{ role: "user", content: "alpha beta gamma" }] };
    const answer = await send("POST", "/v1/chat/completions", chatHeaders(), new TextEncoder().encode(JSON.stringify(body)));
    expect({
      status: answer.status,
      content: (answer.body as { choices: { message: { content: string } }[] }).choices[0]?.message.content,
    }).toEqual({
      status: 200,
      content: echoReply(body, 3),
    });
    expect(await serverErrors()).toEqual([]);
    c.held("the coordinator process is alive, answers a normal request 200, and recorded no 500 for any request it was sent");
  });
});
