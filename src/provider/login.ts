/**
 * `umbra-provider login`: links this machine to an account and stores the provider device token.
 *
 * Interactive: the OAuth 2.0 device authorization grant (RFC 8628; docs/api.md, "Provider device
 * login"): the tool asks for a code, sending this machine's name (and, when configured, the models it
 * will serve and the trust it expects: machineReport), shows it with the approval URL, and
 * polls at the interval the coordinator sets (slower after `slow_down`) until the account holder
 * approves, denies or lets it expire; an approval's `expires_in` (the token's lifetime) is reported.
 * Unattended: `--token T` stores a device token made elsewhere (admin API or CLI) once the coordinator
 * confirms it. The token goes, with the coordinator it belongs to, to credentials.json (mode 0600) in
 * the tool's folder (src/provider/home.ts), where `start` and `status` read it; it is never printed.
 * Exit codes: 0 linked; 1 denied, expired, refused or unreachable; 2 bad usage.
 */
import { hostname } from "node:os";
import { parseArgs } from "node:util";
import { ConfigError, type Env, readSetting } from "../config/settings.ts";
import {
  coordinatorBaseOf,
  expectationOf,
  isTokenText,
  machineReport,
  PROVIDER_SETTINGS,
  readConfigFile,
  type SettingName,
  settingReader,
} from "./config.ts";
import { CoordinatorRefused, type PinnedTls, pinCoordinator, pinnedFetch } from "./coordinator-pin.ts";
import { type ProviderHome, providerHome, readCredentials, writeCredentials } from "./home.ts";
import { fetchProviderMe, type MeAnswer } from "./provider-me.ts";

const LOGIN_USAGE = `usage: umbra-provider login [--coordinator URL] [--machine-name NAME]
       umbra-provider login [--coordinator URL] --token TOKEN

  --coordinator URL     the coordinator (https://; http:// on loopback only); default: UMBRA_PROVIDER_COORDINATOR,
                        the config file, or the coordinator of the last login
  --machine-name NAME   shown to the account holder when they approve (default: this machine's host name)
  --token TOKEN         unattended: store this provider device token (also UMBRA_PROVIDER_TOKEN or
                        UMBRA_PROVIDER_TOKEN_FILE) after the coordinator confirms it
  --coordinator-image FILE
                        the coordinator image's measurements.json: verify the coordinator's attestation
                        first and pin the TLS key it binds (a self-signed coordinator needs it)
  --coordinator-shape NAME, --coordinator-evidence production|development
                        as for start

The token is stored with mode 0600 in the tool's folder (UMBRA_PROVIDER_HOME to choose another).`;

const DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code";
const CLIENT_ID = "umbra-provider";
const REQUEST_TIMEOUT_MS = 15_000;

const printErr = (text: string) => process.stderr.write(`${text}\n`);

export class LoginError extends Error {
  override readonly name = "LoginError";
}

interface DeviceCode {
  readonly device_code: string;
  readonly user_code: string;
  readonly verification_uri: string;
  readonly verification_uri_complete?: string;
  readonly expires_in: number;
  readonly interval?: number;
}

/** Options a test may change: the pause between polls (so that a fake clock is not needed). */
export interface LoginHooks {
  readonly sleep?: (ms: number) => Promise<void>;
  /** TLS options pinning the coordinator's attested key (--coordinator-image; coordinator-pin.ts). */
  readonly tls?: PinnedTls;
}

async function post(url: string, body: Record<string, unknown>, tls: PinnedTls | undefined): Promise<Response> {
  try {
    return await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      ...(tls ? { tls } : {}),
    });
  } catch (error) {
    throw new LoginError(`cannot reach the coordinator at ${new URL(url).origin}: ${(error as Error).message}`);
  }
}

async function json(response: Response): Promise<Record<string, unknown>> {
  try {
    const value = await response.json();
    return typeof value === "object" && value !== null ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** The coordinator's own message from its error envelope, or a plain description of the status. */
function problem(body: Record<string, unknown>, status: number): string {
  const error = body.error;
  if (typeof error === "object" && error !== null && typeof (error as { message?: unknown }).message === "string") {
    return `${(error as { message: string }).message} (HTTP ${status})`;
  }
  if (typeof error === "string") return typeof body.error_description === "string" ? `${error}: ${body.error_description}` : error;
  return `HTTP ${status}`;
}

/** Asks the coordinator who this token belongs to; the account id, or a LoginError. */
async function confirmToken(base: string, token: string, tls?: PinnedTls): Promise<{ accountId: string }> {
  let answer: MeAnswer;
  try {
    answer = await fetchProviderMe(base, token, {
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      ...(tls ? { fetch: pinnedFetch(tls) } : {}),
    });
  } catch (error) {
    throw new LoginError(`cannot reach the coordinator at ${base}: ${(error as Error).message}`);
  }
  if (answer.status === 401) throw new LoginError("the coordinator refused this device token (unknown or revoked)");
  if (!answer.account) throw new LoginError(`the coordinator could not confirm the token: ${problem(answer.body, answer.status)}`);
  return { accountId: answer.account.account_id };
}

/** What a device login yields: the token, its account, and its lifetime in seconds (null: it does not expire). */
export interface DeviceLoginResult {
  readonly token: string;
  readonly accountId: string;
  readonly expiresIn: number | null;
}

/** What the tool tells the approver about this machine: its name, and what its configuration says it will serve. */
export interface MachineReport {
  readonly name: string;
  readonly models?: readonly string[];
  readonly trustLevel?: string;
}

/** Runs the device authorization grant; resolves with the token and its account. */
export async function deviceLogin(
  base: string,
  machine: MachineReport,
  show: (code: DeviceCode) => void,
  hooks: LoginHooks = {},
): Promise<DeviceLoginResult> {
  const sleep = hooks.sleep ?? ((ms: number) => Bun.sleep(ms));
  const body = {
    client_id: CLIENT_ID,
    machine_name: machine.name,
    ...(machine.models ? { models: machine.models } : {}),
    ...(machine.trustLevel ? { trust_level: machine.trustLevel } : {}),
  };
  const started = await post(`${base}/v1/provider/device/code`, body, hooks.tls);
  const code = (await json(started)) as Partial<DeviceCode> & Record<string, unknown>;
  if (!started.ok) throw new LoginError(`the coordinator refused to start a login: ${problem(code, started.status)}`);
  if (typeof code.device_code !== "string" || typeof code.user_code !== "string" || typeof code.verification_uri !== "string") {
    throw new LoginError("the coordinator's answer is not a device authorization (is this an Umbra coordinator?)");
  }
  const expiresIn = typeof code.expires_in === "number" && code.expires_in > 0 ? code.expires_in : 600;
  show(code as DeviceCode);
  // RFC 8628 section 3.5: 5 seconds unless the coordinator says otherwise; never faster than 1 second.
  let intervalMs = Math.max(1, typeof code.interval === "number" ? code.interval : 5) * 1000;
  const deadline = Date.now() + expiresIn * 1000;
  for (;;) {
    await sleep(intervalMs);
    const response = await post(
      `${base}/v1/provider/device/token`,
      { grant_type: DEVICE_GRANT, device_code: code.device_code, client_id: CLIENT_ID },
      hooks.tls,
    );
    const body = await json(response);
    if (response.ok) {
      if (typeof body.access_token !== "string" || typeof body.account_id !== "string") {
        throw new LoginError("the coordinator approved the login but sent no usable token");
      }
      const expiresIn = typeof body.expires_in === "number" && body.expires_in > 0 ? body.expires_in : null;
      return { token: body.access_token, accountId: body.account_id, expiresIn };
    }
    switch (body.error) {
      case "authorization_pending":
        break;
      case "slow_down":
        intervalMs += 5_000;
        break;
      case "access_denied":
        throw new LoginError("the account holder denied this login");
      case "expired_token":
        throw new LoginError("the code expired before it was approved; run 'umbra-provider login' again");
      default:
        throw new LoginError(`the login failed: ${problem(body, response.status)}`);
    }
    if (Date.now() > deadline + 30_000) throw new LoginError("the code expired before it was approved; run 'umbra-provider login' again");
  }
}

/** The coordinator to log in to: flag, environment, config file, then the last login's. */
function coordinatorOf(raw: (name: SettingName) => string | undefined, home: ProviderHome): string {
  const given = raw("coordinator") ?? readCredentials(home)?.credentials.coordinator;
  if (given === undefined) throw new ConfigError("--coordinator is required: the coordinator's base URL (e.g. https://umbra.example.com)");
  try {
    return coordinatorBaseOf(given);
  } catch (error) {
    // Name this command's flag, not start's.
    throw new ConfigError((error as Error).message);
  }
}

export async function loginCommand(argv: readonly string[], env: Env, hooks: LoginHooks = {}): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        coordinator: { type: "string" },
        token: { type: "string" },
        "machine-name": { type: "string" },
        "coordinator-image": { type: "string" },
        "coordinator-shape": { type: "string" },
        "coordinator-evidence": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  if (values.help === true) {
    process.stdout.write(`${LOGIN_USAGE}\n`);
    return 0;
  }
  const home = providerHome(env);
  const file = readConfigFile(home.configFile, false);
  const raw = settingReader(values, env, file);
  const base = coordinatorOf(raw, home);
  const expectation = expectationOf(raw, base);
  const machineName = (values["machine-name"] as string | undefined) ?? hostname().slice(0, 64);
  if (!/^[\x20-\x7e]{1,64}$/.test(machineName)) throw new ConfigError("--machine-name: 1 to 64 printable characters");
  const token = (values.token as string | undefined) ?? readSetting(PROVIDER_SETTINGS.token, {}, env);
  if (token !== undefined && !isTokenText(token)) throw new ConfigError("--token: must be printable ASCII without spaces");

  try {
    let tls: PinnedTls | undefined;
    if (expectation !== undefined) {
      const pinned = await pinCoordinator(base, expectation).catch((error: unknown) => {
        if (error instanceof CoordinatorRefused) throw new LoginError(`refusing ${base}: ${error.message}`);
        throw new LoginError(`cannot verify the coordinator at ${base}: ${(error as Error).message}`);
      });
      tls = pinned.tls;
      process.stdout.write(
        `Coordinator attestation verified: shape ${pinned.shape ?? "?"}${pinned.development ? " (DEVELOPMENT evidence)" : ""}; TLS key pinned.\n`,
      );
    }
    let linked: { token: string; accountId: string; expiresIn?: number | null };
    if (token !== undefined) {
      linked = { token, accountId: (await confirmToken(base, token, tls)).accountId };
    } else {
      linked = await deviceLogin(
        base,
        { name: machineName, ...machineReport(env, file) },
        (code) => {
          process.stdout.write(
            `To link this machine ("${machineName}") to your Umbra account:\n` +
              `  1. open ${code.verification_uri}\n` +
              `  2. enter the code ${code.user_code}\n` +
              `  3. check that it names this machine, then approve with your JWT or an API key allowed to link machines\n` +
              (code.verification_uri_complete ? `(or open ${code.verification_uri_complete})\n` : "") +
              `Waiting for approval (the code expires in ${Math.round(code.expires_in / 60)} minutes; Ctrl-C to cancel)...\n`,
          );
        },
        { ...hooks, ...(tls ? { tls } : {}) },
      );
    }
    writeCredentials(home, { coordinator: base, token: linked.token, accountId: linked.accountId, createdAt: Date.now() });
    process.stdout.write(
      `Linked to account ${linked.accountId} at ${base}.\n` +
        (typeof linked.expiresIn === "number"
          ? `The device token expires on ${new Date(Date.now() + linked.expiresIn * 1000).toISOString()}; run login again before then.\n`
          : "") +
        `The device token is stored in ${home.credentialsFile} (mode 0600).\n` +
        "Next: umbra-provider doctor, then umbra-provider start --engine openai --upstream URL --model BUILD\n",
    );
    return 0;
  } catch (error) {
    if (error instanceof LoginError) {
      printErr(`umbra-provider login: ${error.message}`);
      return 1;
    }
    throw error;
  }
}
