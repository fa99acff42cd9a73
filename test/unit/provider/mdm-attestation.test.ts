/**
 * `--identity-helper` without `--dev-attestation` (src/provider/mdm-attestation.ts): refused against a
 * coordinator without MDM enrolment; against one with it, the helper's key signs self_signed evidence with
 * the posture the Mac reads of itself (no device chain): the coordinator welcomes it at self_signed and a
 * stored chain raises it (test/e2e/provider-trust-mdm.test.ts). The posture reader on Apple's outputs.
 */
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { assessProviderEvidence, FULL_SECURITY } from "../../../attestation/provider/index.ts";
import { ConfigError } from "../../../src/config/settings.ts";
import { silentLogger } from "../../../src/observability/logger.ts";
import { loadProviderConfig, parseProviderFlags } from "../../../src/provider/config.ts";
import { mdmAttestation, type RunCommand, readPosture } from "../../../src/provider/mdm-attestation.ts";
import { seedAccount, tempDir, testApp } from "../../support/harness.ts";
import { mdmEnv, NANOMDM_ENV, testCa } from "../../support/mdm-ca.ts";
import { providerToken, startServer } from "../../support/server.ts";

const MAC: Record<string, string> = {
  "/usr/bin/csrutil status": "System Integrity Protection status: enabled.\n",
  "/usr/sbin/system_profiler -json SPiBridgeDataType": JSON.stringify({ SPiBridgeDataType: [{ ibridge_secure_boot: "Full Security" }] }),
  "/usr/bin/sw_vers -productVersion": "15.5\n",
};
const runOn =
  (outputs: Record<string, string>): RunCommand =>
  async (argv) => {
    const out = outputs[argv.join(" ")];
    return out === undefined ? { exitCode: null, stdout: "" } : { exitCode: 0, stdout: out };
  };

describe("the Mac's own posture", () => {
  test("read from csrutil, system_profiler and sw_vers; anything unreadable is the weakest reading", async () => {
    expect(await readPosture(runOn(MAC))).toEqual({
      sipEnabled: true,
      secureBoot: FULL_SECURITY,
      thirdPartyKexts: false,
      osVersion: "15.5",
    });
    expect(
      await readPosture(
        runOn({
          ...MAC,
          "/usr/bin/csrutil status": "System Integrity Protection status: disabled.\n",
          "/usr/sbin/system_profiler -json SPiBridgeDataType": JSON.stringify({
            SPiBridgeDataType: [{ ibridge_secure_boot: "Reduced Security" }],
          }),
        }),
      ),
    ).toEqual({ sipEnabled: false, secureBoot: "Reduced Security", thirdPartyKexts: true, osVersion: "15.5" });
    expect(await readPosture(runOn({}))).toEqual({
      sipEnabled: false,
      secureBoot: "Permissive Security",
      thirdPartyKexts: true,
      osVersion: "0",
    });
  });
});

describe("--identity-helper without --dev-attestation", () => {
  async function attempt(env: Record<string, string>) {
    using dir = tempDir();
    const helper = join(dir.path, "umbra-se-helper");
    writeFileSync(
      helper,
      `#!/bin/sh\nexec "${process.execPath}" "${join(import.meta.dir, "../../fixtures/fake-identity-helper.ts")}" ok\n`,
      {
        mode: 0o755,
      },
    );
    await using t = await testApp({ env: { ...env } });
    await using server = startServer(t);
    const { accountId } = await seedAccount(t);
    const token = await providerToken(t, accountId);
    const config = loadProviderConfig(
      parseProviderFlags([
        "--coordinator",
        server.url,
        "--token",
        token,
        "--engine",
        "echo",
        "--model",
        "org/m",
        "--identity-helper",
        helper,
      ]),
      {},
    );
    {
      const attestation = await mdmAttestation(config, silentLogger, undefined, runOn(MAC));
      const encryptionKey = new Uint8Array(32).fill(9);
      const evidence = await attestation.evidence(encryptionKey);
      const { policy } = await t.app.trust();
      const assessed = await assessProviderEvidence(evidence, { policy, now: Date.now, helloEncryptionKey: encryptionKey });
      attestation.identity.close();
      // The evidence is the helper's key's (the helper process), bound to this connection's key.
      const signedBy = Buffer.from(assessed.identityKey?.point ?? []).equals(Buffer.from(attestation.identity.publicKey));
      return { level: assessed.level, kind: attestation.identity.kind, signedBy };
    }
  }

  test("a coordinator without MDM enrolment refuses it at start", async () => {
    const error = await attempt({}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toBe(
      "--identity-helper needs --dev-attestation on, or a coordinator with MDM enrolment (this one has none: umbra-provider enroll is for MDM coordinators)",
    );
  });

  test("a coordinator with MDM enrolment: the helper's key signs self_signed evidence, no chain", async () => {
    using dir = tempDir();
    expect(await attempt({ ...NANOMDM_ENV, ...mdmEnv(dir.path, testCa()) })).toEqual({
      level: "self_signed",
      kind: "helper",
      signedBy: true,
    });
  });
});
