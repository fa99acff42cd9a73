/**
 * POST /v1/mdm/webhook through createApp (in-process): 404 without MDM mode; in MDM mode a missing or wrong
 * X-Hmac-Signature is 401 invalid_token whatever the body, a signed body that is not an event 400, a signed
 * event 200 with what became of it; MDM mode without part A's checks refuses to build the app.
 */
import { describe, expect, test } from "bun:test";
import { createHmac } from "node:crypto";
import { startMdm } from "../../src/coordinator/mdm-link.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { createSqliteStore } from "../../src/store/sqlite/index.ts";
import { testApp } from "../support/harness.ts";
import { standInNonces } from "../support/mda-stand-in.ts";

const KEY = "route-test-webhook-key-0123";
const MDM_ENV = { UMBRA_MDM_URL: "http://127.0.0.1:9", UMBRA_MDM_API_KEY: "api-key", UMBRA_MDM_WEBHOOK_KEY: KEY };
const checks = {
  verify: () => {
    throw new Error("not called");
  },
  nonces: standInNonces(new Uint8Array(32)),
};
const sign = (body: string, key = KEY) => createHmac("sha256", key).update(body).digest("base64");
const post = (body: string, signature?: string) => ({
  rawBody: body,
  headers: { "content-type": "application/json", ...(signature !== undefined ? { "x-hmac-signature": signature } : {}) },
});

describe("POST /v1/mdm/webhook", () => {
  test("404 when MDM mode is off", async () => {
    await using t = await testApp();
    const body = JSON.stringify({ topic: "mdm.Connect" });
    const r = await t.call("POST", "/v1/mdm/webhook", post(body, sign(body)));
    expect(r.status).toBe(404);
    expect(t.app.mdm).toBeUndefined();
  });

  test("MDM mode: 401 without or with a wrong signature, 400 for a signed non-event, 200 for a signed event", async () => {
    await using t = await testApp({ env: MDM_ENV, mdmChecks: checks });
    const event = JSON.stringify({
      topic: "mdm.DeclarativeManagement",
      created_at: "2026-11-26T12:00:00Z",
      checkin_event: { raw_payload: "" },
    });
    const answers = [
      await t.call("POST", "/v1/mdm/webhook", post(event)),
      await t.call("POST", "/v1/mdm/webhook", post(event, sign(event, "another-key-0123456789"))),
      await t.call("POST", "/v1/mdm/webhook", post(event, sign(`${event} `))),
      await t.call("POST", "/v1/mdm/webhook", post("not json", sign("not json"))),
      await t.call("POST", "/v1/mdm/webhook", post("{}", sign("{}"))),
      await t.call("POST", "/v1/mdm/webhook", post(event, sign(event))),
    ];
    expect(answers.map((a) => [a.status, (a.body as { error?: { code?: string } }).error?.code ?? a.body])).toEqual([
      [401, "invalid_token"],
      [401, "invalid_token"],
      [401, "invalid_token"],
      [400, "invalid_json"],
      [400, "invalid_value"],
      [200, { topic: "mdm.DeclarativeManagement", result: "ignored:topic" }],
    ]);
  });

  test("MDM mode without the MDA checks refuses to start", () => {
    const store = createSqliteStore(":memory:");
    const config = { url: "http://127.0.0.1:9", apiKey: "k", webhookKey: KEY, maxInFlight: 1 };
    try {
      expect(() => startMdm(config, { store, checks: undefined, now: Date.now, logger: silentLogger })).toThrow(
        "MDM mode (--mdm-url) needs the MDA answer checks",
      );
    } finally {
      store.close();
    }
  });
});
