/**
 * `umbra-provider enroll` (src/provider/enroll.ts) against a real coordinator on port 0 with MDM enrolment
 * configured (the store's enrolment records), the Mac's steps injected: another MDM present is refused with a clear
 * message before any profile is made; the happy path writes (0600) and opens the profile, says what to
 * approve, waits for `enrolled` and reports; a timeout reports what to check; the tokens are never printed.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { type PlistValue, parse } from "plist";
import { SoftwareIdentity } from "../../../attestation/provider/software-identity.ts";
import { pinCoordinator } from "../../../src/provider/coordinator-pin.ts";
import { type EnrollPlatform, parseProfilesStatus, runEnroll } from "../../../src/provider/enroll.ts";
import { softwareIdentity } from "../../../src/provider/identity.ts";
import type { MdmEnrolment } from "../../../src/store/mdm-types.ts";
import type { Store } from "../../../src/store/types.ts";
import { seedAccount, tempDir, testApp } from "../../support/harness.ts";
import { mdmEnv, NANOMDM_ENV, testCa } from "../../support/mdm-ca.ts";
import { startServer } from "../../support/server.ts";

const ca = testCa();
const NOT_ENROLLED = "Enrolled via DEP: No\nMDM enrollment: No\n";
const CORPORATE = "Enrolled via DEP: No\nMDM enrollment: Yes (User Approved)\nMDM server: https://corp.example/mdm\n";

/** The account's enrolment records in the store (oldest first), and a Mac's first check-in as the webhook binds it. */
interface Records {
  all(): Promise<MdmEnrolment[]>;
  enrolled(record: MdmEnrolment): Promise<void>;
}

function recordsOf(store: Store, accountId: string): Records {
  return {
    all: async () => (await store.mdm.enrolments.forAccount(accountId)).reverse(),
    enrolled: async (record) => {
      await store.mdm.enrolments.bind({ tokenHash: record.tokenHash, nanomdmId: "UDID", serial: "SERIAL", at: Date.now() });
    },
  };
}

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly opened: string[];
  readonly records: Records;
  readonly home: string;
  readonly token: string;
}

/** Runs enroll against a fresh coordinator; `onPoll(n, records)` runs at each wait (n from 1). */
async function enroll(
  profilesOutput: string | null,
  options: { args?: string[]; onPoll?: (n: number, records: Records) => Promise<void>; platform?: NodeJS.Platform } = {},
): Promise<Run> {
  using dir = tempDir();
  using home = tempDir();
  await using t = await testApp({ env: { ...NANOMDM_ENV, ...mdmEnv(dir.path, ca) } });
  await using server = startServer(t);
  const { accountId } = await seedAccount(t);
  const records = recordsOf(t.store, accountId);
  const { token } = await t.app.admin.createProviderToken({ account_id: accountId });
  const out = { stdout: "", stderr: "" };
  const opened: string[] = [];
  let clock = 1_000_000;
  let polls = 0;
  const platform: EnrollPlatform = {
    platform: options.platform ?? "darwin",
    env: { UMBRA_PROVIDER_HOME: home.path },
    run: async (argv) =>
      argv.join(" ") === "profiles status -type enrollment" && profilesOutput !== null
        ? { exitCode: 0, stdout: profilesOutput }
        : { exitCode: null, stdout: "", error: "cannot run profiles" },
    open: async (path) => {
      opened.push(path);
    },
    fetch: (url, init) => fetch(url, init),
    identityHelper: async () => softwareIdentity(SoftwareIdentity.generate()),
    pinCoordinator,
    credentials: () => ({ credentials: { coordinator: server.url, token, accountId, createdAt: 0 }, mode: 0o600 }),
    sleep: async (ms) => {
      clock += ms;
      await options.onPoll?.(++polls, records);
    },
    now: () => clock,
    stdout: { write: (text: string) => (out.stdout += text) },
    stderr: { write: (text: string) => (out.stderr += text) },
  };
  const code = await runEnroll(["--identity-helper", "/usr/local/bin/umbra-se-helper", ...(options.args ?? [])], platform);
  let profileMode = 0;
  const file = opened[0];
  if (file) profileMode = statSync(file).mode & 0o777;
  // Read before the coordinator closes: the run's records as they ended.
  const final = await records.all();
  const result = { code, ...out, opened, records: { ...records, all: async () => final }, home: home.path, token };
  if (file) Object.assign(result, { profileMode, profile: readFileSync(file, "utf8") });
  return result;
}

const noSecrets = (run: Run) => {
  const e = /\?e=([^<]+)/.exec((run as Run & { profile?: string }).profile ?? "")?.[1] ?? "no-token-issued";
  const printed = run.stdout + run.stderr;
  return [printed.includes(run.token), printed.includes(e)];
};

describe("umbra-provider enroll", () => {
  test("parses `profiles status -type enrollment`", () => {
    expect([NOT_ENROLLED, CORPORATE, "Enrolled via DEP: Yes\nMDM enrollment: Yes\n", "garbage"].map(parseProfilesStatus)).toEqual([
      { enrolled: false },
      { enrolled: true, server: "https://corp.example/mdm" },
      { enrolled: true },
      undefined,
    ]);
  });

  test("another MDM on this Mac: refused with a clear message, no profile made", async () => {
    const run = await enroll(CORPORATE);
    expect({ code: run.code, opened: run.opened, records: (await run.records.all()).length }).toEqual({ code: 1, opened: [], records: 0 });
    expect(run.stderr).toBe(
      "umbra-provider enroll: this Mac is already enrolled in another MDM server (https://corp.example/mdm); Apple allows one MDM per Mac. " +
        "Remove that enrolment first (a Mac managed by an organisation cannot enrol: it can serve below the hardware trust level).\n",
    );
  });

  test("an unreadable MDM state, or another platform than macOS, is refused", async () => {
    const unreadable = await enroll(null);
    const linux = await enroll(NOT_ENROLLED, { platform: "linux" });
    expect([unreadable.code, unreadable.stderr, linux.code, linux.stderr]).toEqual([
      1,
      "umbra-provider enroll: cannot read this Mac's MDM enrolment ('profiles status -type enrollment': cannot run profiles)\n",
      1,
      "umbra-provider enroll: MDM enrolment is for a Mac (macOS 14.2 or later on Apple silicon)\n",
    ]);
  });

  test("happy path: the profile written 0600 and opened, what to approve, waits for enrolled and reports", async () => {
    const run = (await enroll(NOT_ENROLLED, {
      onPoll: async (n, records) => {
        const [record] = await records.all();
        if (n === 3 && record) await records.enrolled(record);
      },
    })) as Run & { profileMode: number; profile: string };
    expect({ code: run.code, stderr: run.stderr, opened: run.opened, mode: run.profileMode }).toEqual({
      code: 0,
      stderr: "",
      opened: [join(run.home, "Umbra-Enrolment.mobileconfig")],
      mode: 0o600,
    });
    const mdm = ((parse(run.profile) as { PayloadContent: PlistValue[] }).PayloadContent[1] ?? {}) as Record<string, PlistValue>;
    expect([String(mdm.ServerURL).split("?")[0], mdm.AccessRights]).toEqual(["https://mdm.umbra.example/mdm", 1041]);
    expect(run.stdout).toContain("System Settings -> Privacy & Security -> Profiles (macOS 15 and later: General -> Device Management)");
    expect(run.stdout).toContain('"Umbra provider attestation (MDM)"');
    expect(run.stdout).toContain("Enrolled: this Mac checks in with https://mdm.umbra.example/mdm (state: enrolled).");
    expect((await run.records.all()).map((r) => r.state)).toEqual(["enrolled"]);
    expect(noSecrets(run)).toEqual([false, false]);
  });

  test("already enrolled with this coordinator for this key: nothing to do", async () => {
    using dir = tempDir();
    await using t = await testApp({ env: { ...NANOMDM_ENV, ...mdmEnv(dir.path, ca) } });
    await using server = startServer(t);
    const { accountId } = await seedAccount(t);
    const records = recordsOf(t.store, accountId);
    const tokenRecord = await t.app.admin.createProviderToken({ account_id: accountId });
    const key = SoftwareIdentity.generate();
    const created = await t.store.mdm.enrolments.create({
      id: "enr_1",
      accountId,
      providerTokenId: tokenRecord.id,
      identityKey: Buffer.from(key.publicKey(65)).toString("base64"),
      tokenHash: "0".repeat(64),
      createdAt: 1,
      tokenExpiresAt: Date.now() + 3_600_000,
    });
    if (created) await records.enrolled(created);
    let stdout = "";
    const code = await runEnroll(["--identity-helper", "helper", "--coordinator", server.url, "--token", tokenRecord.token], {
      platform: "darwin",
      env: {},
      run: async () => ({ exitCode: 0, stdout: "MDM enrollment: Yes (User Approved)\nMDM server: https://mdm.umbra.example/mdm\n" }),
      open: async () => {},
      fetch: (url, init) => fetch(url, init),
      identityHelper: async () => softwareIdentity(key),
      pinCoordinator,
      credentials: () => undefined,
      sleep: async () => {},
      now: () => 0,
      stdout: { write: (text: string) => (stdout += text) },
      stderr: { write: () => {} },
    });
    expect([code, stdout]).toEqual([
      0,
      `This Mac is already enrolled with ${server.url} for this identity key (state: enrolled). Nothing to do.\n`,
    ]);
  });

  test("timeout: not enrolled in time reports what to check, without the token", async () => {
    const run = await enroll(NOT_ENROLLED, { args: ["--timeout-seconds", "30"] });
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      "umbra-provider enroll: not enrolled after 30 s (the coordinator reports: issued). Check:\n" +
        '  - System Settings -> Privacy & Security -> Profiles (or General -> Device Management) shows "Umbra provider attestation (MDM)" installed, not waiting;\n' +
        "  - 'profiles status -type enrollment' says \"MDM enrollment: Yes\";\n" +
        "  - this Mac reaches https://mdm.umbra.example/mdm over HTTPS (no proxy or firewall in the way);\n" +
        "  - the coordinator's operator: NanoMDM runs, has its APNs push certificate, and its webhook reaches the coordinator.\n" +
        "Then run 'umbra-provider enroll' again: the new profile replaces this one.\n",
    );
    expect(noSecrets(run)).toEqual([false, false]);
  });
});
