/**
 * The console's pages and assets (src/api/console-assets.ts): the shell on every page path (no-store),
 * hashed assets cached as immutable (gzip when asked), 404 envelopes for unknown assets and for unknown
 * /console/api/ paths, 503 saying how to build when the table is missing, and the CSP, nosniff and
 * no-referrer on every /console response (errors included) but not elsewhere. In-process, on a table of
 * temp files; the last case goes through the whole app (createApp).
 */
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Elysia } from "elysia";
import { consoleAssetRoutes } from "../../src/api/console-assets.ts";
import { applyConsoleHeaders } from "../../src/api/console-auth.ts";
import { errorHandling } from "../../src/api/errors.ts";
import { type AssetTable, CONSOLE_CSP } from "../../src/console/assets.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { tempDir, testApp } from "../support/harness.ts";

const SCRIPT = "main.abc123.js";
const STYLE = "main.def456.css";
const JS = `console.log(${JSON.stringify("x".repeat(2000))});`;

function fakeTable(dir: string): AssetTable {
  writeFileSync(join(dir, SCRIPT), JS);
  writeFileSync(join(dir, STYLE), "body{color:#111}");
  return { script: SCRIPT, style: STYLE, files: { [SCRIPT]: join(dir, SCRIPT), [STYLE]: join(dir, STYLE) } };
}

function consoleApp(load: () => Promise<AssetTable>, oidc = false) {
  const app = new Elysia().use(errorHandling(createLogger("error", () => {}))).use(consoleAssetRoutes({ load, oidc }));
  // As src/api/http.ts answers: the console's headers applied to whatever the routes gave.
  return async (path: string, headers: Record<string, string> = {}) => {
    const request = new Request(`http://localhost${path}`, { headers });
    return applyConsoleHeaders(request.url, await app.handle(request));
  };
}

const SECURITY = { csp: CONSOLE_CSP, nosniff: "nosniff", referrer: "no-referrer" };
const security = (r: Response) => ({
  csp: r.headers.get("content-security-policy"),
  nosniff: r.headers.get("x-content-type-options"),
  referrer: r.headers.get("referrer-policy"),
});

describe("console pages and assets", () => {
  test.each(["/console", "/console/", "/console/keys", "/console/usage?model=a", "/console/device?code=ABCD-EFGH", "/console/x/y"])(
    "%s is the shell, not cached, with the security headers",
    async (path) => {
      using dir = tempDir();
      const get = consoleApp(async () => fakeTable(dir.path));
      const r = await get(path);
      const html = await r.text();
      expect({ status: r.status, type: r.headers.get("content-type"), cache: r.headers.get("cache-control"), ...security(r) }).toEqual({
        status: 200,
        type: "text/html; charset=utf-8",
        cache: "no-store",
        ...SECURITY,
      });
      expect(html).toContain(`<script type="module" src="/console/assets/${SCRIPT}"></script>`);
      expect(html).toContain(`<link rel="stylesheet" href="/console/assets/${STYLE}">`);
      expect(html).toContain(`<meta name="umbra-oidc" content="off">`);
      expect(html).not.toMatch(/<script>|<style|style=/);
    },
  );

  test("the shell says when sign-in through the identity provider is configured", async () => {
    using dir = tempDir();
    const html = await (await consoleApp(async () => fakeTable(dir.path), true)("/console/")).text();
    expect(html).toContain(`<meta name="umbra-oidc" content="on">`);
  });

  test("a hashed asset is immutable, typed, and gzipped when the client accepts it", async () => {
    using dir = tempDir();
    const get = consoleApp(async () => fakeTable(dir.path));
    const plain = await get(`/console/assets/${SCRIPT}`);
    expect({
      status: plain.status,
      type: plain.headers.get("content-type"),
      cache: plain.headers.get("cache-control"),
      encoding: plain.headers.get("content-encoding"),
      body: await plain.text(),
      ...security(plain),
    }).toEqual({
      status: 200,
      type: "text/javascript; charset=utf-8",
      cache: "public, max-age=31536000, immutable",
      encoding: null,
      body: JS,
      ...SECURITY,
    });
    const gz = await get(`/console/assets/${SCRIPT}`, { "accept-encoding": "gzip, br" });
    expect(gz.headers.get("content-encoding")).toBe("gzip");
    const bytes = new Uint8Array(await gz.arrayBuffer());
    expect(bytes.length).toBeLessThan(JS.length / 4);
    expect(new TextDecoder().decode(Bun.gunzipSync(bytes))).toBe(JS);
    expect((await get(`/console/assets/${STYLE}`)).headers.get("content-type")).toBe("text/css; charset=utf-8");
  });

  test.each(["/console/assets/main.000000.js", "/console/assets/a/b", "/console/api/nope", "/console/auth/nope"])(
    "%s is the 404 envelope with the security headers",
    async (path) => {
      using dir = tempDir();
      const r = await consoleApp(async () => fakeTable(dir.path))(path);
      expect({ status: r.status, body: (await r.json()) as unknown, ...security(r) }).toEqual({
        status: 404,
        body: { error: { message: expect.any(String), type: "not_found_error", code: "not_found" } },
        ...SECURITY,
      });
    },
  );

  test("without a built table the pages are 503 saying how to build, and a later build is picked up", async () => {
    using dir = tempDir();
    let built = false;
    const get = consoleApp(async () => {
      if (!built) throw new Error("Cannot find module");
      return fakeTable(dir.path);
    });
    const r = await get("/console/");
    expect({ status: r.status, body: (await r.json()) as unknown }).toEqual({
      status: 503,
      body: {
        error: { message: expect.stringContaining("bun console/build.ts"), type: "service_unavailable", code: "service_unavailable" },
      },
    });
    built = true;
    expect((await get("/console/")).status).toBe(200);
  });

  test("through the whole app: console answers carry the headers, other routes do not", async () => {
    await using t = await testApp();
    for (const path of ["/console/", "/console/api/nope", "/console/assets/nope.js"]) {
      const r = await t.app.http.handle(new Request(`http://localhost${path}`));
      expect(security(r)).toEqual(SECURITY);
    }
    const other = await t.app.http.handle(new Request("http://localhost/v1/pricing"));
    expect(security(other)).toEqual({ csp: null, nosniff: null, referrer: null });
    const prefix = await t.app.http.handle(new Request("http://localhost/consoles"));
    expect({ status: prefix.status, csp: prefix.headers.get("content-security-policy") }).toEqual({ status: 404, csp: null });
  });
});
