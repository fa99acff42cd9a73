/**
 * POST /v1/mdm/webhook through createApp (in-process): 404 without MDM mode; in MDM mode a missing or wrong
 * X-Hmac-Signature is 401 invalid_token whatever the body, a signed body that is not an event 400, a signed
 * event 200 with what became of it; development MDM mode without a seed runs on a random one, saying so.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { createHmac } from "node:crypto";
import { tempDir, testApp } from "../support/harness.ts";
import { mdmEnv, NANOMDM_ENV, testCa } from "../support/mdm-ca.ts";

const KEY = "route-test-webhook-key-0123";
const caDir = tempDir();
afterAll(() => caDir[Symbol.dispose]());
const MDM_ENV = { ...NANOMDM_ENV, ...mdmEnv(caDir.path, testCa()), UMBRA_MDM_WEBHOOK_KEY: KEY };
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
    await using t = await testApp({ env: { ...MDM_ENV, UMBRA_MDA_SEED: "ab".repeat(32) } });
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

  test("development MDM mode without a seed runs on a random one and says so in the log", async () => {
    await using t = await testApp({ env: MDM_ENV });
    expect(t.app.mdm).toBeDefined();
    expect(t.logs.filter((l) => l.includes("without an MDA seed")).length).toBe(1);
  });
});
