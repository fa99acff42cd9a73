/**
 * `umbra-provider enroll`: enrols this Mac in the coordinator's MDM server (issue 23; docs/api.md "MDM
 * enrolment"), so the coordinator can ask Apple's attestation of its posture for this identity key.
 *   1. refuses when `profiles status -type enrollment` shows an MDM enrolment that is not this coordinator's
 *      for this key (Apple allows one MDM per Mac), or cannot be read;
 *   2. signs a coordinator challenge with the identity key (the --identity-helper: the Secure Enclave
 *      helper on a Mac), receives the profile, writes it (mode 0600: it holds the device identity) and opens it;
 *   3. prints what to approve in System Settings, polls the status until enrolled (or attested), or the
 *      timeout, and reports; a timeout says what to check. The profile's enrolment token is never printed.
 * Machine access goes through an EnrollPlatform (tests inject it). Exit: 0 enrolled, 1 refused or not
 * enrolled in time, 2 bad usage.
 */
import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ConfigError, type Env, optionsOf, processEnv } from "../config/settings.ts";
import { coordinatorBaseOf, expectationOf, PROVIDER_SETTINGS, readConfigFile, sameCoordinator, settingReader } from "./config.ts";
import { type CoordinatorExpectation, type PinnedCoordinator, pinCoordinator, pinnedFetch } from "./coordinator-pin.ts";
import { type CommandResult, messageOf, realProbe } from "./doctor/probe.ts";
import { ensureHome, type ProviderHome, providerHome, readCredentials, type StoredCredentials } from "./home.ts";
import { helperIdentity, type ProviderIdentity } from "./identity.ts";

const ENROL_TAG = "umbra-enroll-v1";
const PROFILE_TYPE = "application/x-apple-aspen-config";
const POLL_MS = 5_000;
const REQUEST_TIMEOUT_MS = 15_000;

const USAGE = `usage: umbra-provider enroll [--coordinator URL] [--identity-helper PATH] [--out FILE] [--timeout-seconds N]

Enrols this Mac in the coordinator's MDM server so the coordinator can ask Apple to attest this Mac's
security settings (SIP, Secure Boot) for its identity key: needed for the hardware trust level.

  --identity-helper PATH  the signing helper holding the identity key (umbra-se-helper; UMBRA_PROVIDER_IDENTITY_HELPER)
  --out FILE              where to write the profile (default: the tool's folder, Umbra-Enrolment.mobileconfig)
  --timeout-seconds N     how long to wait for the approval (default 600)
  --coordinator URL, --token TOKEN, --coordinator-image FILE ...  as for login (the stored login by default)

Exit status: 0 enrolled, 1 refused or not enrolled in time, 2 bad usage.`;

/** Everything enroll does to the machine and the network. */
export interface EnrollPlatform {
  readonly platform: NodeJS.Platform;
  readonly env: Env;
  run(argv: readonly string[], timeoutMs: number): Promise<CommandResult>;
  /** Opens a file as a double-click would (`open` on a Mac). */
  open(path: string): Promise<void>;
  fetch(url: string, init: RequestInit): Promise<Response>;
  identityHelper(path: string): Promise<ProviderIdentity>;
  pinCoordinator(base: string, expectation: CoordinatorExpectation): Promise<PinnedCoordinator>;
  credentials(home: ProviderHome): StoredCredentials | undefined;
  sleep(ms: number): Promise<void>;
  now(): number;
  readonly stdout: { write(text: string): unknown };
  readonly stderr: { write(text: string): unknown };
}

export class EnrollError extends Error {
  override readonly name = "EnrollError";
}

/** What `profiles status -type enrollment` says. */
export interface MdmEnrolmentState {
  readonly enrolled: boolean;
  readonly server?: string;
}

/** Parses `profiles status -type enrollment`; undefined when the output says neither yes nor no. */
export function parseProfilesStatus(output: string): MdmEnrolmentState | undefined {
  const line = /^\s*MDM enrollment:\s*(\S+)/im.exec(output)?.[1]?.toLowerCase();
  if (line === undefined) return undefined;
  const server = /^\s*MDM server:\s*(\S+)/im.exec(output)?.[1];
  const dep = /^\s*Enrolled via DEP:\s*Yes/im.test(output);
  return { enrolled: line.startsWith("yes") || dep, ...(server ? { server } : {}) };
}

type Flags = Record<string, string | boolean | undefined>;

function parseFlags(argv: readonly string[]): Flags {
  const names = ["coordinator", "token", "identityHelper", "coordinatorImage", "coordinatorShape", "coordinatorEvidence"] as const;
  try {
    return parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        ...optionsOf(Object.fromEntries(names.map((n) => [n, PROVIDER_SETTINGS[n]]))),
        out: { type: "string" },
        "timeout-seconds": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }).values as Flags;
  } catch (error) {
    throw new ConfigError(messageOf(error));
  }
}

/** A coordinator and the device token to call it with (part D's `status` and `doctor` can reuse enrolmentState). */
export interface Session {
  readonly base: string;
  readonly token: string;
  readonly fetch: (url: string, init: RequestInit) => Promise<Response>;
}

async function call(session: Session, method: string, path: string, body?: unknown): Promise<Response> {
  try {
    return await session.fetch(`${session.base}${path}`, {
      method,
      redirect: "manual",
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      headers: { authorization: `Bearer ${session.token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch (error) {
    throw new EnrollError(`cannot reach the coordinator at ${session.base}: ${messageOf(error)}`);
  }
}

/** The coordinator's message from its error envelope, or the status. */
async function problem(response: Response): Promise<string> {
  if (response.status === 401) return "the coordinator refused the device token (run 'umbra-provider login' again)";
  if (response.status === 404) return "this coordinator does not offer MDM enrolment (HTTP 404): ask its operator";
  const body = (await response.json().catch(() => ({}))) as { error?: { message?: unknown } };
  return typeof body.error?.message === "string" ? `${body.error.message} (HTTP ${response.status})` : `HTTP ${response.status}`;
}

/** GET /v1/provider/enroll/status for this identity key; throws EnrollError when refused or unreachable. */
export async function enrolmentState(session: Session, identityKey: Uint8Array): Promise<{ state: string; enrolment_id?: string }> {
  const response = await call(session, "GET", `/v1/provider/enroll/status?identity_key=${Buffer.from(identityKey).toString("base64url")}`);
  if (!response.ok) throw new EnrollError(await problem(response));
  const body = (await response.json().catch(() => ({}))) as { state?: unknown; enrolment_id?: unknown };
  if (typeof body.state !== "string") throw new EnrollError("the coordinator's status answer has no state");
  return { state: body.state, ...(typeof body.enrolment_id === "string" ? { enrolment_id: body.enrolment_id } : {}) };
}

/** Challenge, signature, profile. */
async function fetchProfile(session: Session, identity: ProviderIdentity): Promise<Uint8Array> {
  const started = await call(session, "POST", "/v1/provider/enroll/challenge");
  if (!started.ok) throw new EnrollError(`the coordinator refused a challenge: ${await problem(started)}`);
  const { challenge } = (await started.json().catch(() => ({}))) as { challenge?: unknown };
  if (typeof challenge !== "string") throw new EnrollError("the coordinator's challenge answer has no challenge");
  const bytes = Buffer.from(challenge, "base64");
  const signature = await identity.sign(Buffer.concat([Buffer.from(ENROL_TAG, "utf8"), bytes]));
  const answer = await call(session, "POST", "/v1/provider/enroll", {
    challenge,
    identity_key: Buffer.from(identity.publicKey).toString("base64"),
    signature: Buffer.from(signature).toString("base64"),
  });
  if (!answer.ok) throw new EnrollError(`the coordinator refused the enrolment: ${await problem(answer)}`);
  if (answer.headers.get("content-type")?.split(";")[0] !== PROFILE_TYPE)
    throw new EnrollError("the coordinator's answer is not a profile");
  return new Uint8Array(await answer.arrayBuffer());
}

/** The profile's MDM server URL without its query (the token stays out of the terminal). */
function serverOf(profile: Uint8Array): string {
  const url = /<key>ServerURL<\/key>\s*<string>([^<?]+)/.exec(Buffer.from(profile).toString("latin1"))?.[1];
  return url ?? "the coordinator's MDM server";
}

const APPROVE = (file: string) =>
  `The profile opened: ${file}\n` +
  "Approve it in System Settings:\n" +
  "  1. Open System Settings -> Privacy & Security -> Profiles (macOS 15 and later: General -> Device Management).\n" +
  '  2. Double-click "Umbra provider attestation (MDM)", then Install..., and confirm with your password.\n' +
  '  3. Accept that "Umbra MDM" manages this Mac: it may read device information and run security queries only.\n';

/** `umbra-provider enroll` with injected machine access; returns the exit status. */
export async function runEnroll(argv: readonly string[], io: EnrollPlatform): Promise<number> {
  const flags = parseFlags(argv);
  if (flags.help === true) {
    io.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const home = providerHome(io.env, io.platform);
  const raw = settingReader(flags, io.env, readConfigFile(home.configFile, false));
  const stored = io.credentials(home)?.credentials;
  const base = coordinatorBaseOf(
    raw("coordinator") ?? stored?.coordinator ?? fail("--coordinator is required (or run 'umbra-provider login' first)"),
  );
  const token =
    raw("token") ??
    (stored && sameCoordinator(stored.coordinator, base)
      ? stored.token
      : fail(`no device token for ${base}: run 'umbra-provider login' first`));
  const helper =
    raw("identityHelper") ?? fail("--identity-helper is required: the signing helper holding this Mac's identity key (umbra-se-helper)");
  const timeoutText = (flags["timeout-seconds"] as string | undefined) ?? "600";
  if (!/^\d{1,6}$/.test(timeoutText) || Number(timeoutText) < 1)
    throw new ConfigError("--timeout-seconds: a whole number of seconds, at least 1");
  const out = (flags.out as string | undefined) ?? join(home.dir, "Umbra-Enrolment.mobileconfig");
  const expectation = expectationOf(raw, base);
  if (io.platform !== "darwin") {
    io.stderr.write("umbra-provider enroll: MDM enrolment is for a Mac (macOS 14.2 or later on Apple silicon)\n");
    return 1;
  }
  let identity: ProviderIdentity | undefined;
  try {
    const pinned = expectation
      ? await io.pinCoordinator(base, expectation).catch((error: unknown) => {
          throw new EnrollError(`cannot verify the coordinator at ${base}: ${messageOf(error)}`);
        })
      : undefined;
    const fetcher = pinned ? pinnedFetch(pinned.tls) : io.fetch;
    const session: Session = { base, token, fetch: fetcher };
    identity = await io.identityHelper(helper).catch((error: unknown) => {
      throw new EnrollError(`--identity-helper: ${messageOf(error)}`);
    });
    const mac = await io.run(["profiles", "status", "-type", "enrollment"], 10_000);
    const current = mac.exitCode === 0 ? parseProfilesStatus(mac.stdout) : undefined;
    if (current === undefined) {
      throw new EnrollError(
        `cannot read this Mac's MDM enrolment ('profiles status -type enrollment': ${mac.error ?? `exit ${mac.exitCode}`})`,
      );
    }
    if (current.enrolled) {
      const ours = await enrolmentState(session, identity.publicKey);
      if (ours.state === "enrolled" || ours.state === "attested") {
        io.stdout.write(`This Mac is already enrolled with ${base} for this identity key (state: ${ours.state}). Nothing to do.\n`);
        return 0;
      }
      throw new EnrollError(
        `this Mac is already enrolled in another MDM server${current.server ? ` (${current.server})` : ""}; Apple allows one MDM per Mac. ` +
          "Remove that enrolment first (a Mac managed by an organisation cannot enrol: it can serve below the hardware trust level).",
      );
    }
    const profile = await fetchProfile(session, identity);
    ensureHome(home);
    writeFileSync(out, profile, { mode: 0o600 });
    chmodSync(out, 0o600);
    const opened = await io.open(out).then(
      () => true,
      () => false,
    );
    io.stdout.write(
      opened ? APPROVE(out) : `Open the profile from the Finder (double-click): ${out}\n${APPROVE(out).split("\n").slice(1).join("\n")}`,
    );
    return await waitForEnrolment(io, session, identity.publicKey, Number(timeoutText) * 1000, serverOf(profile));
  } catch (error) {
    if (!(error instanceof EnrollError)) throw error;
    io.stderr.write(`umbra-provider enroll: ${error.message}\n`);
    return 1;
  } finally {
    identity?.close();
  }
}

async function waitForEnrolment(io: EnrollPlatform, session: Session, key: Uint8Array, timeoutMs: number, server: string): Promise<number> {
  io.stdout.write(
    `Waiting for the approval (up to ${Math.round(timeoutMs / 1000)} s; Ctrl-C to stop, the profile stays valid for 24 hours)...\n`,
  );
  const deadline = io.now() + timeoutMs;
  let last = "issued";
  while (io.now() < deadline) {
    await io.sleep(POLL_MS);
    try {
      last = (await enrolmentState(session, key)).state;
    } catch (error) {
      if (error instanceof EnrollError && error.message.startsWith("cannot reach")) continue;
      throw error;
    }
    if (last === "enrolled" || last === "attested") {
      io.stdout.write(
        `Enrolled: this Mac checks in with ${server} (state: ${last}).\n` +
          (last === "attested"
            ? "Apple's attestation of this Mac is verified: it can serve at the hardware trust level.\n"
            : "The coordinator now asks Apple's attestation of this Mac; that takes minutes. 'umbra-provider enroll' again shows the state.\n"),
      );
      return 0;
    }
  }
  io.stderr.write(
    `umbra-provider enroll: not enrolled after ${Math.round(timeoutMs / 1000)} s (the coordinator reports: ${last}). Check:\n` +
      '  - System Settings -> Privacy & Security -> Profiles (or General -> Device Management) shows "Umbra provider attestation (MDM)" installed, not waiting;\n' +
      "  - 'profiles status -type enrollment' says \"MDM enrollment: Yes\";\n" +
      `  - this Mac reaches ${server} over HTTPS (no proxy or firewall in the way);\n` +
      "  - the coordinator's operator: NanoMDM runs, has its APNs push certificate, and its webhook reaches the coordinator.\n" +
      "Then run 'umbra-provider enroll' again: the new profile replaces this one.\n",
  );
  return 1;
}

function fail(message: string): never {
  throw new ConfigError(message);
}

/** The real machine: `profiles`, `open`, fetch, the identity helper, the stored login. */
export function realEnrollPlatform(env: Env): EnrollPlatform {
  const probe = realProbe(env);
  return {
    platform: process.platform,
    env,
    run: probe.run,
    open: async (path) => {
      const result = await probe.run(["open", path], 10_000);
      if (result.exitCode !== 0) throw new EnrollError(`cannot open ${path}`);
    },
    fetch: (url, init) => fetch(url, init),
    identityHelper: (path) => helperIdentity([path]),
    pinCoordinator: (base, expectation) => pinCoordinator(base, expectation),
    credentials: readCredentials,
    sleep: (ms) => Bun.sleep(ms),
    now: () => Date.now(),
    stdout: process.stdout,
    stderr: process.stderr,
  };
}

/** `umbra-provider enroll [flags]`. */
export async function enrollCommand(argv: readonly string[]): Promise<number> {
  return runEnroll(argv, realEnrollPlatform(processEnv()));
}
