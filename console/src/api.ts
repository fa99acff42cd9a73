/**
 * The console API client (CONSOLE-CONTRACT.md "Routes"): same-origin fetches with the session cookie, the
 * CSRF token on every state-changing request, and errors read from the consumer envelope into an
 * ApiFailure whose message says what to do. A 401 anywhere sends the app back to the sign-in page.
 */

export interface Session {
  account: { id: string; name: string };
  csrf_token: string;
  expires_at: number;
  idle_expires_at: number;
}

export interface Totals {
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  spend_micro_usd: number;
}

export interface Overview {
  balance_micro_usd: number;
  reserved_micro_usd: number;
  days: (Totals & { date: string })[];
  by_model: (Totals & { model: string })[];
  by_key: (Totals & { key_id: string; name: string | null; hint: string })[];
  daily_by_model: { date: string; model: string; spend_micro_usd: number; tokens: number }[];
}

export interface ApiKey {
  id: string;
  name: string | null;
  hint: string;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
  allowed_models: string[] | null;
  spend_cap_micro_usd: number | null;
  spent_micro_usd: number;
  rpm: number | null;
  tpm: number | null;
  self_route_only: boolean;
  link_machines: boolean;
}

export interface NewKey {
  name: string;
  allowed_models?: string[];
  spend_cap_micro_usd?: number;
  rpm?: number;
  tpm?: number;
  self_route_only?: boolean;
  link_machines?: boolean;
}

export interface UsageRow {
  request_id: string;
  started_at: number;
  key_id: string | null;
  key_name: string | null;
  model: string;
  prompt_tokens: number;
  cached_tokens: number;
  completion_tokens: number;
  cost_micro_usd: number;
  outcome: string;
  duration_ms: number | null;
}

export interface Machine {
  id: string;
  name: string | null;
  /** The device token's hint (`umbra-pt-...abcd`), when the answer has one. */
  hint?: string;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  online: boolean;
  trust_level: string | null;
  trust_source: string | null;
  models: string[];
  requests_served: number;
  earnings_micro_usd: number;
}

/** What a machine reported about its trust when it started the login (a level, or the level with a note). */
export type ReportedTrust = string | { level: string | null; verified?: boolean; note?: string } | null;

export interface DeviceLogin {
  user_code: string;
  machine_name: string | null;
  requested_at: number;
  expires_at?: number;
  models: string[];
  trust: ReportedTrust;
}

export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

let csrfToken = "";
let unauthorized: () => void = () => {};

/** The session's CSRF token, sent with every POST. */
export function useCsrf(token: string): void {
  csrfToken = token;
}

/** Called on any 401 (the session ended or expired). */
export function onUnauthorized(handler: () => void): void {
  unauthorized = handler;
}

const WHAT_TO_DO: Readonly<Record<number, string>> = {
  403: "You are not allowed to do this. Reload the page and try again.",
  404: "It does not exist (or no longer does). Reload the page to see the current list.",
  429: "Too many requests. Wait a few seconds and try again.",
  500: "The coordinator failed. Try again; if it keeps failing, tell your operator.",
  503: "The coordinator is not available right now. Try again in a moment.",
};

/** A JSON call; throws ApiFailure (status 0: the coordinator could not be reached). */
export async function api<T>(path: string, options: { method?: "GET" | "POST"; body?: unknown } = {}): Promise<T> {
  const method = options.method ?? "GET";
  const headers: Record<string, string> = { accept: "application/json" };
  if (method !== "GET") headers["x-csrf-token"] = csrfToken;
  if (options.body !== undefined) headers["content-type"] = "application/json";
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    });
  } catch {
    throw new ApiFailure(0, "network", "The coordinator could not be reached. Check your connection and try again.");
  }
  const text = await response.text();
  let body: unknown;
  try {
    body = text === "" ? undefined : JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (response.ok) return body as T;
  const error = (body as { error?: { message?: unknown; code?: unknown } } | undefined)?.error;
  const code = typeof error?.code === "string" ? error.code : `http_${response.status}`;
  const said = typeof error?.message === "string" ? error.message : `HTTP ${response.status}`;
  if (response.status === 401 && path !== "/console/api/session") unauthorized();
  const hint = WHAT_TO_DO[response.status] ?? "";
  throw new ApiFailure(response.status, code, hint === "" ? said : `${said}. ${hint}`);
}

/** Query string from the non-empty values. */
export function query(values: Record<string, string | number | undefined>): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(values)) if (v !== undefined && v !== "") params.set(k, String(v));
  const s = params.toString();
  return s === "" ? "" : `?${s}`;
}
