/**
 * MDM mode's settings (src/config/mdm-settings.ts): off without UMBRA_MDM_URL (and its companions refused
 * alone), both keys required with it, keys from `_FILE`, the webhook key's minimum length, plain http off
 * loopback refused in production, and neither key in the configuration digest.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../../src/config/config.ts";
import { configCanonicalBytes } from "../../../src/config/config-digest.ts";
import { tempDir } from "../../support/harness.ts";
import { mdmEnv, NANOMDM_ENV, testCa } from "../../support/mdm-ca.ts";

const STRONG = "a".repeat(40);
const WEBHOOK_KEY = "webhook-key-0123456789";
const caDir = tempDir();
afterAll(() => caDir[Symbol.dispose]());
/** MDM enrolment's settings: MDM mode is on with them or not at all. */
const ENROLMENT = mdmEnv(caDir.path, testCa());
const SERVER = { UMBRA_MDM_URL: "http://127.0.0.1:9000/", UMBRA_MDM_API_KEY: "nanomdm-api-key", UMBRA_MDM_WEBHOOK_KEY: WEBHOOK_KEY };
const MDM = { ...SERVER, ...ENROLMENT };

const refusal = (env: Record<string, string>, mode: "production" | "development" = "development") => {
  try {
    loadConfig({}, { UMBRA_ADMIN_TOKEN: STRONG, ...env }, mode);
  } catch (e) {
    if (e instanceof ConfigError) return e.message;
    throw e;
  }
  throw new Error("accepted");
};

describe("MDM settings", () => {
  test("off by default; on with the URL and both keys", () => {
    expect(loadConfig({}, {}, "development").mdm).toBeNull();
    expect(loadConfig({}, MDM, "development").mdm).toEqual({
      url: "http://127.0.0.1:9000",
      apiKey: "nanomdm-api-key",
      webhookKey: WEBHOOK_KEY,
      maxInFlight: 8,
    });
    expect(loadConfig({ "mdm-max-in-flight": "3" }, MDM, "development").mdm?.maxInFlight).toBe(3);
  });

  test("keys from _FILE", () => {
    using dir = tempDir();
    const file = join(dir.path, "webhook");
    writeFileSync(file, `${WEBHOOK_KEY}\n`);
    const env = { ...ENROLMENT, UMBRA_MDM_URL: SERVER.UMBRA_MDM_URL, UMBRA_MDM_API_KEY: "k", UMBRA_MDM_WEBHOOK_KEY_FILE: file };
    expect(loadConfig({}, env, "development").mdm?.webhookKey).toBe(WEBHOOK_KEY);
  });

  test("refusals name what to fix", () => {
    expect(refusal({ UMBRA_MDM_API_KEY: "k" })).toBe("--mdm-api-key needs --mdm-url (MDM mode)");
    expect(refusal({ ...MDM, UMBRA_MDM_API_KEY: "" })).toContain("MDM mode needs NanoMDM's API key");
    expect(refusal({ ...MDM, UMBRA_MDM_WEBHOOK_KEY: "short" })).toContain("webhook key of at least 16 characters");
    expect(refusal({ ...MDM, UMBRA_MDM_URL: "ftp://x" })).toContain("is not an http(s) URL");
    expect(refusal({ ...MDM, UMBRA_MDM_URL: "http://mdm.example:9000" }, "production")).toContain(
      "production mode refuses an http --mdm-url off loopback",
    );
  });

  test("one switch: NanoMDM's side and enrolment together, either alone refused naming what is missing", () => {
    expect([refusal(SERVER), refusal(ENROLMENT)]).toEqual([
      "MDM mode (--mdm-url) needs MDM enrolment too: set UMBRA_MDM_SERVER_URL, UMBRA_MDM_TOPIC, UMBRA_MDM_CA_CERT and UMBRA_MDM_CA_KEY_FILE",
      "MDM enrolment (--mdm-server-url) needs MDM mode too: set UMBRA_MDM_URL, UMBRA_MDM_API_KEY(_FILE) and UMBRA_MDM_WEBHOOK_KEY(_FILE)",
    ]);
    const { UMBRA_MDM_URL: _, ...withoutUrl } = NANOMDM_ENV;
    expect(refusal({ ...ENROLMENT, ...withoutUrl })).toBe("--mdm-api-key needs --mdm-url (MDM mode)");
  });

  test("neither key is in the configuration digest; the URL is", () => {
    const bytes = Buffer.from(configCanonicalBytes(loadConfig({}, MDM, "development"))).toString("latin1");
    expect([bytes.includes("nanomdm-api-key"), bytes.includes(WEBHOOK_KEY), bytes.includes("http://127.0.0.1:9000")]).toEqual([
      false,
      false,
      true,
    ]);
  });
});
