/**
 * Shared helpers of the reliability suite's fault files (provider faults, consumer faults, restart):
 *
 * - `coordinatorProcess`: a real `umbra-coordinator serve` process (development mode, its own SQLite
 *   file), optionally on a fixed port and an existing folder, so that a restart comes back at the same
 *   address (a provider process then reconnects by itself). `seed(build)` gives each case its own
 *   account, key, provider token and build, so cases share one process without seeing each other.
 * - Money read back two ways: the running coordinator's live holds (admin API, `reserved_micro_usd`) and
 *   the durable rows (the SQLite file opened read-only: usage rows with their outcome, ledger sums).
 * - `Coordinator.rssKiB()`: its resident memory (bench/lib/proc.ts), for bounds that fail
 *   when memory grows with the volume of data.
 * - `rawConnection`: a TCP client that can send half a request, stop reading (TCP backpressure) and
 *   read a chunked HTTP response; `parseHttp` decodes what it received.
 * - `connectFlooder`: a provider sending large chunk frames as fast as its socket drains, obeying
 *   cancel or not.
 * - `providerState`: a real provider process's state file (its `active` attempts).
 *
 * Never prints prompt or completion text: diagnostics are statuses, counts and log tails.
 */
import { Database } from "bun:sqlite";
import { expect } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { rssKiB } from "../../bench/lib/proc.ts";
import type { ChatMessage } from "../../src/protocol/chat-messages.ts";
import type { Inference } from "../../src/protocol/frames.ts";
import { parseCoordinatorFrame } from "../../src/protocol/parse.ts";
import { type Behaviour, connectFakeProvider, echo, type FakeProvider } from "../support/fake-provider.ts";
import { adminClient, BUN, ROOT } from "../support/processes.ts";
import { waitFor } from "../support/wait.ts";

const ADMIN = "reliability-admin-token-0123456789abcdef012345";
/** $1,000: enough that no case runs out; cases compare balances, never absolute amounts. */
export const CREDIT = 1_000_000_000;

export interface Tenant {
  /** The consumer's account (its API key's). */
  readonly accountId: string;
  readonly apiKey: string;
  /** A provider device token on another account, so that earnings never mix with the consumer's money. */
  readonly providerToken: string;
  readonly providerAccountId: string;
  readonly build: string;
}

export interface Money {
  /** Durable balance (admin API). */
  readonly balance: number;
  /** Live holds of the running coordinator. */
  readonly reserved: number;
}

export interface UsageRow {
  readonly request_id: string;
  readonly outcome: string;
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly cost_micro_usd: number;
}

export interface Books {
  readonly account_id: string;
  readonly balance: number;
  readonly reserved: number;
  readonly ledger: number;
}

export interface Coordinator extends AsyncDisposable {
  readonly url: string;
  readonly port: number;
  readonly dir: string;
  readonly proc: Subprocess<"ignore", "ignore", "pipe">;
  /** The last lines the process wrote to stderr (JSON log lines; never content). */
  readonly logTail: () => string[];
  admin<T = Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<T>;
  /** A fresh consumer account with credit and an API key, a provider account and token, a build (no price). */
  seed(build: string, credit?: number): Promise<Tenant>;
  money(accountId: string): Promise<Money>;
  /** Durable usage rows of an account (read-only view of the database). */
  usage(accountId: string): UsageRow[];
  /** Durable charge entries (negative amounts) of an account by request id. */
  charges(accountId: string): Map<string, number>;
  /** Every account's durable balance, stored reservation and ledger sum. */
  books(): Books[];
  rssKiB(): number;
  /** Stops the process with `signal` and waits for it; resolves to its exit code. */
  stop(signal: "SIGKILL" | "SIGTERM"): Promise<number>;
}

/** Reads `stream` line by line into `lines` (bounded), resolving `ready` with the first match of `pattern`. */
function watchLines(stream: ReadableStream<Uint8Array>, lines: string[], pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    void (async () => {
      const decoder = new TextDecoder();
      let partial = "";
      let found = false;
      for await (const bytes of stream) {
        partial += decoder.decode(bytes, { stream: true });
        const parts = partial.split("\n");
        partial = parts.pop() ?? "";
        for (const line of parts) {
          lines.push(line);
          if (lines.length > 200) lines.shift();
          const match = found ? null : pattern.exec(line);
          if (match) {
            found = true;
            resolve(match[1] ?? match[0]);
          }
        }
      }
      if (!found) reject(new Error(`coordinator exited before it was ready:\n${lines.slice(-20).join("\n")}`));
    })();
  });
}

/**
 * A coordinator process. `dir`: an existing folder whose umbra.db to use (a restart; the caller then
 * owns it); `port`: listen there instead of a free port (a restart at the same address).
 */
export async function coordinatorProcess(
  options: { env?: Record<string, string>; dir?: string; port?: number } = {},
): Promise<Coordinator> {
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), "umbra-reliability-"));
  const dbPath = join(dir, "umbra.db");
  const proc = Bun.spawn(
    [BUN, join(ROOT, "src/coordinator/main.ts"), "serve", "--listen", `127.0.0.1:${options.port ?? 0}`, "--db", dbPath],
    {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? dir,
        UMBRA_MODE: "development",
        UMBRA_ADMIN_TOKEN: ADMIN,
        UMBRA_LOG_LEVEL: "info",
        ...options.env,
      },
      stdin: "ignore",
      stdout: "ignore",
      stderr: "pipe",
    },
  );
  const lines: string[] = [];
  const url = await watchLines(proc.stderr, lines, /"msg":"coordinator listening","url":"(http:\/\/[^"]+)"/);
  const port = Number(new URL(url).port);
  let db: Database | undefined;
  const read = () => {
    db ??= new Database(dbPath, { readonly: true });
    return db;
  };
  const admin = adminClient(url, ADMIN);
  let stopped: Promise<number> | undefined;
  const stop = (signal: "SIGKILL" | "SIGTERM") => {
    stopped ??= (async () => {
      proc.kill(signal);
      const code = await proc.exited;
      db?.close();
      db = undefined;
      return code;
    })();
    return stopped;
  };
  return {
    url,
    port,
    dir,
    proc,
    logTail: () => [...lines],
    admin,
    async seed(build, credit = CREDIT) {
      const account = await admin<{ id: string }>("POST", "/accounts", { name: "reliability" });
      await admin("POST", `/accounts/${account.id}/credit`, { amount_micro_usd: credit });
      await admin("PUT", `/models/${build}`, {});
      const key = await admin<{ key: string }>("POST", "/keys", { account_id: account.id });
      const machine = await admin<{ id: string }>("POST", "/accounts", { name: "reliability machine" });
      const token = await admin<{ token: string }>("POST", "/provider-tokens", { account_id: machine.id });
      return { accountId: account.id, apiKey: key.key, providerToken: token.token, providerAccountId: machine.id, build };
    },
    async money(accountId) {
      const a = await admin<{ balance_micro_usd: number; reserved_micro_usd: number }>("GET", `/accounts/${accountId}`);
      return { balance: a.balance_micro_usd, reserved: a.reserved_micro_usd };
    },
    usage(accountId) {
      return read()
        .query<UsageRow, [string]>(
          "SELECT request_id, outcome, prompt_tokens, completion_tokens, cost_micro_usd FROM usage WHERE account_id = ? ORDER BY started_at",
        )
        .all(accountId);
    },
    charges(accountId) {
      const rows = read()
        .query<{ request_id: string; amount: number }, [string]>(
          "SELECT request_id, amount_micro_usd AS amount FROM ledger_entries WHERE account_id = ? AND kind = 'charge'",
        )
        .all(accountId);
      return new Map(rows.map((r) => [r.request_id, -r.amount]));
    },
    books() {
      return read()
        .query<Books, []>(
          `SELECT b.account_id, b.balance_micro_usd AS balance, b.reserved_micro_usd AS reserved,
                  COALESCE((SELECT SUM(l.amount_micro_usd) FROM ledger_entries l WHERE l.account_id = b.account_id), 0) AS ledger
           FROM balances b ORDER BY b.account_id`,
        )
        .all();
    },
    rssKiB: () => rssKiB(proc.pid),
    stop,
    async [Symbol.asyncDispose]() {
      await stop("SIGKILL");
      if (!options.dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Waits until the durable usage rows of `accountId` number `count`; returns them. */
export function usageRows(c: Coordinator, accountId: string, count: number): Promise<UsageRow[]> {
  return waitFor(() => {
    const rows = c.usage(accountId);
    return rows.length >= count ? rows : undefined;
  }, `${count} usage row(s)`);
}

/** Waits until the account holds nothing (every reservation released); returns its money. */
export function released(c: Coordinator, accountId: string): Promise<Money> {
  return waitFor(async () => {
    const m = await c.money(accountId);
    return m.reserved === 0 ? m : undefined;
  }, "every reservation released");
}

/**
 * After a fault: no hold left for `t`, its durable balance is the credit less exactly the costs of its
 * usage rows, its charges are those costs, and every account's books balance. Waits for the settlement
 * writer to catch up (the values are read from several queries).
 */
export async function settledExactly(c: Coordinator, t: Tenant, credit = CREDIT): Promise<void> {
  await released(c, t.accountId);
  const state = () => {
    const costs = c.usage(t.accountId).reduce((sum, r) => sum + r.cost_micro_usd, 0);
    const charged = [...c.charges(t.accountId).values()].reduce((sum, n) => sum + n, 0);
    const balance = c.books().find((b) => b.account_id === t.accountId)?.balance;
    return { balance, charged, expected: { balance: credit - costs, charged: costs } };
  };
  await waitFor(() => {
    const s = state();
    return s.balance === s.expected.balance && s.charged === s.expected.charged;
  }, "the settlement to be durable").catch(() => undefined);
  const s = state();
  expect({ balance: s.balance, charged: s.charged }).toEqual(s.expected);
  expect(unbalanced(c)).toEqual([]);
}

/** Every account's ledger sums to its balance, and nothing is stored as reserved. */
export function unbalanced(c: Coordinator): Books[] {
  return c.books().filter((b) => b.ledger !== b.balance || b.reserved !== 0);
}

export function chat(url: string, tenant: Tenant, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${tenant.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: tenant.build, ...body }),
    ...(signal ? { signal } : {}),
  });
}

export const messages = (content: string): ChatMessage[] => [{ role: "user", content }];

/** `{error: {message, type, code}}` with the given type and code (message: any string). */
export function envelope(type: string, code: string) {
  return { error: { message: expect.any(String), type, code } };
}

/** The content of an event stream's chunks, the data of its last event, and how many [DONE] it had. */
export function streamed(data: readonly string[]): { content: string; last: unknown; done: number } {
  let content = "";
  for (const d of data) {
    if (d === "[DONE]") continue;
    const chunk = JSON.parse(d) as { choices?: { delta?: { content?: string } }[] };
    content += chunk.choices?.[0]?.delta?.content ?? "";
  }
  const last = data.at(-1);
  return {
    content,
    last: last === undefined || last === "[DONE]" ? last : JSON.parse(last),
    done: data.filter((d) => d === "[DONE]").length,
  };
}

/** A healthy ordinary request to `tenant`'s build is answered (the coordinator keeps serving). */
export async function servesNormally(url: string, tenant: Tenant, stream = false): Promise<void> {
  const response = await chat(url, tenant, { messages: messages("still serving"), stream });
  if (response.status !== 200) throw new Error(`expected 200, got ${response.status}: ${await response.text()}`);
  if (stream) {
    const text = await response.text();
    if (!text.endsWith("data: [DONE]\n\n")) throw new Error("the stream did not end with [DONE]");
  } else {
    const body = (await response.json()) as { choices: { finish_reason: string }[] };
    if (!body.choices[0]?.finish_reason) throw new Error("the answer has no finish_reason");
  }
}

// ---------------------------------------------------------------------------------------------------
// Raw TCP connections

export interface RawConnection {
  write(data: string | Uint8Array): void;
  /** Stop reading: the peer's writes fill the socket buffers (TCP backpressure). */
  pause(): void;
  resume(): void;
  /** Every byte received so far. */
  received(): Buffer;
  /** Resolves when the connection closed (either side). */
  readonly closed: Promise<void>;
  readonly isClosed: () => boolean;
  close(): void;
  /**
   * The state of the server's end of this connection as the kernel reports it (/proc/net/tcp, IPv4):
   * "established", "closing" once the server closed it (whether or not its unsent bytes reached us yet),
   * or "gone".
   */
  serverEnd(): Promise<"established" | "closing" | "gone">;
}

/** Opens a TCP connection to the host of `url`. `paused`: do not read anything until `resume()`. */
export async function rawConnection(url: string, options: { paused?: boolean } = {}): Promise<RawConnection> {
  const { hostname, port } = new URL(url);
  const chunks: Buffer[] = [];
  let isClosed = false;
  let markClosed: () => void = () => {};
  const closed = new Promise<void>((resolve) => {
    markClosed = () => {
      isClosed = true;
      resolve();
    };
  });
  const socket = await Bun.connect({
    hostname,
    port: Number(port),
    socket: {
      data(_s, chunk) {
        chunks.push(Buffer.from(chunk));
      },
      close() {
        markClosed();
      },
      error() {
        markClosed();
      },
      end(s) {
        s.end();
        markClosed();
      },
    },
  });
  if (options.paused) socket.pause();
  return {
    write(data) {
      socket.write(data);
    },
    pause: () => void socket.pause(),
    resume: () => void socket.resume(),
    received: () => Buffer.concat(chunks),
    closed,
    isClosed: () => isClosed,
    close() {
      socket.end();
    },
    async serverEnd() {
      // Rows are "sl local rem st ...", addresses as hex IP:hex port; the server's end is local=server.
      const hexPort = (n: number) => n.toString(16).toUpperCase().padStart(4, "0");
      const local = `:${hexPort(Number(port))}`;
      const remote = `:${hexPort(socket.localPort)}`;
      const rows = (await Bun.file("/proc/net/tcp").text()).split("\n").map((line) => line.trim().split(/\s+/));
      const row = rows.find((f) => f[1]?.endsWith(local) && f[2]?.endsWith(remote));
      if (row === undefined) return "gone";
      return row[3] === TCP_ESTABLISHED ? "established" : "closing";
    },
  };
}

const TCP_ESTABLISHED = "01";

export interface ParsedHttp {
  readonly status: number;
  readonly headers: Headers;
  /** The body so far (de-chunked). */
  readonly body: string;
  /** True when the terminating chunk (or the whole declared length) was received. */
  readonly complete: boolean;
}

/** Decodes one HTTP/1.1 response from raw bytes; undefined until the head is complete. */
export function parseHttp(raw: Buffer): ParsedHttp | undefined {
  const split = raw.indexOf("\r\n\r\n");
  if (split < 0) return undefined;
  const lines = raw.subarray(0, split).toString("latin1").split("\r\n");
  const status = Number(lines[0]?.split(" ")[1]);
  const headers = new Headers();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
  }
  const rest = raw.subarray(split + 4);
  if (headers.get("transfer-encoding")?.toLowerCase() !== "chunked") {
    const length = Number(headers.get("content-length") ?? rest.byteLength);
    return { status, headers, body: rest.subarray(0, length).toString("utf8"), complete: rest.byteLength >= length };
  }
  const parts: Buffer[] = [];
  let at = 0;
  let complete = false;
  for (;;) {
    const eol = rest.indexOf("\r\n", at);
    if (eol < 0) break;
    const size = Number.parseInt(rest.subarray(at, eol).toString("latin1"), 16);
    if (size === 0) {
      complete = true;
      break;
    }
    if (rest.byteLength < eol + 2 + size + 2) break;
    parts.push(rest.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return { status, headers, body: Buffer.concat(parts).toString("utf8"), complete };
}

/** The bytes of a chat request (HTTP/1.1, keep-alive off) for `tenant`. */
export function chatRequestBytes(url: string, tenant: Tenant, body: Record<string, unknown>): { head: string; body: Buffer } {
  const { host } = new URL(url);
  const payload = Buffer.from(JSON.stringify({ model: tenant.build, ...body }));
  const head = [
    "POST /v1/chat/completions HTTP/1.1",
    `host: ${host}`,
    `authorization: Bearer ${tenant.apiKey}`,
    "content-type: application/json",
    `content-length: ${payload.byteLength}`,
    "connection: close",
  ].join("\r\n");
  return { head: `${head}\r\n\r\n`, body: payload };
}

// ---------------------------------------------------------------------------------------------------
// Providers

export interface Flooder extends AsyncDisposable {
  /** Inference frames received, in order. */
  readonly inferences: Inference[];
  /** Cancel frames received, in order. */
  readonly cancels: { request_id: string; reason: string }[];
  readonly closed: Promise<{ code: number }>;
  /**
   * Sends chunk frames of `frameChars` characters for `inf`, seq from `firstSeq`, until `until()` or
   * `maxChars` in total, keeping at most 1 MiB queued in this client (so that what was sent is what
   * the coordinator could read); returns the characters sent.
   */
  flood(inf: Inference, options: { frameChars: number; maxChars: number; until?: () => boolean; firstSeq?: number }): Promise<number>;
  send(frame: Record<string, unknown>): void;
}

/**
 * A provider on a plaintext session for `t.build` that accepts every attempt; an attempt whose last
 * message is not "flood" is answered at once (echo of the message, usage 3 + 2); a "flood" attempt is
 * left to the test, which calls `flood`. It keeps sending after a cancel if told to (a misbehaving
 * provider): the coordinator must then ignore the frames.
 */
export async function connectFlooder(url: string, t: Tenant): Promise<Flooder> {
  const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/provider/connect`, {
    headers: { authorization: `Bearer ${t.providerToken}` },
  } as unknown as string[]);
  const inferences: Inference[] = [];
  const cancels: { request_id: string; reason: string }[] = [];
  let heartbeat: ReturnType<typeof setInterval> | undefined;
  let welcomed: () => void = () => {};
  const welcome = new Promise<void>((resolve) => {
    welcomed = resolve;
  });
  const closed = new Promise<{ code: number }>((resolve) => {
    ws.addEventListener("close", (e) => {
      clearInterval(heartbeat);
      resolve({ code: e.code });
    });
  });
  const send = (frame: Record<string, unknown>) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(frame));
  };
  ws.addEventListener("message", (e) => {
    const frame = parseCoordinatorFrame(String(e.data));
    if (frame.type === "welcome") {
      heartbeat = setInterval(
        () => send({ type: "heartbeat", status: "serving", warm_models: [t.build], active: 0, queued: 0 }),
        frame.heartbeat_interval_ms,
      );
      welcomed();
    } else if (frame.type === "cancel") {
      cancels.push({ request_id: frame.request_id, reason: frame.reason });
    } else if (frame.type === "inference") {
      inferences.push(frame);
      const ids = { request_id: frame.request_id, attempt: frame.attempt };
      send({ type: "accepted", ...ids });
      const content = frame.request.messages.at(-1)?.content ?? "";
      if (content !== "flood") {
        send({ type: "chunk", ...ids, seq: 0, delta: { content } });
        send({ type: "complete", ...ids, seq: 1, finish_reason: "stop", usage: { prompt_tokens: 3, completion_tokens: 2 } });
      }
    }
  });
  await new Promise<void>((resolve, reject) => {
    ws.addEventListener("open", () => resolve(), { once: true });
    ws.addEventListener("error", () => reject(new Error("the flooding provider could not connect")), { once: true });
  });
  send({
    type: "hello",
    protocol_versions: [2],
    provider_version: "test",
    engine: "flood",
    models: [{ build_id: t.build }],
    max_concurrency: 8,
  });
  await welcome;
  return {
    inferences,
    cancels,
    closed,
    send,
    async flood(inf, options) {
      const text = "x".repeat(options.frameChars);
      let seq = options.firstSeq ?? 0;
      let sent = 0;
      while (sent < options.maxChars && !options.until?.() && ws.readyState === WebSocket.OPEN) {
        if (ws.bufferedAmount > 1024 * 1024) {
          await new Promise((resolve) => setImmediate(resolve));
          continue;
        }
        ws.send(JSON.stringify({ type: "chunk", request_id: inf.request_id, attempt: inf.attempt, seq: seq++, delta: { content: text } }));
        sent += text.length;
        // Let frames (a cancel) arrive between sends.
        if (seq % 8 === 0) await new Promise((resolve) => setImmediate(resolve));
      }
      return sent;
    },
    async [Symbol.asyncDispose]() {
      clearInterval(heartbeat);
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close();
      await closed;
    },
  };
}

export const isInference = (f: { type: string }): f is Inference => f.type === "inference";
export const isCancel = (reason: string) => (f: { type: string; reason?: string }) => f.type === "cancel" && f.reason === reason;

/** The completion tokens charged for relayed text when the provider reported no usage (billing.ts: 4 characters a token). */
export const estimatedTokens = (chars: number) => Math.ceil(chars / 4);

/** The state file of a real provider process started with UMBRA_PROVIDER_HOME = `home`. */
export function providerState(home: string): { active: number; connected: boolean } | undefined {
  try {
    return JSON.parse(readFileSync(join(home, "state.json"), "utf8")) as { active: number; connected: boolean };
  } catch {
    return undefined;
  }
}

/** A folder for a provider process's home (pid and state files); removed with `using`. */
export function providerHome(): { path: string } & Disposable {
  const path = mkdtempSync(join(tmpdir(), "umbra-reliability-provider-"));
  return { path, [Symbol.dispose]: () => rmSync(path, { recursive: true, force: true }) };
}

/** Scripted providers for one case, all disconnected when the case ends (`await using`). */
export interface Fakes extends AsyncDisposable {
  connect(t: Tenant, behave?: Behaviour, options?: { maxConcurrency?: number }): Promise<FakeProvider>;
}

export function fakes(url: string): Fakes {
  const all: FakeProvider[] = [];
  return {
    async connect(t, behave = echo, options = {}) {
      const p = await connectFakeProvider({ url, token: t.providerToken, models: [t.build], behave, ...options });
      all.push(p);
      return p;
    },
    async [Symbol.asyncDispose]() {
      for (const p of all.splice(0)) await p[Symbol.asyncDispose]();
    },
  };
}
