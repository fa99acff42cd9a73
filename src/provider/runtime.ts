/**
 * The files a running `umbra-provider start` keeps in its folder (src/provider/home.ts), so that
 * `status` and `stop` work from another shell: the pid file (one `start` per folder) and the live state
 * (JSON, rewritten on every change and every second, atomically), and its one-line summary. Never
 * content: ids, counts, times.
 */
import { readFileSync, rmSync } from "node:fs";
import type { ModelWarning } from "../protocol/frames.ts";
import { ensureHome, type ProviderHome, writePrivateFile, writePrivateFileOffLoop } from "./home.ts";

/** The live state `status` shows. Times in Unix ms. */
export interface RuntimeState {
  readonly version: string;
  readonly pid: number;
  readonly started_at: number;
  readonly updated_at: number;
  readonly coordinator: string;
  /** connecting, connected, reconnecting, draining, stopped, or waiting (outside the schedule). */
  readonly phase: string;
  readonly connected: boolean;
  readonly provider_id: string | null;
  readonly trust_level: string | null;
  readonly models: readonly string[];
  /** Models the engine reports ready to answer at once. */
  readonly warm_models: readonly string[];
  readonly engine: string;
  readonly active: number;
  readonly max_concurrency: number;
  readonly requests_served: number;
  readonly tokens_served: number;
  /** Tokens per second over the last ten seconds. */
  readonly tokens_per_second: number;
  readonly last_challenge: { readonly at: number; readonly answered: boolean } | null;
  readonly schedule: { readonly windows: readonly string[]; readonly open: boolean; readonly next_change_at: number | null };
  readonly detached: boolean;
  readonly log_file: string | null;
  /** What the coordinator said about served ids it routes nothing to (describeModelWarning); absent in older files. */
  readonly model_warnings?: readonly string[];
  /** Why the coordinator is refused (its attestation failed a check, --coordinator-image); absent when not. */
  readonly coordinator_refused?: string;
}

/** Whether a process with this pid exists (signal 0 probes without sending anything). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The pid in the pid file, or undefined when there is none or it is unreadable. */
export function readPid(home: ProviderHome): number | undefined {
  try {
    const pid = Number(readFileSync(home.pidFile, "utf8").trim());
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** The pid of a running `start` for this folder, or undefined (a stale pid file is not a running one). */
export function runningPid(home: ProviderHome): number | undefined {
  const pid = readPid(home);
  return pid !== undefined && pid !== process.pid && isAlive(pid) ? pid : undefined;
}

export class AlreadyRunning extends Error {
  override readonly name = "AlreadyRunning";
  constructor(readonly pid: number) {
    super(`umbra-provider is already running (pid ${pid}); see 'umbra-provider status', or stop it with 'umbra-provider stop'`);
  }
}

/** Takes the pid file for this process; throws AlreadyRunning when another live `start` holds it. */
export function takePidFile(home: ProviderHome): void {
  ensureHome(home);
  const other = runningPid(home);
  if (other !== undefined) throw new AlreadyRunning(other);
  writePrivateFile(home.pidFile, `${process.pid}\n`, 0o644);
}

/** Removes the pid file if it is still this process's. */
export function releasePidFile(home: ProviderHome): void {
  if (readPid(home) === process.pid) rmSync(home.pidFile, { force: true });
}

export function writeState(home: ProviderHome, state: RuntimeState): void {
  writePrivateFile(home.stateFile, stateText(state), 0o644);
}

/** The state file's text: one JSON line. */
function stateText(state: RuntimeState): string {
  return `${JSON.stringify(state)}\n`;
}

/**
 * The live state written off the event loop while attempts run (a write that waits on the disk must not
 * stall them: bench/HISTORY.md): one write at a time; a newer state arriving meanwhile replaces any
 * older one still waiting. `close` takes no more and resolves once nothing is being written (before the
 * final, synchronous write). `failed` is told of each write that failed.
 */
export class StateWriter {
  private next: string | undefined;
  private writing: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly home: ProviderHome,
    private readonly failed: () => void,
  ) {}

  write(state: RuntimeState): void {
    if (this.closed) return;
    this.next = stateText(state);
    this.writing ??= this.drain();
  }

  /** Resolves once nothing is being written (later writes are still taken). */
  async settled(): Promise<void> {
    while (this.writing) await this.writing;
  }

  /** Takes no more writes; resolves once the last one has landed. */
  close(): Promise<void> {
    this.closed = true;
    return this.settled();
  }

  private async drain(): Promise<void> {
    for (let text = this.next; text !== undefined; text = this.next) {
      this.next = undefined;
      try {
        await writePrivateFileOffLoop(this.home.stateFile, text, 0o644);
      } catch {
        this.failed();
      }
    }
    this.writing = undefined;
  }
}

/** The last state written, or undefined when there is none (or it is unreadable). */
export function readState(home: ProviderHome): RuntimeState | undefined {
  try {
    const value = JSON.parse(readFileSync(home.stateFile, "utf8")) as RuntimeState;
    return typeof value === "object" && value !== null && typeof value.phase === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}

/** Tokens per second over a sliding window, from the running total sampled once a second. */
export class TokenRate {
  private readonly samples: { at: number; total: number }[] = [];

  constructor(private readonly windowMs = 10_000) {}

  sample(at: number, total: number): number {
    this.samples.push({ at, total });
    while (this.samples.length > 1 && at - (this.samples[0] as { at: number }).at > this.windowMs) this.samples.shift();
    const first = this.samples[0] as { at: number; total: number };
    const seconds = (at - first.at) / 1000;
    return seconds > 0 ? Math.round(((total - first.total) / seconds) * 10) / 10 : 0;
  }
}

const clock = (at: number) => new Date(at).toLocaleString(undefined, { weekday: "short", hour: "2-digit", minute: "2-digit" });

/** The one-line summary of the status line (and of `status`). */
export function describeState(s: RuntimeState): string {
  if (s.phase === "waiting") {
    const next = s.schedule.next_change_at === null ? "" : `, next window ${clock(s.schedule.next_change_at)}`;
    return `umbra-provider waiting (outside the schedule${next}) · served ${s.requests_served} requests, ${s.tokens_served} tokens`;
  }
  const where = s.connected
    ? `${s.phase} as ${s.provider_id ?? "?"} (trust ${s.trust_level ?? "?"})`
    : s.coordinator_refused !== undefined
      ? `${s.phase} (coordinator refused: ${printable(s.coordinator_refused).slice(0, 160)})`
      : s.phase;
  const models = s.models.length === 1 ? (s.models[0] ?? "") : `${s.models.length} models`;
  return `umbra-provider ${where} · ${models} · active ${s.active}/${s.max_concurrency} · served ${s.requests_served} requests, ${s.tokens_served} tokens · ${s.tokens_per_second} tok/s`;
}

/** Printable: control and format characters from the wire become "?". */
const printable = (text: string) => text.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, "?");

/** One line for the operator about a served id the coordinator routes nothing to (welcome.model_warnings). */
export function describeModelWarning(w: ModelWarning): string {
  const model = printable(w.model);
  if (w.reason === "alias" && w.build_id !== undefined) {
    return `${model} is an alias; serve its build ${printable(w.build_id)} (requests are routed by build: this id gets none)`;
  }
  if (w.reason === "not_in_catalog") {
    return `${model} is not a build in the coordinator's catalog: it gets no requests (check the id; umbra-provider doctor lists the builds)`;
  }
  return `${model}: the coordinator routes no requests to it (${printable(w.reason)})`;
}
