/**
 * GET /v1/provider/models in-process: the catalog's builds with the aliases naming each, for a live
 * provider device token; 401 for no token, an API key, or a revoked token.
 */
import { describe, expect, test } from "bun:test";
import { seedAccount, seedCatalog, testApp } from "../support/harness.ts";

describe("GET /v1/provider/models", () => {
  test("builds sorted by id, each with its aliases; no-store", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    await t.app.admin.setAlias("org/a-second-alias", { build_id: "org/base-build-4bit" });
    const { accountId } = await seedAccount(t);
    const { token } = await t.app.admin.createProviderToken({ account_id: accountId });
    const r = await t.call("GET", "/v1/provider/models", { token });
    expect({ status: r.status, cache: r.headers.get("cache-control"), body: r.body }).toEqual({
      status: 200,
      cache: "no-store",
      body: {
        object: "list",
        data: [
          { id: "org/base-build-4bit", aliases: ["org/a-second-alias", "org/model"] },
          { id: "other/plain", aliases: [] },
        ],
      },
    });
  });

  test("401 invalid_token without a live device token", async () => {
    await using t = await testApp();
    const { accountId, apiKey } = await seedAccount(t);
    const revoked = await t.app.admin.createProviderToken({ account_id: accountId });
    await t.app.admin.revokeProviderToken(revoked.id);
    const statuses = [];
    for (const token of [undefined, apiKey, revoked.token]) {
      const r = await t.call("GET", "/v1/provider/models", token === undefined ? {} : { token });
      statuses.push({ status: r.status, code: (r.body as { error?: { code?: string } }).error?.code });
    }
    expect(statuses).toEqual([
      { status: 401, code: "invalid_token" },
      { status: 401, code: "invalid_token" },
      { status: 401, code: "invalid_token" },
    ]);
  });
});
