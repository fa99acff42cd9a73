/**
 * The doctor's flags and their UMBRA_PROVIDER_* twins (start's settings, config.ts) -> the Settings every
 * check reads. A bad value is a usage error (exit 2); a missing one is for a check to report. As `start`,
 * the stored token is never sent to another coordinator than its login's.
 */
import { type ParseArgsConfig, parseArgs } from "node:util";
import { enumSetting, type FlagValues, optionsOf, readList, readSetting } from "../../config/settings.ts";
import {
  coordinatorBaseOf,
  type EngineName,
  expectationOf,
  type ModelMapping,
  modelsOf,
  PROVIDER_SETTINGS,
  type SettingName,
  sameCoordinator,
  settingReader,
} from "../config.ts";
import type { CoordinatorExpectation } from "../coordinator-pin.ts";
import { providerHome, type StoredCredentials } from "../home.ts";
import { type Settings, type Target, type Timeouts, TRUST_LEVELS, type TrustLevel } from "./check.ts";
import { messageOf, type Probe } from "./probe.ts";

export class UsageError extends Error {}

const MODELS_DIR = { flag: "models-dir", env: "UMBRA_PROVIDER_MODELS_DIR", kind: "string", help: "" } as const;
const TRUST_SETTING = { flag: "trust", env: "", kind: "enum", values: TRUST_LEVELS, help: "" } as const;

/** The settings of `start` that doctor reads too (config.ts), with their UMBRA_PROVIDER_* twins. */
const START_SETTINGS = [
  "coordinator",
  "token",
  "engine",
  "upstream",
  "model",
  "identityHelper",
  "coordinatorImage",
  "coordinatorShape",
  "coordinatorEvidence",
] as const satisfies readonly SettingName[];

const OPTIONS: NonNullable<ParseArgsConfig["options"]> = {
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  ...optionsOf({ trust: TRUST_SETTING, modelsDir: MODELS_DIR }),
  ...optionsOf(Object.fromEntries(START_SETTINGS.map((name) => [name, PROVIDER_SETTINGS[name]]))),
};

/** Parses argv; throws parseArgs' own errors (code ERR_PARSE_ARGS_*) for unknown flags or arguments. */
export function parseFlags(argv: readonly string[]): FlagValues {
  return parseArgs({ args: [...argv], strict: true, allowPositionals: false, options: OPTIONS }).values;
}

/** --trust (default hardware); throws ConfigError for another value. */
export const trustOf = (flags: FlagValues): TrustLevel =>
  enumSetting<TrustLevel>(TRUST_SETTING, flags.trust as string | undefined, "hardware");

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

/** Throws UsageError (or ConfigError) for a value that no check could make sense of. */
export function settingsOf(f: FlagValues, probe: Probe, timeouts: Timeouts): Settings {
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
  let token: Settings["token"];
  const given = readSetting(PROVIDER_SETTINGS.coordinator, f, env);
  try {
    const value = readSetting(PROVIDER_SETTINGS.token, f, env);
    const envName = PROVIDER_SETTINGS.token.env;
    const source = typeof f.token === "string" ? "--token" : env[envName] ? envName : `${envName}_FILE`;
    if (value !== undefined && value !== "") token = { value, source };
    else if (stored && (given === undefined || sameCoordinator(given, stored.credentials.coordinator))) {
      token = { value: stored.credentials.token, source: home.credentialsFile };
    } else if (stored && given !== undefined) {
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
