/**
 * The route table (src/api/http.ts) does not depend on the request's host name: a short Host such as a
 * container name on port 80 (`http://api/...`) routes like any other (Elysia's default path parsing
 * assumed at least four host characters and answered 404 for every route).
 */
import { describe, expect, test } from "bun:test";
import { seedAccount, seedCatalog, testApp } from "../support/harness.ts";

describe("host names", () => {
  test.each(["x", "ab", "api", "localhost", "127.0.0.1:8080", "[::1]"])("http://%s/ routes normally", async (host) => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    const get = async (path: string, token?: string) => {
      const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
      const response = await t.app.http.handle(new Request(`http://${host}${path}`, { headers }));
      return { status: response.status, body: (await response.json()) as Record<string, unknown> };
    };
    expect((await get("/v1/pricing")).status).toBe(200);
    expect((await get("/v1/models/org/model?x=1", apiKey)).body.id).toBe("org/model");
    expect((await get("/v1/models")).status).toBe(401);
  });
});
