/**
 * NanoMDM's command API (micromdm/nanomdm `http/api`, `docs/openapi.yaml`), the two calls the coordinator
 * makes, with HTTP Basic `nanomdm:<api key>`:
 *   PUT /v1/enqueue/{id}  body: a raw command plist; 200 {"status":{id:{"push_result"}},"command_uuid","request_type"}
 *                         (with ?nopush=1: {"no_push":true,...}); 500 when it failed: `command_error` (nothing
 *                         queued; an enrolment NanoMDM has no row for yet gives its storage's foreign-key
 *                         error: retry later) or `push_error` / a status `push_error` (queued, not pushed)
 *   GET /v1/push/{id}     200 {"status":{id:{"push_result"}}}; 500 with `push_error` when it failed
 * A 401 (wrong key) and an unreachable server throw NanoMdmError. Error texts never carry the key.
 */

export class NanoMdmError extends Error {
  override readonly name = "NanoMdmError";
}

export interface EnqueueResult {
  /** The command is in the enrolment's queue. */
  readonly enqueued: boolean;
  /** An APNs push was sent for it. */
  readonly pushed: boolean;
  readonly status: number;
  /** NanoMDM's error text (storage or push), when it gave one. */
  readonly error?: string;
}

export interface PushResult {
  readonly pushed: boolean;
  readonly status: number;
  readonly error?: string;
}

export interface NanoMdmClientOptions {
  readonly url: string;
  readonly apiKey: string;
  /** Bound on one call (default 10 s). */
  readonly timeoutMs?: number;
  readonly fetch?: (input: string, init: RequestInit) => Promise<Response>;
}

interface ApiResult {
  readonly status?: Record<string, { push_result?: string; push_error?: string; command_error?: string }>;
  readonly no_push?: boolean;
  readonly push_error?: string;
  readonly command_error?: string;
}

export class NanoMdmClient {
  private readonly base: string;
  private readonly authorization: string;
  private readonly timeoutMs: number;
  private readonly fetch: (input: string, init: RequestInit) => Promise<Response>;

  constructor(options: NanoMdmClientOptions) {
    this.base = options.url.replace(/\/+$/, "");
    this.authorization = `Basic ${Buffer.from(`nanomdm:${options.apiKey}`).toString("base64")}`;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.fetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  /** Queues a raw command plist for one enrolment and pushes (unless `noPush`). Throws NanoMdmError. */
  async enqueue(id: string, command: string, options: { noPush?: boolean } = {}): Promise<EnqueueResult> {
    const query = options.noPush ? "?nopush=1" : "";
    const { status, body } = await this.call("PUT", `/v1/enqueue/${encodeURIComponent(id)}${query}`, command);
    const mine = body.status?.[id];
    const commandError = body.command_error ?? mine?.command_error;
    const pushError = body.push_error ?? mine?.push_error;
    const error = commandError ?? pushError;
    return {
      // A 500 with only a push error still queued the command; one with no error text is unknown: not queued.
      enqueued: commandError === undefined && (status === 200 || status === 207 || (status === 500 && pushError !== undefined)),
      pushed: status === 200 && body.no_push !== true && mine?.push_result !== undefined,
      status,
      ...(error !== undefined ? { error } : {}),
    };
  }

  /** Sends an APNs push to one enrolment (it then fetches its queue). Throws NanoMdmError. */
  async push(id: string): Promise<PushResult> {
    const { status, body } = await this.call("GET", `/v1/push/${encodeURIComponent(id)}`);
    const mine = body.status?.[id];
    const error = body.push_error ?? mine?.push_error;
    return { pushed: status === 200 && mine?.push_result !== undefined, status, ...(error !== undefined ? { error } : {}) };
  }

  private async call(method: string, path: string, body?: string): Promise<{ status: number; body: ApiResult }> {
    let response: Response;
    try {
      response = await this.fetch(`${this.base}${path}`, {
        method,
        headers: { authorization: this.authorization, ...(body !== undefined ? { "content-type": "application/x-plist" } : {}) },
        ...(body !== undefined ? { body } : {}),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (e) {
      throw new NanoMdmError(`NanoMDM ${method} ${path.split("/").slice(0, 3).join("/")} failed: ${e instanceof Error ? e.name : "error"}`);
    }
    if (response.status === 401) throw new NanoMdmError("NanoMDM refused the API key (401)");
    const text = await response.text().catch(() => "");
    let parsed: unknown;
    try {
      parsed = text === "" ? {} : JSON.parse(text);
    } catch {
      parsed = {};
    }
    const result = typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? (parsed as ApiResult) : {};
    return { status: response.status, body: result };
  }
}
