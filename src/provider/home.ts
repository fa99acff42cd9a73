/**
 * The provider tool's own folder: the device token from `login`, the config file, and the files of a
 * detached `start` (pid, log, live state) that `status` and `stop` read.
 *
 * Where: UMBRA_PROVIDER_HOME when set; on macOS ~/Library/Application Support/umbra-provider; elsewhere
 * $XDG_CONFIG_HOME/umbra-provider or ~/.config/umbra-provider. The folder is created with mode 0700 and
 * the credentials file is written with mode 0600 (atomically: a temporary file renamed over it).
 */
import { chmodSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { chmod, rename, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { ConfigError, type Env } from "../config/settings.ts";

export interface ProviderHome {
  readonly dir: string;
  /** The device token and the coordinator it belongs to (`login`), mode 0600. */
  readonly credentialsFile: string;
  /** Settings for `start` (JSON; flags and environment override it). */
  readonly configFile: string;
  /** The pid of a detached `start`. */
  readonly pidFile: string;
  /** A detached `start` writes its log lines here. */
  readonly logFile: string;
  /** A running `start` keeps its live state here (status reads it). */
  readonly stateFile: string;
}

export interface Credentials {
  /** The coordinator's base URL (https://..., or http:// on loopback). */
  readonly coordinator: string;
  /** The provider device token (bearer of /v1/provider/connect). */
  readonly token: string;
  readonly accountId: string;
  /** Unix ms. */
  readonly createdAt: number;
}

export function providerHome(env: Env, platform: NodeJS.Platform = process.platform): ProviderHome {
  const explicit = env.UMBRA_PROVIDER_HOME;
  const home = env.HOME && env.HOME !== "" ? env.HOME : homedir();
  const dir =
    explicit && explicit !== ""
      ? explicit
      : platform === "darwin"
        ? join(home, "Library", "Application Support", "umbra-provider")
        : join(env.XDG_CONFIG_HOME && env.XDG_CONFIG_HOME !== "" ? env.XDG_CONFIG_HOME : join(home, ".config"), "umbra-provider");
  return {
    dir,
    credentialsFile: join(dir, "credentials.json"),
    configFile: join(dir, "config.json"),
    pidFile: join(dir, "provider.pid"),
    logFile: join(dir, "provider.log"),
    stateFile: join(dir, "state.json"),
  };
}

/** Creates the folder (mode 0700) when missing. */
export function ensureHome(home: ProviderHome): void {
  mkdirSync(home.dir, { recursive: true, mode: 0o700 });
}

/** Writes `text` to `file` with `mode`, atomically (temporary file, then rename). */
export function writePrivateFile(file: string, text: string, mode = 0o600): void {
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, text, { mode });
  // The mode given to writeFileSync is filtered by the umask; set it exactly.
  chmodSync(temporary, mode);
  renameSync(temporary, file);
}

/**
 * writePrivateFile on the runtime's thread pool (a file system's latency never stalls the event loop),
 * through a temporary file of its own, so a synchronous write meanwhile is not mixed with it.
 */
export async function writePrivateFileOffLoop(file: string, text: string, mode = 0o600): Promise<void> {
  const temporary = `${file}.${process.pid}.async.tmp`;
  await writeFile(temporary, text, { mode });
  await chmod(temporary, mode);
  await rename(temporary, file);
}

export function writeCredentials(home: ProviderHome, credentials: Credentials): void {
  ensureHome(home);
  writePrivateFile(
    home.credentialsFile,
    `${JSON.stringify({
      coordinator: credentials.coordinator,
      token: credentials.token,
      account_id: credentials.accountId,
      created_at: credentials.createdAt,
    })}\n`,
  );
}

/** What is stored, and the file's permission bits (a token readable by others deserves a warning). */
export interface StoredCredentials {
  readonly credentials: Credentials;
  readonly mode: number;
}

/** The stored credentials; undefined when there are none. Throws ConfigError for an unreadable file. */
export function readCredentials(home: ProviderHome): StoredCredentials | undefined {
  let text: string;
  let mode: number;
  try {
    mode = statSync(home.credentialsFile).mode & 0o777;
    text = readFileSync(home.credentialsFile, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new ConfigError(`cannot read ${home.credentialsFile}: ${(error as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ConfigError(`${home.credentialsFile} is not valid JSON; run 'umbra-provider login' again`);
  }
  const v = value as Record<string, unknown>;
  if (
    typeof v !== "object" ||
    v === null ||
    typeof v.coordinator !== "string" ||
    typeof v.token !== "string" ||
    typeof v.account_id !== "string" ||
    typeof v.created_at !== "number"
  ) {
    throw new ConfigError(`${home.credentialsFile} is incomplete; run 'umbra-provider login' again`);
  }
  return { credentials: { coordinator: v.coordinator, token: v.token, accountId: v.account_id, createdAt: v.created_at }, mode };
}
