/**
 * `umbra-provider doctor`: checks this machine and prints one line per check (pass, warn, FAIL, skip)
 * with what to do, then whether it can serve at the trust level asked for (`--trust`, default hardware).
 * Every read of the machine goes through a `Probe` (tests inject fakes); each check has a deadline.
 *
 * Checks, in order (id: what is read -> result):
 *   platform        process platform/arch; darwin/arm64 passes. darwin/x64 fails (Intel, or Rosetta:
 *                   `sysctl -n sysctl.proc_translated` = 1); anything else fails as not eligible.
 *   macos           `sw_vers -productVersion` >= 14 (Managed Device Attestation needs macOS 14).
 *   sip             `csrutil status`: "enabled." passes; disabled or a custom configuration fails.
 *   secure_boot     `system_profiler -json SPiBridgeDataType`, field `ibridge_secure_boot` (System
 *                   Information > Controller; readable without root on Apple Silicon): exactly "Full
 *                   Security" passes, a known lower level fails. Missing, unreadable or localised
 *                   readings warn with the command to check by hand (`sudo bputil -d`).
 *   secure_enclave  the identity helper (`--identity-helper`) names a P-256 key and signs a probe that
 *                   verifies (helperIdentity); without a helper: warn (a software key, self_signed at most).
 *   memory          total RAM >= weights x 1.2 + 4 GiB pass, within 10% below warn, else fail; weights
 *                   are estimated from the model ids (model-size.ts); an unknown size warns. The echo
 *                   engine loads no weights: pass, "weights: none needed (echo engine)".
 *   disk            free space of --models-dir or the provider home: < 2 GiB fails; less than the
 *                   weights warns (they may already be downloaded); echo: no weights to compare.
 *   engine          echo passes (development engine); openai: GET {upstream}/models must list every
 *                   model's upstream name. No --engine: skip.
 *   coordinator     GET {coordinator}/healthz answers 200 (plain http only for loopback hosts). With
 *                   --coordinator-image, first the coordinator's attestation passes every check of
 *                   coordinator-pin.ts (a refusal fails, naming the check) and every later request of
 *                   doctor goes over the pinned TLS key; the token is sent to no coordinator that failed.
 *   clock           that answer's Date header (whole seconds: read as its mid-second) against the
 *                   midpoint of the round trip: <= 5 s pass, <= 60 s warn, more fail.
 *   device_token    present (--token, UMBRA_PROVIDER_TOKEN[_FILE], or the credentials of `login` when they
 *                   are for the coordinator checked: never sent to another), the
 *                   credentials file not readable by group or others, and GET /v1/provider/me with it:
 *                   200 pass, 401/403 fail, 404 (older coordinator) or no answer warn. Never printed.
 *   catalog         GET /v1/provider/models with the token: every --model build id is a catalog build
 *                   pass; an alias fails naming its build (requests are routed by build); an unknown id
 *                   warns, or fails when no model is a build; not checkable (no model, coordinator,
 *                   token or answer) warns.
 *
 * Exit rule (0 ready, 1 not ready, 2 bad usage). Each trust level names the checks it needs: "pass"
 * means only pass counts, "ok" means pass or warn. A needed check that failed, warned where a pass is
 * needed, or was skipped blocks; every other check is advice. Levels as attestation/README.md defines them:
 *   hardware     the coordinator admits only an Apple MDA chain proving SIP on and Full Security and
 *                bound to a Secure Enclave key; doctor promises no more than it saw, so platform, macos,
 *                sip, secure_boot and secure_enclave must pass (an unreadable Secure Boot level blocks).
 *   self_signed  any P-256 key signs and the posture is self-reported, but the coordinator still refuses
 *                a posture below policy and an honest provider reports what it has: platform and sip must
 *                pass; secure_boot and secure_enclave may warn (unread level, software key); macOS 14 is
 *                not needed (no MDA).
 *   none         development: no evidence; any machine with the echo engine qualifies.
 *   All levels need engine, coordinator, clock, device_token and catalog (ok); hardware and self_signed also need
 *   memory and disk (ok): a machine that cannot hold the weights cannot serve them.
 */
import { statfsSync } from "node:fs";
import { cpus, release, totalmem } from "node:os";
import { dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import type { TrustLevel } from "../../attestation/provider/levels.ts";
import { ConfigError, type Env, enumSetting, processEnv, readList, readSetting } from "../config/settings.ts";
import { VERSION } from "../version.ts";
import {
  coordinatorBaseOf,
  type EngineName,
  expectationOf,
  type ModelMapping,
  modelsOf,
  PROVIDER_SETTINGS,
  sameCoordinator,
  settingReader,
} from "./config.ts";
import {
  type CoordinatorExpectation,
  CoordinatorRefused,
  type PinnableInit,
  type PinnedCoordinator,
  pinCoordinator,
} from "./coordinator-pin.ts";
import { type ProviderHome, providerHome, readCredentials, type StoredCredentials } from "./home.ts";
import { helperIdentity, type ProviderIdentity } from "./identity.ts";
import { estimateModelSize, formatGiB } from "./model-size.ts";
import { fetchProviderMe } from "./provider-me.ts";
import { describeModelWarning } from "./runtime.ts";

export type Status = "pass" | "warn" | "fail" | "skip";
export type CheckId = keyof typeof TITLES;

export interface CheckResult {
  readonly id: CheckId;
  readonly title: string;
  readonly status: Status;
  readonly detail: string;
  readonly fix?: string;
}

export interface CommandResult {
  /** null when the command could not run or did not finish in time (`error` says which). */
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly error?: string;
}

/** Everything doctor reads from the machine. */
export interface Probe {
  readonly platform: NodeJS.Platform;
  readonly arch: string;
  readonly env: Env;
  osRelease(): string;
  cpuModel(): string | undefined;
  totalMemory(): number;
  /** Bytes free to this user on the volume holding `path` (or its nearest existing parent). */
  freeDisk(path: string): number | undefined;
  run(argv: readonly string[], timeoutMs: number): Promise<CommandResult>;
  fetch(url: string, init: PinnableInit): Promise<Response>;
  now(): number;
  /** Throws ConfigError for an unreadable or malformed file (home.ts). */
  credentials(home: ProviderHome): StoredCredentials | undefined;
  identityHelper(path: string, timeoutMs: number): Promise<ProviderIdentity>;
  /** Verifies the coordinator's attestation and pins its TLS key (coordinator-pin.ts). */
  pinCoordinator(base: string, expectation: CoordinatorExpectation): Promise<PinnedCoordinator>;
}

export interface Timeouts {
  readonly commandMs: number;
  readonly profilerMs: number;
  readonly networkMs: number;
  readonly helperMs: number;
}

export interface DoctorIO {
  readonly probe: Probe;
  readonly stdout: { write(text: string): unknown; readonly isTTY?: boolean };
  readonly stderr: { write(text: string): unknown };
  readonly timeouts?: Partial<Timeouts>;
}

const TITLES = {
  platform: "Apple Silicon",
  macos: "macOS version",
  sip: "SIP",
  secure_boot: "Secure Boot",
  secure_enclave: "Secure Enclave",
  memory: "Memory",
  disk: "Disk",
  engine: "Engine",
  coordinator: "Coordinator",
  clock: "Clock",
  device_token: "Device token",
  catalog: "Catalog",
} as const;

const SERVICE = { engine: "ok", coordinator: "ok", clock: "ok", device_token: "ok", catalog: "ok" } as const;
/** What each trust level needs of each check (absent: advice only). */
export const REQUIREMENTS: Readonly<Record<TrustLevel, Partial<Record<CheckId, "pass" | "ok">>>> = {
  hardware: {
    platform: "pass",
    macos: "pass",
    sip: "pass",
    secure_boot: "pass",
    secure_enclave: "pass",
    memory: "ok",
    disk: "ok",
    ...SERVICE,
  },
  self_signed: { platform: "pass", sip: "pass", secure_boot: "ok", secure_enclave: "ok", memory: "ok", disk: "ok", ...SERVICE },
  none: SERVICE,
};
const TRUST_LEVELS = Object.keys(REQUIREMENTS) as TrustLevel[];

const DEFAULT_TIMEOUTS: Timeouts = { commandMs: 5_000, profilerMs: 15_000, networkMs: 3_000, helperMs: 10_000 };
const GIB = 2 ** 30;
const MIN_MACOS = 14;
const LOGIN_FIX = "run umbra-provider login (or give --token / UMBRA_PROVIDER_TOKEN)";
const DEV_HINT =
  "In development: `umbra-provider start --engine echo --dev-attestation on` against `umbra-coordinator dev` works on any machine (check it with `umbra-provider doctor --trust none --engine echo ...`).";
const MODELS_DIR = { flag: "models-dir", env: "UMBRA_PROVIDER_MODELS_DIR", kind: "string", help: "" } as const;
const TRUST_SETTING = { flag: "trust", env: "", kind: "enum", values: TRUST_LEVELS, help: "" } as const;

const USAGE = `usage: umbra-provider doctor [--trust hardware|self_signed|none] [--json]
                             [--engine echo|openai [--upstream URL]] [--model BUILD[=UPSTREAM_NAME] ...]
                             [--coordinator URL] [--token TOKEN] [--identity-helper PATH] [--models-dir PATH]
                             [--coordinator-image measurements.json [--coordinator-shape NAME]]

Checks this machine and prints one line per check (pass, warn, FAIL, skip) with what to do:
Apple Silicon, macOS version, SIP, Secure Boot, Secure Enclave helper, memory and disk for the models,
engine, coordinator, clock skew, device token, whether each model is a catalog build (not an alias).
The token is never printed.

  --trust LEVEL        the level this machine must serve at (default hardware); none is development
  --json               one JSON object on stdout: {version, trust_required, ready, blocking, checks}
  --models-dir PATH    where the weights live, for the disk check (UMBRA_PROVIDER_MODELS_DIR;
                       default: the provider home folder)
  other flags          as for start, with the same UMBRA_PROVIDER_* environment twins

Exit status: 0 ready to serve at the trust level, 1 not ready, 2 bad usage.`;

class UsageError extends Error {}

interface Target {
  readonly base?: string;
  /** Why there is no usable base URL. */
  readonly problem?: { readonly detail: string; readonly fix: string };
}

interface Context {
  readonly probe: Probe;
  readonly timeouts: Timeouts;
  readonly home: ProviderHome;
  readonly engine?: EngineName;
  readonly upstream?: string;
  readonly models: readonly ModelMapping[];
  readonly identityHelper?: string;
  readonly modelsDir?: string;
  readonly coordinator: Target;
  readonly token?: { readonly value: string; readonly source: string };
  readonly tokenProblem?: string;
  readonly stored?: StoredCredentials;
  /** --coordinator-image: the attestation the coordinator must show before anything is sent to it. */
  readonly expectation?: CoordinatorExpectation;
  /** The verified attestation's pin (set by runChecks when there is an expectation and a base URL). */
  pinned?: Promise<PinnedCoordinator>;
}

const result = (id: CheckId, status: Status, detail: string, fix?: string): CheckResult => ({
  id,
  title: TITLES[id],
  status,
  detail,
  ...(fix !== undefined ? { fix } : {}),
});

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error)).replace(/\s+/g, " ").slice(0, 300);

/** Runs `work` with an abort signal and a deadline; rejects with "no answer within N ms" when it passes. */
async function within<T>(ms: number, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      reject(new Error(`no answer within ${ms} ms`));
    }, ms);
  });
  try {
    return await Promise.race([work(controller.signal), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** The coordinator's http(s) base URL, by the same rules as `start` (plaintext for loopback only). */
function coordinatorTarget(value: string | undefined): Target {
  const fix = "give --coordinator https://... (or run umbra-provider login)";
  if (value === undefined) return { problem: { detail: "no coordinator given", fix } };
  try {
    return { base: coordinatorBaseOf(value) };
  } catch (error) {
    const detail = messageOf(error).replace(/^--coordinator: /, "");
    return { problem: { detail, fix: detail.includes("plaintext") ? "use https:// (plain http is for loopback only)" : fix } };
  }
}

function parseModels(entries: readonly string[]): readonly ModelMapping[] {
  // No model is not a usage error here: the memory check reports it.
  if (entries.length === 0) return [];
  try {
    return modelsOf(entries);
  } catch (error) {
    throw new UsageError(messageOf(error));
  }
}

function contextOf(flags: Record<string, unknown>, probe: Probe, timeouts: Timeouts): Context {
  const f = flags as Record<string, string | boolean | string[] | undefined>;
  const env = probe.env;
  const home = providerHome(env, probe.platform);
  const engineRaw = readSetting(PROVIDER_SETTINGS.engine, f, env);
  let engine: EngineName | undefined;
  try {
    engine = engineRaw === undefined ? undefined : enumSetting<EngineName>(PROVIDER_SETTINGS.engine, engineRaw, undefined);
  } catch (error) {
    throw new UsageError(messageOf(error));
  }
  let stored: StoredCredentials | undefined;
  let tokenProblem: string | undefined;
  try {
    stored = probe.credentials(home);
  } catch (error) {
    tokenProblem = messageOf(error);
  }
  let token: Context["token"];
  const given = readSetting(PROVIDER_SETTINGS.coordinator, f, env);
  try {
    const value = readSetting(PROVIDER_SETTINGS.token, f, env);
    const envName = PROVIDER_SETTINGS.token.env;
    const source = typeof f.token === "string" ? "--token" : env[envName] ? envName : `${envName}_FILE`;
    if (value !== undefined && value !== "") token = { value, source };
    else if (stored && (given === undefined || sameCoordinator(given, stored.credentials.coordinator))) {
      token = { value: stored.credentials.token, source: home.credentialsFile };
    } else if (stored && given !== undefined) {
      // As start: the stored token is never sent to another coordinator than its login's.
      const login = stored.credentials.coordinator;
      tokenProblem = `the stored login is for ${login}, not ${given}; run 'umbra-provider login --coordinator ${given}' or use --coordinator ${login}`;
    }
  } catch (error) {
    tokenProblem = messageOf(error);
  }
  const upstream = readSetting(PROVIDER_SETTINGS.upstream, f, env);
  const identityHelper = readSetting(PROVIDER_SETTINGS.identityHelper, f, env);
  const modelsDir = readSetting(MODELS_DIR, f, env);
  const coordinator = coordinatorTarget(given ?? stored?.credentials.coordinator);
  let expectation: CoordinatorExpectation | undefined;
  try {
    expectation = coordinator.base === undefined ? undefined : expectationOf(settingReader(f, env), coordinator.base);
  } catch (error) {
    throw new UsageError(messageOf(error));
  }
  return {
    probe,
    timeouts,
    home,
    models: parseModels(readList(PROVIDER_SETTINGS.model, f, env)),
    coordinator,
    ...(expectation !== undefined ? { expectation } : {}),
    ...(engine !== undefined ? { engine } : {}),
    ...(upstream !== undefined ? { upstream } : {}),
    ...(identityHelper ? { identityHelper } : {}),
    ...(modelsDir ? { modelsDir } : {}),
    ...(token ? { token } : {}),
    ...(tokenProblem !== undefined ? { tokenProblem } : {}),
    ...(stored ? { stored } : {}),
  };
}

// ---- machine checks -------------------------------------------------------------------------------

async function checkPlatform({ probe, timeouts }: Context): Promise<CheckResult> {
  if (probe.platform === "darwin" && probe.arch === "arm64") return result("platform", "pass", probe.cpuModel() ?? "Apple Silicon (arm64)");
  if (probe.platform === "darwin" && probe.arch === "x64") {
    const translated = await probe.run(["/usr/sbin/sysctl", "-n", "sysctl.proc_translated"], timeouts.commandMs);
    if (translated.exitCode === 0 && translated.stdout.trim() === "1") {
      return result(
        "platform",
        "fail",
        "running under Rosetta: an x64 build on an Apple Silicon Mac cannot attest this machine",
        "install and run the arm64 build of umbra-provider",
      );
    }
    return result(
      "platform",
      "fail",
      "Intel Mac: not eligible for production: Managed Device Attestation is issued only to Macs with Apple silicon",
      DEV_HINT,
    );
  }
  return result(
    "platform",
    "fail",
    `${probe.platform} ${probe.arch} (${probe.osRelease()}): not eligible for production: Umbra providers need an Apple Silicon Mac (Secure Enclave, Managed Device Attestation)`,
    DEV_HINT,
  );
}

const notMac = (id: CheckId) => result(id, "skip", "not macOS");

async function checkMacOS({ probe, timeouts }: Context): Promise<CheckResult> {
  if (probe.platform !== "darwin") return notMac("macos");
  const out = await probe.run(["/usr/bin/sw_vers", "-productVersion"], timeouts.commandMs);
  const version = out.stdout.trim();
  if (out.exitCode !== 0 || !/^\d+(\.\d+){0,2}$/.test(version)) {
    return result("macos", "warn", `could not read the macOS version (${out.error ?? `sw_vers exit ${out.exitCode}`})`, "run sw_vers");
  }
  if (Number(version.split(".")[0]) >= MIN_MACOS) return result("macos", "pass", version);
  return result(
    "macos",
    "fail",
    `${version}: Managed Device Attestation needs macOS ${MIN_MACOS} or later`,
    `update to macOS ${MIN_MACOS} Sonoma or later (System Settings > General > Software Update)`,
  );
}

async function checkSip({ probe, timeouts }: Context): Promise<CheckResult> {
  if (probe.platform !== "darwin") return notMac("sip");
  const out = await probe.run(["/usr/bin/csrutil", "status"], timeouts.commandMs);
  const line = /System Integrity Protection status:\s*([^\n]*)/.exec(out.stdout)?.[1]?.trim();
  const fix = "restart into Recovery (hold the power button), open Terminal, run `csrutil enable`, then restart";
  if (line === undefined)
    return result("sip", "warn", `could not read csrutil status (${out.error ?? `exit ${out.exitCode}`})`, "run csrutil status");
  if (/^enabled\.?$/.test(line)) return result("sip", "pass", "enabled");
  if (/custom configuration/i.test(line)) return result("sip", "fail", "custom configuration: some protections are off", fix);
  if (/^disabled/.test(line)) return result("sip", "fail", "disabled", fix);
  return result("sip", "warn", `unrecognised csrutil status '${line.slice(0, 80)}'`, "run csrutil status");
}

const LOWER_SECURITY = new Set(["Reduced Security", "Permissive Security", "Medium Security", "No Security"]);

async function checkSecureBoot({ probe, timeouts }: Context): Promise<CheckResult> {
  if (probe.platform !== "darwin") return notMac("secure_boot");
  const out = await probe.run(["/usr/sbin/system_profiler", "-json", "SPiBridgeDataType"], timeouts.profilerMs);
  let level: unknown;
  try {
    level = (JSON.parse(out.stdout) as { SPiBridgeDataType?: { ibridge_secure_boot?: unknown }[] }).SPiBridgeDataType?.[0]
      ?.ibridge_secure_boot;
  } catch {
    level = undefined;
  }
  if (level === "Full Security") return result("secure_boot", "pass", "Full Security");
  if (typeof level === "string" && LOWER_SECURITY.has(level)) {
    return result(
      "secure_boot",
      "fail",
      level,
      "restart into Recovery, open Startup Security Utility and choose Full Security (no third-party kernel extensions)",
    );
  }
  const seen = typeof level === "string" ? `unrecognised reading '${level.slice(0, 80)}'` : "not readable without administrator rights";
  return result(
    "secure_boot",
    "warn",
    `${seen}: hardware trust needs a positive Full Security reading`,
    "check with `sudo bputil -d` (look for Full Security) or System Information > Hardware > Controller",
  );
}

async function checkSecureEnclave({ probe, timeouts, identityHelper }: Context): Promise<CheckResult> {
  if (probe.platform !== "darwin") return notMac("secure_enclave");
  const readme = "see src/provider/secure-enclave/README.md";
  if (identityHelper === undefined) {
    return result(
      "secure_enclave",
      "warn",
      "no identity helper: the identity key would be a software key (trust level self_signed at most)",
      `hardware trust needs the Secure Enclave helper: ${readme}, then pass --identity-helper PATH`,
    );
  }
  const starting = probe.identityHelper(identityHelper, timeouts.helperMs);
  try {
    const identity = await within(timeouts.helperMs + 1_000, () => starting);
    identity.close();
    const keyId = new Bun.CryptoHasher("sha256").update(identity.publicKey).digest("hex").slice(0, 16);
    return result("secure_enclave", "pass", `${identityHelper} holds a P-256 key that signs (key id ${keyId}...)`);
  } catch (error) {
    void starting.then((identity) => identity.close()).catch(() => {});
    return result("secure_enclave", "fail", `${identityHelper}: ${messageOf(error)}`, `build and check the helper: ${readme}`);
  }
}

/** The estimated weights of the models (upstream name first: it is what the engine loads). */
function weightsOf(models: readonly ModelMapping[]) {
  let bytes = 0;
  const unknown: string[] = [];
  for (const m of models) {
    const size = estimateModelSize(m.upstreamName) ?? estimateModelSize(m.buildId);
    if (size) bytes += size.bytes;
    else unknown.push(m.buildId);
  }
  return { bytes, unknown };
}

/** The echo engine answers from the prompt alone: it loads no weights. */
const NO_WEIGHTS = "weights: none needed (echo engine)";

function checkMemory({ probe, models, engine }: Context): CheckResult {
  if (engine === "echo") return result("memory", "pass", `${formatGiB(probe.totalMemory())} RAM; ${NO_WEIGHTS}`);
  if (models.length === 0) return result("memory", "skip", "no --model given", "name the models to serve: --model BUILD[=UPSTREAM_NAME]");
  const { bytes, unknown } = weightsOf(models);
  const total = probe.totalMemory();
  const need = bytes * 1.2 + 4 * GIB;
  const against =
    bytes > 0
      ? `${formatGiB(total)} RAM; the models need about ${formatGiB(need)} (weights ${formatGiB(bytes)} x 1.2 + 4 GiB for the system)`
      : `${formatGiB(total)} RAM`;
  const fix = "serve fewer or more quantized models, or use a Mac with more memory";
  if (total < need * 0.9) return result("memory", "fail", against, fix);
  if (total < need) return result("memory", "warn", `${against}: within 10%, expect memory pressure`, fix);
  if (unknown.length > 0) {
    return result("memory", "warn", `size unknown for ${unknown.join(", ")}; ${against}`, "make sure the weights fit in memory");
  }
  return result("memory", "pass", against);
}

function checkDisk({ probe, models, modelsDir, home, engine }: Context): CheckResult {
  const path = modelsDir ?? home.dir;
  const free = probe.freeDisk(path);
  if (free === undefined) return result("disk", "warn", `could not read the free space of ${path}`, "check with df -h");
  const where = `${formatGiB(free)} free in ${path}`;
  if (free < 2 * GIB) return result("disk", "fail", `${where}: less than 2 GiB`, "free some space on that volume");
  if (engine === "echo") return result("disk", "pass", `${where}; ${NO_WEIGHTS}`);
  if (models.length === 0) return result("disk", "pass", where);
  const { bytes, unknown } = weightsOf(models);
  if (free < bytes) {
    return result(
      "disk",
      "warn",
      `${where}; the weights take about ${formatGiB(bytes)} (fine if they are already downloaded)`,
      "free space before downloading the weights",
    );
  }
  if (unknown.length > 0) return result("disk", "warn", `${where}; size unknown for ${unknown.join(", ")}`, "make sure the weights fit");
  return result("disk", "pass", `${where}; the weights take about ${formatGiB(bytes)}`);
}

// ---- service checks -------------------------------------------------------------------------------

async function checkEngine({ probe, timeouts, engine, upstream, models }: Context): Promise<CheckResult> {
  if (engine === undefined) {
    return result("engine", "skip", "no engine given", "give --engine echo (development) or --engine openai --upstream URL");
  }
  if (models.length === 0) return result("engine", "fail", "no --model given", "name the models to serve: --model BUILD[=UPSTREAM_NAME]");
  if (engine === "echo") return result("engine", "pass", "echo: development engine (echoes the prompt; not for production)");
  const example = "e.g. --upstream http://127.0.0.1:11434/v1";
  if (upstream === undefined) return result("engine", "fail", "--upstream is required with --engine openai", example);
  let base: string;
  try {
    const url = new URL(upstream);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http");
    base = `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, "")}`;
  } catch {
    return result("engine", "fail", `--upstream '${upstream.slice(0, 200)}' is not an http(s) URL`, example);
  }
  const url = `${base}/models`;
  let listed: Set<string>;
  try {
    listed = await within(timeouts.networkMs, async (signal) => {
      const response = await probe.fetch(url, { signal });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const body = (await response.json()) as { data?: { id?: unknown }[] };
      return new Set((body.data ?? []).flatMap((m) => (typeof m?.id === "string" ? [m.id] : [])));
    });
  } catch (error) {
    return result(
      "engine",
      "fail",
      `${url}: ${messageOf(error)}`,
      "start the runtime (e.g. ollama serve, mlx_lm.server) and check --upstream",
    );
  }
  const missing = models.filter((m) => !listed.has(m.upstreamName)).map((m) => m.upstreamName);
  if (missing.length > 0) {
    return result(
      "engine",
      "fail",
      `${url} does not list ${missing.join(", ")}`,
      "load the models in the runtime, or map --model BUILD=UPSTREAM_NAME to a name it lists",
    );
  }
  return result("engine", "pass", `openai at ${base} serves ${models.map((m) => m.upstreamName).join(", ")}`);
}

interface Health {
  readonly check: CheckResult;
  readonly reached?: { readonly sentAt: number; readonly receivedAt: number; readonly date: string | null };
}

async function checkCoordinator({ probe, timeouts, coordinator, pinned }: Context): Promise<Health> {
  if (coordinator.base === undefined) {
    const problem = coordinator.problem ?? { detail: "no coordinator", fix: "" };
    return { check: result("coordinator", "fail", problem.detail, problem.fix) };
  }
  let pin: PinnedCoordinator | undefined;
  if (pinned !== undefined) {
    try {
      pin = await pinned;
    } catch (error) {
      const refused = error instanceof CoordinatorRefused;
      return {
        check: result(
          "coordinator",
          "fail",
          refused ? `refused: ${messageOf(error)}` : `cannot verify its attestation: ${messageOf(error)}`,
          !refused
            ? "check the URL and this machine's network"
            : error.check === "document"
              ? "the coordinator shows no attestation: it must run in its SEV-SNP VM (ask its operator)"
              : "the coordinator does not run the published image: check --coordinator-image (and --coordinator-shape) against the operator's release",
        ),
      };
    }
  }
  const url = `${coordinator.base}/healthz`;
  const sentAt = probe.now();
  try {
    const response = await within(timeouts.networkMs, (signal) =>
      probe.fetch(url, { signal, redirect: "manual", ...(pin ? { tls: pin.tls } : {}) }),
    );
    const receivedAt = probe.now();
    await response.body?.cancel();
    if (response.status !== 200) {
      return {
        check: result(
          "coordinator",
          "fail",
          `${url} answered HTTP ${response.status}`,
          "check --coordinator: the base URL of an Umbra coordinator",
        ),
      };
    }
    const attested = pin
      ? `; attestation verified (shape ${pin.shape ?? "?"}${pin.development ? ", DEVELOPMENT evidence" : ""}), TLS key pinned`
      : "";
    return {
      check: result("coordinator", "pass", `${coordinator.base} is up (${Math.round(receivedAt - sentAt)} ms)${attested}`),
      reached: { sentAt, receivedAt, date: response.headers.get("date") },
    };
  } catch (error) {
    const message = messageOf(error);
    const untrusted = !pin && /certificate|TLS|self[- ]signed/i.test(message);
    return {
      check: result(
        "coordinator",
        "fail",
        `cannot reach ${url}: ${message}`,
        untrusted
          ? "a coordinator with a self-signed certificate is trusted through its attestation: give --coordinator-image with the image's measurements.json"
          : "check the URL and this machine's network",
      ),
    };
  }
}

function checkClock(health: Health): CheckResult {
  const fix =
    "attestation evidence must be within two minutes of the coordinator's clock; enable automatic time (macOS: System Settings > General > Date & Time; Linux: timedatectl set-ntp true)";
  if (!health.reached) return result("clock", "skip", "needs an answer from the coordinator");
  const date = health.reached.date === null ? Number.NaN : Date.parse(health.reached.date);
  if (Number.isNaN(date)) return result("clock", "warn", "the coordinator sent no usable Date header; skew not measured", fix);
  // The header has whole seconds: the coordinator's clock read somewhere in [date, date + 1 s).
  const skewMs = (health.reached.sentAt + health.reached.receivedAt) / 2 - (date + 500);
  const seconds = Math.abs(skewMs) / 1000;
  const detail = `${seconds.toFixed(1)} s ${skewMs >= 0 ? "ahead of" : "behind"} the coordinator`;
  if (seconds <= 5) return result("clock", "pass", detail);
  return result("clock", seconds <= 60 ? "warn" : "fail", detail, fix);
}

/**
 * The probe's fetch, with the pinned TLS options when the coordinator is pinned; undefined when its
 * attestation did not pass (the token is then sent nowhere).
 */
async function pinnedProbeFetch(
  probe: Probe,
  pinned: Promise<PinnedCoordinator> | undefined,
): Promise<((url: string, init: PinnableInit) => Promise<Response>) | undefined> {
  if (pinned === undefined) return probe.fetch;
  try {
    const { tls } = await pinned;
    return (url, init) => probe.fetch(url, { ...init, tls });
  } catch {
    return undefined;
  }
}

async function checkDeviceToken({
  probe,
  timeouts,
  token,
  tokenProblem,
  stored,
  home,
  coordinator,
  pinned,
}: Context): Promise<CheckResult> {
  if (stored && (stored.mode & 0o077) !== 0) {
    const mode = stored.mode.toString(8).padStart(4, "0");
    return result(
      "device_token",
      "fail",
      `${home.credentialsFile} is readable by other users (mode ${mode})`,
      `chmod 600 ${home.credentialsFile}`,
    );
  }
  if (token === undefined) return result("device_token", "fail", tokenProblem ?? "no device token", LOGIN_FIX);
  if (!/^[\x21-\x7e]{1,4096}$/.test(token.value)) {
    return result("device_token", "fail", `the token from ${token.source} is not printable ASCII without spaces`, LOGIN_FIX);
  }
  const present = `present (from ${token.source})`;
  if (coordinator.base === undefined) return result("device_token", "warn", `${present}; not verified: no usable coordinator URL`);
  const base = coordinator.base;
  const url = `${base}/v1/provider/me`;
  const fetchPinned = await pinnedProbeFetch(probe, pinned);
  if (fetchPinned === undefined)
    return result("device_token", "warn", `${present}; not verified: the coordinator's attestation did not pass`);
  try {
    const answer = await within(timeouts.networkMs, (signal) => fetchProviderMe(base, token.value, { signal, fetch: fetchPinned }));
    const status = answer.status;
    const account = answer.account?.account_id.slice(0, 100);
    if (status === 200)
      return result("device_token", "pass", `${present}; accepted for account ${account ?? stored?.credentials.accountId ?? "?"}`);
    if (status === 401 || status === 403) {
      return result("device_token", "fail", `${present}; the coordinator refused it (HTTP ${status})`, "run umbra-provider login");
    }
    if (status === 404)
      return result("device_token", "warn", `${present}; not verified: the coordinator has no /v1/provider/me (older version)`);
    return result("device_token", "warn", `${present}; not verified: ${url} answered HTTP ${status}`);
  } catch (error) {
    return result("device_token", "warn", `${present}; not verified: ${messageOf(error)} (offline?)`);
  }
}

/** How many catalog builds a failing check lists as examples. */
const BUILDS_SHOWN = 5;

async function checkCatalog({ probe, timeouts, token, coordinator, models, pinned }: Context): Promise<CheckResult> {
  const base = coordinator.base;
  if (models.length === 0 || base === undefined || token === undefined) {
    return result("catalog", "warn", "not checked: needs --model, a coordinator and a device token");
  }
  const fetchPinned = await pinnedProbeFetch(probe, pinned);
  if (fetchPinned === undefined) return result("catalog", "warn", "not checked: the coordinator's attestation did not pass");
  const url = `${base}/v1/provider/models`;
  let catalog: { id: string; aliases: string[] }[];
  try {
    catalog = await within(timeouts.networkMs, async (signal) => {
      const headers = { authorization: `Bearer ${token.value}`, accept: "application/json" };
      // The token goes to this coordinator only, never to where a redirect points.
      const response = await fetchPinned(url, { signal, redirect: "manual", headers });
      if (response.status === 404) throw new Error("the coordinator has no /v1/provider/models (older version)");
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const body = (await response.json()) as { data?: { id?: unknown; aliases?: unknown }[] };
      return (body.data ?? []).flatMap((m) =>
        typeof m?.id === "string"
          ? [{ id: m.id, aliases: Array.isArray(m.aliases) ? m.aliases.filter((a) => typeof a === "string") : [] }]
          : [],
      );
    });
  } catch (error) {
    return result("catalog", "warn", `not checked: ${url}: ${messageOf(error)}`);
  }
  const builds = new Set(catalog.map((b) => b.id));
  const aliasOf = new Map(catalog.flatMap((b) => b.aliases.map((a) => [a, b.id] as const)));
  const served = models.filter((m) => builds.has(m.buildId)).map((m) => m.buildId);
  const aliases = models.filter((m) => !builds.has(m.buildId) && aliasOf.has(m.buildId));
  const unknown = models.filter((m) => !builds.has(m.buildId) && !aliasOf.has(m.buildId)).map((m) => m.buildId);
  const fix = "give --model BUILD[=UPSTREAM_NAME] with the build id: requests are routed by build";
  if (aliases.length > 0) {
    const lines = aliases.map((m) => describeModelWarning({ model: m.buildId, reason: "alias", build_id: aliasOf.get(m.buildId) ?? "?" }));
    return result("catalog", "fail", lines.join("; "), fix);
  }
  if (unknown.length > 0) {
    const shown = catalog.slice(0, BUILDS_SHOWN).map((b) => b.id);
    const more = catalog.length > BUILDS_SHOWN ? ` and ${catalog.length - BUILDS_SHOWN} more` : "";
    const list = shown.length > 0 ? `the catalog's builds: ${shown.join(", ")}${more}` : "the catalog has no builds yet";
    const detail = `${unknown.join(", ")}: not a build in the coordinator's catalog (it gets no requests)`;
    return result("catalog", served.length > 0 ? "warn" : "fail", detail, `check the id; ${list}`);
  }
  return result("catalog", "pass", `catalog builds: ${served.join(", ")}`);
}

/** Runs every check (independent ones at once) and returns them in the documented order. */
async function runChecks(context: Context): Promise<CheckResult[]> {
  const { expectation, coordinator, probe, timeouts } = context;
  if (expectation !== undefined && coordinator.base !== undefined) {
    const base = coordinator.base;
    context.pinned = within(timeouts.networkMs * 3, () => probe.pinCoordinator(base, expectation));
    context.pinned.catch(() => undefined);
  }
  const health = checkCoordinator(context);
  const checks = await Promise.all([
    checkPlatform(context),
    checkMacOS(context),
    checkSip(context),
    checkSecureBoot(context),
    checkSecureEnclave(context),
    checkMemory(context),
    checkDisk(context),
    checkEngine(context),
    health.then((h) => h.check),
    health.then(checkClock),
    checkDeviceToken(context),
    checkCatalog(context),
  ]);
  return checks;
}

// ---- verdict and output ---------------------------------------------------------------------------

interface Verdict {
  readonly ready: boolean;
  readonly failed: readonly CheckId[];
  /** Warned where the level needs a pass. */
  readonly unproven: readonly CheckId[];
  /** Skipped although the level needs it. */
  readonly unchecked: readonly CheckId[];
  /** All of the above, in check order. */
  readonly blocking: readonly CheckId[];
}

function assess(checks: readonly CheckResult[], trust: TrustLevel): Verdict {
  const needs = REQUIREMENTS[trust];
  const pick = (test: (c: CheckResult, need: "pass" | "ok") => boolean) =>
    checks.filter((c) => needs[c.id] !== undefined && test(c, needs[c.id] ?? "ok")).map((c) => c.id);
  const failed = pick((c) => c.status === "fail");
  const unproven = pick((c, need) => c.status === "warn" && need === "pass");
  const unchecked = pick((c) => c.status === "skip");
  const blocking = checks.filter((c) => [...failed, ...unproven, ...unchecked].includes(c.id)).map((c) => c.id);
  return { ready: blocking.length === 0, failed, unproven, unchecked, blocking };
}

function summary(checks: readonly CheckResult[], verdict: Verdict, trust: TrustLevel): string {
  if (verdict.ready) {
    const warnings = checks.filter((c) => c.status === "warn").length;
    const advice = checks.filter((c) => c.status === "fail").map((c) => c.id);
    const notes = [
      warnings > 0 ? `${warnings} warning${warnings === 1 ? "" : "s"}` : "",
      advice.length > 0 ? `failed but not needed at this level: ${advice.join(", ")}` : "",
    ].filter((n) => n !== "");
    return `ready to serve at trust level ${trust}${notes.length > 0 ? ` (${notes.join("; ")})` : ""}`;
  }
  const n = verdict.failed.length;
  const parts = [
    n > 0 ? `${n} check${n === 1 ? "" : "s"} failed (${verdict.failed.join(", ")})` : "",
    verdict.unproven.length > 0 ? `not proven: ${verdict.unproven.join(", ")}` : "",
    verdict.unchecked.length > 0 ? `not checked: ${verdict.unchecked.join(", ")}` : "",
  ];
  return `not ready for trust level ${trust}: ${parts.filter((p) => p !== "").join("; ")}`;
}

const LABELS: Record<Status, { text: string; colour: string }> = {
  pass: { text: "pass", colour: "\x1b[32m" },
  warn: { text: "warn", colour: "\x1b[33m" },
  fail: { text: "FAIL", colour: "\x1b[1;31m" },
  skip: { text: "skip", colour: "\x1b[2m" },
};

function renderHuman(checks: readonly CheckResult[], verdict: Verdict, trust: TrustLevel, colour: boolean): string {
  const paint = (code: string, text: string) => (colour ? `${code}${text}\x1b[0m` : text);
  const width = Math.max(...checks.map((c) => c.title.length)) + 2;
  const lines = checks.map((c) => {
    const label = paint(LABELS[c.status].colour, LABELS[c.status].text);
    return `${label}  ${c.title.padEnd(width)}${c.detail}${c.fix ? ` — ${c.fix}` : ""}`;
  });
  lines.push("", paint(verdict.ready ? "\x1b[1;32m" : "\x1b[1;31m", summary(checks, verdict, trust)));
  return `${lines.join("\n")}\n`;
}

/** `umbra-provider doctor` with injected machine access and streams; returns the exit status. */
export async function runDoctor(argv: readonly string[], io: DoctorIO): Promise<number> {
  const timeouts = { ...DEFAULT_TIMEOUTS, ...io.timeouts };
  let flags: Record<string, unknown>;
  let trust: TrustLevel;
  let context: Context;
  try {
    flags = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        json: { type: "boolean" },
        help: { type: "boolean", short: "h" },
        trust: { type: "string" },
        "models-dir": { type: "string" },
        coordinator: { type: "string" },
        token: { type: "string" },
        engine: { type: "string" },
        upstream: { type: "string" },
        model: { type: "string", multiple: true },
        "identity-helper": { type: "string" },
        "coordinator-image": { type: "string" },
        "coordinator-shape": { type: "string" },
        "coordinator-evidence": { type: "string" },
      },
    }).values;
    if (flags.help === true) {
      io.stdout.write(`${USAGE}\n`);
      return 0;
    }
    trust = enumSetting<TrustLevel>(TRUST_SETTING, flags.trust as string | undefined, "hardware");
    context = contextOf(flags, io.probe, timeouts);
  } catch (error) {
    const parseError = String((error as { code?: unknown }).code).startsWith("ERR_PARSE_ARGS");
    if (!(error instanceof UsageError || error instanceof ConfigError || parseError)) throw error;
    io.stderr.write(`umbra-provider doctor: ${messageOf(error)}\n(umbra-provider doctor --help lists every flag)\n`);
    return 2;
  }
  const checks = await runChecks(context);
  const verdict = assess(checks, trust);
  const text =
    flags.json === true
      ? `${JSON.stringify({
          version: VERSION,
          trust_required: trust,
          ready: verdict.ready,
          blocking: verdict.blocking,
          checks,
        })}\n`
      : renderHuman(checks, verdict, trust, io.stdout.isTTY === true && !io.probe.env.NO_COLOR);
  // Belt and braces: no check prints the token, and none may by accident.
  const secret = context.token?.value;
  io.stdout.write(secret !== undefined && secret.length >= 8 ? text.replaceAll(secret, "[redacted]") : text);
  return verdict.ready ? 0 : 1;
}

// ---- the real machine -----------------------------------------------------------------------------

async function runCommand(argv: readonly string[], timeoutMs: number): Promise<CommandResult> {
  let proc: ReturnType<typeof Bun.spawn<"ignore", "pipe", "ignore">>;
  try {
    proc = Bun.spawn([...argv], { stdin: "ignore", stdout: "pipe", stderr: "ignore" });
  } catch {
    return { exitCode: null, stdout: "", error: `cannot run ${argv[0] ?? ""}` };
  }
  try {
    return await within(timeoutMs, async () => {
      const [stdout, exitCode] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
      return { exitCode, stdout };
    });
  } catch (error) {
    proc.kill("SIGKILL");
    return { exitCode: null, stdout: "", error: messageOf(error) };
  }
}

function freeDisk(path: string): number | undefined {
  let dir = resolve(path);
  for (;;) {
    try {
      const stats = statfsSync(dir);
      return stats.bavail * stats.bsize;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT" || dirname(dir) === dir) return undefined;
      dir = dirname(dir);
    }
  }
}

/** The probe of this machine: node:os, statfs, Bun.spawn, fetch, the credentials file, helperIdentity. */
export function realProbe(env: Env): Probe {
  return {
    platform: process.platform,
    arch: process.arch,
    env,
    osRelease: () => release(),
    cpuModel: () => cpus()[0]?.model.trim() || undefined,
    totalMemory: () => totalmem(),
    freeDisk,
    run: runCommand,
    fetch: (url, init) => fetch(url, init),
    now: () => Date.now(),
    credentials: readCredentials,
    identityHelper: (path, timeoutMs) => helperIdentity([path], timeoutMs),
    pinCoordinator: (base, expectation) => pinCoordinator(base, expectation),
  };
}

/** `umbra-provider doctor [flags]`: exit 0 ready, 1 not ready, 2 bad usage. */
export async function doctorCommand(argv: readonly string[]): Promise<number> {
  return runDoctor(argv, { probe: realProbe(processEnv()), stdout: process.stdout, stderr: process.stderr });
}
