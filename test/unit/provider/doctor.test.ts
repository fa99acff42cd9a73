/**
 * `umbra-provider doctor` against fake machines (the Probe interface): a healthy Mac passes everything
 * and exits 0; each broken condition gives the right status, fix and exit code; the trust levels need
 * what the checks' entries say; the JSON shape; the token is never printed; usage errors exit 2. The real
 * probe's command deadline, free-disk walk and credentials mode are exercised on this machine; the
 * model-size estimate has its own table.
 */
import { describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SoftwareIdentity } from "../../../attestation/provider/index.ts";
import type { TrustLevel } from "../../../attestation/provider/levels.ts";
import { ConfigError } from "../../../src/config/settings.ts";
import { CoordinatorRefused, type PinnedCoordinator } from "../../../src/provider/coordinator-pin.ts";
import { type CommandResult, type DoctorIO, type Probe, REQUIREMENTS, realProbe, runDoctor } from "../../../src/provider/doctor/index.ts";
import type { StoredCredentials } from "../../../src/provider/home.ts";
import { IdentityError, softwareIdentity } from "../../../src/provider/identity.ts";
import { estimateModelSize } from "../../../src/provider/model-size.ts";
import { VERSION } from "../../../src/version.ts";
import { writeMeasurements } from "../../support/measurements.ts";

const GIB = 2 ** 30;
const NOW = Date.UTC(2026, 10, 21, 12, 0, 0, 250);
const TOKEN = "prov_secret_device_token_0123456789abcdef";
const HOME = "/fake/home/umbra-provider";
const CREDENTIALS = `${HOME}/credentials.json`;
const COORDINATOR = "https://coordinator.example";
const UPSTREAM = "http://127.0.0.1:11434/v1";
const HELPER = "/usr/local/bin/umbra-se-helper";
const MODEL = "meta/llama-3.1-8b=llama3.1:8b-instruct-q4_K_M";
/** A provider that serves one quantized 8B model through a local runtime, with the Secure Enclave helper. */
const SERVE = ["--engine", "openai", "--upstream", UPSTREAM, "--model", MODEL, "--identity-helper", HELPER];
const NO_HELPER = SERVE.slice(0, -2);
/** Serves `build` through the runtime's model "other" (listed, of unknown size): sized by the build id. */
const sized = (build: string) => ["--engine", "openai", "--upstream", UPSTREAM, "--model", `${build}=other`, "--identity-helper", HELPER];

/** The coordinator's catalog: every build the tests serve, and one alias. */
const CATALOG = ["a/x-1b", "b/y-2b", "meta/llama-3.1-8b", "meta/llama-3.3-70b-4bit", "org/m"].map((id) => ({
  id,
  aliases: id === "meta/llama-3.1-8b" ? ["meta/llama"] : [],
}));

const SIP_ON = "System Integrity Protection status: enabled.\n";
const bridge = (level: string) => JSON.stringify({ SPiBridgeDataType: [{ ibridge_secure_boot: level, ibridge_sb_sip: "Enabled" }] });
const json = (body: unknown, init: ResponseInit = {}) => new Response(JSON.stringify(body), init);

interface Fake {
  platform?: NodeJS.Platform;
  arch?: string;
  env?: Record<string, string>;
  commands?: Record<string, string | CommandResult>;
  memoryGiB?: number;
  freeGiB?: number | undefined;
  routes?: Record<string, () => Response | Promise<Response>>;
  stored?: StoredCredentials | Error | null;
  helper?: Error;
  /** How far the coordinator's clock is ahead of this machine's. */
  serverAheadMs?: number;
  /** What pinning the coordinator gives (--coordinator-image): a pin, or the error it rejects with. */
  pin?: PinnedCoordinator | Error;
}

interface FakeProbe extends Probe {
  /** Every request, with whether it went over pinned TLS options. */
  readonly requests: { url: string; authorization: string | null; pinned?: boolean }[];
  readonly diskPaths: string[];
  readonly helpersClosed: number[];
}

function fakeProbe(fake: Fake = {}): FakeProbe {
  const commands: Record<string, string | CommandResult> = {
    "/usr/bin/sw_vers -productVersion": "15.1\n",
    "/usr/bin/csrutil status": SIP_ON,
    "/usr/sbin/system_profiler -json SPiBridgeDataType": bridge("Full Security"),
    ...fake.commands,
  };
  const routes: Record<string, () => Response | Promise<Response>> = {
    [`${UPSTREAM}/models`]: () => json({ object: "list", data: [{ id: "llama3.1:8b-instruct-q4_K_M" }, { id: "other" }] }),
    [`${COORDINATOR}/healthz`]: () =>
      json({ status: "ok" }, { headers: { date: new Date(NOW + (fake.serverAheadMs ?? 0)).toUTCString() } }),
    [`${COORDINATOR}/v1/provider/me`]: () => json({ account_id: "acct_1", provider_tokens: 1 }),
    [`${COORDINATOR}/v1/provider/models`]: () => json({ object: "list", data: CATALOG }),
    [`${COORDINATOR}/v1/provider/enroll/status`]: () => json({ state: "attested", attested_at: NOW }),
    ...fake.routes,
  };
  const requests: FakeProbe["requests"] = [];
  const diskPaths: string[] = [];
  const helpersClosed: number[] = [];
  const stored =
    fake.stored === undefined
      ? { credentials: { coordinator: COORDINATOR, token: TOKEN, accountId: "acct_1", createdAt: NOW }, mode: 0o600 }
      : fake.stored;
  return {
    platform: fake.platform ?? "darwin",
    arch: fake.arch ?? "arm64",
    env: { UMBRA_PROVIDER_HOME: HOME, ...fake.env },
    osRelease: () => "6.1.0",
    cpuModel: () => "Apple M2 Max",
    totalMemory: () => (fake.memoryGiB ?? 64) * GIB,
    freeDisk: (path) => {
      diskPaths.push(path);
      return "freeGiB" in fake && fake.freeGiB === undefined ? undefined : (fake.freeGiB ?? 500) * GIB;
    },
    run: async (argv) => {
      const answer = commands[argv.join(" ")];
      if (answer === undefined) return { exitCode: null, stdout: "", error: `cannot run ${argv[0]}` };
      return typeof answer === "string" ? { exitCode: 0, stdout: answer } : answer;
    },
    fetch: async (url, init) => {
      requests.push({ url, authorization: new Headers(init.headers).get("authorization"), ...(init.tls ? { pinned: true } : {}) });
      const route = routes[url];
      if (!route) throw new TypeError("Unable to connect. Is the computer able to access the url?");
      return route();
    },
    now: () => NOW,
    credentials: () => {
      if (stored instanceof Error) throw stored;
      return stored ?? undefined;
    },
    identityHelper: async () => {
      if (fake.helper) throw fake.helper;
      const identity = softwareIdentity(SoftwareIdentity.generate());
      return { ...identity, close: () => helpersClosed.push(1) };
    },
    pinCoordinator: async () => {
      if (fake.pin === undefined) throw new Error("no pin in this fake");
      if (fake.pin instanceof Error) throw fake.pin;
      return fake.pin;
    },
    requests,
    diskPaths,
    helpersClosed,
  };
}

interface Check {
  id: string;
  title: string;
  status: string;
  detail: string;
  fix?: string;
}

async function doctor(argv: readonly string[], probe: Probe, options: { tty?: boolean } = {}) {
  let out = "";
  let err = "";
  const io: DoctorIO = {
    probe,
    stdout: { write: (text: string) => (out += text), isTTY: options.tty ?? false },
    stderr: { write: (text: string) => (err += text) },
    timeouts: { networkMs: 100, helperMs: 100, commandMs: 100, profilerMs: 100 },
  };
  const code = await runDoctor(argv, io);
  return { code, out, err };
}

async function doctorJson(argv: readonly string[], probe: Probe) {
  const { code, out, err } = await doctor([...argv, "--json"], probe);
  const report = JSON.parse(out) as { version: string; ready: boolean; trust_required: string; blocking: string[]; checks: Check[] };
  const check = (id: string) => report.checks.find((c) => c.id === id);
  return { code, out, err, report, check };
}

describe("doctor on a healthy Mac", () => {
  test("every check passes, exit 0, and the JSON report is exactly this", async () => {
    const probe = fakeProbe();
    const { code, report, err } = await doctorJson(SERVE, probe);
    expect(err).toBe("");
    expect(code).toBe(0);
    expect(report).toEqual({
      version: VERSION,
      trust_required: "hardware",
      ready: true,
      blocking: [],
      checks: [
        { id: "platform", title: "Apple Silicon", status: "pass", detail: "Apple M2 Max" },
        { id: "macos", title: "macOS version", status: "pass", detail: "15.1" },
        { id: "sip", title: "SIP", status: "pass", detail: "enabled" },
        { id: "secure_boot", title: "Secure Boot", status: "pass", detail: "Full Security" },
        {
          id: "secure_enclave",
          title: "Secure Enclave",
          status: "pass",
          detail: expect.stringMatching(new RegExp(`^${HELPER} holds a P-256 key that signs \\(key id [0-9a-f]{16}\\.\\.\\.\\)$`)),
        },
        {
          id: "memory",
          title: "Memory",
          status: "pass",
          detail: "64.0 GiB RAM; the models need about 9.0 GiB (weights 4.2 GiB x 1.2 + 4 GiB for the system)",
        },
        { id: "disk", title: "Disk", status: "pass", detail: `500.0 GiB free in ${HOME}; the weights take about 4.2 GiB` },
        { id: "engine", title: "Engine", status: "pass", detail: `openai at ${UPSTREAM} serves llama3.1:8b-instruct-q4_K_M` },
        { id: "coordinator", title: "Coordinator", status: "pass", detail: `${COORDINATOR} is up (0 ms)` },
        { id: "clock", title: "Clock", status: "pass", detail: "0.3 s behind the coordinator" },
        {
          id: "device_token",
          title: "Device token",
          status: "pass",
          detail: `present (from ${CREDENTIALS}); accepted for account acct_1`,
        },
        { id: "catalog", title: "Catalog", status: "pass", detail: "catalog builds: meta/llama-3.1-8b" },
        {
          id: "mdm_enrolment",
          title: "MDM enrolment",
          status: "pass",
          detail: "attested: Apple's attestation of this Mac is stored and passes (hardware)",
        },
      ],
    });
    expect(probe.helpersClosed).toEqual([1]);
    const provider = (r: { url: string }) => /\/v1\/provider\/(me|models|enroll\/status)$/.test(r.url);
    expect(probe.requests.filter(provider).map((r) => r.authorization)).toEqual([`Bearer ${TOKEN}`, `Bearer ${TOKEN}`, `Bearer ${TOKEN}`]);
    expect(probe.requests.filter((r) => !provider(r)).map((r) => r.authorization)).toEqual([null, null]);
  });

  test("human output: one aligned line per check, then the verdict; no colour off a terminal", async () => {
    const { code, out } = await doctor(SERVE, fakeProbe());
    expect(code).toBe(0);
    const lines = out.trimEnd().split("\n");
    expect(lines).toHaveLength(15);
    expect(lines.slice(0, 4)).toEqual([
      "pass  Apple Silicon   Apple M2 Max",
      "pass  macOS version   15.1",
      "pass  SIP             enabled",
      "pass  Secure Boot     Full Security",
    ]);
    expect(lines.slice(11)).toEqual([
      "pass  Catalog         catalog builds: meta/llama-3.1-8b",
      "pass  MDM enrolment   attested: Apple's attestation of this Mac is stored and passes (hardware)",
      "",
      "ready to serve at trust level hardware",
    ]);
    expect(out).not.toContain("\x1b[");
  });

  test("colours only on a terminal and only without NO_COLOR", async () => {
    expect((await doctor(SERVE, fakeProbe(), { tty: true })).out).toContain("\x1b[32mpass\x1b[0m  Apple Silicon");
    expect((await doctor(SERVE, fakeProbe({ env: { NO_COLOR: "1" } }), { tty: true })).out).not.toContain("\x1b[");
  });
});

/** [what, fake machine, flags, check id, status, text the detail or fix must contain, exit at hardware] */
const CONDITIONS: [string, Fake, string[], string, string, string, number][] = [
  [
    "SIP disabled",
    { commands: { "/usr/bin/csrutil status": "System Integrity Protection status: disabled.\n" } },
    SERVE,
    "sip",
    "fail",
    "csrutil enable",
    1,
  ],
  [
    "SIP in a custom configuration",
    { commands: { "/usr/bin/csrutil status": "System Integrity Protection status: enabled (Custom Configuration).\n\nConfiguration:\n" } },
    SERVE,
    "sip",
    "fail",
    "Recovery",
    1,
  ],
  [
    "csrutil unreadable",
    { commands: { "/usr/bin/csrutil status": { exitCode: 1, stdout: "" } } },
    SERVE,
    "sip",
    "warn",
    "csrutil status",
    1,
  ],
  [
    "Reduced Security",
    { commands: { "/usr/sbin/system_profiler -json SPiBridgeDataType": bridge("Reduced Security") } },
    SERVE,
    "secure_boot",
    "fail",
    "Startup Security Utility",
    1,
  ],
  [
    "Permissive Security",
    { commands: { "/usr/sbin/system_profiler -json SPiBridgeDataType": bridge("Permissive Security") } },
    SERVE,
    "secure_boot",
    "fail",
    "Full Security",
    1,
  ],
  [
    "Secure Boot level unreadable",
    { commands: { "/usr/sbin/system_profiler -json SPiBridgeDataType": "{}" } },
    SERVE,
    "secure_boot",
    "warn",
    "sudo bputil -d",
    1,
  ],
  [
    "Secure Boot level localised",
    { commands: { "/usr/sbin/system_profiler -json SPiBridgeDataType": bridge("Sécurité maximale") } },
    SERVE,
    "secure_boot",
    "warn",
    "unrecognised reading 'Sécurité maximale'",
    1,
  ],
  [
    "system_profiler timed out",
    {
      commands: { "/usr/sbin/system_profiler -json SPiBridgeDataType": { exitCode: null, stdout: "", error: "no answer within 15000 ms" } },
    },
    SERVE,
    "secure_boot",
    "warn",
    "bputil",
    1,
  ],
  ["no Secure Enclave helper", {}, NO_HELPER, "secure_enclave", "warn", "src/provider/secure-enclave/README.md", 1],
  [
    "a broken helper",
    { helper: new IdentityError("the identity helper exited (code 3)") },
    SERVE,
    "secure_enclave",
    "fail",
    "exited (code 3)",
    1,
  ],
  ["macOS 13", { commands: { "/usr/bin/sw_vers -productVersion": "13.6.7\n" } }, SERVE, "macos", "fail", "Software Update", 1],
  ["low memory", { memoryGiB: 16 }, sized("meta/llama-3.3-70b-4bit"), "memory", "fail", "the models need about", 1],
  ["memory within 10%", { memoryGiB: 9 }, SERVE, "memory", "warn", "within 10%", 0],
  ["a model of unknown size", {}, sized("org/m"), "memory", "warn", "size unknown for org/m", 0],
  ["under 2 GiB of disk", { freeGiB: 1.5 }, SERVE, "disk", "fail", "less than 2 GiB", 1],
  ["less disk than the weights", { freeGiB: 3 }, SERVE, "disk", "warn", "already downloaded", 0],
  [
    "an unreachable engine",
    { routes: { [`${UPSTREAM}/models`]: () => Promise.reject(new TypeError("ECONNREFUSED")) } },
    SERVE,
    "engine",
    "fail",
    `${UPSTREAM}/models: ECONNREFUSED`,
    1,
  ],
  [
    "an engine without the model",
    { routes: { [`${UPSTREAM}/models`]: () => json({ data: [{ id: "qwen" }] }) } },
    SERVE,
    "engine",
    "fail",
    "does not list llama3.1:8b-instruct-q4_K_M",
    1,
  ],
  [
    "an engine answering 500",
    { routes: { [`${UPSTREAM}/models`]: () => new Response("no", { status: 500 }) } },
    SERVE,
    "engine",
    "fail",
    "HTTP 500",
    1,
  ],
  [
    "an unreachable coordinator",
    { routes: { [`${COORDINATOR}/healthz`]: () => Promise.reject(new TypeError("getaddrinfo ENOTFOUND")) } },
    SERVE,
    "coordinator",
    "fail",
    "ENOTFOUND",
    1,
  ],
  ["a clock 30 s ahead of the coordinator", { serverAheadMs: -30_000 }, SERVE, "clock", "warn", "29.8 s ahead", 0],
  ["a clock two minutes behind", { serverAheadMs: 120_000 }, SERVE, "clock", "fail", "within two minutes", 1],
  [
    "no Date header",
    { routes: { [`${COORDINATOR}/healthz`]: () => json({ status: "ok" }) } },
    SERVE,
    "clock",
    "warn",
    "no usable Date header",
    0,
  ],
  ["no device token", { stored: null }, ["--coordinator", COORDINATOR], "device_token", "fail", "run umbra-provider login", 1],
  [
    "a world-readable credentials file",
    { stored: { credentials: { coordinator: COORDINATOR, token: TOKEN, accountId: "a", createdAt: 1 }, mode: 0o644 } },
    SERVE,
    "device_token",
    "fail",
    `chmod 600 ${CREDENTIALS}`,
    1,
  ],
  [
    "a malformed credentials file",
    { stored: new ConfigError(`${CREDENTIALS} is not valid JSON; run 'umbra-provider login' again`) },
    ["--coordinator", COORDINATOR],
    "device_token",
    "fail",
    "not valid JSON",
    1,
  ],
  [
    "a refused device token",
    { routes: { [`${COORDINATOR}/v1/provider/me`]: () => json({}, { status: 401 }) } },
    SERVE,
    "device_token",
    "fail",
    "run umbra-provider login",
    1,
  ],
  [
    "a coordinator without /v1/provider/me",
    { routes: { [`${COORDINATOR}/v1/provider/me`]: () => new Response("", { status: 404 }) } },
    SERVE,
    "device_token",
    "warn",
    "older version",
    0,
  ],
];

describe.each(CONDITIONS)("%s", (_what, fake, flags, id, status, text, exit) => {
  test(`${id} is ${status}, exit ${exit} at trust level hardware`, async () => {
    const { code, check } = await doctorJson(flags, fakeProbe(fake));
    const found = check(id);
    expect(found?.status).toBe(status);
    expect(`${found?.detail} ${found?.fix ?? ""}`).toContain(text);
    expect(code).toBe(exit);
  });
});

describe("the MDM enrolment check (GET /v1/provider/enroll/status)", () => {
  const status = (answer: () => Response | Promise<Response>) => ({ routes: { [`${COORDINATOR}/v1/provider/enroll/status`]: answer } });
  test.each([
    ["attested", status(() => json({ state: "attested", attested_at: NOW })), "pass", 0],
    ["enrolled, no chain yet", status(() => json({ state: "enrolled", attested_at: null })), "warn", 0],
    ["a profile not installed", status(() => json({ state: "issued", attested_at: null })), "fail", 1],
    ["not enrolled", status(() => json({ state: "none" })), "fail", 1],
    ["a coordinator without MDM enrolment", status(() => new Response("", { status: 404 })), "warn", 0],
    ["offline", status(() => Promise.reject(new TypeError("offline"))), "warn", 0],
  ] as const)("%s: %s at hardware", async (_, fake, expected, exit) => {
    const { code, check } = await doctorJson(SERVE, fakeProbe(fake));
    expect({ code, status: check("mdm_enrolment")?.status }).toEqual({ code: exit, status: expected });
    if (expected === "fail") expect(check("mdm_enrolment")?.fix).toContain("umbra-provider enroll");
  });

  test("self_signed takes it as advice: not enrolled still serves there", async () => {
    const { code } = await doctorJson([...SERVE, "--trust", "self_signed"], fakeProbe(status(() => json({ state: "none" }))));
    expect(code).toBe(0);
  });
});

describe("the catalog check: requests are routed by build", () => {
  test("an alias fails, naming the build to serve; exit 1 at every level", async () => {
    const flags = ["--engine", "echo", "--model", "meta/llama", "--identity-helper", HELPER];
    const { code, check } = await doctorJson([...flags, "--trust", "none"], fakeProbe());
    expect({ code, check: check("catalog") }).toEqual({
      code: 1,
      check: {
        id: "catalog",
        title: "Catalog",
        status: "fail",
        detail: "meta/llama is an alias; serve its build meta/llama-3.1-8b (requests are routed by build: this id gets none)",
        fix: "give --model BUILD[=UPSTREAM_NAME] with the build id: requests are routed by build",
      },
    });
  });

  test("an unknown id fails when it is the only model (listing the builds), warns next to a build", async () => {
    const alone = await doctorJson(["--engine", "echo", "--model", "org/typo", "--trust", "none"], fakeProbe());
    expect({ code: alone.code, check: alone.check("catalog") }).toEqual({
      code: 1,
      check: {
        id: "catalog",
        title: "Catalog",
        status: "fail",
        detail: "org/typo: not a build in the coordinator's catalog (it gets no requests)",
        fix: "check the id; the catalog's builds: a/x-1b, b/y-2b, meta/llama-3.1-8b, meta/llama-3.3-70b-4bit, org/m",
      },
    });
    const next = await doctorJson(["--engine", "echo", "--model", "org/typo", "--model", "org/m", "--trust", "none"], fakeProbe());
    expect({ code: next.code, status: next.check("catalog")?.status }).toEqual({ code: 0, status: "warn" });
  });

  test("an older coordinator (404) or no answer: not checked, a warning", async () => {
    const old = fakeProbe({ routes: { [`${COORDINATOR}/v1/provider/models`]: () => new Response("", { status: 404 }) } });
    const { code, check } = await doctorJson(SERVE, old);
    expect({ code, check: check("catalog") }).toEqual({
      code: 0,
      check: {
        id: "catalog",
        title: "Catalog",
        status: "warn",
        detail: `not checked: ${COORDINATOR}/v1/provider/models: the coordinator has no /v1/provider/models (older version)`,
      },
    });
  });
});

describe("a stored login for another coordinator", () => {
  test("its token is not sent there; the device token check says which coordinator the login is for", async () => {
    const other = "https://other.example";
    const probe = fakeProbe({ routes: { [`${other}/healthz`]: () => json({ status: "ok" }) } });
    const { code, check } = await doctorJson([...SERVE, "--coordinator", other], probe);
    expect({ code, check: check("device_token") }).toEqual({
      code: 1,
      check: {
        id: "device_token",
        title: "Device token",
        status: "fail",
        detail: `the stored login is for ${COORDINATOR}, not ${other}; run 'umbra-provider login --coordinator ${other}' or use --coordinator ${COORDINATOR}`,
        fix: "run umbra-provider login (or give --token / UMBRA_PROVIDER_TOKEN)",
      },
    });
    expect(probe.requests.filter((r) => r.authorization !== null)).toEqual([]);
  });
});

describe("the echo engine", () => {
  test("loads no weights: memory and disk say so instead of sizing the model id", async () => {
    const { code, report } = await doctorJson(
      ["--engine", "echo", "--model", "meta/llama-3.3-70b-4bit", "--identity-helper", HELPER],
      fakeProbe({ memoryGiB: 8 }),
    );
    expect(code).toBe(0);
    expect(report.checks.filter((c) => c.id === "memory" || c.id === "disk")).toEqual([
      { id: "memory", title: "Memory", status: "pass", detail: "8.0 GiB RAM; weights: none needed (echo engine)" },
      { id: "disk", title: "Disk", status: "pass", detail: `500.0 GiB free in ${HOME}; weights: none needed (echo engine)` },
    ]);
  });

  test("still needs 2 GiB of free disk", async () => {
    const { check } = await doctorJson(["--engine", "echo", "--model", "org/m"], fakeProbe({ freeGiB: 1.5 }));
    expect(check("disk")).toMatchObject({ status: "fail", detail: `1.5 GiB free in ${HOME}: less than 2 GiB` });
  });
});

describe("platforms other than an Apple Silicon Mac", () => {
  const linux = { platform: "linux", arch: "x64" } as const;
  const devFlags = ["--engine", "echo", "--model", "org/m"];

  test("Linux: not eligible for production, says what works in development; the Mac checks are skipped", async () => {
    const { code, check, report } = await doctorJson(devFlags, fakeProbe(linux));
    expect(code).toBe(1);
    expect(check("platform")).toEqual({
      id: "platform",
      title: "Apple Silicon",
      status: "fail",
      detail:
        "linux x64 (6.1.0): not eligible for production: Umbra providers need an Apple Silicon Mac (Secure Enclave, Managed Device Attestation)",
      fix: expect.stringContaining("`umbra-provider start --engine echo --dev-attestation on` against `umbra-coordinator dev`"),
    });
    expect(["macos", "sip", "secure_boot", "secure_enclave"].map((id) => check(id)?.status)).toEqual(["skip", "skip", "skip", "skip"]);
    expect(report.blocking).toEqual(["platform", "macos", "sip", "secure_boot", "secure_enclave"]);
  });

  test("Linux with --trust none: the echo engine, a coordinator and a valid token are enough (exit 0)", async () => {
    const { code, out } = await doctor([...devFlags, "--trust", "none"], fakeProbe(linux));
    expect(code).toBe(0);
    expect(out).toContain("FAIL  Apple Silicon");
    expect(out.trimEnd().split("\n").at(-1)).toBe("ready to serve at trust level none (failed but not needed at this level: platform)");
  });

  test("darwin x64 under Rosetta: run the arm64 build", async () => {
    const fake = { platform: "darwin", arch: "x64", commands: { "/usr/sbin/sysctl -n sysctl.proc_translated": "1\n" } } as const;
    const { code, check } = await doctorJson(SERVE, fakeProbe(fake));
    expect(code).toBe(1);
    expect(check("platform")).toMatchObject({
      status: "fail",
      detail: expect.stringContaining("Rosetta"),
      fix: "install and run the arm64 build of umbra-provider",
    });
  });

  test("an Intel Mac: Managed Device Attestation is Apple silicon only", async () => {
    const fake = {
      platform: "darwin",
      arch: "x64",
      commands: { "/usr/sbin/sysctl -n sysctl.proc_translated": { exitCode: 1, stdout: "" } },
    } as const;
    const { check } = await doctorJson(SERVE, fakeProbe(fake));
    expect(check("platform")).toMatchObject({ status: "fail", detail: expect.stringContaining("Intel Mac: not eligible for production") });
  });
});

describe("trust levels", () => {
  /** [scenario, fake, flags, exit at hardware, self_signed, none] */
  const MATRIX: [string, Fake, string[], number, number, number][] = [
    ["healthy Mac", {}, SERVE, 0, 0, 0],
    ["Secure Boot unreadable", { commands: { "/usr/sbin/system_profiler -json SPiBridgeDataType": "" } }, SERVE, 1, 0, 0],
    ["no Secure Enclave helper", {}, NO_HELPER, 1, 0, 0],
    ["a broken helper", { helper: new IdentityError("no key") }, SERVE, 1, 1, 0],
    ["SIP disabled", { commands: { "/usr/bin/csrutil status": "System Integrity Protection status: disabled.\n" } }, SERVE, 1, 1, 0],
    ["macOS 13", { commands: { "/usr/bin/sw_vers -productVersion": "13.6\n" } }, SERVE, 1, 0, 0],
    ["not enough memory", { memoryGiB: 4 }, SERVE, 1, 1, 0],
    ["Linux", { platform: "linux", arch: "x64" }, ["--engine", "echo", "--model", "org/m"], 1, 1, 0],
    ["no --engine", {}, SERVE.slice(4), 1, 1, 1],
    ["no --model", {}, ["--engine", "echo"], 1, 1, 1],
    ["coordinator down", { routes: { [`${COORDINATOR}/healthz`]: () => new Response("", { status: 503 }) } }, SERVE, 1, 1, 1],
    ["token refused", { routes: { [`${COORDINATOR}/v1/provider/me`]: () => new Response("", { status: 401 }) } }, SERVE, 1, 1, 1],
    [
      "token unverifiable (404)",
      { routes: { [`${COORDINATOR}/v1/provider/me`]: () => new Response("", { status: 404 }) } },
      SERVE,
      0,
      0,
      0,
    ],
  ];

  test.each(MATRIX)("%s: exits at hardware, self_signed, none", async (_what, fake, flags, hardware, selfSigned, none) => {
    const levels: TrustLevel[] = ["hardware", "self_signed", "none"];
    const codes: number[] = [];
    for (const level of levels) codes.push((await doctor([...flags, "--trust", level], fakeProbe(fake))).code);
    expect(codes).toEqual([hardware, selfSigned, none]);
  });

  test("the requirement table: hardware needs the whole posture proven; none only the service checks", () => {
    expect(REQUIREMENTS).toEqual({
      hardware: {
        platform: "pass",
        macos: "pass",
        sip: "pass",
        secure_boot: "pass",
        secure_enclave: "pass",
        memory: "ok",
        disk: "ok",
        engine: "ok",
        coordinator: "ok",
        clock: "ok",
        device_token: "ok",
        catalog: "ok",
        mdm_enrolment: "ok",
      },
      self_signed: {
        platform: "pass",
        sip: "pass",
        secure_boot: "ok",
        secure_enclave: "ok",
        memory: "ok",
        disk: "ok",
        engine: "ok",
        coordinator: "ok",
        clock: "ok",
        device_token: "ok",
        catalog: "ok",
      },
      none: { engine: "ok", coordinator: "ok", clock: "ok", device_token: "ok", catalog: "ok" },
    });
  });

  test("the verdict names what blocks: failed, not proven (warn where a pass is needed), not checked", async () => {
    const fake = {
      commands: {
        "/usr/bin/csrutil status": "System Integrity Protection status: disabled.\n",
        "/usr/sbin/system_profiler -json SPiBridgeDataType": "",
      },
    };
    const { out } = await doctor(["--identity-helper", HELPER], fakeProbe(fake));
    expect(out.trimEnd().split("\n").at(-1)).toBe(
      "not ready for trust level hardware: 1 check failed (sip); not proven: secure_boot; not checked: memory, engine",
    );
  });
});

describe("the device token is never printed", () => {
  const SCENARIOS: [string, Fake, string[]][] = [
    ["accepted", {}, SERVE],
    ["given by flag", { stored: null }, [...SERVE, "--token", TOKEN, "--coordinator", COORDINATOR]],
    ["refused", { routes: { [`${COORDINATOR}/v1/provider/me`]: () => new Response("", { status: 401 }) } }, SERVE],
    ["unverifiable", { routes: { [`${COORDINATOR}/v1/provider/me`]: () => Promise.reject(new TypeError("offline")) } }, SERVE],
    [
      "world-readable",
      { stored: { credentials: { coordinator: COORDINATOR, token: TOKEN, accountId: "a", createdAt: 1 }, mode: 0o640 } },
      SERVE,
    ],
    [
      "an error that quotes it",
      { routes: { [`${COORDINATOR}/v1/provider/me`]: () => Promise.reject(new Error(`bad header Bearer ${TOKEN}`)) } },
      SERVE,
    ],
  ];

  test.each(SCENARIOS)("%s", async (_what, fake, flags) => {
    for (const format of [[], ["--json"]]) {
      const { out, err } = await doctor([...flags, ...format], fakeProbe(fake));
      expect(out).toContain("Device token");
      expect(`${out}${err}`).not.toContain(TOKEN);
      expect(`${out}${err}`).not.toContain(TOKEN.slice(0, 20));
    }
  });

  test("a plaintext coordinator off loopback fails and is never sent a request", async () => {
    const probe = fakeProbe({ stored: null });
    const { check, code } = await doctorJson([...SERVE, "--coordinator", "http://coordinator.example", "--token", TOKEN], probe);
    expect(code).toBe(1);
    expect(check("coordinator")).toMatchObject({ status: "fail", fix: "use https:// (plain http is for loopback only)" });
    expect(check("device_token")).toMatchObject({
      status: "warn",
      detail: "present (from --token); not verified: no usable coordinator URL",
    });
    expect(check("clock")?.status).toBe("skip");
    expect(probe.requests.map((r) => r.url)).toEqual([`${UPSTREAM}/models`]);
  });

  test("loopback http is fine, and a ws:// connect URL maps to its base", async () => {
    const probe = fakeProbe({ stored: null, routes: { "http://127.0.0.1:8080/healthz": () => json({}) } });
    await doctor([...SERVE, "--coordinator", "ws://127.0.0.1:8080/v1/provider/connect", "--token", TOKEN], probe);
    expect(probe.requests.map((r) => r.url)).toContain("http://127.0.0.1:8080/healthz");
  });
});

describe("--coordinator-image: the coordinator is pinned from its attestation", () => {
  const dir = mkdtempSync(join(tmpdir(), "umbra-doctor-image-"));
  const image = writeMeasurements(dir, [{ name: "milan-2vcpu", measurement: "ab".repeat(48) }]);
  const pin: PinnedCoordinator = {
    tls: { checkServerIdentity: () => undefined },
    shape: "milan-2vcpu",
    measurement: "ab".repeat(48),
    development: false,
    keySha256: "cd".repeat(32),
  };

  test("verified: the coordinator check says so and every request (the token's included) goes over the pinned key", async () => {
    const probe = fakeProbe({ pin });
    const { code, check } = await doctorJson([...SERVE, "--coordinator-image", image], probe);
    expect(code).toBe(0);
    expect(check("coordinator")?.detail).toBe(`${COORDINATOR} is up (0 ms); attestation verified (shape milan-2vcpu), TLS key pinned`);
    const toCoordinator = probe.requests.filter((r) => r.url.startsWith(COORDINATOR));
    expect(toCoordinator.map((r) => `${r.url.slice(COORDINATOR.length)} pinned=${r.pinned}`).sort()).toEqual([
      "/healthz pinned=true",
      "/v1/provider/enroll/status pinned=true",
      "/v1/provider/me pinned=true",
      "/v1/provider/models pinned=true",
    ]);
  });

  test("refused: the coordinator check fails naming the check; nothing, the token least of all, is sent to it", async () => {
    const probe = fakeProbe({
      pin: new CoordinatorRefused("measurement", "attestation check measurement failed: matches no published shape"),
    });
    const { code, check } = await doctorJson([...SERVE, "--coordinator-image", image], probe);
    expect(code).toBe(1);
    expect([check("coordinator")?.status, check("coordinator")?.detail]).toEqual([
      "fail",
      "refused: attestation check measurement failed: matches no published shape",
    ]);
    expect([check("device_token")?.status, check("catalog")?.status]).toEqual(["warn", "warn"]);
    expect(probe.requests.filter((r) => r.url.startsWith(COORDINATOR))).toEqual([]);
  });

  test("a plain-http coordinator, an unreadable file or an unknown shape is a usage error (exit 2)", async () => {
    const loopback = ["--coordinator", "http://127.0.0.1:8080"];
    const plain = await doctor([...SERVE, ...loopback, "--coordinator-image", image], fakeProbe({ pin }));
    expect([plain.code, plain.err]).toEqual([2, expect.stringContaining("--coordinator-image needs an https coordinator")]);
    const missing = await doctor([...SERVE, "--coordinator-image", join(dir, "nope.json")], fakeProbe({ pin }));
    expect([missing.code, missing.err]).toEqual([2, expect.stringContaining("nope.json: cannot read it (ENOENT)")]);
    const shape = await doctor([...SERVE, "--coordinator-image", image, "--coordinator-shape", "genoa"], fakeProbe({ pin }));
    expect([shape.code, shape.err]).toEqual([2, expect.stringContaining("--coordinator-shape: genoa: not in")]);
  });

  test("without the image, an untrusted certificate is explained: pin it from the attestation", async () => {
    const probe = fakeProbe({
      routes: {
        [`${COORDINATOR}/healthz`]: () => {
          throw new Error("unable to verify the first certificate");
        },
      },
    });
    const { check } = await doctorJson(SERVE, probe);
    expect(check("coordinator")?.fix).toContain("give --coordinator-image with the image's measurements.json");
  });
});

describe("the other settings", () => {
  test("--models-dir is the disk that is checked; UMBRA_PROVIDER_* twins work like start's", async () => {
    const probe = fakeProbe({
      env: { UMBRA_PROVIDER_ENGINE: "echo", UMBRA_PROVIDER_MODEL: "a/x-1b,b/y-2b", UMBRA_PROVIDER_IDENTITY_HELPER: HELPER },
    });
    const { code, check } = await doctorJson(["--models-dir", "/Volumes/Models"], probe);
    expect(code).toBe(0);
    expect(probe.diskPaths).toEqual(["/Volumes/Models"]);
    expect(check("engine")?.detail).toContain("echo");
    expect(check("memory")?.detail).toBe("64.0 GiB RAM; weights: none needed (echo engine)");
  });

  test("an unreadable free space warns", async () => {
    const { check } = await doctorJson(SERVE, fakeProbe({ freeGiB: undefined }));
    expect(check("disk")).toMatchObject({ status: "warn", detail: `could not read the free space of ${HOME}` });
  });

  test("no check hangs: a network that never answers ends at each deadline", async () => {
    const never = () => new Promise<Response>(() => {});
    const probe = fakeProbe({
      routes: { [`${UPSTREAM}/models`]: never, [`${COORDINATOR}/healthz`]: never, [`${COORDINATOR}/v1/provider/me`]: never },
    });
    const started = performance.now();
    const { check, code } = await doctorJson(SERVE, probe);
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(code).toBe(1);
    expect(check("engine")?.detail).toBe(`${UPSTREAM}/models: no answer within 100 ms`);
    expect(check("coordinator")?.detail).toBe(`cannot reach ${COORDINATOR}/healthz: no answer within 100 ms`);
    expect(check("device_token")?.status).toBe("warn");
  });
});

describe("usage", () => {
  test("--help prints the usage on stdout, exit 0", async () => {
    const { code, out, err } = await doctor(["--help"], fakeProbe());
    expect(code).toBe(0);
    expect(out).toStartWith("usage: umbra-provider doctor");
    expect(err).toBe("");
  });

  test.each([
    [["--bogus"], "Unknown option '--bogus'"],
    [["extra"], "Unexpected argument 'extra'"],
    [["--trust", "maximum"], "--trust: 'maximum' is not one of hardware, self_signed, none"],
    [["--engine", "llama"], "--engine: 'llama' is not one of echo, openai"],
    [["--model", "org/m="], "--model: 'org/m='"],
    [["--model", "a", "--model", "a"], "--model: build 'a' is given twice"],
    [["--json=yes"], "--json"],
  ])("%p exits 2 with a message on stderr and nothing on stdout", async (argv, message) => {
    const { code, out, err } = await doctor(argv, fakeProbe());
    expect(code).toBe(2);
    expect(out).toBe("");
    expect(err).toContain(message);
    expect(err).toContain("umbra-provider doctor --help");
  });
});

describe("the real probe on this machine", () => {
  const probe = realProbe({});

  test("a command runs; one past its deadline is killed", async () => {
    expect(await probe.run(["/bin/echo", "hello"], 5_000)).toEqual({ exitCode: 0, stdout: "hello\n" });
    const started = performance.now();
    expect(await probe.run(["/bin/sleep", "10"], 100)).toEqual({ exitCode: null, stdout: "", error: "no answer within 100 ms" });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect((await probe.run(["/nonexistent/umbra-doctor-test"], 1_000)).exitCode).toBeNull();
  });

  test("free disk of a folder that does not exist yet is its nearest parent's", () => {
    const free = probe.freeDisk(join(tmpdir(), "umbra-doctor-missing", "deeper"));
    expect(free).toBeGreaterThan(0);
  });

  test("a credentials file readable by others fails with chmod 600", async () => {
    const dir = mkdtempSync(join(tmpdir(), "umbra-doctor-"));
    try {
      const file = join(dir, "credentials.json");
      writeFileSync(file, JSON.stringify({ coordinator: COORDINATOR, token: TOKEN, account_id: "a", created_at: 1 }));
      chmodSync(file, 0o644);
      const real = realProbe({ UMBRA_PROVIDER_HOME: dir });
      const { check } = await doctorJson(["--trust", "none"], { ...real, fetch: () => Promise.reject(new TypeError("offline")) });
      expect(check("device_token")).toEqual({
        id: "device_token",
        title: "Device token",
        status: "fail",
        detail: `${file} is readable by other users (mode 0644)`,
        fix: `chmod 600 ${file}`,
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("model size estimate", () => {
  test.each([
    ["meta/llama-3.1-8b", 8e9, 16],
    ["mlx-community/Llama-3.3-70B-Instruct-4bit", 70e9, 4.5],
    ["qwen2.5:0.5b", 0.5e9, 16],
    ["mistralai/Mixtral-8x7B-Instruct-v0.1", 56e9, 16],
    ["llama3.1:8b-instruct-q4_K_M", 8e9, 4.5],
    ["mistral-7b-v0.3-q8_0", 7e9, 8.5],
    ["bartowski/gemma-2-9b-it-GGUF-IQ4_XS", 9e9, 4.5],
    ["gemma-2-9b-it-fp16", 9e9, 16],
    ["Qwen2.5-7B-Instruct-bf16", 7e9, 16],
    ["deepseek-r1-distill-qwen-1.5b-fp32", 1.5e9, 32],
    ["Qwen3-30B-A3B", 30e9, 16],
    ["Qwen3-235B-A22B-8bit", 235e9, 8.5],
    ["SmolLM2-135M-Instruct", 135e6, 16],
    ["openai/gpt-oss-20b-mxfp4", 20e9, 4.25],
    ["llama2-13b-awq", 13e9, 4.5],
    ["llama2-7b-int8", 7e9, 8.5],
    ["qwen2.5-7b-3-bit", 7e9, 3.5],
  ])("%s: %d parameters at %d bits", (id, parameters, bits) => {
    expect(estimateModelSize(id)).toEqual({ parameters, bitsPerWeight: bits, bytes: Math.round((parameters * bits) / 8) });
  });

  test.each(["org/m", "qwen2.5", "phi-3-mini-4k-instruct", "gemma-3n-e4b", "llama-4bit", "deepseek-v3"])("%s: unknown", (id) => {
    expect(estimateModelSize(id)).toBeUndefined();
  });
});
