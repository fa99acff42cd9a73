/**
 * Real processes for end-to-end tests and benchmarks: a coordinator (`serve`, development mode, on a
 * temp database, port 0) seeded over its admin API, `umbra-coordinator dev` with its banner read,
 * providers (`umbra-provider start`), and any coordinator command run to its exit. Every handle is
 * AsyncDisposable: `await using` kills the process and removes its files.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";

export const ROOT = join(import.meta.dir, "../..");
export const BUN = join(ROOT, "node_modules/.bin/bun");
const ADMIN = "process-admin-token-0123456789abcdef0123456789";

/**
 * Reads a process's stream until `pattern` matches; returns the first group. Keeps draining after,
 * handing `keep` every piece of text read (before and after the match).
 */
async function waitForLine(
  stream: ReadableStream<Uint8Array>,
  pattern: RegExp,
  what: string,
  keep?: (text: string) => void,
): Promise<string> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`${what} exited before it was ready:\n${text.slice(-2000)}`);
    const piece = decoder.decode(value, { stream: true });
    keep?.(piece);
    text += piece;
    const match = pattern.exec(text);
    if (match) {
      void (async () => {
        for (;;) {
          const next = await reader.read().catch(() => ({ done: true as const, value: undefined }));
          if (next.done) return;
          keep?.(decoder.decode(next.value, { stream: true }));
        }
      })();
      return match[1] ?? match[0];
    }
  }
}

export interface CoordinatorProcess extends AsyncDisposable {
  readonly url: string;
  /** The fields of its `coordinator listening` log line. */
  readonly started: Readonly<Record<string, unknown>>;
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;
  readonly dir: string;
  /** Everything it has written to stderr (its log) so far. */
  log(): string;
  admin<T = Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<T>;
  /** Creates an account with credit, a key, and a provider token; registers each build (no prices). */
  seed(
    builds: readonly string[],
    key?: Record<string, unknown>,
    credit?: number,
  ): Promise<{ apiKey: string; providerToken: string; accountId: string }>;
}

/**
 * `dir`: an existing folder whose umbra.db to use (a restart); the caller then owns and removes it.
 * `db`: another database (a Postgres URL) instead of the folder's umbra.db. `listen`: instead of 127.0.0.1:0.
 */
export async function startCoordinator(
  env: Record<string, string> = {},
  options: { dir?: string; db?: string; listen?: string } = {},
): Promise<CoordinatorProcess> {
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), "umbra-proc-"));
  const db = options.db ?? join(dir, "umbra.db");
  const proc = Bun.spawn([BUN, join(ROOT, "src/coordinator/main.ts"), "serve", "--listen", options.listen ?? "127.0.0.1:0", "--db", db], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? dir,
      UMBRA_MODE: "development",
      UMBRA_ADMIN_TOKEN: ADMIN,
      UMBRA_LOG_LEVEL: "info",
      ...env,
    },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let log = "";
  const started = JSON.parse(
    await waitForLine(proc.stderr, /(\{[^\n]*"msg":"coordinator listening"[^\n]*\})\n/, "coordinator", (text) => {
      log += text;
    }),
  ) as Record<string, unknown>;
  const url = String(started.url);
  const admin = adminClient(url, ADMIN);
  return {
    url,
    started,
    proc,
    dir,
    log: () => log,
    admin,
    async seed(builds, key = {}, credit = 1_000_000_000) {
      const account = await admin<{ id: string }>("POST", "/accounts", { name: "e2e" });
      await admin("POST", `/accounts/${account.id}/credit`, { amount_micro_usd: credit });
      for (const b of builds) await admin("PUT", `/models/${b}`, {});
      const created = await admin<{ key: string }>("POST", "/keys", { account_id: account.id, ...key });
      const token = await admin<{ token: string }>("POST", "/provider-tokens", { account_id: account.id });
      return { apiKey: created.key, providerToken: token.token, accountId: account.id };
    },
    async [Symbol.asyncDispose]() {
      proc.kill("SIGKILL");
      await proc.exited;
      if (!options.dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface Exited {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `umbra-coordinator ARGS` from source in `cwd` (default: the checkout) with no UMBRA_* variables but `env`, to its exit. */
export async function runCoordinator(
  args: readonly string[],
  options: { cwd?: string; env?: Record<string, string> } = {},
): Promise<Exited> {
  const proc = Bun.spawn([BUN, join(ROOT, "src/coordinator/main.ts"), ...args], {
    cwd: options.cwd ?? ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...options.env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

export interface DevProcess extends AsyncDisposable {
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;
  /** What the banner printed. */
  readonly url: string;
  readonly apiKey: string;
  readonly adminToken: string;
  /** The console sign-in link for the demo account. */
  readonly consoleLink: string;
  admin<T = Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<T>;
}

/** `umbra-coordinator dev` on `db`, port 0; resolves once its banner is printed (its provider is connected). */
export async function startDev(db: string): Promise<DevProcess> {
  const proc = Bun.spawn([BUN, join(ROOT, "src/coordinator/main.ts"), "dev", "--listen", "127.0.0.1:0", "--db", db], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", UMBRA_LOG_LEVEL: "warn" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  // Drained all along (a full pipe would stall the process); shown when it exits before its banner.
  const stderr = new Response(proc.stderr).text();
  const banner = await waitForLine(
    proc.stdout,
    /(Umbra development coordinator on [\s\S]*Press Ctrl-C to stop\.)/,
    "umbra-coordinator dev",
  ).catch(async (e: unknown) => {
    throw new Error(`${e instanceof Error ? e.message : String(e)}\nstderr:\n${(await stderr).slice(-2000)}`);
  });
  const field = (pattern: RegExp) => {
    const value = pattern.exec(banner)?.[1];
    if (value === undefined) throw new Error(`the dev banner has no ${pattern}:\n${banner}`);
    return value;
  };
  const url = field(/coordinator on (http:\/\/\S+)/);
  const adminToken = field(/Admin token: +(\S+)/);
  return {
    proc,
    url,
    apiKey: field(/Demo API key: +(\S+)/),
    adminToken,
    consoleLink: field(/Console: +(\S+)/),
    admin: adminClient(url, adminToken),
    async [Symbol.asyncDispose]() {
      proc.kill("SIGKILL");
      await proc.exited;
    },
  };
}

/** Calls a coordinator's admin API with `token`; throws on any status but 2xx. A self-signed https coordinator's certificate is not checked (tests). */
export function adminClient(url: string, token: string) {
  return async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const response = await fetch(`${url}/admin/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      ...(url.startsWith("https:") ? { tls: { rejectUnauthorized: false } } : {}),
    });
    if (!response.ok) throw new Error(`admin ${method} ${path}: ${response.status} ${await response.text()}`);
    return (await response.json()) as T;
  };
}

export interface ProviderProcess extends AsyncDisposable {
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;
  /** Resolves when the coordinator has welcomed the provider. */
  readonly connected: Promise<string>;
  /** Everything it wrote to stderr so far. */
  log(): string;
}

/** Starts `umbra-provider start` with the given flags (coordinator and token included by the caller). */
export function startProvider(args: readonly string[], env: Record<string, string> = {}): ProviderProcess {
  const home = mkdtempSync(join(tmpdir(), "umbra-provider-home-"));
  const proc = Bun.spawn([BUN, join(ROOT, "src/provider/main.ts"), "start", ...args], {
    cwd: ROOT,
    // Each provider gets its own folder (pid, state and log files; one `start` per folder).
    env: {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? tmpdir(),
      UMBRA_PROVIDER_HOME: home,
      ...env,
    },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let log = "";
  const connected = waitForLine(proc.stderr, /"msg":"connected to coordinator","provider_id":"([^"]+)"/, "provider", (text) => {
    log += text;
  });
  connected.catch(() => {});
  return {
    proc,
    connected,
    log: () => log,
    async [Symbol.asyncDispose]() {
      proc.kill("SIGKILL");
      await proc.exited;
      rmSync(home, { recursive: true, force: true });
    },
  };
}
