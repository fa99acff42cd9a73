/**
 * /healthz, /readyz and /metrics (no authentication), and the 404 answer for a route that does not exist.
 */
import { describe, expect, test } from "bun:test";
import { createApp } from "../../src/coordinator/app.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import type { Store } from "../../src/store/types.ts";
import { call, seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";

/** The value of one sample line of the Prometheus text, or undefined when the series is absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

const requests = (method: string, route: string, status: number) =>
  `umbra_http_requests_total{method="${method}",route="${route}",status="${status}"}`;

async function metricsText(t: TestApp): Promise<string> {
  const r = await t.call("GET", "/metrics");
  expect(r.status).toBe(200);
  expect(typeof r.body).toBe("string");
  return r.body as string;
}

describe("/healthz and /readyz", () => {
  test("/healthz is 200 without credentials", async () => {
    await using t = await testApp();
    const r = await t.call("GET", "/healthz");
    expect(r).toMatchObject({ status: 200, body: { status: "ok" } });
  });

  test("/readyz is 200 while the store answers", async () => {
    await using t = await testApp();
    const r = await t.call("GET", "/readyz");
    expect(r).toMatchObject({ status: 200, body: { status: "ready" } });
  });

  test("while the coordinator drains (stopping): /readyz and new chat requests are 503, /healthz stays 200", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    expect(await t.app.chat.idle()).toBeUndefined();
    t.app.chat.drain();
    expect(await t.call("GET", "/readyz")).toMatchObject({ status: 503, body: { status: "unavailable", reason: "shutting down" } });
    const chat = await t.call("POST", "/v1/chat/completions", {
      token: apiKey,
      body: { model: "org/model", messages: [{ role: "user", content: "hello" }] },
    });
    expect(chat).toMatchObject({ status: 503, body: { error: { type: "service_unavailable", code: "service_unavailable" } } });
    expect((await t.call("GET", "/healthz")).status).toBe(200);
  });

  test("/readyz is 503 once the store is closed; /healthz stays 200", async () => {
    await using t = await testApp();
    expect((await t.call("GET", "/readyz")).status).toBe(200);
    t.store.close();
    const r = await t.call("GET", "/readyz");
    expect(r).toMatchObject({ status: 503, body: { status: "unavailable", reason: "store" } });
    expect((await t.call("GET", "/healthz")).status).toBe(200);
  });

  test("/readyz is 503 with a store whose ping throws, without the error's text", async () => {
    await using t = await testApp();
    const failing: Store = {
      ...t.store,
      ping: async () => {
        throw new Error("secret-detail: disk on fire");
      },
    };
    const app = createApp({ config: t.config, store: failing, logger: silentLogger });
    const r = await call(app, "GET", "/readyz");
    expect(r.status).toBe(503);
    expect(r.body).toEqual({ status: "unavailable", reason: "store" });
    expect((await call(app, "GET", "/healthz")).status).toBe(200);
  });
});

describe("/metrics", () => {
  test("is Prometheus text format 0.0.4 without credentials", async () => {
    await using t = await testApp();
    const r = await t.call("GET", "/metrics");
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toStartWith("text/plain; version=0.0.4");
    expect(r.body as string).toContain("# TYPE umbra_http_requests_total counter");
    expect(r.body as string).toContain("# TYPE umbra_http_request_duration_seconds histogram");
  });

  test("counts requests by method, route template and status; ids never become labels", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    expect((await t.call("GET", "/v1/models/org/model", { token: apiKey })).status).toBe(200);
    expect((await t.call("GET", "/v1/models/org%2Fmodel", { token: apiKey })).status).toBe(200);
    expect((await t.call("GET", "/v1/models/other/plain", { token: apiKey })).status).toBe(200);
    expect((await t.call("GET", "/v1/models/secret-model/never-label", { token: apiKey })).status).toBe(404);
    expect((await t.call("GET", "/v1/models/org/model")).status).toBe(401);
    expect((await t.call("GET", "/v1/models", { token: apiKey })).status).toBe(200);
    expect((await t.call("GET", "/v1/models?include_builds=2", { token: apiKey })).status).toBe(400);
    expect((await t.call("GET", "/v1/pricing")).status).toBe(200);
    expect((await t.call("GET", "/no/such/secret-route")).status).toBe(404);
    expect((await t.admin("GET", "/aliases")).status).toBe(200);

    const text = await metricsText(t);
    expect({
      retrieved: sample(text, requests("GET", "/v1/models/*", 200)),
      unknown: sample(text, requests("GET", "/v1/models/*", 404)),
      unauthorized: sample(text, requests("GET", "/v1/models/*", 401)),
      listed: sample(text, requests("GET", "/v1/models", 200)),
      rejected: sample(text, requests("GET", "/v1/models", 400)),
      pricing: sample(text, requests("GET", "/v1/pricing", 200)),
      unmatched: sample(text, requests("GET", "unmatched", 404)),
      admin: sample(text, requests("GET", "/admin/v1/aliases", 200)),
      durations: sample(text, 'umbra_http_request_duration_seconds_count{method="GET",route="/v1/models/*"}'),
    }).toEqual({ retrieved: 3, unknown: 1, unauthorized: 1, listed: 1, rejected: 1, pricing: 1, unmatched: 1, admin: 1, durations: 5 });

    const routes = new Set([...text.matchAll(/route="([^"]*)"/g)].map((m) => m[1]));
    expect([...routes].sort()).toEqual(["/admin/v1/aliases", "/v1/models", "/v1/models/*", "/v1/pricing", "unmatched"]);
  });

  test("the metrics text never holds an API key, a model id from a path or a query value", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    await t.call("GET", "/v1/models/org/model", { token: apiKey });
    await t.call("GET", "/v1/models/org/base-build-4bit", { token: apiKey });
    await t.call("GET", "/v1/models/secret-model/never-label", { token: apiKey });
    await t.call("GET", "/v1/models?include_builds=secret-query", { token: apiKey });
    await t.call("GET", "/v1/models/other/plain", { token: `${apiKey}-wrong` });
    await t.call("GET", `/v1/${apiKey}`);
    await t.admin("PUT", "/models/org/secret-build", {});
    const text = await metricsText(t);
    for (const leak of [
      apiKey,
      apiKey.slice(9, 30),
      "org/model",
      "base-build",
      "secret-model",
      "never-label",
      "secret-query",
      "other/plain",
      "secret-build",
    ]) {
      expect(text).not.toContain(leak);
    }
  });

  test("two apps in one process keep separate counters", async () => {
    await using a = await testApp();
    await using b = await testApp();
    await a.call("GET", "/healthz");
    await a.call("GET", "/healthz");
    await b.call("GET", "/healthz");
    expect(sample(await metricsText(a), requests("GET", "/healthz", 200))).toBe(2);
    expect(sample(await metricsText(b), requests("GET", "/healthz", 200))).toBe(1);
  });
});

describe("unknown routes", () => {
  test.each([
    ["GET", "/"],
    ["GET", "/v2/models"],
    ["GET", "/v1/unknown"],
    ["POST", "/v1/models"],
    ["DELETE", "/v1/pricing"],
  ])("%s %s -> 404 envelope with type not_found_error", async (method, path) => {
    await using t = await testApp();
    const r = await t.call(method, path);
    expect(r.status).toBe(404);
    expect(r.headers.get("content-type")).toStartWith("application/json");
    expect(r.body).toEqual({ error: { message: expect.any(String), type: "not_found_error", code: "not_found" } });
  });
});
