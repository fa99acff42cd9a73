/**
 * The error boundary (DESIGN.md section 5): invalid JSON becomes 400 invalid_json, and anything thrown
 * that is not an ApiError becomes 500 server_error / internal_error without its message, in the body and
 * in the logs.
 */
import { describe, expect, test } from "bun:test";
import { createApp } from "../../src/coordinator/app.ts";
import { createLogger } from "../../src/observability/logger.ts";
import type { Store } from "../../src/store/types.ts";
import { ADMIN_TOKEN, call, seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";

const SECRET = "secret-detail";
const INTERNAL = { error: { message: "internal server error", type: "server_error", code: "internal_error" } };

function boom(): never {
  throw new Error(SECRET);
}

/** Builds a second app over the harness's real store with some store methods replaced by throwing ones. */
function failingApp(t: TestApp, patch: (store: Store) => Store) {
  const logs: string[] = [];
  const app = createApp({ config: t.config, store: patch(t.store), logger: createLogger("debug", (line) => logs.push(line)) });
  return { app, logs };
}

describe("invalid JSON", () => {
  test.each([
    ["a broken object", "{not json"],
    ["a truncated object", '{"name": "x"'],
    ["trailing text", '{"name": "x"} extra'],
    ["a bare word", "hello"],
  ])("%s on an admin POST -> 400 invalid_json", async (_, raw) => {
    await using t = await testApp();
    const r = await t.call("POST", "/admin/v1/accounts", {
      token: ADMIN_TOKEN,
      rawBody: raw,
      headers: { "content-type": "application/json" },
    });
    expect(r.status).toBe(400);
    expect(r.headers.get("content-type")).toStartWith("application/json");
    expect(r.body).toEqual({ error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_json" } });
    expect(JSON.stringify(r.body)).not.toContain(raw);
    expect((await t.app.admin.listAccounts()).data).toEqual([]);
  });

  test("invalid JSON without a JSON content type is the same 400", async () => {
    await using t = await testApp();
    const r = await t.call("POST", "/admin/v1/keys", { token: ADMIN_TOKEN, rawBody: "{oops", headers: { "content-type": "text/plain" } });
    expect(r.status).toBe(400);
    expect((r.body as { error: { code: string } }).error.code).toBe("invalid_json");
  });

  test("a body that breaks off while it is read (the client went away) -> 400 invalid_json, not a 500", async () => {
    await using t = await testApp();
    const { apiKey } = await seedAccount(t);
    const brokenBody = () =>
      new ReadableStream<Uint8Array>({
        start: (controller) => controller.enqueue(new TextEncoder().encode('{"model":')),
        pull: (controller) => controller.error(new Error("connection reset")),
      });
    for (const [path, token] of [
      ["/v1/chat/completions", apiKey],
      ["/admin/v1/accounts", ADMIN_TOKEN],
    ] as const) {
      for (const length of [undefined, "100"]) {
        const headers: Record<string, string> = { authorization: `Bearer ${token}`, "content-type": "application/json" };
        if (length !== undefined) headers["content-length"] = length;
        const init: RequestInit = { method: "POST", headers, body: brokenBody(), duplex: "half" };
        const response = await t.app.http.handle(new Request(`http://localhost${path}`, init));
        expect({ path, length, status: response.status, body: await response.json() }).toEqual({
          path,
          length,
          status: 400,
          body: { error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_json" } },
        });
      }
    }
    expect(t.logs.filter((l) => l.includes('"level":"error"'))).toEqual([]);
  });

  test("a JSON body that is not an object -> 400 invalid_json", async () => {
    await using t = await testApp();
    const r = await t.admin("POST", "/accounts", ["name"]);
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_json" } });
  });
});

describe("unknown routes", () => {
  test.each(["GET", "POST", "DELETE"])("%s on an unknown path -> 404 not_found that does not quote the path", async (method) => {
    await using t = await testApp();
    const canary = "canary-9f3e-path";
    for (const path of [`/${canary}`, `/v1/${canary}?q=${canary}`, `/admin/v2/${canary}`]) {
      const r = await t.call(method, path);
      expect({ path, status: r.status, body: r.body }).toEqual({
        path,
        status: 404,
        body: { error: { message: "no such route", type: "not_found_error", code: "not_found" } },
      });
    }
    expect(t.logs.join("\n")).not.toContain(canary);
  });
});

describe("errors that are not ApiErrors", () => {
  test("a throwing catalog store -> 500 internal_error; the message is neither in the body nor in the logs", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    const { app, logs } = failingApp(t, (s) => ({
      ...s,
      catalog: { ...s.catalog, listBuilds: async () => boom(), getAlias: async () => boom() },
    }));

    for (const path of ["/v1/models", "/v1/models/org/model"]) {
      const response = await app.http.handle(new Request(`http://localhost${path}`, { headers: { authorization: `Bearer ${apiKey}` } }));
      const text = await response.text();
      expect(response.status).toBe(500);
      expect(response.headers.get("content-type")).toStartWith("application/json");
      expect(JSON.parse(text)).toEqual(INTERNAL);
      expect(text).not.toContain(SECRET);
    }
    expect(logs.length).toBeGreaterThan(0);
    expect(logs.join("\n")).not.toContain(SECRET);
    expect(logs.map((l) => JSON.parse(l) as Record<string, unknown>)).toContainEqual(
      expect.objectContaining({ level: "error", msg: "unhandled error", error_name: "Error" }),
    );
  });

  test("a throwing key store (inside authentication) -> 500, not 401", async () => {
    await using t = await testApp();
    const { apiKey } = await seedAccount(t);
    const { app, logs } = failingApp(t, (s) => ({ ...s, keys: { ...s.keys, findByHash: async () => boom() } }));
    const r = await call(app, "GET", "/v1/models", { token: apiKey });
    expect(r).toEqual({ status: 500, headers: expect.any(Headers), body: INTERNAL });
    expect(logs.join("\n")).not.toContain(SECRET);
  });

  test.each([
    ["a lost connection (postgres.js)", "CONNECTION_CLOSED"],
    ["a refused connection", "ECONNREFUSED"],
    ["a server shutting down (57P01)", "57P01"],
    ["a connection exception (08006)", "08006"],
  ])("a database that cannot be reached (%s) -> 503 with Retry-After, logged as a warning", async (_, code) => {
    await using t = await testApp();
    const { apiKey } = await seedAccount(t);
    const unreachable = async () => {
      throw Object.assign(new Error(SECRET), { code });
    };
    const wrapped = async () => {
      // As drizzle throws it: a DrizzleQueryError whose cause is the driver's error.
      throw Object.assign(new Error(`Failed query: ${SECRET}`), { cause: Object.assign(new Error(SECRET), { code }) });
    };
    const { app, logs } = failingApp(t, (s) => ({ ...s, keys: { ...s.keys, findByHash: unreachable } }));
    const r = await call(app, "GET", "/v1/models", { token: apiKey });
    expect([r.status, r.headers.get("retry-after"), (r.body as { error: { code: string } }).error.code]).toEqual([
      503,
      "1",
      "service_unavailable",
    ]);
    const viaDrizzle = failingApp(t, (s) => ({ ...s, keys: { ...s.keys, findByHash: wrapped } }));
    expect((await call(viaDrizzle.app, "GET", "/v1/models", { token: apiKey })).status).toBe(503);
    const lines = logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toContainEqual(expect.objectContaining({ level: "warn", msg: "database unavailable", route: "/v1/models" }));
    expect([lines.some((l) => l.msg === "unhandled error"), logs.join("\n").includes(SECRET)]).toEqual([false, false]);
  });

  test("a throwing price store -> 500 on the public /v1/pricing", async () => {
    await using t = await testApp();
    const { app, logs } = failingApp(t, (s) => ({ ...s, prices: { ...s.prices, list: async () => boom() } }));
    const r = await call(app, "GET", "/v1/pricing");
    expect(r.status).toBe(500);
    expect(r.body).toEqual(INTERNAL);
    expect(logs.join("\n")).not.toContain(SECRET);
  });

  test("a throwing account store under an admin POST -> 500 without the message", async () => {
    await using t = await testApp();
    const { app, logs } = failingApp(t, (s) => ({ ...s, accounts: { ...s.accounts, create: async () => boom() } }));
    const r = await call(app, "POST", "/admin/v1/accounts", { token: ADMIN_TOKEN, body: { name: "x" } });
    expect(r.status).toBe(500);
    expect(r.body).toEqual(INTERNAL);
    expect(logs.join("\n")).not.toContain(SECRET);
  });

  test("a thrown non-Error value -> 500 too", async () => {
    await using t = await testApp();
    const { apiKey } = await seedAccount(t);
    const { app, logs } = failingApp(t, (s) => ({
      ...s,
      catalog: {
        ...s.catalog,
        listBuilds: async () => {
          throw SECRET;
        },
      },
    }));
    const r = await call(app, "GET", "/v1/models", { token: apiKey });
    expect(r.status).toBe(500);
    expect(r.body).toEqual(INTERNAL);
    expect(logs.join("\n")).not.toContain(SECRET);
  });

  test("the same app still answers normally afterwards", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    let fail = true;
    const { app } = failingApp(t, (s) => ({
      ...s,
      catalog: { ...s.catalog, listBuilds: async () => (fail ? boom() : s.catalog.listBuilds()) },
    }));
    expect((await call(app, "GET", "/v1/models", { token: apiKey })).status).toBe(500);
    fail = false;
    const r = await call(app, "GET", "/v1/models", { token: apiKey });
    expect(r.status).toBe(200);
    expect((r.body as { data: unknown[] }).data).toHaveLength(2);
  });
});
