/**
 * `umbra-provider start`: serve models to a coordinator.
 *
 * Foreground by default, with a live status line on a terminal (connected, trust level, models, active
 * requests, requests and tokens served, tokens per second) and JSON log lines otherwise. `--detach`
 * starts the same command in the background (its own session, output appended to the log file in the
 * tool's folder), waits until it has connected (or failed) and returns; `status` and `stop` find it
 * through the pid file. Settings come from flags, `UMBRA_PROVIDER_*`, the config file and the stored
 * login (src/provider/config.ts).
 *
 * The welcome's model warnings (a served id that is an alias or not a catalog build: it gets no requests)
 * are printed on stderr, in the state file and by `--detach`, naming the build to serve.
 *
 * Schedule windows: outside every window it drains and waits; when one opens it connects again.
 * SIGTERM or SIGINT drains (finishes active requests, then exits 0); a second signal stops at once.
 *
 * Exit codes: 0 drained after a signal; 1 refused at run time (device token refused, protocol version
 * unsupported, already running) or stopped by a second signal; 2 bad usage or configuration.
 */
import { spawn } from "node:child_process";
import { openSync, readFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { FULL_SECURITY, parseChallenge, postureJson, SoftwareIdentity } from "../../attestation/provider/index.ts";
import { ConfigError, type Env } from "../config/settings.ts";
import { createLogger, type Logger, type LogSink } from "../observability/logger.ts";
import type { Hello } from "../protocol/frames.ts";
import { VERSION } from "../version.ts";
import { type Agent, type AgentState, startAgent } from "./agent.ts";
import {
  coordinatorBaseOf,
  loadProviderConfig,
  PROVIDER_SETTINGS,
  type ProviderConfig,
  parseProviderFlags,
  readConfigFile,
} from "./config.ts";
import { CoordinatorRefused, type PinnedCoordinator, type PinnedTls, pinCoordinator } from "./coordinator-pin.ts";
import { createEchoEngine } from "./engines/echo.ts";
import type { Engine } from "./engines/engine.ts";
import { createOpenAIEngine } from "./engines/openai.ts";
import { ensureHome, type ProviderHome, providerHome, readCredentials } from "./home.ts";
import { helperIdentity, type ProviderIdentity, signChallengeAnswer, signEvidence, softwareIdentity } from "./identity.ts";
import {
  AlreadyRunning,
  describeModelWarning,
  describeState,
  type RuntimeState,
  readState,
  releasePidFile,
  runningPid,
  TokenRate,
  takePidFile,
  writeState,
} from "./runtime.ts";
import { Schedule } from "./schedule.ts";

export const START_USAGE = `usage: umbra-provider start [--coordinator URL] [--token TOKEN] --engine echo|openai [--upstream URL]
                            --model BUILD[=UPSTREAM_NAME] [--model ...] [options]

  --detach                     run in the background (pid and log files in the tool's folder)
  --config PATH                JSON config file (default: config.json in the tool's folder)
${Object.values(PROVIDER_SETTINGS)
  .map((s) => `  --${s.flag.padEnd(26)} ${s.env.padEnd(42)} ${s.help}`)
  .join("\n")}

--coordinator and --token default to what 'umbra-provider login' stored.
SIGTERM or SIGINT drains (finishes active requests, then exits 0); a second signal stops at once.`;

type Pin = () => Promise<PinnedCoordinator>;

/** Set in the environment of the background process `--detach` starts. */
const DETACHED_ENV = "UMBRA_PROVIDER_DETACHED";
/** How long `--detach` waits for the background process to connect before returning anyway. */
const DETACH_WAIT_MS = 20_000;
/** The state file is rewritten at most this often on changes, and every second regardless. */
const STATE_MIN_INTERVAL_MS = 200;
/** Outside the schedule, the clock is re-read at least this often (clock changes, sleep). */
const SCHEDULE_RECHECK_MS = 60_000;

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

function detectHardware(): Hello["hardware"] {
  const chip = cpus()[0]?.model.trim().slice(0, 128);
  return { ...(chip ? { chip } : {}), memory_gb: Math.round(totalmem() / 2 ** 30) };
}

/** A one-line status redrawn in place; log lines print above it. */
function statusLine(): { sink: LogSink; update: (text: string) => void; end: () => void } {
  let current = "";
  const draw = () => process.stderr.write(`\r\x1b[2K${current}`);
  return {
    sink: (line) => {
      process.stderr.write(`\r\x1b[2K${line}\n`);
      draw();
    },
    update: (text) => {
      current = text;
      draw();
    },
    end: () => process.stderr.write("\n"),
  };
}

/** The posture a development provider claims (and its development chain states). */
const DEV_POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;

interface Attestation {
  readonly identity: ProviderIdentity;
  readonly answerChallenge: (challenge: { nonce: string; timestamp: number }) => Promise<{ payload: string; signature: string }>;
  readonly evidence: (encryptionKey: Uint8Array) => Promise<Readonly<Record<string, unknown>>>;
}

/**
 * `--dev-attestation on`: a software identity key and a device chain from the development coordinator's
 * root (POST /v1/provider/dev-chain with the device token), so this provider earns `hardware` there
 * through the same verification as a Mac. A production coordinator answers 404 and the start fails.
 */
async function developmentAttestation(config: ProviderConfig, logger: Logger, pin: Pin | undefined): Promise<Attestation> {
  const identity = await identityOf(config);
  const base = coordinatorBaseOf(config.connectUrl);
  // The token goes only to a coordinator whose attestation passed (--coordinator-image).
  let tls: PinnedTls | undefined;
  try {
    tls = pin ? (await pin()).tls : undefined;
  } catch (error) {
    throw new ConfigError(
      `--dev-attestation: ${error instanceof CoordinatorRefused ? "" : "cannot verify the coordinator: "}${(error as Error).message}`,
    );
  }
  const response = await fetch(`${base}/v1/provider/dev-chain`, {
    method: "POST",
    headers: { authorization: `Bearer ${config.token}`, "content-type": "application/json" },
    body: JSON.stringify({ identity_key: Buffer.from(identity.publicKey).toString("base64url"), posture: postureJson(DEV_POSTURE) }),
    ...(tls ? { tls } : {}),
  });
  if (!response.ok) throw new ConfigError(`--dev-attestation: the coordinator refused a development chain (HTTP ${response.status})`);
  const { chain } = (await response.json()) as { chain: string[] };
  const mdaChain = chain.map((der) => new Uint8Array(Buffer.from(der, "base64url")));
  logger.info("development attestation ready", { count: mdaChain.length, reason: identity.kind });
  return {
    identity,
    answerChallenge: async (challenge) => signChallengeAnswer(identity, parseChallenge(challenge), DEV_POSTURE),
    evidence: (encryptionKey) => signEvidence(identity, encryptionKey, DEV_POSTURE, mdaChain),
  };
}

/** The identity key: the signing helper named by --identity-helper, else a fresh software key. */
async function identityOf(config: ProviderConfig): Promise<ProviderIdentity> {
  if (config.identityHelper === undefined) return softwareIdentity(SoftwareIdentity.generate());
  try {
    return await helperIdentity([config.identityHelper]);
  } catch (error) {
    throw new ConfigError(`--identity-helper: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** Reads the settings of `start` from every source. */
export function startConfig(flags: Record<string, unknown>, env: Env, home: ProviderHome): ProviderConfig {
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
  const attestation = config.devAttestation ? await developmentAttestation(config, logger, pin) : undefined;

  const startedAt = Date.now();
  const rate = new TokenRate();
  let tokensPerSecond = 0;
  let lastChallenge: RuntimeState["last_challenge"] = null;
  let agent: Agent | undefined;
  let waiting = false;
  // Totals across agents (each schedule window starts a fresh agent).
  let carried = { requests: 0, tokens: 0 };
  let lastWrite = 0;

  const snapshot = (): RuntimeState => {
    const s: AgentState | undefined = agent?.state();
    const at = new Date();
    const next = schedule.nextChange(at);
    return {
      version: VERSION,
      pid: process.pid,
      started_at: startedAt,
      updated_at: at.getTime(),
      coordinator,
      phase: waiting ? "waiting" : (s?.phase ?? "connecting"),
      connected: !waiting && (s?.connected ?? false),
      provider_id: s?.providerId ?? null,
      trust_level: s?.trustLevel ?? null,
      models: config.models.map((m) => m.buildId),
      warm_models: [...engine.warmModels()],
      engine: config.engine,
      active: s?.active ?? 0,
      max_concurrency: config.maxConcurrency,
      requests_served: carried.requests + (s?.requestsServed ?? 0),
      tokens_served: carried.tokens + (s?.tokensServed ?? 0),
      tokens_per_second: tokensPerSecond,
      last_challenge: lastChallenge,
      schedule: { windows: config.schedule, open: schedule.open(at), next_change_at: next?.getTime() ?? null },
      detached,
      log_file: detached ? home.logFile : null,
      model_warnings: (s?.modelWarnings ?? []).map(describeModelWarning),
      ...(s?.refused !== undefined ? { coordinator_refused: s.refused } : {}),
    };
  };
  // The coordinator's warnings about served ids (aliases, unknown builds), printed once per change.
  let warned = "";
  const warn = (state: RuntimeState) => {
    const text = (state.model_warnings ?? []).map((w) => `umbra-provider: warning: ${w}`).join("\n");
    if (!state.connected || text === warned) return;
    warned = text;
    if (text !== "") (line ? line.sink : printErr)(text);
  };
  const publish = (force: boolean) => {
    const now = Date.now();
    if (!force && now - lastWrite < STATE_MIN_INTERVAL_MS) return;
    lastWrite = now;
    const state = snapshot();
    warn(state);
    try {
      writeState(home, state);
    } catch {
      logger.warn("cannot write the state file", { reason: "io" });
    }
    line?.update(describeState(state));
  };
  const ticker = setInterval(() => {
    const s = snapshot();
    tokensPerSecond = rate.sample(Date.now(), s.tokens_served);
    publish(true);
  }, 1000);

  let signals = 0;
  let wake: (() => void) | undefined;
  const onSignal = () => {
    signals++;
    if (signals === 1) {
      logger.info("signal received: draining (send again to stop at once)");
      if (agent) void agent.drain();
    } else {
      logger.warn("second signal: stopping at once");
      if (agent) void agent.stop();
    }
    wake?.();
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);

  let code = 0;
  try {
    while (signals === 0) {
      const at = new Date();
      if (!schedule.open(at)) {
        waiting = true;
        const next = schedule.nextChange(at);
        logger.info("outside the schedule: waiting for the next window", { reason: next ? next.toISOString() : "none" });
        publish(true);
        const ms = Math.min(SCHEDULE_RECHECK_MS, next ? Math.max(0, next.getTime() - Date.now()) : SCHEDULE_RECHECK_MS);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, ms);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
        continue;
      }
      waiting = false;
      const current = startAgent({
        ...(attestation
          ? {
              identity: attestation.identity,
              evidence: attestation.evidence,
              answerChallenge: async (challenge) => {
                try {
                  const answer = await attestation.answerChallenge(challenge);
                  lastChallenge = { at: Date.now(), answered: true };
                  return answer;
                } catch (error) {
                  lastChallenge = { at: Date.now(), answered: false };
                  throw error;
                }
              },
            }
          : {}),
        url: config.connectUrl,
        token: config.token,
        ...(pin ? { pin } : {}),
        engine,
        maxConcurrency: config.maxConcurrency,
        drainTimeoutMs: config.drainTimeoutMs,
        hardware: detectHardware(),
        logger,
        onChange: () => publish(false),
      });
      agent = current;
      publish(true);
      // The window's end drains this agent; the loop then waits for the next window.
      const closes = schedule.nextChange(new Date());
      const closeTimer = closes
        ? setTimeout(
            () => {
              logger.info("schedule window closed: draining");
              void current.drain();
            },
            Math.max(0, closes.getTime() - Date.now()),
          )
        : undefined;
      const exit = await current.done;
      clearTimeout(closeTimer);
      const last = current.state();
      carried = { requests: carried.requests + last.requestsServed, tokens: carried.tokens + last.tokensServed };
      agent = undefined;
      if (exit.reason === "unauthorized" || exit.reason === "version") {
        printErr(`umbra-provider: ${exit.message}`);
        code = 1;
        break;
      }
      if (exit.reason === "stopped") {
        code = 1;
        break;
      }
    }
  } finally {
    clearInterval(ticker);
    process.off("SIGTERM", onSignal);
    process.off("SIGINT", onSignal);
    attestation?.identity.close();
    waiting = false;
    const final = { ...snapshot(), phase: "stopped", connected: false, active: 0 };
    try {
      writeState(home, final);
    } catch {
      // Nothing to report to: the process is ending.
    }
    line?.update(describeState(final));
    line?.end();
  }
  return code;
}
