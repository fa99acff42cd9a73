/**
 * `umbra-provider start`: serve models to a coordinator. Settings come from flags, `UMBRA_PROVIDER_*`,
 * the config file and the stored login (config.ts).
 *
 * Foreground by default (provider-runtime.ts: schedule windows, state file, status line, signals).
 * `--detach` starts the same command in the background (its own session, output appended to the log file
 * in the tool's folder), waits until it has connected (or failed) and returns, printing the welcome's
 * model warnings; `status` and `stop` find it through the pid file.
 *
 * Exit codes: 0 drained after a signal; 1 refused at run time (device token refused, protocol version
 * unsupported, already running) or stopped by a second signal; 2 bad usage or configuration.
 */
import { spawn } from "node:child_process";
import { openSync, readFileSync } from "node:fs";
import { type Env, processEnv } from "../config/settings.ts";
import { createLogger } from "../observability/logger.ts";
import { VERSION } from "../version.ts";
import {
  coordinatorBaseOf,
  loadProviderConfig,
  PROVIDER_SETTINGS,
  type ProviderConfig,
  parseProviderFlags,
  readConfigFile,
} from "./config.ts";
import { pinCoordinator } from "./coordinator-pin.ts";
import { developmentAttestation, type Pin } from "./dev-attestation.ts";
import { realProbe } from "./doctor/probe.ts";
import { createEchoEngine } from "./engines/echo.ts";
import type { Engine } from "./engines/engine.ts";
import { createOpenAIEngine } from "./engines/openai.ts";
import { ensureHome, type ProviderHome, providerHome, readCredentials } from "./home.ts";
import { mdmAttestation, type RunCommand } from "./mdm-attestation.ts";
import { ProviderRuntime, statusLine } from "./provider-runtime.ts";
import { AlreadyRunning, type RuntimeState, readState, releasePidFile, runningPid, takePidFile } from "./runtime.ts";
import { Schedule } from "./schedule.ts";

const START_USAGE = `usage: umbra-provider start [--coordinator URL] [--token TOKEN] --engine echo|openai [--upstream URL]
                            --model BUILD[=UPSTREAM_NAME] [--model ...] [options]

  --detach                     run in the background (pid and log files in the tool's folder)
  --config PATH                JSON config file (default: config.json in the tool's folder)
${Object.values(PROVIDER_SETTINGS)
  .map((s) => `  --${s.flag.padEnd(26)} ${s.env.padEnd(42)} ${s.help}`)
  .join("\n")}

--coordinator and --token default to what 'umbra-provider login' stored.
SIGTERM or SIGINT drains (finishes active requests, then exits 0); a second signal stops at once.`;

/** Set in the environment of the background process `--detach` starts. */
const DETACHED_ENV = "UMBRA_PROVIDER_DETACHED";
/** How long `--detach` waits for the background process to connect before returning anyway. */
const DETACH_WAIT_MS = 20_000;

const printErr = (text: string) => process.stderr.write(`${text}\n`);

function createEngine(config: ProviderConfig): Engine {
  switch (config.engine) {
    case "echo":
      return createEchoEngine({
        models: config.models.map((m) => m.buildId),
        tokensPerSecond: config.echoTokensPerSecond,
        firstTokenDelayMs: config.echoFirstTokenDelayMs,
      });
    case "openai":
      return createOpenAIEngine({ upstream: config.upstream ?? "", models: config.models });
  }
}

/** Reads the settings of `start` from every source. */
function startConfig(flags: Record<string, unknown>, env: Env, home: ProviderHome): ProviderConfig {
  const configPath = typeof flags.config === "string" ? flags.config : home.configFile;
  const file = readConfigFile(configPath, typeof flags.config === "string");
  const stored = readCredentials(home);
  return loadProviderConfig(flags as Parameters<typeof loadProviderConfig>[0], env, {
    ...(file ? { file } : {}),
    ...(stored ? { login: stored.credentials } : {}),
  });
}

export async function startCommand(argv: readonly string[], env: Env): Promise<number> {
  const flags = parseProviderFlags(argv, {
    help: { type: "boolean", short: "h" },
    detach: { type: "boolean" },
    config: { type: "string" },
  });
  if (flags.help === true) {
    process.stdout.write(`${START_USAGE}\n`);
    return 0;
  }
  const home = providerHome(env);
  const config = startConfig(flags, env, home);
  if (flags.detach === true) return detach(argv, env, home, config);
  try {
    takePidFile(home);
  } catch (error) {
    if (error instanceof AlreadyRunning) {
      printErr(`umbra-provider: ${error.message}`);
      return 1;
    }
    throw error;
  }
  try {
    return await serve(config, home, env[DETACHED_ENV] === "1");
  } finally {
    releasePidFile(home);
  }
}

/**
 * Starts `start` again without --detach as a background process in its own session, its output
 * appended to the log file; waits for it to connect (or to fail) and reports.
 */
async function detach(argv: readonly string[], env: Env, home: ProviderHome, config: ProviderConfig): Promise<number> {
  const other = runningPid(home);
  if (other !== undefined) {
    printErr(`umbra-provider: ${new AlreadyRunning(other).message}`);
    return 1;
  }
  ensureHome(home);
  const log = openSync(home.logFile, "a", 0o600);
  // A compiled tool is its own executable; from source, Bun runs this tool's entry file.
  const compiled = Bun.main.startsWith("/$bunfs/") || /^[A-Z]:[\\/]~BUN[\\/]/i.test(Bun.main);
  const command = compiled ? [process.execPath] : [process.execPath, Bun.main];
  const args = [...command.slice(1), "start", ...argv.filter((a) => a !== "--detach")];
  const child = spawn(command[0] as string, args, {
    detached: true,
    stdio: ["ignore", log, log],
    env: { ...env, [DETACHED_ENV]: "1" },
  });
  child.unref();
  const pid = child.pid;
  if (pid === undefined) {
    printErr("umbra-provider: could not start the background process");
    return 1;
  }
  let exited: number | null | undefined;
  child.on("exit", (code) => {
    exited = code;
  });
  const deadline = Date.now() + DETACH_WAIT_MS;
  let state: RuntimeState | undefined;
  while (Date.now() < deadline) {
    await Bun.sleep(100);
    state = readState(home);
    if (exited !== undefined) break;
    if (state?.pid === pid && (state.connected || state.phase === "waiting" || state.coordinator_refused !== undefined)) break;
  }
  if (exited !== undefined) {
    printErr(`umbra-provider: the background process stopped (exit ${exited ?? "signal"}); last log lines (${home.logFile}):`);
    printErr(tail(home.logFile, 10));
    return 1;
  }
  const now = state?.pid === pid ? state : undefined;
  const what =
    now?.phase === "waiting"
      ? "waiting for its schedule window"
      : now?.connected
        ? `connected (trust ${now.trust_level ?? "?"})`
        : "not connected yet";
  process.stdout.write(
    `umbra-provider started in the background (pid ${pid}), ${what}, serving ${config.models.length} model(s) to ${coordinatorBaseOf(config.connectUrl)}\n` +
      `log: ${home.logFile}\nstatus: umbra-provider status    stop: umbra-provider stop\n`,
  );
  for (const w of now?.model_warnings ?? []) printErr(`umbra-provider: warning: ${w}`);
  return 0;
}

function tail(file: string, lines: number): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/** The Mac's own commands (posture readings for MDM attestation), 10 s each. */
const runCommand: RunCommand = (argv) => realProbe(processEnv()).run(argv, 10_000);

/** Runs the agent in the foreground, within the schedule, until a signal or a refusal. */
async function serve(config: ProviderConfig, home: ProviderHome, detached: boolean): Promise<number> {
  const schedule = Schedule.parse(config.schedule);
  const line = !detached && process.stderr.isTTY === true ? statusLine() : undefined;
  const logger = createLogger(config.logLevel, line?.sink);
  const engine = createEngine(config);
  const coordinator = coordinatorBaseOf(config.connectUrl);
  logger.info("provider starting", { url: coordinator, version: VERSION, count: config.models.length });
  const expectation = config.coordinatorExpectation;
  const pin: Pin | undefined = expectation ? () => pinCoordinator(coordinator, expectation) : undefined;
  const attestation = config.devAttestation
    ? await developmentAttestation(config, logger, pin)
    : config.identityHelper !== undefined
      ? await mdmAttestation(config, logger, pin, runCommand)
      : undefined;
  try {
    return await new ProviderRuntime({ config, home, schedule, detached, logger, engine, line, pin, attestation }).run();
  } finally {
    attestation?.identity.close();
  }
}
