/**
 * Every `umbra-provider start` setting, one entry each (the format of src/config/settings.ts): flag,
 * `UMBRA_PROVIDER_*` environment twin, kind, default, bounds, help. docs/operations.md lists the same
 * table (test/unit/docs/operations-settings.test.ts holds them together); `start --help` prints it.
 * loadProviderConfig (config.ts) parses the plain entries in a loop; its rules read the others.
 */

import { ConfigError, type FlagValues, type Options, optionsOf, parseOptions, type SettingTable } from "../config/settings.ts";
import { LOG_LEVELS } from "../observability/logger.ts";
import { MAX_CONCURRENCY } from "../protocol/frames.ts";

export type EngineName = "echo" | "openai";
const ENGINE_NAMES: readonly EngineName[] = ["echo", "openai"];

const DAY_MS = 86_400_000;

export const PROVIDER_SETTINGS = {
  // Default: the coordinator `login` stored; else required.
  coordinator: {
    flag: "coordinator",
    env: "UMBRA_PROVIDER_COORDINATOR",
    kind: "string",
    help: "coordinator base URL (https://, wss://; http:// and ws:// for loopback only)",
  },
  // Default: the token `login` stored for that coordinator; else required.
  token: { flag: "token", env: "UMBRA_PROVIDER_TOKEN", kind: "string", secret: true, help: "provider device token" },
  // Required.
  engine: { flag: "engine", env: "UMBRA_PROVIDER_ENGINE", kind: "enum", values: ENGINE_NAMES, help: "echo or openai" },
  upstream: {
    flag: "upstream",
    env: "UMBRA_PROVIDER_UPSTREAM",
    kind: "string",
    help: "OpenAI-compatible base URL including /v1 (openai engine)",
  },
  model: {
    flag: "model",
    env: "UMBRA_PROVIDER_MODEL",
    kind: "list",
    help: "BUILD or BUILD=UPSTREAM_NAME, repeatable; BUILD is a catalog build id, not an alias",
  },
  maxConcurrency: {
    flag: "max-concurrency",
    env: "UMBRA_PROVIDER_MAX_CONCURRENCY",
    kind: "int",
    default: 8,
    min: 1,
    max: MAX_CONCURRENCY,
    help: "attempts served at once",
  },
  /** 0 = as fast as possible. */
  echoTokensPerSecond: {
    flag: "echo-tokens-per-second",
    env: "UMBRA_PROVIDER_ECHO_TOKENS_PER_SECOND",
    kind: "int",
    default: 0,
    min: 0,
    max: 1_000_000,
    help: "echo engine token rate (0 = as fast as possible)",
  },
  echoFirstTokenDelayMs: {
    flag: "echo-first-token-delay-ms",
    env: "UMBRA_PROVIDER_ECHO_FIRST_TOKEN_DELAY_MS",
    kind: "int",
    default: 0,
    min: 0,
    max: DAY_MS,
    help: "echo engine delay before the first token",
  },
  drainTimeoutMs: {
    flag: "drain-timeout-ms",
    env: "UMBRA_PROVIDER_DRAIN_TIMEOUT_MS",
    kind: "int",
    default: 120_000,
    min: 0,
    max: DAY_MS,
    help: "longest wait for active attempts on shutdown",
  },
  logLevel: {
    flag: "log-level",
    env: "UMBRA_PROVIDER_LOG_LEVEL",
    kind: "enum",
    values: LOG_LEVELS,
    default: "info",
    help: "error, warn, info or debug",
  },
  /** Ask a development coordinator for a device chain (software identity key; never valid in production). */
  devAttestation: {
    flag: "dev-attestation",
    env: "UMBRA_PROVIDER_DEV_ATTESTATION",
    kind: "switch",
    default: "off",
    help: "on: get a development device chain from a development coordinator (trust level hardware there)",
  },
  identityHelper: {
    flag: "identity-helper",
    env: "UMBRA_PROVIDER_IDENTITY_HELPER",
    kind: "string",
    help: "path of a signing helper that holds the identity key (umbra-se-helper on a Mac)",
  },
  coordinatorImage: {
    flag: "coordinator-image",
    env: "UMBRA_PROVIDER_COORDINATOR_IMAGE",
    kind: "string",
    help: "the coordinator image's measurements.json: verify its attestation before each connection and pin the TLS key it binds",
  },
  coordinatorShape: {
    flag: "coordinator-shape",
    env: "UMBRA_PROVIDER_COORDINATOR_SHAPE",
    kind: "string",
    help: "the published VM shape the coordinator must run (default: one of the shapes in --coordinator-image)",
  },
  coordinatorEvidence: {
    flag: "coordinator-evidence",
    env: "UMBRA_PROVIDER_COORDINATOR_EVIDENCE",
    kind: "enum",
    values: ["production", "development"],
    default: "production",
    help: "development: accept a coordinator's development evidence (local tests only: anyone can make it)",
  },
  schedule: {
    flag: "schedule",
    env: "UMBRA_PROVIDER_SCHEDULE",
    kind: "list",
    help: "when to serve, local time: 'mon-fri 22:00-07:00', 'daily 09:00-17:00'; repeatable",
  },
} as const satisfies SettingTable;

export type SettingName = keyof typeof PROVIDER_SETTINGS;

/** parseArgs option descriptors for `umbra-provider start`. */
const PROVIDER_OPTIONS: Options = optionsOf(PROVIDER_SETTINGS);

/** Parses `start` argv; unknown flags and positionals are an error (ConfigError naming the flag). */
export function parseProviderFlags(argv: readonly string[], extra: Options = {}): FlagValues {
  const { values, positionals } = parseOptions(argv, { ...PROVIDER_OPTIONS, ...extra });
  if (positionals.length > 0) throw new ConfigError(`unexpected argument '${positionals[0]}'`);
  return values;
}
