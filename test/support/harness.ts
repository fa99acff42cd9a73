/**
 * Test harness: a real SQLite file in a temporary folder, the app built through createApp exactly as
 * production does, and helpers to call it in-process. Use with `await using`.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ClusterConfig, type Config, loadConfig } from "../../src/config/config.ts";
import { type App, type AppDeps, type Clock, createApp } from "../../src/coordinator/app.ts";
import { loadLinks } from "../../src/coordinator/links.ts";
import type { FleetView } from "../../src/fleet/fleet-view.ts";
import { createLogger, type Logger } from "../../src/observability/logger.ts";
import { createSqliteStore } from "../../src/store/sqlite/index.ts";
import type { Store } from "../../src/store/types.ts";

export const ADMIN_TOKEN = "test-admin-token-0123456789abcdef0123456789";

export interface TempDir extends Disposable {
  readonly path: string;
}

export function tempDir(prefix = "umbra-test-"): TempDir {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, [Symbol.dispose]: () => rmSync(path, { recursive: true, force: true }) };
}

export interface CallResult {
  readonly status: number;
  readonly headers: Headers;
  /** Parsed JSON, or the text when the body is not JSON. */
  readonly body: unknown;
}

export interface CallOptions {
  readonly token?: string;
  readonly body?: unknown;
  readonly rawBody?: RequestInit["body"];
  readonly headers?: Record<string, string>;
}

export interface TestApp extends AsyncDisposable {
  readonly app: App;
  readonly store: Store;
  readonly config: Config;
  readonly dir: string;
  /** Log lines the app wrote (JSON strings). */
  readonly logs: string[];
  call(method: string, path: string, options?: CallOptions): Promise<CallResult>;
  /** Calls /admin/v1 with the admin token. */
  admin(method: string, path: string, body?: unknown): Promise<CallResult>;
}

export interface TestAppOptions {
  readonly env?: Record<string, string>;
  readonly clock?: Clock;
  readonly fleet?: FleetView;
  readonly logger?: Logger;
  /** The sealed-envelope replay cache's bound (AppDeps.sealedReplayEntries). */
  readonly sealedReplayEntries?: number;
  /** HOST_DATA of the development attestation reports (AppDeps.devHostData). */
  readonly devHostData?: Uint8Array;
  /** The coordinator's own TLS key (AppDeps.tlsPublicKeySpki). */
  readonly tlsPublicKeySpki?: Uint8Array;
  /**
   * Cluster settings put into the loaded config (a SQLite store, which loadConfig would refuse in cluster
   * mode): the shared rate limits' tests, whose replicas share one store.
   */
  readonly cluster?: ClusterConfig;
  /** MDM mode's scheduler timings (AppDeps.mdmTimings). */
  readonly mdmTimings?: AppDeps["mdmTimings"];
}

export async function call(app: App, method: string, path: string, options: CallOptions = {}): Promise<CallResult> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  let body: RequestInit["body"] = options.rawBody;
  if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers["content-type"] ??= "application/json";
  }
  const response = await app.http.handle(new Request(`http://localhost${path}`, { method, headers, body }));
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, body: parsed };
}

export async function testApp(options: TestAppOptions = {}): Promise<TestApp> {
  const dir = tempDir();
  const env = { UMBRA_DB: join(dir.path, "umbra.db"), UMBRA_ADMIN_TOKEN: ADMIN_TOKEN, UMBRA_LOG_LEVEL: "debug", ...options.env };
  let config: Config;
  let store: Store;
  try {
    config = loadConfig({}, env, "development");
    if (options.cluster) config = Object.freeze({ ...config, cluster: options.cluster });
    // As the coordinator opens it (src/coordinator/cli.ts serve): with its settlement journal.
    store = createSqliteStore(config.db, { journal: true });
  } catch (e) {
    dir[Symbol.dispose]();
    throw e;
  }
  const logs: string[] = [];
  const app = createApp({
    config,
    store,
    logger: options.logger ?? createLogger("debug", (line) => logs.push(line)),
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.fleet ? { fleet: options.fleet } : {}),
    ...(options.sealedReplayEntries ? { sealedReplayEntries: options.sealedReplayEntries } : {}),
    ...(options.devHostData ? { devHostData: options.devHostData } : {}),
    ...(options.tlsPublicKeySpki ? { tlsPublicKeySpki: options.tlsPublicKeySpki } : {}),
    ...(options.mdmTimings ? { mdmTimings: options.mdmTimings } : {}),
    links: await loadLinks(config),
  });
  return {
    app,
    store,
    config,
    dir: dir.path,
    logs,
    call: (method, path, o) => call(app, method, path, o),
    admin: (method, path, body) => call(app, method, `/admin/v1${path}`, { token: ADMIN_TOKEN, ...(body === undefined ? {} : { body }) }),
    async [Symbol.asyncDispose]() {
      app.close();
      store.close();
      dir[Symbol.dispose]();
    },
  };
}

/** Seeds an account with credit and returns it with a fresh API key. */
export async function seedAccount(
  t: TestApp,
  key: Record<string, unknown> = {},
  credit = 5_000_000,
): Promise<{ accountId: string; apiKey: string; keyId: string }> {
  const account = await t.app.admin.createAccount({ name: "tester" });
  if (credit > 0) await t.app.admin.creditAccount(account.id, { amount_micro_usd: credit });
  const created = await t.app.admin.createKey({ account_id: account.id, ...key });
  return { accountId: account.id, apiKey: created.key, keyId: created.id };
}

/** A small catalog: two builds, one alias hiding the first build, prices on the alias. */
export async function seedCatalog(t: TestApp): Promise<void> {
  await t.app.admin.upsertModel("org/base-build-4bit", {
    owned_by: "org",
    name: "Base",
    quantization: "4bit",
    context_length: 8192,
    max_output_length: 2048,
  });
  await t.app.admin.upsertModel("other/plain", {});
  await t.app.admin.setAlias("org/model", { build_id: "org/base-build-4bit" });
  await t.app.admin.setPrice("org/model", { input_price: 65_000, output_price: 130_000 });
}
