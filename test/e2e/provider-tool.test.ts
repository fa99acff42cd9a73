/**
 * The provider tool's path from the README, as real processes against a real coordinator process:
 * `login` (unattended --token, and the device flow approved or denied by the account holder over HTTP),
 * then `start --detach` with nothing but the stored login, `status` (connection, trust, requests served,
 * earnings from the coordinator), `stop` (drains, exits), `status` again (not running, last run). Also:
 * one `start` per folder, a schedule window that is closed now, the config file.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BUN, type CoordinatorProcess, ROOT, startCoordinator } from "../support/processes.ts";
import { shiftedClockEnv } from "../support/shifted-clock.ts";
import { waitFor } from "../support/wait.ts";

const MAIN = join(ROOT, "src/provider/main.ts");
const BUILD = "org/tool-model";

let coordinator: CoordinatorProcess;
let seeded: { apiKey: string; providerToken: string; accountId: string };

beforeAll(async () => {
  coordinator = await startCoordinator();
  // The account holder's key: allowed to approve `login` (link machines).
  seeded = await coordinator.seed([BUILD], { link_machines: true });
});
afterAll(async () => {
  await coordinator[Symbol.asyncDispose]();
});

const newHome = () => mkdtempSync(join(tmpdir(), "umbra-provider-home-"));

function spawnTool(home: string, args: readonly string[], env: Record<string, string> = {}) {
  return Bun.spawn([BUN, MAIN, ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? tmpdir(), UMBRA_PROVIDER_HOME: home, ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
}

async function tool(home: string, args: readonly string[], env: Record<string, string> = {}) {
  const proc = spawnTool(home, args, env);
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

interface Status {
  running: boolean;
  pid: number | null;
  stale_pid_file: boolean;
  linked: boolean;
  state: {
    phase: string;
    connected: boolean;
    provider_id: string | null;
    trust_level: string | null;
    requests_served: number;
    tokens_served: number;
    models: string[];
    warm_models: string[];
  } | null;
  account: { account_id: string; earnings: { total_micro_usd: number } } | null;
  enrolment: { offered: boolean; state?: string } | null;
}

async function status(home: string): Promise<{ code: number; report: Status }> {
  const r = await tool(home, ["status", "--json"]);
  if (!r.stdout.startsWith("{")) throw new Error(`status --json printed no report (exit ${r.code}): ${r.stderr}`);
  return { code: r.code, report: JSON.parse(r.stdout) as Status };
}

const credentials = (home: string) => JSON.parse(readFileSync(join(home, "credentials.json"), "utf8")) as Record<string, unknown>;

async function chat(content: string): Promise<number> {
  const response = await fetch(`${coordinator.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${seeded.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: BUILD, messages: [{ role: "user", content }] }),
  });
  await response.arrayBuffer();
  return response.status;
}

describe("login", () => {
  test("--token: confirmed by the coordinator, stored with mode 0600, never printed", async () => {
    const home = newHome();
    const r = await tool(home, ["login", "--coordinator", coordinator.url, "--token", seeded.providerToken]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`Linked to account ${seeded.accountId}`);
    expect(r.stdout + r.stderr).not.toContain(seeded.providerToken);
    expect(statSync(join(home, "credentials.json")).mode & 0o777).toBe(0o600);
    expect(credentials(home)).toMatchObject({ coordinator: coordinator.url, token: seeded.providerToken, account_id: seeded.accountId });
  });

  test("--token refused by the coordinator: exit 1, nothing stored", async () => {
    const home = newHome();
    const r = await tool(home, ["login", "--coordinator", coordinator.url, "--token", "prov_not-a-real-token"]);
    expect({ code: r.code, said: r.stderr.includes("refused this device token") }).toEqual({ code: 1, said: true });
    expect(() => statSync(join(home, "credentials.json"))).toThrow();
  });

  test("a consumer API key is not a device token", async () => {
    const r = await tool(newHome(), ["login", "--coordinator", coordinator.url, "--token", seeded.apiKey]);
    expect(r.code).toBe(1);
  });

  test("plaintext http to another machine is refused before anything is sent (exit 2)", async () => {
    const r = await tool(newHome(), ["login", "--coordinator", "http://umbra.example.com"]);
    expect({ code: r.code, said: r.stderr.includes("plaintext") }).toEqual({ code: 2, said: true });
  });

  /** Starts `login` and resolves with the user code it shows (and the running process). */
  async function deviceLogin(home: string) {
    const proc = spawnTool(home, ["login", "--coordinator", coordinator.url, "--machine-name", "studio-1"]);
    const reader = proc.stdout.getReader();
    let shown = "";
    const code = await waitFor(async () => {
      const { value, done } = await reader.read();
      if (value) shown += new TextDecoder().decode(value);
      if (done && !/[A-Z]{4}-[A-Z]{4}/.test(shown)) throw new Error(`login ended without a code: ${shown}`);
      return /enter the code ([A-Z]{4}-[A-Z]{4})/.exec(shown)?.[1];
    }, "the user code");
    const rest = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (value) shown += new TextDecoder().decode(value);
        if (done) return shown;
      }
    })();
    return { proc, code, output: rest, stderr: new Response(proc.stderr).text() };
  }

  async function decide(userCode: string, decision: "approve" | "deny", bearer = seeded.apiKey) {
    const response = await fetch(`${coordinator.url}/v1/provider/device/approve`, {
      method: "POST",
      headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
      body: JSON.stringify({ user_code: userCode, decision }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  }

  // The two device-flow logins (and the schedule-window case after them) run at the same time: each
  // mostly waits, here for the coordinator's 5 s poll interval.
  test.concurrent("device flow: shown code approved with the account's API key -> a new device token stored; it serves", async () => {
    const home = newHome();
    const login = await deviceLogin(home);
    expect(await decide(login.code, "approve")).toMatchObject({ status: 200, body: { decision: "approve", account_id: seeded.accountId } });
    expect(await login.proc.exited).toBe(0);
    const out = await login.output;
    expect(out).toContain(`${coordinator.url}/console/device`);
    expect(out).toContain(`Linked to account ${seeded.accountId}`);
    const stored = credentials(home);
    expect(stored.account_id).toBe(seeded.accountId);
    expect(typeof stored.token).toBe("string");
    expect(stored.token).not.toBe(seeded.providerToken);
    expect(out + (await login.stderr)).not.toContain(stored.token as string);
    // The code is single use: approving it again is refused.
    expect((await decide(login.code, "approve")).status).not.toBe(200);
    // The new token is a working device token.
    const me = await fetch(`${coordinator.url}/v1/provider/me`, { headers: { authorization: `Bearer ${stored.token}` } });
    expect(me.status).toBe(200);
  }, 30_000);

  test.concurrent("device flow: denied -> exit 1 with a clear message, nothing stored", async () => {
    const home = newHome();
    const login = await deviceLogin(home);
    expect((await decide(login.code, "deny")).status).toBe(200);
    expect(await login.proc.exited).toBe(1);
    expect(await login.stderr).toContain("denied");
    expect(() => statSync(join(home, "credentials.json"))).toThrow();
  }, 30_000);
});

describe("start --detach, status, stop", () => {
  // Runs at the same time as the two device-flow logins above: it mostly waits too.
  test.concurrent("when its schedule window closes it drains and disconnects, then waits for the next", async () => {
    // Windows have minute resolution: the tool runs with its clock shifted so that the window it is
    // started in closes 8 s after the start (time to connect first), not at the machine's next minute.
    const home = newHome();
    expect((await tool(home, ["login", "--coordinator", coordinator.url, "--token", seeded.providerToken])).code).toBe(0);
    const offset = (52_000 - (Date.now() % 60_000) + 60_000) % 60_000;
    const now = new Date(Date.now() + offset);
    const days = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    const hhmm = (d: Date) => `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}`;
    const end = new Date(now.getTime() + 60_000);
    // A window crossing midnight is written from the start day; the schedule runs it past midnight.
    const window = `${days[now.getDay()]} ${hhmm(now)}-${end.getHours() === 0 && end.getMinutes() === 0 ? "24:00" : hhmm(end)}`;
    const started = await tool(
      home,
      ["start", "--detach", "--engine", "echo", "--model", BUILD, "--schedule", window],
      shiftedClockEnv(offset),
    );
    expect({ code: started.code, connected: started.stdout.includes("connected") }).toEqual({ code: 0, connected: true });
    const waiting = await waitFor(
      async () => {
        const r = (await status(home)).report;
        return r.state?.phase === "waiting" ? r : undefined;
      },
      "the window to close",
      30_000,
    );
    expect(waiting).toMatchObject({ running: true, state: { connected: false } });
    const log = readFileSync(join(home, "provider.log"), "utf8");
    expect(log).toContain("schedule window closed: draining");
    expect(log).toContain("outside the schedule");
    expect((await tool(home, ["stop"])).code).toBe(0);
  }, 60_000);

  test("from the stored login: connects, serves, reports, drains on stop; status before and after", async () => {
    const home = newHome();
    // Never run, not linked: status says so, exit 3.
    const before = await status(home);
    expect({ code: before.code, running: before.report.running, linked: before.report.linked, state: before.report.state }).toEqual({
      code: 3,
      running: false,
      linked: false,
      state: null,
    });
    expect((await tool(home, ["login", "--coordinator", coordinator.url, "--token", seeded.providerToken])).code).toBe(0);

    const started = await tool(home, ["start", "--detach", "--engine", "echo", "--model", BUILD]);
    expect(started.code).toBe(0);
    expect(started.stdout).toMatch(/started in the background \(pid \d+\), connected/);

    const running = await status(home);
    expect(running.code).toBe(0);
    expect(running.report).toMatchObject({
      running: true,
      linked: true,
      state: { connected: true, models: [BUILD], warm_models: [BUILD] },
    });
    expect(running.report.state?.provider_id).toMatch(/^prov_/);
    expect(running.report.state?.trust_level).toBe("none");
    // This coordinator has no MDM enrolment (its status route is 404).
    expect(running.report.enrolment).toEqual({ offered: false });

    // A second start for the same folder is refused.
    const twice = await tool(home, ["start", "--engine", "echo", "--model", BUILD]);
    expect({ code: twice.code, said: twice.stderr.includes("already running") }).toEqual({ code: 1, said: true });

    expect(await chat("one two three")).toBe(200);
    const served = await waitFor(async () => {
      const s = await status(home);
      return (s.report.state?.requests_served ?? 0) >= 1 && (s.report.account?.earnings.total_micro_usd ?? 0) > 0 ? s.report : undefined;
    }, "requests served and earnings in status");
    expect(served.account?.account_id).toBe(seeded.accountId);
    expect(served.state?.tokens_served).toBeGreaterThan(0);

    const human = await tool(home, ["status"]);
    expect(human.stdout).toContain("running (pid");
    expect(human.stdout).toContain("trust level     none");
    expect(human.stdout).toContain(`${BUILD} (warm)`);
    expect(human.stdout).toContain("MDM enrolment   not offered by this coordinator");
    expect(human.stdout).not.toContain(seeded.providerToken);

    const stopped = await tool(home, ["stop"]);
    expect({ code: stopped.code, out: stopped.stdout.trim().split("\n").at(-1) }).toEqual({ code: 0, out: "stopped" });
    const after = await status(home);
    expect(after.code).toBe(3);
    expect(after.report).toMatchObject({ running: false, stale_pid_file: false, state: { phase: "stopped", connected: false } });
    expect(after.report.state?.requests_served).toBeGreaterThanOrEqual(1);
    expect((await tool(home, ["stop"])).stdout).toContain("not running");
    // The detached process wrote its log to the folder; no token in it.
    const log = readFileSync(join(home, "provider.log"), "utf8");
    expect(log).toContain("connected to coordinator");
    expect(log).not.toContain(seeded.providerToken);
  }, 60_000);

  // The next three run at the same time: one never connects, one uses a coordinator of its own, and
  // the third sends no chat.
  test.concurrent("outside its schedule it waits without connecting; the config file supplies the settings", async () => {
    const home = newHome();
    expect((await tool(home, ["login", "--coordinator", coordinator.url, "--token", seeded.providerToken])).code).toBe(0);
    // A window two days from now: closed today, whatever the time.
    const days = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    const later = days[(new Date().getDay() + 2) % 7];
    const config = join(home, "settings.json");
    writeFileSync(config, JSON.stringify({ engine: "echo", model: [BUILD], schedule: [`${later} 00:00-24:00`] }));
    const started = await tool(home, ["start", "--detach", "--config", config]);
    expect(started.code).toBe(0);
    expect(started.stdout).toContain("waiting for its schedule window");
    const s = await status(home);
    expect(s.report).toMatchObject({ running: true, state: { phase: "waiting", connected: false } });
    expect((await tool(home, ["status"])).stdout).toContain("outside the schedule");
    expect((await tool(home, ["stop"])).code).toBe(0);
  }, 60_000);

  test.concurrent("attested: status shows trust level hardware and the last challenge answered", async () => {
    await using attesting = await startCoordinator({ UMBRA_CHALLENGE_INTERVAL_MS: "300", UMBRA_CHALLENGE_TIMEOUT_MS: "250" });
    const { providerToken } = await attesting.seed([BUILD]);
    const home = newHome();
    const args = ["start", "--detach", "--coordinator", attesting.url, "--token", providerToken, "--engine", "echo", "--model", BUILD];
    expect((await tool(home, [...args, "--dev-attestation", "on"])).code).toBe(0);
    const report = await waitFor(async () => {
      const r = (await status(home)).report as Status & { state: { last_challenge: { answered: boolean } | null } };
      return r.state?.last_challenge ? r : undefined;
    }, "a challenge answered");
    expect(report.state).toMatchObject({ trust_level: "hardware", last_challenge: { answered: true } });
    expect((await tool(home, ["status"])).stdout).toMatch(/last challenge {2}.+, answered/);
    expect((await tool(home, ["stop"])).code).toBe(0);
  }, 60_000);

  test.concurrent("serving an alias: start --detach and status name the build to serve", async () => {
    const alias = "org/tool-alias";
    await coordinator.admin("PUT", `/aliases/${alias}`, { build_id: BUILD });
    const home = newHome();
    const args = ["--coordinator", coordinator.url, "--token", seeded.providerToken, "--engine", "echo", "--model", alias];
    const line = `${alias} is an alias; serve its build ${BUILD} (requests are routed by build: this id gets none)`;
    try {
      const started = await tool(home, ["start", "--detach", ...args]);
      expect({ code: started.code, stderr: started.stderr }).toEqual({ code: 0, stderr: `umbra-provider: warning: ${line}\n` });
      expect((await tool(home, ["status"])).stdout).toContain(`  warning         ${line}\n`);
    } finally {
      // A failed expectation must not leave the background process running.
      expect((await tool(home, ["stop"])).code).toBe(0);
    }
    expect(readFileSync(join(home, "provider.log"), "utf8")).toContain(`umbra-provider: warning: ${line}\n`);
  }, 60_000);

  test("a login for 127.0.0.1, start --coordinator localhost: says which coordinator the login is for (exit 2)", async () => {
    const home = newHome();
    expect(coordinator.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await tool(home, ["login", "--coordinator", coordinator.url, "--token", seeded.providerToken])).code).toBe(0);
    const localhost = coordinator.url.replace("127.0.0.1", "localhost");
    const r = await tool(home, ["start", "--coordinator", localhost, "--engine", "echo", "--model", BUILD]);
    expect({ code: r.code, said: r.stderr.split("\n")[0] }).toEqual({
      code: 2,
      said: `umbra-provider: --token is required: the stored login is for ${coordinator.url}, not ${localhost}; run 'umbra-provider login --coordinator ${localhost}' or use --coordinator ${coordinator.url}`,
    });
  });

  test("a bad setting stops --detach at once with the foreground's message (exit 2)", async () => {
    const r = await tool(newHome(), ["start", "--detach", "--coordinator", coordinator.url, "--token", "x", "--engine", "echo"]);
    expect({ code: r.code, said: r.stderr.includes("--model is required") }).toEqual({ code: 2, said: true });
  });
});
