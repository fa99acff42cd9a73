/**
 * The configuration binding (src/attestation/config-binding.ts): a coordinator whose configuration's digest
 * differs from the bound one refuses to start, naming both digests; the same digest starts, and the
 * attestation document says where it is bound. Bound by the kernel command line (--config-digest) through a
 * real `serve` process, and by HOST_DATA through the development evidence source.
 */
import "reflect-metadata";
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { checkConfigBinding } from "../../src/attestation/config-binding.ts";
import { loadConfig } from "../../src/config/config.ts";
import { configDigest, configDigestHex } from "../../src/config/config-digest.ts";
import { tempDir, testApp } from "../support/harness.ts";
import { runCoordinator, startCoordinator } from "../support/processes.ts";

describe("configuration bound by the kernel command line (--config-digest)", () => {
  test("`config-digest` prints the digest serve computes; a different bound digest refuses the start, naming both", async () => {
    using dir = tempDir();
    const db = join(dir.path, "umbra.db");
    const env = { UMBRA_MODE: "development", UMBRA_DB: db, UMBRA_LISTEN: "127.0.0.1:0", UMBRA_PLATFORM_FEE: "12" };
    const printed = await runCoordinator(["config-digest"], { env });
    const digest = printed.stdout.trim();
    expect([printed.code, digest]).toEqual([0, configDigestHex(loadConfig({}, env, "production"))]);

    const tampered = await runCoordinator(["serve", "--config-digest", digest], { env: { ...env, UMBRA_PLATFORM_FEE: "50" } });
    const actual = configDigestHex(loadConfig({}, { ...env, UMBRA_PLATFORM_FEE: "50" }, "production"));
    expect([tampered.code, tampered.stderr.trim()]).toEqual([
      2,
      `umbra-coordinator: the configuration's digest ${actual} differs from the digest bound by the kernel command line (umbra.config=, via --config-digest), ${digest}: refusing to start (umbra-coordinator config-digest prints the digest of a configuration)`,
    ]);
  });

  test("the bound digest of this configuration starts, and the document says where it is bound", async () => {
    using dir = tempDir();
    const env = { UMBRA_MODE: "development", UMBRA_DB: join(dir.path, "umbra.db"), UMBRA_ADMIN_TOKEN: "x".repeat(40) };
    const digest = (await runCoordinator(["config-digest", "--listen", "127.0.0.1:0", "--log-level", "info"], { env })).stdout.trim();
    await using c = await startCoordinator({ UMBRA_CONFIG_DIGEST: digest }, { dir: dir.path });
    const doc = (await (await fetch(`${c.url}/v1/attestation`)).json()) as { config: unknown };
    expect(doc.config).toEqual({ sha256: digest, bound_by: "cmdline" });
  });
});

describe("configuration bound by HOST_DATA", () => {
  const env = { UMBRA_CONFIG_BINDING: "host-data" };

  test("the report's HOST_DATA equal to the digest: accepted, and the document says host-data", async () => {
    using dir = tempDir();
    const own = { ...env, UMBRA_DB: join(dir.path, "umbra.db"), UMBRA_LOG_LEVEL: "debug" };
    const digest = configDigest(loadConfig({}, own, "development"));
    await using t = await testApp({ env: own, devHostData: digest });
    await expect(checkConfigBinding(t.config, t.app.attestation)).resolves.toBeUndefined();
    const doc = (await t.call("GET", "/v1/attestation")).body as { config: unknown };
    expect(doc.config).toEqual({ sha256: Buffer.from(digest).toString("hex"), bound_by: "host-data" });
  });

  test("a different HOST_DATA refuses, naming both digests", async () => {
    await using t = await testApp({ env, devHostData: new Uint8Array(32).fill(0xaa) });
    await expect(checkConfigBinding(t.config, t.app.attestation)).rejects.toThrow(
      `the configuration's digest ${configDigestHex(t.config)} differs from the digest bound by the report's HOST_DATA, ${"aa".repeat(32)}`,
    );
  });
});
