/**
 * Everything doctor reads from the machine goes through a Probe (tests inject fakes); `realProbe` reads
 * this one. Every read has a deadline (`within`).
 */
import { statfsSync } from "node:fs";
import { cpus, release, totalmem } from "node:os";
import { dirname, resolve } from "node:path";
import type { Env } from "../../config/settings.ts";
import { type CoordinatorExpectation, type PinnableInit, type PinnedCoordinator, pinCoordinator } from "../coordinator-pin.ts";
import { type ProviderHome, readCredentials, type StoredCredentials } from "../home.ts";
import { helperIdentity, type ProviderIdentity } from "../identity.ts";

export interface CommandResult {
  /** null when the command could not run or did not finish in time (`error` says which). */
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly error?: string;
}

/** Everything doctor reads from the machine. */
export interface Probe {
  readonly platform: NodeJS.Platform;
  readonly arch: string;
  readonly env: Env;
  osRelease(): string;
  cpuModel(): string | undefined;
  totalMemory(): number;
  /** Bytes free to this user on the volume holding `path` (or its nearest existing parent). */
  freeDisk(path: string): number | undefined;
  run(argv: readonly string[], timeoutMs: number): Promise<CommandResult>;
  fetch(url: string, init: PinnableInit): Promise<Response>;
  now(): number;
  /** Throws ConfigError for an unreadable or malformed file (home.ts). */
  credentials(home: ProviderHome): StoredCredentials | undefined;
  identityHelper(path: string, timeoutMs: number): Promise<ProviderIdentity>;
  /** Verifies the coordinator's attestation and pins its TLS key (coordinator-pin.ts). */
  pinCoordinator(base: string, expectation: CoordinatorExpectation): Promise<PinnedCoordinator>;
}

/** An error as one line of at most 300 characters. */
export const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error)).replace(/\s+/g, " ").slice(0, 300);

/** Runs `work` with an abort signal and a deadline; rejects with "no answer within N ms" when it passes. */
export async function within<T>(ms: number, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      reject(new Error(`no answer within ${ms} ms`));
    }, ms);
  });
  try {
    return await Promise.race([work(controller.signal), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

async function runCommand(argv: readonly string[], timeoutMs: number): Promise<CommandResult> {
  let proc: ReturnType<typeof Bun.spawn<"ignore", "pipe", "ignore">>;
  try {
    proc = Bun.spawn([...argv], { stdin: "ignore", stdout: "pipe", stderr: "ignore" });
  } catch {
    return { exitCode: null, stdout: "", error: `cannot run ${argv[0] ?? ""}` };
  }
  try {
    return await within(timeoutMs, async () => {
      const [stdout, exitCode] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
      return { exitCode, stdout };
    });
  } catch (error) {
    proc.kill("SIGKILL");
    return { exitCode: null, stdout: "", error: messageOf(error) };
  }
}

function freeDisk(path: string): number | undefined {
  let dir = resolve(path);
  for (;;) {
    try {
      const stats = statfsSync(dir);
      return stats.bavail * stats.bsize;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT" || dirname(dir) === dir) return undefined;
      dir = dirname(dir);
    }
  }
}

/** The probe of this machine: node:os, statfs, Bun.spawn, fetch, the credentials file, helperIdentity. */
export function realProbe(env: Env): Probe {
  return {
    platform: process.platform,
    arch: process.arch,
    env,
    osRelease: () => release(),
    cpuModel: () => cpus()[0]?.model.trim() || undefined,
    totalMemory: () => totalmem(),
    freeDisk,
    run: runCommand,
    fetch: (url, init) => fetch(url, init),
    now: () => Date.now(),
    credentials: readCredentials,
    identityHelper: (path, timeoutMs) => helperIdentity([path], timeoutMs),
    pinCoordinator: (base, expectation) => pinCoordinator(base, expectation),
  };
}
