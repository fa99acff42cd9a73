/**
 * `umbra-provider status`: the local provider's state, whether it runs or not: the process (pid file),
 * its connection, trust level and last challenge, models warm, active requests, requests and tokens
 * served (the state file a running `start` keeps), and the account's earnings as the coordinator reports
 * them (GET /v1/provider/me with the stored device token), and the MDM enrolment state (GET
 * /v1/provider/enroll/status: enrolment-status.ts). `--json` for scripts.
 * Exit codes (as LSB init scripts): 0 running, 3 not running, 2 bad usage.
 *
 * `umbra-provider stop`: SIGTERM to the running `start` (it drains: finishes active requests, then
 * exits), waits for it to exit; `--now` asks it to stop at once (a second SIGTERM).
 * Exit codes: 0 stopped or not running, 1 still running after --timeout seconds, 2 bad usage.
 */
import { type ParseArgsConfig, parseArgs } from "node:util";
import { ConfigError, type Env } from "../config/settings.ts";
import { VERSION } from "../version.ts";
import { expectationOf, readConfigFile, settingReader } from "./config.ts";
import { type CoordinatorExpectation, CoordinatorRefused, pinCoordinator, pinnedFetch } from "./coordinator-pin.ts";
import { describeEnrolment, type EnrolmentAnswer, fetchEnrolmentStatus } from "./enrolment-status.ts";
import { providerHome, readCredentials } from "./home.ts";
import { type AccountView, fetchProviderMe } from "./provider-me.ts";
import { describeState, isAlive, type RuntimeState, readPid, readState } from "./runtime.ts";

const STATUS_USAGE = `usage: umbra-provider status [--json]

Shows the local provider's state (running or not) and the account's earnings from the coordinator.
Exit status: 0 running, 3 not running.`;

const STOP_USAGE = `usage: umbra-provider stop [--now] [--timeout SECONDS]

Drains the running provider (active requests finish, then it exits) and waits for it (default 150 s).
--now stops it at once instead (active requests fail over to other providers).`;

const ME_TIMEOUT_MS = 3_000;

export interface StatusReport {
  readonly version: string;
  readonly running: boolean;
  readonly pid: number | null;
  /** A pid file was left by a process that is gone (it crashed or was killed). */
  readonly stale_pid_file: boolean;
  /** The last state written (by the running process, or the last one that ran); null when none ever ran. */
  readonly state: RuntimeState | null;
  readonly coordinator: string | null;
  readonly linked: boolean;
  readonly account: AccountView | null;
  /** Why `account` is null although a login is stored. */
  readonly account_error: string | null;
  /** The MDM enrolment of the latest enrolment made with the stored device token; null without an answer. */
  readonly enrolment: EnrolmentAnswer | null;
}

function flagsOf(argv: readonly string[], options: ParseArgsConfig["options"]) {
  try {
    return parseArgs({ args: [...argv], options, strict: true, allowPositionals: false }).values as Record<
      string,
      string | boolean | undefined
    >;
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
}

async function accountView(
  coordinator: string,
  token: string,
  expectation: CoordinatorExpectation | undefined,
  found: { enrolment: EnrolmentAnswer | null },
): Promise<{ account: AccountView | null; error: string | null }> {
  try {
    // With --coordinator-image (environment or config file), the token goes to an attested coordinator only.
    let fetchMe: ((url: string, init: RequestInit) => Promise<Response>) | undefined;
    if (expectation !== undefined) {
      try {
        fetchMe = pinnedFetch((await pinCoordinator(coordinator, expectation)).tls);
      } catch (error) {
        if (error instanceof CoordinatorRefused) return { account: null, error: `coordinator refused: ${error.message}` };
        throw error;
      }
    }
    const options = { signal: AbortSignal.timeout(ME_TIMEOUT_MS), ...(fetchMe ? { fetch: fetchMe } : {}) };
    const [answer, enrolment] = await Promise.all([
      fetchProviderMe(coordinator, token, options),
      fetchEnrolmentStatus(coordinator, token, options).catch(() => null),
    ]);
    if (enrolment !== null) found.enrolment = enrolment;
    if (answer.status === 401)
      return { account: null, error: "the coordinator refused the stored device token; run 'umbra-provider login'" };
    if (answer.status !== 200) return { account: null, error: `the coordinator answered HTTP ${answer.status}` };
    return answer.account ? { account: answer.account, error: null } : { account: null, error: "unexpected answer" };
  } catch (error) {
    return { account: null, error: `coordinator unreachable (${(error as Error).name})` };
  }
}

async function statusReport(env: Env): Promise<StatusReport> {
  const home = providerHome(env);
  const pid = readPid(home);
  const running = pid !== undefined && isAlive(pid);
  const state = readState(home) ?? null;
  let stored: ReturnType<typeof readCredentials>;
  let storedError: string | null = null;
  try {
    stored = readCredentials(home);
  } catch (error) {
    storedError = (error as Error).message;
  }
  let expectation: CoordinatorExpectation | undefined;
  if (stored) {
    const raw = settingReader({}, env, readConfigFile(home.configFile, false));
    expectation = expectationOf(raw, stored.credentials.coordinator);
  }
  const found: { enrolment: EnrolmentAnswer | null } = { enrolment: null };
  const { account, error } = stored
    ? await accountView(stored.credentials.coordinator, stored.credentials.token, expectation, found)
    : { account: null, error: storedError };
  return {
    version: VERSION,
    running,
    pid: running ? (pid as number) : null,
    stale_pid_file: pid !== undefined && !running,
    state,
    coordinator: stored?.credentials.coordinator ?? state?.coordinator ?? null,
    linked: stored !== undefined,
    account,
    account_error: error,
    enrolment: found.enrolment,
  };
}

const time = (ms: number) => new Date(ms).toLocaleString();

/** Micro-USD as dollars, exactly (integer arithmetic). */
function dollars(micro: number): string {
  const sign = micro < 0 ? "-" : "";
  const abs = Math.abs(Math.trunc(micro));
  return `${sign}$${Math.floor(abs / 1_000_000)}.${String(abs % 1_000_000).padStart(6, "0")}`;
}

function formatStatus(r: StatusReport): string {
  const lines: string[] = [];
  const s = r.state;
  if (r.running) {
    lines.push(
      `umbra-provider ${r.version}: running (pid ${r.pid}${s?.detached ? ", detached" : ""}${s ? `, since ${time(s.started_at)}` : ""})`,
    );
  } else {
    lines.push(
      `umbra-provider ${r.version}: not running${r.stale_pid_file ? " (a stale pid file says it stopped without cleaning up: crashed or killed)" : ""}`,
    );
  }
  if (s) {
    if (r.running) lines.push(`  ${describeState(s)}`);
    else lines.push(`  last run: ${s.phase} at ${time(s.updated_at)}, served ${s.requests_served} requests, ${s.tokens_served} tokens`);
    if (r.running) {
      lines.push(
        `  connection      ${s.connected ? `connected to ${s.coordinator} as ${s.provider_id ?? "?"}` : `${s.phase} (${s.coordinator})`}`,
      );
      lines.push(`  trust level     ${s.trust_level ?? "unknown"}`);
      lines.push(
        `  last challenge  ${s.last_challenge ? `${time(s.last_challenge.at)}, ${s.last_challenge.answered ? "answered" : "NOT answered"}` : "none yet"}`,
      );
      const warm = new Set(s.warm_models);
      lines.push(`  models          ${s.models.map((m) => `${m} (${warm.has(m) ? "warm" : "cold"})`).join(", ")} · engine ${s.engine}`);
      for (const w of s.model_warnings ?? []) lines.push(`  warning         ${w}`);
      lines.push(
        `  requests        active ${s.active}/${s.max_concurrency} · served ${s.requests_served}, ${s.tokens_served} tokens · ${s.tokens_per_second} tok/s`,
      );
      const sched =
        s.schedule.windows.length === 0
          ? "always"
          : `${s.schedule.windows.join("; ")} (${s.schedule.open ? "open" : "closed"}${s.schedule.next_change_at ? `, changes ${time(s.schedule.next_change_at)}` : ""})`;
      lines.push(`  schedule        ${sched}`);
      if (s.log_file) lines.push(`  log             ${s.log_file}`);
    }
  } else {
    lines.push("  it has not run on this machine yet: umbra-provider start --help");
  }
  if (!r.linked) {
    lines.push(`  account         not linked: run umbra-provider login${r.account_error ? ` (${r.account_error})` : ""}`);
  } else if (r.account) {
    const e = r.account.earnings;
    lines.push(
      `  account         ${r.account.account_id} at ${r.coordinator}: earnings ${dollars(e?.total_micro_usd ?? 0)} in total, ${dollars(e?.today_micro_usd ?? 0)} today`,
    );
  } else {
    lines.push(`  account         linked to ${r.coordinator}; earnings unavailable: ${r.account_error ?? "unknown"}`);
  }
  if (r.enrolment !== null) lines.push(`  MDM enrolment   ${describeEnrolment(r.enrolment)}`);
  return `${lines.join("\n")}\n`;
}

export async function statusCommand(argv: readonly string[], env: Env): Promise<number> {
  const flags = flagsOf(argv, { json: { type: "boolean" }, help: { type: "boolean", short: "h" } });
  if (flags.help === true) {
    process.stdout.write(`${STATUS_USAGE}\n`);
    return 0;
  }
  const report = await statusReport(env);
  process.stdout.write(flags.json === true ? `${JSON.stringify(report)}\n` : formatStatus(report));
  return report.running ? 0 : 3;
}

export async function stopCommand(argv: readonly string[], env: Env): Promise<number> {
  const flags = flagsOf(argv, { now: { type: "boolean" }, timeout: { type: "string" }, help: { type: "boolean", short: "h" } });
  if (flags.help === true) {
    process.stdout.write(`${STOP_USAGE}\n`);
    return 0;
  }
  const timeoutText = (flags.timeout as string | undefined) ?? "150";
  if (!/^\d{1,6}$/.test(timeoutText)) throw new ConfigError(`--timeout: '${timeoutText}' is not a whole number of seconds`);
  const home = providerHome(env);
  const pid = readPid(home);
  if (pid === undefined || !isAlive(pid)) {
    process.stdout.write("umbra-provider is not running\n");
    return 0;
  }
  process.kill(pid, "SIGTERM");
  // A second signal stops at once (start.ts); give the first one a moment to be handled on its own.
  if (flags.now === true) {
    await Bun.sleep(200);
    if (isAlive(pid)) process.kill(pid, "SIGTERM");
  }
  process.stdout.write(`umbra-provider (pid ${pid}): ${flags.now === true ? "stopping" : "draining"}...\n`);
  const deadline = Date.now() + Number(timeoutText) * 1000;
  while (Date.now() < deadline) {
    if (!isAlive(pid)) {
      process.stdout.write("stopped\n");
      return 0;
    }
    await Bun.sleep(100);
  }
  process.stderr.write(`umbra-provider stop: pid ${pid} is still running after ${timeoutText} s (try: umbra-provider stop --now)\n`);
  return 1;
}
