/**
 * Provider configuration (`umbra-provider start`): parsed once from flags and `UMBRA_PROVIDER_*`
 * environment variables, validated, frozen.
 *
 * Precedence: flag > environment > `<NAME>_FILE` (secrets only) > the config file (JSON, keys named like
 * the flags, lists as arrays; never the token) > the credentials `login` stored (coordinator and token) >
 * default. Each setting is one entry in provider-settings.ts: the plain ones are parsed in a loop, the
 * rules below read the others. `--model` and `--schedule` repeat (environment: comma-separated). Each
 * model is `BUILD` or `BUILD=UPSTREAM_NAME` (the runtime's name for the weights; default the build id).
 * The device token never travels in plaintext to another machine: plain `http`/`ws` coordinator URLs
 * are accepted for loopback hosts only.
 */
import { readFileSync } from "node:fs";
import { ExpectedImageError, loadExpectedImage } from "../../attestation/cvm/measurements.ts";
import {
  ConfigError,
  type Env,
  enumSetting,
  type FlagValues,
  parseSetting,
  parseSettings,
  readList,
  readSetting,
  type Setting,
  type SettingValues,
} from "../config/settings.ts";
import { MAX_BUILD_ID, MAX_MODELS_PER_HELLO } from "../protocol/frames.ts";
import type { CoordinatorExpectation } from "./coordinator-pin.ts";
import { type EngineName, PROVIDER_SETTINGS, type SettingName } from "./provider-settings.ts";
import { Schedule } from "./schedule.ts";

export {
  type EngineName,
  PROVIDER_SETTINGS,
  parseProviderFlags,
  type SettingName,
} from "./provider-settings.ts";

/** Path the agent dials on the coordinator. */
export const CONNECT_PATH = "/v1/provider/connect";

export interface ModelMapping {
  /** The build id the coordinator routes by. */
  readonly buildId: string;
  /** The model name sent to the upstream runtime (openai engine). */
  readonly upstreamName: string;
}

/** The settings loadProviderConfig's rules read themselves; every other entry is the field of its name. */
const DERIVED = [
  "coordinator",
  "token",
  "engine",
  "upstream",
  "model",
  "identityHelper",
  "coordinatorImage",
  "coordinatorShape",
  "coordinatorEvidence",
  "schedule",
] as const satisfies readonly SettingName[];

/** The plain settings (their comments are in provider-settings.ts), then those built by the rules. */
export interface ProviderConfig extends SettingValues<Omit<typeof PROVIDER_SETTINGS, (typeof DERIVED)[number]>> {
  /** `ws(s)://host[:port][/base]/v1/provider/connect`. */
  readonly connectUrl: string;
  readonly token: string;
  readonly engine: EngineName;
  /** OpenAI-compatible base URL including `/v1`, without a trailing slash (openai engine only). */
  readonly upstream?: string;
  readonly models: readonly ModelMapping[];
  /** A signing helper holding the identity key (the Secure Enclave helper on a Mac); else a software key. */
  readonly identityHelper?: string;
  /** `--coordinator-image`: verify the coordinator's attestation before each connection and pin its TLS key. */
  readonly coordinatorExpectation?: CoordinatorExpectation;
  /** When it may serve (src/provider/schedule.ts); empty: always. */
  readonly schedule: readonly string[];
}

/** The config file's values, by flag name (lists as arrays). */
export type FileValues = Readonly<Record<string, string | readonly string[]>>;

/** What `login` stored. */
export interface StoredLogin {
  readonly coordinator: string;
  readonly token: string;
}

/** A device token as the tool accepts one (flag, environment, file or login): printable ASCII, no spaces. */
export function isTokenText(token: string): boolean {
  return /^[\x21-\x7e]{1,4096}$/.test(token);
}

const flagName = (name: SettingName) => `--${PROVIDER_SETTINGS[name].flag}`;

/** The config file's value of a single-valued setting. */
function fileValue(name: SettingName, file: FileValues): string | undefined {
  const v = file[PROVIDER_SETTINGS[name].flag];
  if (v === undefined) return undefined;
  if (typeof v !== "string") throw new ConfigError(`config file: '${PROVIDER_SETTINGS[name].flag}' must be a single value`);
  return v;
}

/** The config file's value of a list setting. */
function fileList(name: SettingName, file: FileValues): string[] {
  const v = file[PROVIDER_SETTINGS[name].flag];
  if (v === undefined) return [];
  return typeof v === "string" ? [v] : [...v];
}

function isLoopback(hostname: string): boolean {
  const host = hostname.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function parseUrl(name: SettingName, value: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`${flagName(name)}: '${value}' is not a URL`);
  }
  if (url.username !== "" || url.password !== "") throw new ConfigError(`${flagName(name)}: credentials do not belong in the URL`);
  if (url.search !== "" || url.hash !== "") throw new ConfigError(`${flagName(name)}: the URL must not carry a query or fragment`);
  return url;
}

/** Base URL (http, https, ws, wss) -> the WebSocket URL of the connect endpoint. */
function connectUrlOf(value: string): string {
  const url = parseUrl("coordinator", value);
  const secure = url.protocol === "https:" || url.protocol === "wss:";
  if (!secure && url.protocol !== "http:" && url.protocol !== "ws:") {
    throw new ConfigError(`--coordinator: '${url.protocol}' is not http, https, ws or wss`);
  }
  if (!secure && !isLoopback(url.hostname)) {
    throw new ConfigError(
      "--coordinator: plaintext http/ws would expose the device token; use https or wss (plaintext is for loopback only)",
    );
  }
  let path = url.pathname.replace(/\/+$/, "");
  if (!path.endsWith(CONNECT_PATH)) path += CONNECT_PATH;
  return `${secure ? "wss" : "ws"}://${url.host}${path}`;
}

/** A coordinator URL (http, https, ws, wss; plaintext on loopback only) -> its http(s) base URL. */
export function coordinatorBaseOf(value: string): string {
  return connectUrlOf(value).replace(/^ws/, "http").slice(0, -CONNECT_PATH.length);
}

function upstreamOf(value: string): string {
  const url = parseUrl("upstream", value);
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new ConfigError(`--upstream: '${url.protocol}' is not http or https`);
  return `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, "")}`;
}

/** Parses `--model` entries (BUILD or BUILD=UPSTREAM_NAME); throws ConfigError naming the entry. */
export function modelsOf(entries: readonly string[]): ModelMapping[] {
  if (entries.length === 0) throw new ConfigError("--model is required: give at least one BUILD or BUILD=UPSTREAM_NAME");
  if (entries.length > MAX_MODELS_PER_HELLO) throw new ConfigError(`--model: at most ${MAX_MODELS_PER_HELLO} models per provider`);
  const seen = new Set<string>();
  return entries.map((entry) => {
    const eq = entry.indexOf("=");
    const buildId = (eq < 0 ? entry : entry.slice(0, eq)).trim();
    const upstreamName = (eq < 0 ? buildId : entry.slice(eq + 1)).trim();
    if (buildId === "" || buildId.length > MAX_BUILD_ID || /\s/.test(buildId)) {
      throw new ConfigError(`--model: '${entry}' needs a build id of 1..${MAX_BUILD_ID} characters without spaces`);
    }
    if (upstreamName === "") throw new ConfigError(`--model: '${entry}' has an empty upstream name after '='`);
    if (seen.has(buildId)) throw new ConfigError(`--model: build '${buildId}' is given twice`);
    seen.add(buildId);
    return Object.freeze({ buildId, upstreamName });
  });
}

/**
 * Builds the frozen provider configuration. Throws ConfigError with a message naming the flag for any
 * missing, invalid or unsafe value.
 */
export function loadProviderConfig(flags: FlagValues, env: Env, sources: { file?: FileValues; login?: StoredLogin } = {}): ProviderConfig {
  const file = sources.file ?? {};
  const raw = settingReader(flags, env, file);
  const rawList = (name: SettingName) => {
    const given = readList(PROVIDER_SETTINGS[name], flags, env);
    return given.length > 0 ? given : fileList(name, file);
  };
  const coordinator = raw("coordinator") ?? sources.login?.coordinator;
  if (coordinator === undefined) {
    throw new ConfigError("--coordinator is required: the coordinator's base URL (or run 'umbra-provider login' first)");
  }
  const connectUrl = connectUrlOf(coordinator);

  // The stored token belongs to the coordinator it was issued by: never send it to another one.
  const storedToken =
    sources.login && (raw("coordinator") === undefined || sameCoordinator(raw("coordinator") as string, sources.login.coordinator))
      ? sources.login.token
      : undefined;
  const token = raw("token") ?? storedToken;
  if ((token === undefined || token === "") && sources.login !== undefined && storedToken === undefined) {
    // A login exists but for another coordinator (127.0.0.1 and localhost are different origins).
    const stored = displayBase(sources.login.coordinator);
    const given = displayBase(coordinator);
    throw new ConfigError(
      `--token is required: the stored login is for ${stored}, not ${given}; run 'umbra-provider login --coordinator ${given}' or use --coordinator ${stored}`,
    );
  }
  if (token === undefined || token === "") {
    throw new ConfigError(
      "--token is required: the provider device token (or UMBRA_PROVIDER_TOKEN / UMBRA_PROVIDER_TOKEN_FILE, or run 'umbra-provider login')",
    );
  }
  if (!isTokenText(token)) throw new ConfigError("--token: must be printable ASCII without spaces");

  const engine = enumSetting<EngineName>(PROVIDER_SETTINGS.engine, raw("engine"), undefined);
  const upstreamRaw = raw("upstream");
  if (engine === "openai" && upstreamRaw === undefined) {
    throw new ConfigError("--upstream is required with --engine openai (e.g. http://127.0.0.1:11434/v1)");
  }
  if (engine !== "openai" && upstreamRaw !== undefined) throw new ConfigError(`--upstream does not apply to --engine ${engine}`);
  const upstream = upstreamRaw === undefined ? undefined : upstreamOf(upstreamRaw);
  const plain = parseSettings(PROVIDER_SETTINGS, DERIVED, raw);
  const identityHelper = raw("identityHelper");
  if (identityHelper === "") throw new ConfigError("--identity-helper: empty path");
  // Without --dev-attestation the helper's key needs a coordinator with MDM enrolment: start asks it (mdm-attestation.ts).

  const coordinatorExpectation = expectationOf(raw, connectUrl);

  const config: ProviderConfig = {
    connectUrl,
    token,
    engine,
    ...(upstream !== undefined ? { upstream } : {}),
    models: Object.freeze(modelsOf(rawList("model"))),
    ...plain,
    ...(identityHelper !== undefined ? { identityHelper } : {}),
    ...(coordinatorExpectation !== undefined ? { coordinatorExpectation } : {}),
    schedule: Object.freeze(scheduleOf(rawList("schedule"))),
  };
  return Object.freeze(config);
}

/**
 * What `login` reports of this machine to the approver (unverified until it connects): the build ids
 * `start` would serve from the environment or the config file, and `hardware` when development
 * attestation is on there (a development coordinator grants it). Each undefined when not configured or
 * not valid (start would say why).
 */
export function machineReport(env: Env, file: FileValues = {}): { models?: string[]; trustLevel?: "hardware" } {
  const out: { models?: string[]; trustLevel?: "hardware" } = {};
  try {
    const given = readList(PROVIDER_SETTINGS.model, {}, env);
    const entries = given.length > 0 ? given : fileList("model", file);
    if (entries.length > 0) out.models = modelsOf(entries).map((m) => m.buildId);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
  }
  try {
    if (parseSetting(PROVIDER_SETTINGS.devAttestation, settingReader({}, env, file)("devAttestation")) === true)
      out.trustLevel = "hardware";
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
  }
  return out;
}

/** Reads a single-valued setting by name: flag, environment (and `_FILE` for secrets), then the config file. */
export function settingReader(flags: FlagValues, env: Env, file: FileValues = {}): (name: SettingName) => string | undefined {
  return (name) => readSetting(PROVIDER_SETTINGS[name], flags, env) ?? fileValue(name, file);
}

/**
 * `--coordinator-image FILE [--coordinator-shape NAME] [--coordinator-evidence development]` -> what the
 * coordinator's attestation must show (src/provider/coordinator-pin.ts); undefined without an image. `raw`
 * reads a setting by name (flag, environment, config file); `url` is the coordinator's URL (https needed).
 */
export function expectationOf(raw: (name: SettingName) => string | undefined, url: string): CoordinatorExpectation | undefined {
  const image = raw("coordinatorImage");
  const shape = raw("coordinatorShape");
  const development = parseSetting(PROVIDER_SETTINGS.coordinatorEvidence, raw("coordinatorEvidence")) === "development";
  if (image === undefined || image === "") {
    if (shape !== undefined) throw new ConfigError("--coordinator-shape needs --coordinator-image (the measurements.json that names it)");
    if (development) throw new ConfigError("--coordinator-evidence development needs --coordinator-image");
    return undefined;
  }
  if (!/^(https|wss):/.test(url)) {
    throw new ConfigError("--coordinator-image needs an https coordinator: the attestation binds the key of its TLS connection");
  }
  try {
    return Object.freeze({ image: loadExpectedImage(image, shape), development });
  } catch (error) {
    if (error instanceof ExpectedImageError) throw new ConfigError(`--coordinator-${error.input}: ${error.message}`);
    throw error;
  }
}

function scheduleOf(windows: readonly string[]): string[] {
  // Parsed here so that a bad window stops `start` with a clear message before it connects.
  Schedule.parse(windows);
  return [...windows];
}

/** Whether two coordinator URLs name the same origin (the scheme's ws/http forms are the same server). */
/** A coordinator URL as the operator would type it again: its http(s) base, or the text itself. */
function displayBase(value: string): string {
  try {
    return coordinatorBaseOf(value);
  } catch {
    return value;
  }
}

export function sameCoordinator(a: string, b: string): boolean {
  try {
    const origin = (u: string) => {
      const url = new URL(u);
      const secure = url.protocol === "https:" || url.protocol === "wss:";
      return `${secure ? "https" : "http"}://${url.host}`;
    };
    return origin(a) === origin(b);
  } catch {
    return false;
  }
}

/**
 * Reads the JSON config file: an object whose keys are flag names (`engine`, `upstream`, `model`,
 * `max-concurrency`, `schedule`, ...), values strings, numbers or (lists) arrays of strings. Undefined
 * when the file does not exist and was not named explicitly.
 */
export function readConfigFile(path: string, explicit: boolean): FileValues | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    if (!explicit && (error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new ConfigError(`--config: cannot read ${path}: ${(error as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(`--config: ${path} is not valid JSON (${(error as Error).message})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new ConfigError(`--config: ${path} must hold a JSON object`);
  const byFlag = new Map<string, Setting>(Object.values(PROVIDER_SETTINGS).map((s) => [s.flag, s]));
  const out: Record<string, string | readonly string[]> = {};
  for (const [key, v] of Object.entries(value)) {
    const setting = byFlag.get(key);
    if (!setting)
      throw new ConfigError(`--config: ${path}: unknown setting '${key}' (use the flag names of 'umbra-provider start --help')`);
    if (setting.flag === "token")
      throw new ConfigError(`--config: ${path}: the device token does not belong in the config file; run 'umbra-provider login'`);
    if (setting.kind === "list") {
      const list = typeof v === "string" ? [v] : v;
      if (!Array.isArray(list) || !list.every((x) => typeof x === "string")) {
        throw new ConfigError(`--config: ${path}: '${key}' must be a string or an array of strings`);
      }
      out[key] = list;
    } else if (typeof v === "string" || (typeof v === "number" && Number.isFinite(v))) {
      out[key] = String(v);
    } else {
      throw new ConfigError(`--config: ${path}: '${key}' must be a string${setting.kind === "int" ? " or a number" : ""}`);
    }
  }
  return out;
}
