/**
 * End-to-end helpers: the app behind a real socket on port 0, a provider token, plain-fetch chat calls,
 * and an SSE reader built on eventsource-parser that also keeps the raw text (to check framing, comments
 * and what follows [DONE]), and a raw HTTP/1.1 client for load tests. Use `await using server = startServer(t)`.
 */
import { createParser } from "eventsource-parser";
import { type ListenOptions, listen } from "../../src/coordinator/server.ts";
import type { TestApp } from "./harness.ts";

export interface TestServer extends AsyncDisposable {
  readonly url: string;
  readonly port: number;
}

/**
 * Listens on 127.0.0.1:0 (`idleTimeoutSeconds` shortens the idle timeout: ListenOptions); disposal stops
 * the fleet sweeper and the server (closing every connection).
 */
export function startServer(t: TestApp, options: ListenOptions = {}): TestServer {
  const server = listen(t.app, "127.0.0.1", 0, options);
  return {
    url: server.url,
    port: server.port,
    async [Symbol.asyncDispose]() {
      t.app.close();
      await server.stop();
    },
  };
}

/** A fresh provider device token for the account. */
export async function providerToken(t: TestApp, accountId: string): Promise<string> {
  return (await t.app.admin.createProviderToken({ account_id: accountId })).token;
}

export interface ChatOptions {
  readonly signal?: AbortSignal;
  readonly headers?: Record<string, string>;
}

/** POST /v1/chat/completions with a JSON body through the socket. */
export function postChat(url: string, apiKey: string, body: unknown, options: ChatOptions = {}): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...options.headers },
    body: JSON.stringify(body),
    ...(options.signal ? { signal: options.signal } : {}),
  });
}

/** An error answer as one comparable object. */
export interface ErrorAnswer {
  readonly status: number;
  readonly contentType: string | null;
  readonly retryAfter: string | null;
  readonly body: { readonly error: { readonly message: string; readonly type: string; readonly code: string; readonly param?: string } };
}

/** Status, content type, Retry-After and parsed body of an error answer (compare it whole with toEqual). */
export async function errorOf(response: Response): Promise<ErrorAnswer> {
  return {
    status: response.status,
    contentType: response.headers.get("content-type"),
    retryAfter: response.headers.get("retry-after"),
    body: (await response.json()) as ErrorAnswer["body"],
  };
}

/** A minimal valid chat body for the seeded alias. */
export function chatBody(content: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: "org/model", messages: [{ role: "user", content }], ...extra };
}

export interface SseResult {
  /** The data of every event, in order. */
  readonly data: string[];
  /** Comment lines seen by the parser (keepalives would land here). */
  readonly comments: string[];
  /** The whole body as received. */
  readonly raw: string;
}

/** Parses a whole event-stream body. */
export function parseSse(raw: string): SseResult {
  const data: string[] = [];
  const comments: string[] = [];
  const parser = createParser({ onEvent: (e) => data.push(e.data), onComment: (c) => comments.push(c) });
  parser.feed(raw);
  return { data, comments, raw };
}

/** Reads an event stream to its end. */
export async function readSse(response: Response): Promise<SseResult> {
  return parseSse(await response.text());
}

/** An incremental SSE reader for tests that act between events. */
export interface SseReader {
  /** The next event's data; undefined when the stream ended. */
  next(): Promise<string | undefined>;
  /** Every remaining event until the end. */
  rest(): Promise<string[]>;
  readonly raw: () => string;
}

export function sseReader(response: Response): SseReader {
  if (!response.body) throw new Error("response has no body");
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const queue: string[] = [];
  let raw = "";
  let ended = false;
  const parser = createParser({ onEvent: (e) => queue.push(e.data) });
  async function next(): Promise<string | undefined> {
    while (queue.length === 0 && !ended) {
      const { done, value } = await reader.read();
      if (done) {
        ended = true;
        break;
      }
      const text = decoder.decode(value, { stream: true });
      raw += text;
      parser.feed(text);
    }
    return queue.shift();
  }
  return {
    next,
    async rest() {
      const out: string[] = [];
      for (let d = await next(); d !== undefined; d = await next()) out.push(d);
      return out;
    },
    raw: () => raw,
  };
}

export interface RawResponse {
  readonly status: number;
  readonly headers: Headers;
  readonly body: string;
}

/**
 * One HTTP/1.1 request on its own TCP connection (Bun.connect), for load tests: fetch caps how many
 * requests it has in flight (256), raw sockets do not. Understands chunked and content-length bodies.
 */
export function rawHttp(url: string, method: string, path: string, headers: Record<string, string>, body: string): Promise<RawResponse> {
  const { hostname, port } = new URL(url);
  const payload = Buffer.from(body);
  const head = [`${method} ${path} HTTP/1.1`, `host: ${hostname}:${port}`, `content-length: ${payload.byteLength}`, "connection: close"]
    .concat(Object.entries(headers).map(([k, v]) => `${k}: ${v}`))
    .join("\r\n");
  const request = Buffer.concat([Buffer.from(`${head}\r\n\r\n`), payload]);

  return new Promise<RawResponse>((resolve, reject) => {
    let received = Buffer.alloc(0);
    let settled = false;
    const settle = (result: RawResponse | Error) => {
      if (settled) return;
      settled = true;
      if (result instanceof Error) reject(result);
      else resolve(result);
    };
    /** The response once complete, undefined while more bytes are needed. */
    const parse = (ended: boolean): RawResponse | undefined => {
      const split = received.indexOf("\r\n\r\n");
      if (split < 0) return undefined;
      const lines = received.subarray(0, split).toString("latin1").split("\r\n");
      const status = Number(lines[0]?.split(" ")[1]);
      const h = new Headers();
      for (const line of lines.slice(1)) {
        const colon = line.indexOf(":");
        h.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
      }
      const rest = received.subarray(split + 4);
      if (h.get("transfer-encoding")?.toLowerCase() === "chunked") {
        const parts: Buffer[] = [];
        let at = 0;
        for (;;) {
          const eol = rest.indexOf("\r\n", at);
          if (eol < 0) return undefined;
          const size = Number.parseInt(rest.subarray(at, eol).toString("latin1"), 16);
          if (size === 0) return { status, headers: h, body: Buffer.concat(parts).toString("utf8") };
          if (rest.byteLength < eol + 2 + size + 2) return undefined;
          parts.push(rest.subarray(eol + 2, eol + 2 + size));
          at = eol + 2 + size + 2;
        }
      }
      const length = h.get("content-length");
      if (length !== null) {
        return rest.byteLength >= Number(length)
          ? { status, headers: h, body: rest.subarray(0, Number(length)).toString("utf8") }
          : undefined;
      }
      return ended ? { status, headers: h, body: rest.toString("utf8") } : undefined;
    };
    Bun.connect({
      hostname,
      port: Number(port),
      socket: {
        open(socket) {
          if (socket.write(request) !== request.byteLength) settle(new Error("request not written in one go"));
        },
        data(socket, chunk) {
          received = Buffer.concat([received, chunk]);
          const response = parse(false);
          if (response) {
            settle(response);
            socket.end();
          }
        },
        close() {
          settle(parse(true) ?? new Error(`connection closed before a complete response (${received.byteLength} bytes)`));
        },
        error(_socket, error) {
          settle(error);
        },
        connectError(_socket, error) {
          settle(error);
        },
      },
    }).catch((e: unknown) => settle(e instanceof Error ? e : new Error(String(e))));
  });
}
