/**
 * The provider agent: one outbound WebSocket to the coordinator, speaking protocol v2 (docs/protocol.md)
 * on behalf of an Engine. Usable in-process (the coordinator's `dev` command, tests) and by
 * `umbra-provider start`. The session (hello, welcome, heartbeats) is agent-session.ts; attempts
 * (refusals, seq, cancel, the first-content backstop) attempts.ts; close codes, backoff and reconnection
 * agent-connection.ts.
 *
 * Invariants: after a `cancel`, a lost connection, `stop()` or a terminal `error`, nothing more is sent
 * for the attempt and its engine call is aborted at once. Close 4001 (or an upgrade refused with
 * 401/403) and close 4002 stop the agent for good; `done` reports why. Content is never logged: only
 * ids, codes, counts and durations.
 */
import { type Logger, silentLogger } from "../observability/logger.ts";
import { CLOSE } from "../protocol/frames.ts";
import { AgentConnection, type ConnectionOptions } from "./agent-connection.ts";
import { CoordinatorSession, type SessionHost, type SessionOptions } from "./agent-session.ts";
import type { AgentExit, AgentPhase, AgentState } from "./agent-state.ts";
import { Attempts } from "./attempts.ts";

export interface AgentOptions extends ConnectionOptions, SessionOptions {
  /** Longest wait for active attempts in `drain()`; default 120 s. */
  readonly drainTimeoutMs?: number;
  readonly logger?: Logger;
  /**
   * Called after every state change (for a status line; twice per request); must not throw. It reads
   * `state()` when it needs the state: nothing is built for a change it skips.
   */
  readonly onChange?: () => void;
}

export interface Agent {
  /** A snapshot for a status line. */
  state(): AgentState;
  /** Stops taking work, waits for active attempts (bounded by the drain timeout), closes with 1000. */
  drain(): Promise<AgentExit>;
  /** Aborts every attempt and closes at once. */
  stop(): Promise<AgentExit>;
  /** Resolves once when the agent has stopped for good. */
  readonly done: Promise<AgentExit>;
}

const DRAINED = "drained and disconnected";

export function startAgent(options: AgentOptions): Agent {
  return new ProviderAgent(options);
}

class ProviderAgent implements Agent {
  readonly done: Promise<AgentExit>;
  private resolveDone!: (exit: AgentExit) => void;
  private readonly logger: Logger;
  private readonly attempts: Attempts;
  private readonly connection: AgentConnection;
  private readonly host: SessionHost;
  /** The session of the current connection, from its open to its loss. */
  private session: CoordinatorSession | undefined;
  private draining = false;
  private finished: AgentExit | undefined;
  private served = 0;
  private tokens = 0;
  private sessions = 0;

  constructor(private readonly options: AgentOptions) {
    this.done = new Promise((resolve) => {
      this.resolveDone = resolve;
    });
    this.logger = options.logger ?? silentLogger;
    this.attempts = new Attempts(options.engine, this.logger, {
      changed: () => this.changed(),
      completed: (usage) => {
        this.served++;
        this.tokens += usage.completion_tokens;
      },
    });
    this.connection = new AgentConnection(options, this.logger, {
      opened: (ws) => this.opened(ws),
      message: (ws, data) => {
        if (this.session?.ws === ws) this.session.onMessage(data);
      },
      lost: (code, reason) => this.lost(code, reason),
      mayDial: () => this.mayDial(),
      fatal: (exit) => this.finish(exit),
      changed: () => this.changed(),
    });
    this.host = {
      options,
      logger: this.logger,
      attempts: this.attempts,
      connection: this.connection,
      draining: () => this.draining,
      finish: (exit, closeCode) => this.finish(exit, closeCode),
      welcomed: () => {
        this.sessions++;
        this.changed();
      },
    };
    this.connection.connect();
  }

  state(): AgentState {
    const welcome = this.session?.welcome;
    const phase: AgentPhase = this.finished
      ? "stopped"
      : this.draining
        ? "draining"
        : welcome
          ? "connected"
          : this.sessions > 0 || this.connection.failures > 0
            ? "reconnecting"
            : "connecting";
    const refused = this.connection.refusal;
    return {
      phase,
      connected: welcome !== undefined,
      ...(welcome ? { providerId: welcome.provider_id, trustLevel: welcome.trust_level } : {}),
      models: this.options.engine.models().map((m) => m.build_id),
      active: this.attempts.size,
      maxConcurrency: this.options.maxConcurrency,
      requestsServed: this.served,
      tokensServed: this.tokens,
      sessions: this.sessions,
      ...(welcome?.model_warnings ? { modelWarnings: welcome.model_warnings } : {}),
      ...(refused !== undefined ? { refused } : {}),
    };
  }

  async drain(): Promise<AgentExit> {
    if (this.finished || this.draining) return this.done;
    this.draining = true;
    this.logger.info("provider draining", { count: this.attempts.size });
    this.session?.heartbeat();
    this.changed();
    const ws = this.connection.current;
    if (!ws || !this.session?.welcome) {
      this.finish({ reason: "drained", message: DRAINED });
      return this.done;
    }
    const timeoutMs = this.options.drainTimeoutMs ?? 120_000;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = await Promise.race([
      this.attempts.whenIdle().then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (this.finished) return this.done;
    if (timedOut) {
      this.logger.warn("drain timeout: ending active attempts", { count: this.attempts.size, duration_ms: timeoutMs });
      this.attempts.endAll("draining", "drain timeout reached");
    }
    await this.connection.closeGracefully(ws);
    this.finish({ reason: "drained", message: DRAINED });
    return this.done;
  }

  async stop(): Promise<AgentExit> {
    this.finish({ reason: "stopped", message: "stopped" }, CLOSE.goingAway);
    return this.done;
  }

  private opened(ws: WebSocket): void {
    const session = new CoordinatorSession(ws, this.host);
    this.session = session;
    void session.hello();
  }

  /** The current connection is gone: its attempts end; false when the agent stops instead of redialing. */
  private lost(code: number, reason: string): boolean {
    const wasWelcomed = this.session?.welcome !== undefined;
    this.session?.end();
    this.session = undefined;
    this.attempts.endAll();
    if (this.finished) return false;
    if (this.draining) {
      this.finish({ reason: "drained", message: DRAINED });
      return false;
    }
    // A lost session is news; another failed dial while the coordinator is away is not.
    if (wasWelcomed) this.logger.warn("disconnected from coordinator", { status: code, reason: reason.slice(0, 120) });
    else this.logger.debug("connection attempt failed", { status: code, reason: reason.slice(0, 120) });
    return true;
  }

  /** A pin passed: dial, unless a drain began meanwhile (then the agent is done). */
  private mayDial(): boolean {
    if (!this.draining) return true;
    this.finish({ reason: "drained", message: DRAINED });
    return false;
  }

  /** Stops for good: no reconnect, every attempt aborted, the socket (if any) closed with `closeCode`. */
  private finish(exit: AgentExit, closeCode: number = CLOSE.normal): void {
    if (this.finished) return;
    this.finished = exit;
    this.session?.end();
    this.attempts.endAll();
    // The attempts' last frames leave before the close.
    this.connection.stop(closeCode, exit.reason);
    this.session = undefined;
    if (exit.reason === "unauthorized" || exit.reason === "version") this.logger.error("provider agent stopped", { reason: exit.reason });
    else this.logger.info("provider agent stopped", { reason: exit.reason });
    this.changed();
    this.resolveDone(exit);
  }

  private changed(): void {
    if (!this.options.onChange) return;
    try {
      this.options.onChange();
    } catch {
      // a status line must not break the agent
    }
  }
}
