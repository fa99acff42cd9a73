/**
 * `umbra-provider doctor` as a real process on this machine: off an Apple Silicon Mac it says the
 * machine is not eligible for production and exits 1; with `--trust none`, the echo engine, a real
 * coordinator and a seeded device token it exits 0 (and 1 at the default level hardware); the token is
 * never printed; `--help` exits 0; an unknown flag exits 2. Each run gets its own UMBRA_PROVIDER_HOME.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BUN, ROOT, startCoordinator } from "../support/processes.ts";

const MAIN = join(ROOT, "src/provider/main.ts");
const APPLE_SILICON = process.platform === "darwin" && process.arch === "arm64";

interface Check {
  id: string;
  title: string;
  status: string;
  detail: string;
  fix?: string;
}

function tempHome(): { dir: string } & AsyncDisposable {
  const dir = mkdtempSync(join(tmpdir(), "umbra-doctor-home-"));
  return { dir, [Symbol.asyncDispose]: async () => rmSync(dir, { recursive: true, force: true }) };
}

/** Runs `umbra-provider doctor ...args` with a clean environment (no UMBRA_PROVIDER_* from this machine). */
async function doctor(args: readonly string[], home: string) {
  const proc = Bun.spawn([BUN, MAIN, "doctor", ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, UMBRA_PROVIDER_HOME: home },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

describe("umbra-provider doctor (process)", () => {
  test.skipIf(APPLE_SILICON)(
    "--json off an Apple Silicon Mac: exit 1, the platform is not eligible, stdout is one JSON object",
    async () => {
      await using home = tempHome();
      const { code, stdout, stderr } = await doctor(["--json"], home.dir);
      expect(code).toBe(1);
      expect(stderr).toBe("");
      const report = JSON.parse(stdout) as { trust_required: string; ready: boolean; checks: Check[] };
      expect(report.trust_required).toBe("hardware");
      expect(report.ready).toBe(false);
      const platform = report.checks.find((c) => c.id === "platform");
      expect(platform?.status).toBe("fail");
      expect(platform?.detail).toContain("not eligible for production: Umbra providers need an Apple Silicon Mac");
      expect(platform?.fix).toContain("umbra-coordinator dev");
      expect(report.checks.map((c) => c.id)).toEqual([
        "platform",
        "macos",
        "sip",
        "secure_boot",
        "secure_enclave",
        "memory",
        "disk",
        "engine",
        "coordinator",
        "clock",
        "device_token",
        "catalog",
        "mdm_enrolment",
      ]);
    },
  );

  test("--trust none with the echo engine against a real coordinator: ready (exit 0); hardware is not (exit 1); no token printed", async () => {
    await using coordinator = await startCoordinator();
    await using home = tempHome();
    const { providerToken, accountId } = await coordinator.seed(["org/m"]);
    const flags = ["--engine", "echo", "--model", "org/m", "--coordinator", coordinator.url, "--token", providerToken];

    const none = await doctor([...flags, "--trust", "none"], home.dir);
    expect(none.stderr).toBe("");
    expect(none.code).toBe(0);
    expect(none.stdout).toContain("ready to serve at trust level none");
    expect(none.stdout).not.toContain(providerToken);

    const json = await doctor([...flags, "--trust", "none", "--json"], home.dir);
    expect(json.code).toBe(0);
    expect(json.stdout).not.toContain(providerToken);
    const checks = new Map((JSON.parse(json.stdout) as { checks: Check[] }).checks.map((c) => [c.id, c]));
    expect(checks.get("engine")?.status).toBe("pass");
    expect(checks.get("coordinator")?.status).toBe("pass");
    expect(checks.get("clock")?.status).toBe("pass");
    expect(checks.get("catalog")).toEqual({ id: "catalog", title: "Catalog", status: "pass", detail: "catalog builds: org/m" });
    // 200 once the coordinator has /v1/provider/me (then it names the account); 404 before: not verified.
    const token = checks.get("device_token");
    if (token?.status === "pass") expect(token.detail).toContain(accountId);
    else expect(token).toMatchObject({ status: "warn", detail: expect.stringContaining("/v1/provider/me") });

    if (token?.status === "pass") {
      const wrong = ["--engine", "echo", "--model", "org/m", "--coordinator", coordinator.url, "--token", "not-a-real-token-123"];
      const refused = await doctor([...wrong, "--trust", "none"], home.dir);
      expect(refused.code).toBe(1);
      expect(refused.stdout).toContain("refused it (HTTP 401) — run umbra-provider login");
    }

    const hardware = await doctor(flags, home.dir);
    // No identity helper: nowhere is hardware trust proven.
    expect(hardware.code).toBe(1);
    expect(hardware.stdout).toContain("not ready for trust level hardware");
    expect(hardware.stdout).not.toContain(providerToken);
  });

  test("--model naming an alias: the catalog check fails and names the build to serve (exit 1)", async () => {
    await using coordinator = await startCoordinator();
    await using home = tempHome();
    const { providerToken } = await coordinator.seed(["org/m-build-4bit"]);
    await coordinator.admin("PUT", "/aliases/org/m", { build_id: "org/m-build-4bit" });
    const flags = ["--engine", "echo", "--model", "org/m", "--coordinator", coordinator.url, "--token", providerToken, "--trust", "none"];
    const { code, stdout } = await doctor(flags, home.dir);
    expect(code).toBe(1);
    expect(stdout).toContain(
      "FAIL  Catalog         org/m is an alias; serve its build org/m-build-4bit (requests are routed by build: this id gets none) — give --model BUILD[=UPSTREAM_NAME] with the build id",
    );
  });

  test("--help prints the usage, exit 0", async () => {
    await using home = tempHome();
    const { code, stdout } = await doctor(["--help"], home.dir);
    expect(code).toBe(0);
    expect(stdout).toContain("usage: umbra-provider doctor");
  });

  test("an unknown flag exits 2 naming it, nothing on stdout", async () => {
    await using home = tempHome();
    const { code, stdout, stderr } = await doctor(["--frobnicate"], home.dir);
    expect(code).toBe(2);
    expect(stdout).toBe("");
    expect(stderr).toContain("--frobnicate");
  });
});
