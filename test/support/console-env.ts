/**
 * The console's data routes for tests: the app on a real SQLite file (harness.ts) behind the coordinator's
 * own server (providers connect, device logins start there), and the console routes on a second real
 * socket (port 0) over the same app, signed in through a fake ConsoleAuth: a session is a cookie value
 * and a CSRF token the test holds. Use `await using env = await consoleEnv()`.
 */
import { randomBytes } from "node:crypto";
import { Elysia } from "elysia";
import { consoleDataRoutes } from "../../src/api/console-data.ts";
import { errorHandling } from "../../src/api/errors.ts";
import type { ConsoleAuth, ConsoleSession } from "../../src/console/types.ts";
import { Errors } from "../../src/errors/api-error.ts";
import { seedCatalog, type TestApp, testApp } from "./harness.ts";
import { startServer, type TestServer } from "./server.ts";

export interface ConsoleAnswer {
  readonly status: number;
  readonly headers: Headers;
  /** Parsed JSON, or the text when the body is not JSON. */
  readonly body: unknown;
  readonly text: string;
  /** The URL called. */
  readonly url: string;
}

export interface SignedIn {
  readonly accountId: string;
  readonly session: ConsoleSession;
}

export interface CallOptions {
  readonly body?: unknown;
  readonly rawBody?: string;
  /** The CSRF header to send: the session's by default; false sends none. */
  readonly csrf?: string | false;
}

export interface ConsoleEnv extends AsyncDisposable {
  readonly t: TestApp;
  /** The coordinator's server (providers, device logins). */
  readonly server: TestServer;
  /** The console routes' server. */
  readonly consoleUrl: string;
  readonly clock: { now: () => number; advance: (ms: number) => void };
  /** A new account with credit, signed in to the console. */
  signIn(name?: string): Promise<SignedIn>;
  /** A request to /console/api with the session's cookie (none when `who` is undefined). */
  call(who: SignedIn | undefined, method: string, path: string, options?: CallOptions): Promise<ConsoleAnswer>;
}

export async function consoleEnv(start = Date.UTC(2027, 2, 10, 12)): Promise<ConsoleEnv> {
  let ms = start;
  const clock = {
    now: () => ms,
    advance: (by: number) => {
      ms += by;
    },
  };
  const t = await testApp({ clock });
  await seedCatalog(t);
  const sessions = new Map<string, ConsoleSession>();
  const auth: ConsoleAuth = {
    async authenticate(request) {
      const cookie = /(?:^|;\s*)umbra_session=([^;]+)/.exec(request.headers.get("cookie") ?? "")?.[1];
      const session = cookie === undefined ? undefined : sessions.get(cookie);
      if (!session) throw Errors.invalidToken("sign in to the console");
      return session;
    },
    requireCsrf(request, session) {
      if (request.headers.get("x-csrf-token") !== session.csrfToken) throw Errors.forbidden("missing or wrong CSRF token");
    },
  };
  const app = new Elysia()
    .use(errorHandling(t.app.logger))
    .use(consoleDataRoutes({ console: t.app.console, auth, logger: t.app.logger, bodyTimeoutMs: 5_000 }));
  const consoleServer = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (request) => app.handle(request) });
  const server = startServer(t);
  const consoleUrl = `http://127.0.0.1:${consoleServer.port}`;
  return {
    t,
    server,
    consoleUrl,
    clock,
    async signIn(name = "holder") {
      const account = await t.app.admin.createAccount({ name });
      await t.app.admin.creditAccount(account.id, { amount_micro_usd: 5_000_000 });
      const id = randomBytes(16).toString("base64url");
      const session = {
        id,
        accountId: account.id,
        csrfToken: randomBytes(16).toString("hex"),
        createdAt: ms,
        expiresAt: ms + 3_600_000,
        idleExpiresAt: ms + 3_600_000,
      };
      sessions.set(id, session);
      return { accountId: account.id, session };
    },
    async call(who, method, path, options = {}) {
      const headers: Record<string, string> = {};
      if (who) headers.cookie = `umbra_session=${who.session.id}`;
      const csrf = options.csrf ?? who?.session.csrfToken;
      if (csrf !== undefined && csrf !== false) headers["x-csrf-token"] = csrf;
      let body = options.rawBody;
      if (options.body !== undefined) {
        body = JSON.stringify(options.body);
        headers["content-type"] = "application/json";
      }
      const url = `${consoleUrl}/console/api${path}`;
      const response = await fetch(url, { method, headers, ...(body === undefined ? {} : { body }) });
      const text = await response.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {}
      return { status: response.status, headers: response.headers, body: parsed, text, url };
    },
    async [Symbol.asyncDispose]() {
      await consoleServer.stop(true);
      await server[Symbol.asyncDispose]();
      await t[Symbol.asyncDispose]();
    },
  };
}
