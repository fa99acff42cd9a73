/**
 * No-content guarantee (spec: What the service does, point 5; docs/security.md): the whole flow runs
 * with a canary string in system and user messages, in pass-through and identity fields, in the model
 * name and the credential of bad requests and in request bodies of every failure path, against a real
 * coordinator process at debug level on a temp database and real provider processes (echo engine, so
 * the canary also comes back in completions) plus scripted fake providers for failures. Every chat body
 * is a tool-calling turn: the canary is in tool schemas, a tool call's arguments and a tool result too,
 * and in the refused tool shapes, schemas (422) and image parts.
 *
 * Then the canary (UTF-8 and UTF-16LE, as written and lower-cased) must be in no log line of any
 * process, no database file (.db, -wal, -shm, the settlement journal -settlements, while running and
 * after a graceful stop), no error body or header (JSON errors and in-band stream errors, consumer and
 * admin), and not in /metrics. The
 * harness proves it can see the canary: it must find it in the completions the client received and in
 * what the providers (the plaintext endpoint) were sent.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import OpenAI from "openai";
import { type SealedAnswer, sealedChat } from "../../docs/examples/sealed-chat.ts";
import { SEALED_CONTENT_TYPE } from "../../src/crypto/consumer-seal.ts";
import type { Inference } from "../../src/protocol/frames.ts";
import {
  CANARY,
  type CanaryProvider,
  type Finding,
  leaks,
  scan,
  scanDir,
  scanLines,
  startCanaryCoordinator,
  startCanaryProvider,
} from "../support/canary.ts";
import { connectFakeProvider } from "../support/fake-provider.ts";
import { parseSse, sseReader } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const FIRST_CONTENT_TIMEOUT_MS = 1_500;
const MAX_BODY_BYTES = 64 * 1024;

/** One build per behaviour, so each request reaches the provider meant for it. */
const BUILD = {
  echo: "canary/echo", // echo provider process, immediate
  slow: "canary/slow-first", // echo provider process, first token after a minute: first-content deadline
  trickle: "canary/trickle", // echo provider process, 20 tokens/s: the client leaves mid-answer
  doomed: "canary/doomed", // echo provider process, 20 tokens/s: killed mid-answer
  failing: "canary/failing", // fake provider: accepts, then an error frame whose message carries the canary
  refusing: "canary/refusing", // fake provider: refuses with context_length_exceeded
  corrupt: "canary/corrupt", // fake provider: content, then a malformed frame carrying the canary
  idle: "canary/idle", // registered, served by nobody
} as const;

/** A chat body with the canary in every place a client can put text. */
function canaryBody(model: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    model,
    messages: [
      { role: "system", content: `You guard the secret ${CANARY} carefully.` },
      { role: "user", content: [{ type: "text", text: `look ${CANARY} up` }] },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "lookup", arguments: JSON.stringify({ q: CANARY }) } }],
      },
      { role: "tool", tool_call_id: "call_1", content: `found ${CANARY}` },
      { role: "user", content: `please repeat ${CANARY} back to me` },
    ],
    user: CANARY,
    metadata: { note: CANARY },
    stop: [`${CANARY}-stop`],
    tools: [
      {
        type: "function",
        function: {
          name: "lookup",
          description: CANARY,
          parameters: { type: "object", description: CANARY, properties: { q: { type: "string", description: CANARY } }, required: ["q"] },
        },
      },
    ],
    // Forwarded, but the echo engine answers with text (its tool mode would answer with a call).
    tool_choice: "none",
    ...extra,
  };
}

/** A long last message: an answer at 20 tokens/s that is still running when the test acts. */
const LONG = Array.from({ length: 200 }, () => CANARY).join(" ");

interface Seen {
  readonly what: string;
  readonly status: number;
  readonly headers: string;
  readonly body: string;
}

describe("privacy canary", () => {
  test("the scanner finds the canary in UTF-8 and UTF-16LE, as written and lower-cased, and says where", () => {
    const bytes = Buffer.concat([
      Buffer.from(`head ${CANARY} mid `),
      Buffer.from(`x${CANARY.toLowerCase()}y`, "utf16le"),
      Buffer.from(" tail"),
    ]);
    expect(scan("file", bytes).map((f) => [f.sink, f.place, f.encoding])).toEqual([
      ["file", "byte 5", "utf8"],
      ["file", "byte 25", "utf16le"],
    ]);
    expect(leaks(scanLines("log", `one\ntwo ${CANARY}\nthree ${CANARY}`))).toEqual([
      { sink: "log", encoding: "utf8", count: 2, first: `line 2, byte 4: ${JSON.stringify(`two ${CANARY}`)}` },
    ]);
    expect(scan("clean", `CANARY-7f3a9 ${CANARY.slice(1)}`)).toEqual([]);
  });

  test("the whole flow leaves the canary in no log line, database file, error body or header, nor /metrics", async () => {
    await using c = await startCanaryCoordinator({
      UMBRA_LOG_LEVEL: "debug",
      // Every settlement goes through the settlement journal, so that its file is scanned with the rest.
      UMBRA_SETTLEMENT_GROUP_ABOVE: "0",
      UMBRA_FIRST_CONTENT_TIMEOUT_MS: String(FIRST_CONTENT_TIMEOUT_MS),
      UMBRA_MAX_BODY_BYTES: String(MAX_BODY_BYTES),
      // Six provider sessions share one device token below (the default limit is 4).
      UMBRA_MAX_SESSIONS_PER_TOKEN: "8",
    });
    const admin = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
      const r = await c.admin(method, path, body);
      if (r.status >= 300) throw new Error(`admin ${method} ${path}: ${r.status} ${r.text}`);
      return r.body as T;
    };

    // Catalog, a paying account with four keys, a broke account, one provider token.
    for (const build of Object.values(BUILD)) await admin("PUT", `/models/${build}`, {});
    const payer = await admin<{ id: string }>("POST", "/accounts", { name: "canary payer" });
    await admin("POST", `/accounts/${payer.id}/credit`, { amount_micro_usd: 1_000_000_000 });
    const key = async (extra: Record<string, unknown> = {}, accountId = payer.id) =>
      (await admin<{ key: string }>("POST", "/keys", { account_id: accountId, ...extra })).key;
    const apiKey = await key();
    const limitedKey = await key({ rpm: 1 });
    const allowlistedKey = await key({ allowed_models: [BUILD.idle] });
    const cappedKey = await key({ spend_cap_micro_usd: 1 });
    const broke = await admin<{ id: string }>("POST", "/accounts", { name: "canary broke" });
    const brokeKey = await key({}, broke.id);
    const token = (await admin<{ token: string }>("POST", "/provider-tokens", { account_id: payer.id })).token;

    // Providers: real processes with the echo engine, and scripted fakes.
    const echoProvider = (build: string, ...flags: string[]) =>
      startCanaryProvider([
        "--coordinator",
        c.url,
        "--token",
        token,
        "--engine",
        "echo",
        "--model",
        build,
        "--max-concurrency",
        "8",
        ...flags,
      ]);
    await using fast = echoProvider(BUILD.echo);
    await using slow = echoProvider(BUILD.slow, "--echo-first-token-delay-ms", "60000");
    await using trickle = echoProvider(BUILD.trickle, "--echo-tokens-per-second", "20");
    await using doomed = echoProvider(BUILD.doomed, "--echo-tokens-per-second", "20");
    const providers: Record<string, CanaryProvider> = { fast, slow, trickle, doomed };
    await Promise.all(Object.values(providers).map((p) => p.connected));
    await using failing = await connectFakeProvider({
      url: c.url,
      token,
      models: [BUILD.failing, BUILD.refusing],
      behave: (inf) =>
        inf.model === BUILD.refusing
          ? [{ do: "error", code: "context_length_exceeded" }]
          : [
              { do: "accept" },
              {
                do: "raw",
                text: JSON.stringify({
                  type: "error",
                  request_id: inf.request_id,
                  attempt: inf.attempt,
                  code: "engine_error",
                  message: `engine trace ${CANARY}`,
                }),
              },
            ],
    });
    await using corrupt = await connectFakeProvider({
      url: c.url,
      token,
      models: [BUILD.corrupt],
      behave: (inf) => [
        { do: "accept" },
        { do: "chunk", delta: { content: `${CANARY} ` } },
        {
          do: "raw",
          text: JSON.stringify({ type: "chunk", request_id: inf.request_id, attempt: inf.attempt, seq: 1, delta: { content: [CANARY] } }),
        },
      ],
    });

    // Every response is kept: successes for the sanity check, everything else must be canary-free.
    const successes: Seen[] = [];
    const failures: Seen[] = [];
    const statuses: Record<string, number | string> = {};
    const headersOf = (r: Response) => [...r.headers].map(([k, v]) => `${k}: ${v}`).join("\n");
    const keep = async (what: string, r: Response): Promise<void> => {
      const seen = { what, status: r.status, headers: headersOf(r), body: await r.text() };
      (r.status === 200 ? successes : failures).push(seen);
      statuses[what] = r.status;
    };
    const post = (body: unknown, bearer = apiKey, init: RequestInit = {}) =>
      fetch(`${c.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
        body: typeof body === "string" ? body : JSON.stringify(body),
        ...init,
      });
    /** A stream that commits, then fails: its events before the error are content, the error event is an error body. */
    const keepInBand = (what: string, r: Response, events: string[]) => {
      const errorEvents = events.filter((e) => e.startsWith('{"error"'));
      failures.push({ what: `${what} (in-band error)`, status: r.status, headers: headersOf(r), body: errorEvents.join("\n") });
      successes.push({ what: `${what} (content before the error)`, status: r.status, headers: "", body: events.join("\n") });
      const inBand = errorEvents.length === 1 && events.at(-1) === errorEvents[0] && !events.includes("[DONE]");
      statuses[what] = inBand
        ? `${r.status}, content, one in-band error, no [DONE]`
        : `${r.status}, events: ${events.join(" | ").slice(0, 300)}`;
    };

    // The first-content deadline takes its time: it runs alongside everything else.
    const deadline = Promise.all([
      post(canaryBody(BUILD.slow)).then((r) => keep("first-content deadline", r)),
      post(canaryBody(BUILD.slow, { stream: true })).then((r) => keep("first-content deadline, stream", r)),
    ]);

    // Success: fetch (JSON and stream), the official client (JSON and stream).
    await keep("success", await post(canaryBody(BUILD.echo)));
    await keep("success, stream", await post(canaryBody(BUILD.echo, { stream: true, stream_options: { include_usage: true } })));
    const client = new OpenAI({ baseURL: `${c.url}/v1`, apiKey, maxRetries: 0 });
    const viaClient = await client.chat.completions.create({
      model: BUILD.echo,
      messages: [
        { role: "system", content: `secret ${CANARY}` },
        { role: "user", content: `openai says ${CANARY}` },
      ],
      user: CANARY,
      metadata: { note: CANARY },
    });
    successes.push({ what: "openai client", status: 200, headers: "", body: JSON.stringify(viaClient) });
    let streamedByClient = "";
    const clientStream = await client.chat.completions.create({
      model: BUILD.echo,
      messages: [{ role: "user", content: `openai streams ${CANARY}` }],
      stream: true,
    });
    for await (const chunk of clientStream) streamedByClient += chunk.choices[0]?.delta.content ?? "";
    successes.push({ what: "openai client, stream", status: 200, headers: "", body: streamedByClient });

    // Sealed transport: opened answers join the others (success carries the canary, errors must not);
    // a bad envelope carrying the canary is a plain 400 that must not echo it.
    const sealedAnswers: [string, SealedAnswer][] = [
      ["sealed", await sealedChat(c.url, apiKey, canaryBody(BUILD.echo))],
      ["sealed, stream", await sealedChat(c.url, apiKey, canaryBody(BUILD.echo, { stream: true }))],
      ["sealed, unknown model", await sealedChat(c.url, apiKey, canaryBody(`canary/${CANARY}`))],
      ["sealed, provider error", await sealedChat(c.url, apiKey, canaryBody(BUILD.failing))],
    ];
    for (const [what, answer] of sealedAnswers) {
      const body = answer.events ? answer.events.join("\n") : JSON.stringify(answer.json);
      (answer.status === 200 ? successes : failures).push({ what, status: answer.status, headers: "", body });
      statuses[what] = `${answer.status}${answer.sealed ? " sealed" : ""}`;
    }
    const sealedPost = (body: string) =>
      fetch(`${c.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": SEALED_CONTENT_TYPE },
        body,
      });
    await keep("sealed, bad envelope", await sealedPost(JSON.stringify({ version: 2, timestamp: 0, enc: CANARY, ciphertext: CANARY })));
    await keep("sealed, plain body", await sealedPost(JSON.stringify(canaryBody(BUILD.echo))));

    // Malformed requests: broken JSON, wrong types, unknown models, all carrying the canary.
    const truncated = JSON.stringify(canaryBody(BUILD.echo)).slice(0, -20);
    await keep("invalid JSON", await post(truncated));
    await keep("JSON that is not an object", await post(JSON.stringify(CANARY)));
    const wrongTypes: Record<string, Record<string, unknown>> = {
      "model an object": { model: { name: CANARY } },
      "model too long": { model: CANARY.repeat(30) },
      "messages a string": { messages: CANARY },
      "message a string": { messages: [CANARY] },
      "content an object": { messages: [{ role: "user", content: { text: CANARY } }] },
      "role an object": { messages: [{ role: { name: CANARY }, content: CANARY }] },
      "stream a string": { stream: CANARY },
      "stream_options a string": { stream_options: CANARY },
      "max_tokens a string": { max_tokens: CANARY },
      "max_completion_tokens a string": { max_completion_tokens: CANARY },
      "n a string": { n: CANARY },
      "n 2": { n: 2 },
      "temperature a string": { temperature: CANARY },
      "top_p a string": { top_p: CANARY },
      "stop with a number": { stop: [CANARY, 5] },
      "self_route a string": { self_route: CANARY },
      "tool call arguments an object": {
        messages: [
          { role: "assistant", tool_calls: [{ id: CANARY, type: "function", function: { name: CANARY, arguments: { q: CANARY } } }] },
        ],
      },
      "tool message without tool_call_id": { messages: [{ role: "tool", content: CANARY }] },
      "content part of an unknown type": { messages: [{ role: "user", content: [{ type: CANARY, text: CANARY }] }] },
      "tool name with a space": { tools: [{ type: "function", function: { name: `${CANARY} x`, description: CANARY } }] },
      "tool_choice naming no tool": { tool_choice: { type: "function", function: { name: CANARY.replaceAll(/[^a-zA-Z0-9]/g, "_") } } },
      "response_format of unknown type": { response_format: { type: CANARY } },
      "image part for a text-only model": {
        messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `https://${CANARY}.example/x.png` } }] }],
      },
    };
    const uncompilable: Record<string, Record<string, unknown>> = {
      "remote $ref": { $ref: `https://${CANARY}.example/schema.json`, description: CANARY },
      "bad pattern": { type: "object", properties: { [CANARY]: { type: "string", pattern: `([${CANARY}` } } },
      "not a schema": { type: CANARY, description: CANARY },
      "strict, open object": { type: "object", properties: { [CANARY]: { type: "string" } } },
    };
    for (const [name, fields] of Object.entries(wrongTypes))
      await keep(`invalid field: ${name}`, await post(canaryBody(BUILD.echo, fields)));
    for (const [name, parameters] of Object.entries(uncompilable)) {
      const strict = name.startsWith("strict");
      await keep(
        `422 schema: ${name}`,
        await post(
          canaryBody(BUILD.echo, { tools: [{ type: "function", function: { name: "lookup", description: CANARY, strict, parameters } }] }),
        ),
      );
    }
    await keep("unknown model", await post(canaryBody(`canary/${CANARY}`)));
    await keep("unknown model, stream", await post(canaryBody(CANARY, { stream: true })));
    await keep(
      "unknown model, retrieve",
      await fetch(`${c.url}/v1/models/canary/${CANARY}`, { headers: { authorization: `Bearer ${apiKey}` } }),
    );

    // Credentials: the canary as the bearer.
    for (const bearer of [CANARY, `sk-umbra-${CANARY}`, `umbra-pt-${CANARY}`]) {
      await keep(`401 bearer ${bearer.slice(0, 9)}`, await post(canaryBody(BUILD.echo), bearer));
    }
    await keep("401 on models", await fetch(`${c.url}/v1/models`, { headers: { authorization: `Bearer ${CANARY}` } }));

    // Bodies over the limit: declared length, and a chunked stream that grows past it.
    const huge = JSON.stringify(canaryBody(BUILD.echo, { messages: [{ role: "user", content: CANARY.repeat(MAX_BODY_BYTES / 8) }] }));
    await keep("413 declared length", await post(huge));
    const chunked = new ReadableStream<Uint8Array>({
      start(controller) {
        const bytes = new TextEncoder().encode(huge);
        for (let at = 0; at < bytes.byteLength; at += 8192) controller.enqueue(bytes.subarray(at, at + 8192));
        controller.close();
      },
    });
    await keep("413 chunked", await post("", apiKey, { body: chunked }));

    // Money, permissions, limits.
    await keep("402 no credit", await post(canaryBody(BUILD.echo), brokeKey));
    await keep("402 spend cap", await post(canaryBody(BUILD.echo), cappedKey));
    await keep("403 allowlist", await post(canaryBody(BUILD.echo), allowlistedKey));
    await keep("409 self-route without a machine", await post(canaryBody(BUILD.echo, { self_route: true }), brokeKey));
    await keep("rate-limited key, first request", await post(canaryBody(BUILD.echo), limitedKey));
    await keep("429 rate limit", await post(canaryBody(BUILD.echo, { stream: true }), limitedKey));

    // No provider; providers that fail before content.
    await keep("503 no provider", await post(canaryBody(BUILD.idle)));
    await keep("503 no provider, stream", await post(canaryBody(BUILD.idle, { stream: true })));
    await keep("provider error before content", await post(canaryBody(BUILD.failing)));
    await keep("provider error before content, stream", await post(canaryBody(BUILD.failing, { stream: true })));
    await keep("provider refuses (context length)", await post(canaryBody(BUILD.refusing)));

    // A provider that breaks the protocol after content: in-band error.
    {
      const r = await post(canaryBody(BUILD.corrupt, { stream: true }));
      keepInBand("malformed provider frame after content", r, parseSse(await r.text()).data);
    }

    // The provider process dies mid-answer: a JSON request fails, a stream ends with an in-band error.
    {
      const json = post(canaryBody(BUILD.doomed, { messages: [{ role: "user", content: LONG }] }));
      const r = await post(canaryBody(BUILD.doomed, { stream: true, messages: [{ role: "user", content: LONG }] }));
      const reader = sseReader(r);
      const first = await reader.next();
      doomed.proc.kill("SIGKILL");
      keepInBand("provider killed mid-stream", r, [first ?? "", ...(await reader.rest())]);
      await keep("provider killed mid-answer", await json);
    }

    // The client leaves mid-answer, streaming and not.
    {
      const leave = new AbortController();
      const json = post(canaryBody(BUILD.trickle, { messages: [{ role: "user", content: LONG }] }), apiKey, { signal: leave.signal });
      const r = await post(canaryBody(BUILD.trickle, { stream: true, messages: [{ role: "user", content: LONG }] }), apiKey, {
        signal: leave.signal,
      });
      const reader = sseReader(r);
      successes.push({
        what: "client abort, stream (content before leaving)",
        status: r.status,
        headers: "",
        body: (await reader.next()) ?? "",
      });
      leave.abort();
      statuses["client abort"] = await json.then(
        (response) => `answered ${response.status}`,
        (e: unknown) => (e instanceof Error && e.name === "AbortError" ? "aborted" : String(e)),
      );
      await reader.rest().catch(() => []);
    }
    await deadline;

    // Admin API: numeric fields given the canary, broken JSON, the canary as the admin token.
    const adminCalls: [string, string, string, unknown][] = [
      ["admin credit amount", "POST", `/accounts/${payer.id}/credit`, { amount_micro_usd: CANARY }],
      ["admin credit unknown field", "POST", `/accounts/${payer.id}/credit`, { amount_micro_usd: 5, note: CANARY }],
      ["admin key rpm", "POST", "/keys", { account_id: payer.id, rpm: CANARY }],
      ["admin key spend cap", "POST", "/keys", { account_id: payer.id, spend_cap_micro_usd: CANARY }],
      ["admin model context length", "PUT", `/models/${BUILD.echo}`, { context_length: CANARY }],
      ["admin price", "PUT", `/prices/${BUILD.echo}`, { input_price: CANARY, output_price: 1 }],
      ["admin invalid JSON", "POST", "/keys", `{"account_id":"${payer.id}","name":"${CANARY}"`],
      ["admin ledger limit", "GET", `/accounts/${payer.id}/ledger?limit=${CANARY}`, undefined],
      ["admin usage since", "GET", `/accounts/${payer.id}/usage?since=${CANARY}`, undefined],
    ];
    for (const [what, method, path, body] of adminCalls) {
      const r = await c.admin(method, path, body);
      failures.push({ what, status: r.status, headers: "", body: r.text });
      statuses[what] = r.status;
    }
    await keep("admin 401", await fetch(`${c.url}/admin/v1/accounts`, { headers: { authorization: `Bearer ${CANARY}` }, method: "GET" }));

    // Every request settled (no hold left), then the sinks while running: metrics and database files.
    await waitFor(
      async () => (await admin<{ reserved_micro_usd: number }>("GET", `/accounts/${payer.id}`)).reserved_micro_usd === 0,
      "every reservation settled",
    );
    const metrics = await (await fetch(`${c.url}/metrics`)).text();
    const filesWhileRunning = readdirSync(c.dir).sort();
    const findings: Finding[] = [...scan("GET /metrics", metrics), ...scanDir("database folder while running", c.dir)];

    // A graceful stop flushes and checkpoints; then the files again, and every process's output.
    const exitCode = await c.stop();
    findings.push(...scanDir("database folder after SIGTERM", c.dir));
    for (const p of Object.values(providers)) await p[Symbol.asyncDispose]();
    // The provider tool's own files (state, pid) hold counts and ids only.
    for (const [name, p] of Object.entries(providers)) {
      expect(readdirSync(p.home)).toContain("state.json");
      findings.push(...scanDir(`provider ${name} folder`, p.home));
    }
    const outputs: Record<string, { stdout: string; stderr: string }> = { coordinator: c.output() };
    for (const [name, p] of Object.entries(providers)) outputs[`provider ${name}`] = p.output();
    for (const [name, out] of Object.entries(outputs)) {
      findings.push(...scanLines(`${name} stdout`, out.stdout), ...scanLines(`${name} stderr`, out.stderr));
    }
    for (const f of failures) findings.push(...scan(`${f.what}: ${f.status} body`, f.body), ...scan(`${f.what}: headers`, f.headers));
    for (const s of successes) findings.push(...scan(`${s.what}: headers`, s.headers));

    // The harness sees the canary where it belongs: completions, and what the providers were sent.
    const inferences = [...failing.received, ...corrupt.received].filter((f): f is Inference => f.type === "inference");
    expect({
      completionsWithoutCanary: successes.filter((s) => scan(s.what, s.body).length === 0).map((s) => s.what),
      providerSawCanary: inferences.length > 0 && inferences.every((f) => scan("inference", JSON.stringify(f.request)).length > 0),
      identityFieldsForwarded: inferences.filter((f) => "user" in f.request || "metadata" in f.request).length,
      coordinatorDebugLines: outputs.coordinator?.stderr.includes('"level":"debug","msg":"chat request ended"'),
      providerDebugLines: outputs["provider fast"]?.stderr.includes('"level":"debug"'),
      filesWhileRunning,
      exitCode,
    }).toEqual({
      completionsWithoutCanary: [],
      providerSawCanary: true,
      identityFieldsForwarded: 0,
      coordinatorDebugLines: true,
      providerDebugLines: true,
      filesWhileRunning: ["umbra.db", "umbra.db-lock", "umbra.db-lock-journal", "umbra.db-settlements", "umbra.db-shm", "umbra.db-wal"],
      exitCode: 0,
    });

    // Each failure path answered as it should (so each was really exercised).
    const invalid = Object.fromEntries(Object.keys(wrongTypes).map((name) => [`invalid field: ${name}`, 400]));
    const adminInvalid = Object.fromEntries(adminCalls.map(([what]) => [what, 400]));
    const schemaInvalid = Object.fromEntries(Object.keys(uncompilable).map((name) => [`422 schema: ${name}`, 422]));
    expect(statuses).toEqual({
      success: 200,
      "success, stream": 200,
      "invalid JSON": 400,
      "JSON that is not an object": 400,
      ...invalid,
      ...schemaInvalid,
      sealed: "200 sealed",
      "sealed, stream": "200 sealed",
      "sealed, unknown model": "404 sealed",
      "sealed, provider error": "502 sealed",
      "sealed, bad envelope": 400,
      "sealed, plain body": 400,
      "unknown model": 404,
      "unknown model, stream": 404,
      "unknown model, retrieve": 404,
      "401 bearer CANARY-7f": 401,
      "401 bearer sk-umbra-": 401,
      "401 bearer umbra-pt-": 401,
      "401 on models": 401,
      "413 declared length": 413,
      "413 chunked": 413,
      "402 no credit": 402,
      "402 spend cap": 402,
      "403 allowlist": 403,
      "409 self-route without a machine": 409,
      "rate-limited key, first request": 200,
      "429 rate limit": 429,
      "503 no provider": 503,
      "503 no provider, stream": 503,
      "provider error before content": 502,
      "provider error before content, stream": 502,
      "provider refuses (context length)": 400,
      "malformed provider frame after content": "200, content, one in-band error, no [DONE]",
      "provider killed mid-stream": "200, content, one in-band error, no [DONE]",
      "provider killed mid-answer": 502,
      "client abort": "aborted",
      "first-content deadline": 429,
      "first-content deadline, stream": 429,
      ...adminInvalid,
      "admin 401": 401,
    });

    // The guarantee.
    expect(leaks(findings)).toEqual([]);
  }, 60_000);
});
