#!/usr/bin/env bun
import { cpus, totalmem } from "node:os";
import { FULL_SECURITY, parseChallenge, postureJson, SoftwareIdentity } from "../../attestation/src/index.ts";
import { ConfigError } from "../config/config.ts";
import { loadProviderConfig, PROVIDER_SETTINGS, type ProviderConfig, parseProviderFlags } from "../config/provider-config.ts";
/**
 * umbra-provider: the tool a provider runs on an Apple Silicon Mac (doctor, login, start, status).
 * `start` serves models to a coordinator in the foreground; doctor, login and status land with their issue.
 *
 * Exit codes: 0 ok (drained after SIGTERM/SIGINT); 1 refused at run time (device token refused,
 * protocol version unsupported) or stopped at once by a second signal; 2 bad usage or configuration.
 * Output: a one-line live status on stderr when it is a terminal, JSON log lines otherwise.
 */
import { processEnv } from "../config/settings.ts";
import { createLogger, type Logger, type LogSink } from "../observability/logger.ts";
import type { Hello } from "../protocol/messages.ts";
import { VERSION } from "../version.ts";
import { type AgentState, startAgent } from "./agent.ts";
import { createEchoEngine } from "./engines/echo.ts";
import type { Engine } from "./engines/engine.ts";
import { createOpenAIEngine } from "./engines/openai.ts";
import { helperIdentity, type ProviderIdentity, signChallengeAnswer, signEvidence, softwareIdentity } from "./identity.ts";

const USAGE = `umbra-provider ${VERSION}

usage:
  umbra-provider doctor   check this machine
  umbra-provider login    link this machine to an account
  umbra-provider start    serve models to a coordinator (start --help)
  umbra-provider status   show the local provider's state`;

const START_USAGE = `usage: umbra-provider start --coordinator URL --token TOKEN --engine echo|openai [--upstream URL]
                            --model BUILD[=UPSTREAM_NAME] [--model ...] [options]

${Object.values(PROVIDER_SETTINGS)
  .map((s) => `  --${s.flag.padEnd(26)} ${s.env.padEnd(42)} ${s.help}`)
  .join("\n")}

SIGTERM or SIGINT drains (finishes active requests, then exits 0); a second signal stops at once.`;

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

function describe(state: AgentState): string {
  const where =
    state.phase === "connected" || (state.phase === "draining" && state.connected)
      ? `${state.phase} as ${state.providerId ?? "?"} (trust ${state.trustLevel ?? "?"})`
      : state.phase;
  const models = state.models.length === 1 ? (state.models[0] ?? "") : `${state.models.length} models`;
  return `umbra-provider ${where} · ${models} · active ${state.active}/${state.maxConcurrency} · served ${state.requestsServed} requests, ${state.tokensServed} tokens`;
}

/** A one-line status redrawn in place; log lines print above it. */
function statusLine(): { sink: LogSink; update: (state: AgentState) => void; end: () => void } {
  let current = "";
  const draw = () => process.stderr.write(`\r\x1b[2K${current}`);
  return {
    sink: (line) => {
      process.stderr.write(`\r\x1b[2K${line}\n`);
      draw();
    },
    update: (state) => {
      current = describe(state);
      draw();
    },
    end: () => process.stderr.write("\n"),
  };
}

/** The posture a development provider claims (and its development chain states). */
const DEV_POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;

/**
 * `--dev-attestation on`: a software identity key and a device chain from the development coordinator's
 * root (POST /v1/provider/dev-chain with the device token), so this provider earns `hardware` there
 * through the same verification as a Mac. A production coordinator answers 404 and the start fails.
 */
async function developmentAttestation(config: ProviderConfig, logger: Logger) {
  const identity = await identityOf(config);
  const base = config.connectUrl.replace(/^ws/, "http").replace(/\/v1\/provider\/connect$/, "");
  const response = await fetch(`${base}/v1/provider/dev-chain`, {
    method: "POST",
    headers: { authorization: `Bearer ${config.token}`, "content-type": "application/json" },
    body: JSON.stringify({ identity_key: Buffer.from(identity.publicKey).toString("base64url"), posture: postureJson(DEV_POSTURE) }),
  });
  if (!response.ok) throw new ConfigError(`--dev-attestation: the coordinator refused a development chain (HTTP ${response.status})`);
  const { chain } = (await response.json()) as { chain: string[] };
  const mdaChain = chain.map((der) => new Uint8Array(Buffer.from(der, "base64url")));
  logger.info("development attestation ready", { count: mdaChain.length, reason: identity.kind });
  return {
    identity,
    answerChallenge: (challenge: { nonce: string; timestamp: number }) =>
      signChallengeAnswer(identity, parseChallenge(challenge), DEV_POSTURE),
    evidence: (encryptionKey: Uint8Array) => signEvidence(identity, encryptionKey, DEV_POSTURE, mdaChain),
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

async function start(argv: readonly string[]): Promise<number> {
  const flags = parseProviderFlags(argv, { help: { type: "boolean", short: "h" } });
  if (flags.help === true) {
    process.stdout.write(`${START_USAGE}\n`);
    return 0;
  }
  const config = loadProviderConfig(flags, processEnv());
  const line = process.stderr.isTTY === true ? statusLine() : undefined;
  const logger = createLogger(config.logLevel, line?.sink);
  const engine = createEngine(config);
  logger.info("provider starting", { url: config.connectUrl, version: VERSION, count: config.models.length });
  const attestation = config.devAttestation ? await developmentAttestation(config, logger) : undefined;
  const agent = startAgent({
    ...(attestation ?? {}),
    url: config.connectUrl,
    token: config.token,
    engine,
    maxConcurrency: config.maxConcurrency,
    drainTimeoutMs: config.drainTimeoutMs,
    hardware: detectHardware(),
    logger,
    ...(line ? { onChange: line.update } : {}),
  });

  let signals = 0;
  const onSignal = () => {
    signals++;
    if (signals === 1) {
      logger.info("signal received: draining (send again to stop at once)");
      void agent.drain();
    } else {
      logger.warn("second signal: stopping at once");
      void agent.stop();
    }
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);

  const exit = await agent.done;
  attestation?.identity.close();
  line?.end();
  if (exit.reason === "unauthorized" || exit.reason === "version") {
    printErr(`umbra-provider: ${exit.message}`);
    return 1;
  }
  return exit.reason === "drained" ? 0 : 1;
}

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "--version":
    case "version":
      process.stdout.write(`${VERSION}\n`);
      return 0;
    case undefined:
    case "help":
    case "--help":
    case "-h":
      process.stdout.write(`${USAGE}\n`);
      return command === undefined ? 2 : 0;
    case "start":
      return start(rest);
    case "doctor":
    case "login":
    case "status":
      printErr(`umbra-provider: '${command}' is not available in version ${VERSION} yet`);
      return 2;
    default:
      printErr(`umbra-provider: unknown command '${command}'\n\n${USAGE}`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof ConfigError) {
      printErr(`umbra-provider: ${error.message}\n(umbra-provider start --help lists every flag)`);
      process.exit(2);
    }
    printErr(`umbra-provider: internal error (${error instanceof Error ? error.name : "unknown"})`);
    process.exit(1);
  },
);
