/**
 * The MDA seed setting (src/config/mda-seed.ts): hex or base64 of at least 32 bytes, from the
 * environment, a flag or `UMBRA_MDA_SEED_FILE`; never quoted in an error; out of the configuration
 * digest; and production refusing MDM mode (`UMBRA_MDM_URL`) without it.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../../src/config/config.ts";
import { configCanonicalBytes, configDigestHex } from "../../../src/config/config-digest.ts";
import { tempDir } from "../../support/harness.ts";
import { mdmEnv, testCa } from "../../support/mdm-ca.ts";

const STRONG = "x".repeat(40);
const SEED = Uint8Array.from({ length: 32 }, (_, i) => 0xa0 + i);
const SEED_HEX = Buffer.from(SEED).toString("hex");
const SEED_B64 = Buffer.from(SEED).toString("base64");
const caDir = tempDir();
afterAll(() => caDir[Symbol.dispose]());
const MDM = {
  ...mdmEnv(caDir.path, testCa()),
  UMBRA_MDM_URL: "http://127.0.0.1:9000",
  UMBRA_MDM_API_KEY: "nanomdm-api-key",
  UMBRA_MDM_WEBHOOK_KEY: "a-webhook-key-of-24-chars",
};
const dev = (env: Record<string, string>, flags: Record<string, string> = {}) => loadConfig(flags, env, "development");

function refusal(run: () => unknown): string {
  try {
    run();
  } catch (e) {
    if (e instanceof ConfigError) return e.message;
    throw e;
  }
  return "no error";
}

describe("--mda-seed", () => {
  test("hex (either case) or base64, from the environment or a flag", () => {
    expect([
      dev({ UMBRA_MDA_SEED: SEED_HEX }).mdaSeed,
      dev({ UMBRA_MDA_SEED: SEED_HEX.toUpperCase() }).mdaSeed,
      dev({ UMBRA_MDA_SEED: SEED_B64 }).mdaSeed,
      dev({}, { "mda-seed": SEED_HEX }).mdaSeed,
    ]).toEqual([SEED, SEED, SEED, SEED]);
  });

  test("from UMBRA_MDA_SEED_FILE, trimmed", () => {
    using dir = tempDir();
    const file = join(dir.path, "mda-seed");
    writeFileSync(file, `${SEED_B64}\n`);
    expect(dev({ UMBRA_MDA_SEED_FILE: file }).mdaSeed).toEqual(SEED);
    expect(refusal(() => dev({ UMBRA_MDA_SEED_FILE: join(dir.path, "absent") }))).toContain("UMBRA_MDA_SEED_FILE");
  });

  test("absent by default, in both modes", () => {
    expect([dev({}).mdaSeed, loadConfig({}, { UMBRA_ADMIN_TOKEN: STRONG }).mdaSeed]).toEqual([undefined, undefined]);
  });

  test.each([
    ["31 bytes of hex", "ab".repeat(31), "31 bytes, at least 32"],
    ["31 bytes of base64", Buffer.alloc(31, 7).toString("base64"), "31 bytes, at least 32"],
    ["an odd number of hex digits", `${SEED_HEX}a`, "not hex or padded base64"],
    ["unpadded base64", SEED_B64.replace(/=+$/, ""), "not hex or padded base64"],
    ["URL-safe base64", Buffer.alloc(33, 0xfb).toString("base64url"), "not hex or padded base64"],
    ["a passphrase", "correct horse battery staple correct horse battery", "not hex or padded base64"],
  ])("refuses %s, naming the flag and not the value", (_, value, message) => {
    const text = refusal(() => dev({ UMBRA_MDA_SEED: value }));
    expect([text.startsWith("--mda-seed: "), text.includes(message), text.includes(value)]).toEqual([true, true, false]);
  });
});

describe("MDM mode and the seed", () => {
  test("production refuses --mdm-url without a seed", () => {
    expect(refusal(() => loadConfig({}, { UMBRA_ADMIN_TOKEN: STRONG, ...MDM }))).toBe(
      "production mode refuses MDM mode (--mdm-url) without an MDA seed: set UMBRA_MDA_SEED_FILE (openssl rand -hex 32)",
    );
  });

  test("production starts MDM mode with a seed; development without one", () => {
    const production = loadConfig({}, { UMBRA_ADMIN_TOKEN: STRONG, ...MDM, UMBRA_MDA_SEED: SEED_HEX });
    expect([production.mdm?.url, production.mdaSeed]).toEqual([MDM.UMBRA_MDM_URL, SEED]);
    expect([dev(MDM).mdm?.url, dev(MDM).mdaSeed]).toEqual([MDM.UMBRA_MDM_URL, undefined]);
  });
});

describe("configuration digest", () => {
  const BASE = { UMBRA_DB: "/data/umbra.db" };
  const digestOf = (env: Record<string, string>) => configDigestHex(dev({ ...BASE, ...env }));

  test("the seed (a secret) is not covered; the MDM URL is", () => {
    expect([digestOf({ UMBRA_MDA_SEED: SEED_HEX }), digestOf({ UMBRA_MDA_SEED: "cd".repeat(32) })]).toEqual([digestOf({}), digestOf({})]);
    expect(digestOf(MDM)).not.toBe(digestOf({}));
  });

  test("the canonical bytes hold neither the seed nor its name", () => {
    const bytes = Buffer.from(configCanonicalBytes(dev({ ...BASE, UMBRA_MDA_SEED: SEED_HEX })));
    expect([bytes.includes(Buffer.from(SEED)), bytes.includes(SEED_HEX), bytes.includes("mdaSeed")]).toEqual([false, false, false]);
  });
});
