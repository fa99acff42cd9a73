/**
 * The foreground life of `umbra-provider start` (start.ts wires it): serves window after window of the
 * schedule (a fresh agent per window, drained when the window closes, then waits for the next), keeps the
 * state file and the status line current (on changes, at most every 200 ms, and every second), prints the
 * coordinator's model warnings once per change, and handles signals: the first drains, a second stops at
 * once. `run()` resolves with the exit code: 0 drained after a signal; 1 refused (device token, protocol
 * version) or stopped by a second signal. Totals carry over from one window's agent to the next.
 */
import { cpus, totalmem } from "node:os";
import type { Logger, LogSink } from "../observability/logger.ts";
import type { Hello } from "../protocol/frames.ts";
import { VERSION } from "../version.ts";
import { type Agent, type AgentOptions, startAgent } from "./agent.ts";
import type { AgentExit } from "./agent-state.ts";
import { coordinatorBaseOf, type ProviderConfig } from "./config.ts";
import type { Attestation, Pin } from "./dev-attestation.ts";
import type { Engine } from "./engines/engine.ts";
import type { ProviderHome } from "./home.ts";
import { describeModelWarning, describeState, type RuntimeState, StateWriter, TokenRate, writeState } from "./runtime.ts";
import type { Schedule } from "./schedule.ts";

/** The state file is rewritten at most this often on changes, and every second regardless. */
const STATE_MIN_INTERVAL_MS = 200;
/** Outside the schedule, the clock is re-read at least this often (clock changes, sleep). */
const SCHEDULE_RECHECK_MS = 60_000;

const printErr = (text: string) => process.stderr.write(`${text}\n`);

/** A one-line status redrawn in place on a terminal; log lines print above it. */
export interface StatusLine {
  readonly sink: LogSink;
  readonly update: (text: string) => void;
  readonly end: () => void;
}

export function statusLine(): StatusLine {
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

export interface RuntimeParts {
  readonly config: ProviderConfig;
  readonly home: ProviderHome;
  readonly schedule: Schedule;
  /** Started by --detach: the state file names the log file. */
  readonly detached: boolean;
  readonly logger: Logger;
  readonly engine: Engine;
  /** The terminal's status line; undefined when stderr is not a terminal or detached. */
  readonly line: StatusLine | undefined;
  /** --coordinator-image: run before every dial. */
  readonly pin: Pin | undefined;
  /** --dev-attestation: evidence and challenge answers. */
  readonly attestation: Attestation | undefined;
}

function detectHardware(): Hello["hardware"] {
  const chip = cpus()[0]?.model.trim().slice(0, 128);
  return { ...(chip ? { chip } : {}), memory_gb: Math.round(totalmem() / 2 ** 30) };
}

export class ProviderRuntime {
  private readonly startedAt = Date.now();
  private readonly coordinator: string;
  private readonly rate = new TokenRate();
  private tokensPerSecond = 0;
  private lastChallenge: RuntimeState["last_challenge"] = null;
  /** The agent of the open window; undefined between windows. */
  private agent: Agent | undefined;
  private waiting = false;
  /** Totals of the agents of earlier windows. */
  private carried = { requests: 0, tokens: 0 };
  private lastWrite = 0;
  /** The model warnings last printed. */
  private warned = "";
  private signals = 0;
  /** Ends the wait for the next window early (a signal). */
  private wake: (() => void) | undefined;

  /** The state file, written off the event loop while serving. */
  private readonly stateWriter: StateWriter;

  constructor(private readonly parts: RuntimeParts) {
    this.coordinator = coordinatorBaseOf(parts.config.connectUrl);
    this.stateWriter = new StateWriter(parts.home, () => parts.logger.warn("cannot write the state file", { reason: "io" }));
  }

  /** Serves within the schedule until a signal or a refusal; resolves with the exit code. */
  async run(): Promise<number> {
    const ticker = setInterval(() => this.tick(), 1000);
    process.on("SIGTERM", this.onSignal);
    process.on("SIGINT", this.onSignal);
    try {
      return await this.loop();
    } finally {
      clearInterval(ticker);
      process.off("SIGTERM", this.onSignal);
      process.off("SIGINT", this.onSignal);
      // The last write off the loop lands first (none after it): the final state is the one left in the file.
      await this.stateWriter.close();
      this.writeFinalState();
    }
  }

  private async loop(): Promise<number> {
    while (this.signals === 0) {
      const at = new Date();
      if (!this.parts.schedule.open(at)) {
        await this.waitForWindow(at);
        continue;
      }
      const exit = await this.serveWindow();
      if (exit.reason === "unauthorized" || exit.reason === "version") {
        printErr(`umbra-provider: ${exit.message}`);
        return 1;
      }
      if (exit.reason === "stopped") return 1;
    }
    return 0;
  }

  /** Outside the schedule: waits until the next window opens, the recheck interval passes or a signal. */
  private async waitForWindow(at: Date): Promise<void> {
    this.waiting = true;
    const next = this.parts.schedule.nextChange(at);
    this.parts.logger.info("outside the schedule: waiting for the next window", { reason: next ? next.toISOString() : "none" });
    this.publish(true);
    const ms = Math.min(SCHEDULE_RECHECK_MS, next ? Math.max(0, next.getTime() - Date.now()) : SCHEDULE_RECHECK_MS);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.wake = undefined;
  }

  /** Runs a fresh agent until it stops; the window's end drains it. */
  private async serveWindow(): Promise<AgentExit> {
    this.waiting = false;
    const agent = startAgent(this.agentOptions());
    this.agent = agent;
    this.publish(true);
    const closes = this.parts.schedule.nextChange(new Date());
    const closeTimer = closes
      ? setTimeout(
          () => {
            this.parts.logger.info("schedule window closed: draining");
            void agent.drain();
          },
          Math.max(0, closes.getTime() - Date.now()),
        )
      : undefined;
    const exit = await agent.done;
    clearTimeout(closeTimer);
    const last = agent.state();
    this.carried = { requests: this.carried.requests + last.requestsServed, tokens: this.carried.tokens + last.tokensServed };
    this.agent = undefined;
    return exit;
  }

  private agentOptions(): AgentOptions {
    const { config, engine, logger, pin, attestation } = this.parts;
    return {
      ...(attestation
        ? {
            identity: attestation.identity,
            evidence: attestation.evidence,
            answerChallenge: async (challenge) => {
              try {
                const answer = await attestation.answerChallenge(challenge);
                this.lastChallenge = { at: Date.now(), answered: true };
                return answer;
              } catch (error) {
                this.lastChallenge = { at: Date.now(), answered: false };
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
      onChange: () => this.publish(false),
    };
  }

  private readonly onSignal = (): void => {
    this.signals++;
    if (this.signals === 1) {
      this.parts.logger.info("signal received: draining (send again to stop at once)");
      if (this.agent) void this.agent.drain();
    } else {
      this.parts.logger.warn("second signal: stopping at once");
      if (this.agent) void this.agent.stop();
    }
    this.wake?.();
  };

  /** Once a second: the token rate, and the state file rewritten. */
  private tick(): void {
    const s = this.snapshot();
    this.tokensPerSecond = this.rate.sample(Date.now(), s.tokens_served);
    this.publish(true);
  }

  private snapshot(): RuntimeState {
    const { config, engine, home, schedule, detached } = this.parts;
    const s = this.agent?.state();
    const at = new Date();
    const next = schedule.nextChange(at);
    return {
      version: VERSION,
      pid: process.pid,
      started_at: this.startedAt,
      updated_at: at.getTime(),
      coordinator: this.coordinator,
      phase: this.waiting ? "waiting" : (s?.phase ?? "connecting"),
      connected: !this.waiting && (s?.connected ?? false),
      provider_id: s?.providerId ?? null,
      trust_level: s?.trustLevel ?? null,
      models: config.models.map((m) => m.buildId),
      warm_models: [...engine.warmModels()],
      engine: config.engine,
      active: s?.active ?? 0,
      max_concurrency: config.maxConcurrency,
      requests_served: this.carried.requests + (s?.requestsServed ?? 0),
      tokens_served: this.carried.tokens + (s?.tokensServed ?? 0),
      tokens_per_second: this.tokensPerSecond,
      last_challenge: this.lastChallenge,
      schedule: { windows: config.schedule, open: schedule.open(at), next_change_at: next?.getTime() ?? null },
      detached,
      log_file: detached ? home.logFile : null,
      model_warnings: (s?.modelWarnings ?? []).map(describeModelWarning),
      ...(s?.refused !== undefined ? { coordinator_refused: s.refused } : {}),
    };
  }

  /** Writes the state file (off the event loop: StateWriter) and redraws the status line (on a change at most every 200 ms, unless forced). */
  private publish(force: boolean): void {
    const now = Date.now();
    if (!force && now - this.lastWrite < STATE_MIN_INTERVAL_MS) return;
    this.lastWrite = now;
    const state = this.snapshot();
    this.warn(state);
    this.stateWriter.write(state);
    this.parts.line?.update(describeState(state));
  }

  /** The coordinator's warnings about served ids (aliases, unknown builds), printed once per change. */
  private warn(state: RuntimeState): void {
    const text = (state.model_warnings ?? []).map((w) => `umbra-provider: warning: ${w}`).join("\n");
    if (!state.connected || text === this.warned) return;
    this.warned = text;
    const line = this.parts.line;
    if (text !== "") (line ? line.sink : printErr)(text);
  }

  private writeFinalState(): void {
    this.waiting = false;
    const final = { ...this.snapshot(), phase: "stopped", connected: false, active: 0 };
    try {
      writeState(this.parts.home, final);
    } catch {
      // Nothing to report to: the process is ending.
    }
    this.parts.line?.update(describeState(final));
    this.parts.line?.end();
  }
}
