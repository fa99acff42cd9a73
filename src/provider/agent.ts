/**
 * The provider agent: one outbound WebSocket to the coordinator, speaking protocol v2 (docs/protocol.md)
 * on behalf of an Engine. Usable in-process (the coordinator's `dev` command, tests) and by
 * `umbra-provider start`.
 *
 * Session: connect (bearer = device token) -> send `hello` -> wait for `welcome` (else close 4008 and
 * retry) -> `heartbeat` at once and every `heartbeat_interval_ms` -> serve `inference` / `cancel`.
 * Attempt: refuse with `error` (draining, busy at max concurrency, model_not_loaded), or send
 * `accepted`, then `chunk` and `tool_call` frames (one seq: 0, 1, 2, ...) and `complete` (seq = those
 * frames sent), or one `error`.
 * After a `cancel`, a lost connection, `stop()`, or a terminal `error`, nothing more is sent for the
 * attempt and its engine call is aborted at once. No first content within `first_content_deadline_ms`
 * -> `error` timeout (a backstop; the coordinator normally cancels first). Attempt execution lives in
 * attempts.ts; this file owns the connection, the session state and the refusals.
 * Failures: a malformed or out-of-order coordinator frame closes with 1002 and reconnects; any other
 * drop reconnects after a backoff (250 ms doubling to 30 s, jittered, reset by a welcome). A refused
 * session (close 4029 or an upgrade refused with 429: too many sessions; close 4003: evidence earned no
 * trust) is logged as a warning and retried after the longest backoff. Close 4001 (or an upgrade refused
 * with 401/403) and close 4002 stop the agent for good; `done` reports why.
 * Content is never logged: only ids, codes, counts and durations.
 */
import { fromBase64url, toBase64url } from "../crypto/encoding.ts";
import { generateX25519KeyPair } from "../crypto/seal.ts";
import { openRecipientSession, type SessionOpener } from "../crypto/session.ts";
import { type Logger, silentLogger } from "../observability/logger.ts";
import {
  CLOSE,
  type CoordinatorFrame,
  encode,
  encodeBatch,
  type Hello,
  type Inference,
  MAX_BATCH_CHARS,
  type ModelWarning,
  PROTOCOL_VERSION,
  type ProviderErrorCode,
  type ProviderFrame,
  type ProviderStatus,
  type SealedInference,
  type Welcome,
} from "../protocol/frames.ts";
import { ProtocolError, parseCoordinatorFrame } from "../protocol/parse.ts";
import { VERSION } from "../version.ts";
import { Attempts, type ReceiptSigner } from "./attempts.ts";
import { CoordinatorRefused, type PinnedCoordinator, type PinnedTls } from "./coordinator-pin.ts";
import type { Engine } from "./engines/engine.ts";

export interface AgentOptions {
  /** `ws(s)://.../v1/provider/connect`. */
  readonly url: string;
  readonly token: string;
  readonly engine: Engine;
  readonly maxConcurrency: number;
  /** Longest wait for active attempts in `drain()`; default 120 s. */
  readonly drainTimeoutMs?: number;
  readonly hardware?: Hello["hardware"];
  readonly logger?: Logger;
  /** Reconnect backoff: first delay and ceiling, in ms (default 250 and 30000). */
  readonly backoff?: { readonly initialMs?: number; readonly maxMs?: number };
  /** Jitter source in [0, 1); the delay is scaled by 0.5 + 0.5 * random(). */
  readonly random?: () => number;
  /** Close and retry when no welcome arrives within this many ms of dialing; default 15 s. */
  readonly welcomeTimeoutMs?: number;
  /**
   * Attestation evidence for a connection's encryption key (attestation/: signed by the machine's
   * identity key, with its device chain); called once per connection. Without it the provider earns
   * trust level `none`.
   */
  readonly evidence?: (encryptionKey: Uint8Array) => Promise<Readonly<Record<string, unknown>>>;
  /** The identity key that signed the evidence: signs a receipt for every sealed answer. */
  readonly identity?: ReceiptSigner;
  /**
   * Answers a coordinator challenge (attestation/: the identity key's signature over the nonce, the
   * timestamp and the current posture); `{payload, signature}` goes back as `challenge_response`.
   */
  readonly answerChallenge?: (challenge: {
    nonce: string;
    timestamp: number;
  }) => { payload: string; signature: string } | Promise<{ payload: string; signature: string }>;
  /** Called after every state change (for a status line); must not throw. */
  readonly onChange?: (state: AgentState) => void;
  /**
   * Called before each dial: verifies the coordinator's attestation and returns the TLS options that pin
   * its attested key (coordinator-pin.ts). A CoordinatorRefused is logged as an error and retried after
   * the longest backoff; nothing is sent to a coordinator that failed it.
   */
  readonly pin?: () => Promise<PinnedCoordinator>;
  /**
   * Offer session keys in the hello (one HPKE setup per connection instead of one per request;
   * src/crypto/session.ts). Default true; false makes the coordinator seal every request on its own.
   */
  readonly sessionKeys?: boolean;
}

export type AgentPhase = "connecting" | "connected" | "reconnecting" | "draining" | "stopped";

export interface AgentState {
  readonly phase: AgentPhase;
  readonly connected: boolean;
  readonly providerId?: string;
  readonly trustLevel?: string;
  readonly models: readonly string[];
  readonly active: number;
  readonly maxConcurrency: number;
  readonly requestsServed: number;
  readonly tokensServed: number;
  /** Welcomes received since start (1 after the first connection). */
  readonly sessions: number;
  /** The current welcome's `model_warnings`: served ids the coordinator routes nothing to (aliases, unknown). */
  readonly modelWarnings?: readonly ModelWarning[];
  /** Why the coordinator is refused (its attestation failed a check; --coordinator-image); absent once connected. */
  readonly refused?: string;
}

export type AgentExitReason = "stopped" | "drained" | "unauthorized" | "version";

export interface AgentExit {
  readonly reason: AgentExitReason;
  /** A sentence for the operator; never content. */
  readonly message: string;
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

/** How long `drain()` waits for the coordinator to acknowledge its close before giving up on it. */
const CLOSE_GRACE_MS = 2_000;
const DRAINED = "drained and disconnected";

export function startAgent(options: AgentOptions): Agent {
  return new ProviderAgent(options);
}

class ProviderAgent implements Agent {
  readonly done: Promise<AgentExit>;
  private resolveDone!: (exit: AgentExit) => void;
  private readonly logger: Logger;
  private readonly initialBackoff: number;
  private readonly maxBackoff: number;
  private readonly random: () => number;
  private readonly attempts: Attempts;

  private ws: WebSocket | undefined;
  /** This connection's X25519 private key (sealed requests); wiped once the session keys are set up. */
  private privateKey: Uint8Array | undefined;
  /** This connection's session keys, once the welcome set them up (pending while the setup runs). */
  private session: Promise<SessionOpener> | undefined;
  private welcome: Welcome | undefined;
  private upgradeStatus: number | undefined;
  private heartbeatTimer: ReturnType<typeof setInterval> | undefined;
  private welcomeTimer: ReturnType<typeof setTimeout> | undefined;
  private reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  private failures = 0;
  private draining = false;
  private finished: AgentExit | undefined;
  private closeWaiter: (() => void) | undefined;
  /** Frames of this event-loop turn waiting to leave as one message, and the connection they are for. */
  private outbox: string[] = [];
  private outboxChars = 0;
  private outboxWs: WebSocket | undefined;
  private flushScheduled = false;
  private served = 0;
  private tokens = 0;
  private sessions = 0;
  /** The attested TLS key of the last verified attestation (logged when it changes). */
  private pinnedKey: string | undefined;
  /** Why the coordinator was last refused (its attestation failed a check); cleared by a welcome. */
  private refusal: string | undefined;
  /** A failed TLS handshake was explained once already (cleared by a welcome). */
  private tlsWarned = false;

  constructor(private readonly options: AgentOptions) {
    this.done = new Promise((resolve) => {
      this.resolveDone = resolve;
    });
    this.logger = options.logger ?? silentLogger;
    this.initialBackoff = options.backoff?.initialMs ?? 250;
    this.maxBackoff = options.backoff?.maxMs ?? 30_000;
    this.random = options.random ?? Math.random;
    this.attempts = new Attempts(options.engine, this.logger, {
      changed: () => this.changed(),
      completed: (usage) => {
        this.served++;
        this.tokens += usage.completion_tokens;
      },
    });
    this.connect();
  }

  state(): AgentState {
    const phase: AgentPhase = this.finished
      ? "stopped"
      : this.draining
        ? "draining"
        : this.welcome
          ? "connected"
          : this.sessions > 0 || this.failures > 0
            ? "reconnecting"
            : "connecting";
    return {
      phase,
      connected: this.welcome !== undefined,
      ...(this.welcome ? { providerId: this.welcome.provider_id, trustLevel: this.welcome.trust_level } : {}),
      models: this.options.engine.models().map((m) => m.build_id),
      active: this.attempts.size,
      maxConcurrency: this.options.maxConcurrency,
      requestsServed: this.served,
      tokensServed: this.tokens,
      sessions: this.sessions,
      ...(this.welcome?.model_warnings ? { modelWarnings: this.welcome.model_warnings } : {}),
      ...(this.refusal !== undefined ? { refused: this.refusal } : {}),
    };
  }

  async drain(): Promise<AgentExit> {
    if (this.finished || this.draining) return this.done;
    this.draining = true;
    this.logger.info("provider draining", { count: this.attempts.size });
    this.sendHeartbeat();
    this.changed();
    const ws = this.ws;
    if (!ws || !this.welcome) {
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
    if (this.ws === ws && ws.readyState === WebSocket.OPEN) {
      const closed = new Promise<void>((resolve) => {
        this.closeWaiter = resolve;
      });
      this.flushOutbox(ws);
      ws.close(CLOSE.normal, "drained");
      const grace = setTimeout(() => this.closeWaiter?.(), CLOSE_GRACE_MS);
      await closed;
      clearTimeout(grace);
    }
    this.finish({ reason: "drained", message: DRAINED });
    return this.done;
  }

  async stop(): Promise<AgentExit> {
    this.finish({ reason: "stopped", message: "stopped" }, CLOSE.goingAway);
    return this.done;
  }

  // --- connection -------------------------------------------------------------------------------------

  private connect(): void {
    if (this.finished) return;
    this.reconnectTimer = undefined;
    this.upgradeStatus = undefined;
    const pin = this.options.pin;
    if (pin === undefined) {
      this.dial(undefined);
      return;
    }
    pin().then(
      (pinned) => {
        if (this.finished) return;
        if (this.draining) {
          this.finish({ reason: "drained", message: DRAINED });
          return;
        }
        if (this.pinnedKey !== pinned.keySha256) {
          this.pinnedKey = pinned.keySha256;
          this.logger.info("coordinator attestation verified; TLS key pinned", {
            shape: pinned.shape ?? undefined,
            tls_spki_sha256: pinned.keySha256,
            mode: pinned.development ? "development evidence" : undefined,
          });
        }
        this.dial(pinned.tls);
      },
      (error: unknown) => {
        if (this.finished) return;
        if (this.draining) {
          this.finish({ reason: "drained", message: DRAINED });
          return;
        }
        if (error instanceof CoordinatorRefused) {
          this.refusal = error.message;
          this.logger.error("refusing the coordinator: its attestation failed a check; retrying later", {
            check: error.check,
            reason: error.message,
          });
          this.retry(this.maxBackoff);
        } else {
          this.logger.debug("cannot fetch the coordinator's attestation", { reason: String((error as Error)?.message ?? error) });
          this.retry(this.nextBackoff());
        }
      },
    );
  }

  private dial(tls: PinnedTls | undefined): void {
    const ws = new WebSocket(this.options.url, {
      headers: { authorization: `Bearer ${this.options.token}` },
      ...(tls !== undefined ? { tls } : {}),
    });
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    this.welcomeTimer = setTimeout(() => {
      if (this.ws === ws && !this.welcome) this.drop(ws, CLOSE.timeout, "no welcome in time");
    }, this.options.welcomeTimeoutMs ?? 15_000);
    ws.onopen = async () => {
      if (this.ws !== ws) return;
      // A fresh X25519 key for every connection: requests are sealed to it, and it dies with the socket.
      const keys = await generateX25519KeyPair();
      const evidence = this.options.evidence ? await this.options.evidence(keys.publicKey) : undefined;
      if (this.ws !== ws) return;
      this.privateKey = keys.privateKey;
      this.session = undefined;
      const models = this.options.engine.models();
      this.send(ws, {
        type: "hello",
        protocol_versions: [PROTOCOL_VERSION],
        provider_version: VERSION,
        engine: this.options.engine.name,
        ...(this.options.hardware ? { hardware: this.options.hardware } : {}),
        models,
        max_concurrency: this.options.maxConcurrency,
        encryption_key: toBase64url(keys.publicKey),
        ...(this.options.sessionKeys !== false ? { session_keys: true } : {}),
        ...(evidence ? { evidence } : {}),
      });
    };
    ws.onmessage = (event: MessageEvent) => {
      const data: unknown = event.data;
      this.onMessage(ws, data);
    };
    ws.onerror = (event: Event) => {
      // A refused upgrade surfaces only as an error message ("Expected 101 status code: 401").
      const message = event instanceof ErrorEvent ? event.message : "";
      const status = /\b101 status code:? (\d{3})/.exec(message)?.[1];
      if (status !== undefined) this.upgradeStatus = Number(status);
      if (/TLS handshake failed|certificate/i.test(message) && !this.tlsWarned) {
        this.tlsWarned = true;
        const hint = this.options.pin
          ? "the coordinator's key is not the one its attestation bound (restarted?); the next dial verifies again"
          : "a coordinator with a self-signed certificate is trusted through its attestation: give --coordinator-image with the image's measurements.json";
        this.logger.warn(`TLS with the coordinator failed: ${hint}`, { reason: message });
      }
    };
    ws.onclose = (event: CloseEvent) => this.onClosed(ws, event.code, event.reason);
  }

  /** Closes `ws` from our side and handles the loss at once (without waiting for the close handshake). */
  private drop(ws: WebSocket, code: number, reason: string): void {
    this.flushOutbox(ws);
    try {
      ws.close(code, reason.slice(0, 120));
    } catch {
      // already closing
    }
    this.onClosed(ws, code, reason);
  }

  private onClosed(ws: WebSocket, code: number, reason: string): void {
    if (this.closeWaiter && this.ws === ws) {
      const resolve = this.closeWaiter;
      this.closeWaiter = undefined;
      resolve();
    }
    if (this.ws !== ws) return;
    this.ws = undefined;
    const wasWelcomed = this.welcome !== undefined;
    this.welcome = undefined;
    this.session = undefined;
    clearTimeout(this.welcomeTimer);
    clearInterval(this.heartbeatTimer);
    this.attempts.endAll();
    if (this.finished) return;
    if (this.draining) {
      this.finish({ reason: "drained", message: DRAINED });
      return;
    }
    // A lost session is news; another failed dial while the coordinator is away is not.
    if (wasWelcomed) this.logger.warn("disconnected from coordinator", { status: code, reason: reason.slice(0, 120) });
    else this.logger.debug("connection attempt failed", { status: code, reason: reason.slice(0, 120) });

    if (code === CLOSE.unauthorized || this.upgradeStatus === 401 || this.upgradeStatus === 403) {
      this.finish({
        reason: "unauthorized",
        message: `the coordinator refused the device token (${code === CLOSE.unauthorized ? `close ${code}` : `HTTP ${this.upgradeStatus}`}); check --token`,
      });
      return;
    }
    if (code === CLOSE.version) {
      this.finish({
        reason: "version",
        message: `the coordinator does not speak protocol version ${PROTOCOL_VERSION} (close ${code}); upgrade umbra-provider`,
      });
      return;
    }
    // A refusal will not change within a few hundred milliseconds: wait the longest backoff at once.
    const refusal =
      code === CLOSE.tooManySessions || this.upgradeStatus === 429
        ? "the coordinator refused another session for this device token (too many open); retrying later"
        : code === CLOSE.untrusted
          ? "the coordinator admits attested providers only and refused this machine's evidence; retrying later"
          : undefined;
    const delay = this.retry(refusal ? this.maxBackoff : this.nextBackoff());
    if (refusal) this.logger.warn(refusal, { status: this.upgradeStatus ?? code, reason: reason.slice(0, 120), duration_ms: delay });
  }

  /** The next dial's backoff before jitter: doubling from the first, up to the ceiling. */
  private nextBackoff(): number {
    return Math.min(this.maxBackoff, this.initialBackoff * 2 ** Math.min(this.failures, 30));
  }

  /** Schedules the next dial after `base` ms (jittered); returns the delay. */
  private retry(base: number): number {
    const delay = Math.round(base * (0.5 + 0.5 * this.random()));
    this.failures++;
    if (this.failures === 1) this.logger.info("reconnecting", { duration_ms: delay, count: this.failures });
    else this.logger.debug("reconnecting", { duration_ms: delay, count: this.failures });
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
    this.changed();
    return delay;
  }

  /** Stops for good: no reconnect, every attempt aborted, the socket (if any) closed with `closeCode`. */
  private finish(exit: AgentExit, closeCode: number = CLOSE.normal): void {
    if (this.finished) return;
    this.finished = exit;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.welcomeTimer);
    clearInterval(this.heartbeatTimer);
    this.attempts.endAll();
    const ws = this.ws;
    // The attempts' last frames leave before the close.
    if (ws) this.flushOutbox(ws);
    this.ws = undefined;
    this.welcome = undefined;
    this.session = undefined;
    if (ws && (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING)) {
      try {
        ws.close(closeCode, exit.reason);
      } catch {
        // already closing
      }
    }
    if (exit.reason === "unauthorized" || exit.reason === "version") this.logger.error("provider agent stopped", { reason: exit.reason });
    else this.logger.info("provider agent stopped", { reason: exit.reason });
    this.changed();
    this.resolveDone(exit);
  }

  // --- frames -----------------------------------------------------------------------------------------

  /**
   * Sends a frame. To a coordinator whose welcome says `batch_frames`, the frames of one event-loop turn
   * leave as one message (a JSON array, in order): a WebSocket message costs a few microseconds on each
   * side whatever its size, and with many streams their tokens land in the same turns.
   */
  private send(ws: WebSocket, frame: ProviderFrame): boolean {
    if (this.ws !== ws || ws.readyState !== WebSocket.OPEN) return false;
    const text = encode(frame);
    if (!this.welcome?.batch_frames) {
      ws.send(text);
      return true;
    }
    if (this.outboxWs !== ws) {
      this.outbox = [];
      this.outboxChars = 0;
      this.outboxWs = ws;
    }
    if (this.outboxChars + text.length > MAX_BATCH_CHARS) this.flushOutbox(ws);
    this.outbox.push(text);
    this.outboxChars += text.length;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => {
        this.flushScheduled = false;
        if (this.outboxWs) this.flushOutbox(this.outboxWs);
      });
    }
    return true;
  }

  /** Sends what the outbox holds for `ws` as one message; drops it when `ws` is no longer ours. */
  private flushOutbox(ws: WebSocket): void {
    const frames = this.outbox;
    if (frames.length === 0 || this.outboxWs !== ws) return;
    this.outbox = [];
    this.outboxChars = 0;
    if (this.ws === ws && ws.readyState === WebSocket.OPEN) ws.send(encodeBatch(frames));
  }

  private onMessage(ws: WebSocket, data: unknown): void {
    if (this.ws !== ws) return;
    let frame: CoordinatorFrame;
    try {
      if (typeof data !== "string" && !(data instanceof ArrayBuffer) && !(data instanceof Uint8Array)) {
        throw new ProtocolError("unsupported frame payload");
      }
      frame = parseCoordinatorFrame(data);
      if (!this.welcome && frame.type !== "welcome") throw new ProtocolError(`expected welcome, got ${frame.type}`);
      if (this.welcome && frame.type === "welcome") throw new ProtocolError("second welcome");
    } catch (e) {
      const reason = e instanceof ProtocolError ? e.message : "unreadable frame";
      this.logger.warn("malformed coordinator frame", { reason });
      this.drop(ws, CLOSE.protocolError, reason);
      return;
    }
    switch (frame.type) {
      case "welcome":
        this.onWelcome(ws, frame);
        return;
      case "inference":
      case "sealed_inference":
        this.onInference(ws, frame);
        return;
      case "challenge":
        if (this.options.answerChallenge) {
          const answering = this.options.answerChallenge;
          // A key that cannot sign leaves the challenge unanswered: the coordinator withdraws trust.
          void (async () => answering({ nonce: frame.nonce, timestamp: frame.timestamp }))().then(
            (answer) => this.send(ws, { type: "challenge_response", payload: answer.payload, signature: answer.signature }),
            () => this.logger.warn("challenge not answered", { reason: "identity_key" }),
          );
        }
        return;
      case "cancel":
        if (this.attempts.cancel(frame.request_id, frame.attempt)) {
          this.logger.debug("attempt cancelled", { request_id: frame.request_id, attempt: frame.attempt, reason: frame.reason });
        }
        return;
    }
  }

  private onWelcome(ws: WebSocket, welcome: Welcome): void {
    if (welcome.protocol_version !== PROTOCOL_VERSION) {
      this.finish(
        {
          reason: "version",
          message: `the coordinator chose protocol version ${welcome.protocol_version}; this provider speaks ${PROTOCOL_VERSION}`,
        },
        CLOSE.version,
      );
      return;
    }
    clearTimeout(this.welcomeTimer);
    this.welcome = welcome;
    if (welcome.session_enc !== undefined && this.options.sessionKeys !== false && this.privateKey !== undefined) {
      const [privateKey, enc] = [this.privateKey, welcome.session_enc];
      // Any failure, a non-canonical `enc` included, rejects (never throws into the message handler).
      const session = (async () =>
        openRecipientSession(privateKey, fromBase64url(enc, "session_enc"), {
          protocolVersion: PROTOCOL_VERSION,
          providerId: welcome.provider_id,
        }))();
      // Requests that arrive while the setup runs wait for it in order (attempts.ts).
      this.session = session;
      session.then(
        () => {
          // The session's chain is all this connection needs now: wipe the private key, so that this
          // process's memory cannot re-derive the keys of requests already opened (docs/security.md).
          privateKey.fill(0);
          if (this.privateKey === privateKey) this.privateKey = undefined;
        },
        () => {
          if (this.ws !== ws) return;
          this.logger.warn("malformed coordinator frame", { reason: "session key setup failed" });
          this.drop(ws, CLOSE.protocolError, "session key setup failed");
        },
      );
    }
    this.failures = 0;
    this.refusal = undefined;
    this.tlsWarned = false;
    this.sessions++;
    this.logger.info("connected to coordinator", { provider_id: welcome.provider_id, status: welcome.trust_level, version: VERSION });
    for (const w of welcome.model_warnings ?? []) {
      this.logger.warn("the coordinator routes no requests to this model", {
        model: w.model,
        reason: w.reason,
        ...(w.build_id !== undefined ? { build_id: w.build_id } : {}),
      });
    }
    this.sendHeartbeat();
    this.heartbeatTimer = setInterval(() => this.sendHeartbeat(), welcome.heartbeat_interval_ms);
    this.changed();
  }

  private sendHeartbeat(): void {
    const ws = this.ws;
    if (!ws || !this.welcome) return;
    const status: ProviderStatus = this.draining ? "draining" : this.attempts.size > 0 ? "serving" : "idle";
    this.send(ws, {
      type: "heartbeat",
      status,
      warm_models: [...this.options.engine.warmModels()],
      active: this.attempts.size,
      queued: 0,
    });
  }

  private onInference(ws: WebSocket, frame: Inference | SealedInference): void {
    if (this.attempts.has(frame.request_id, frame.attempt)) {
      this.logger.warn("malformed coordinator frame", { reason: "duplicate attempt", request_id: frame.request_id });
      this.drop(ws, CLOSE.protocolError, "duplicate attempt");
      return;
    }
    const refusal: [ProviderErrorCode, string] | undefined = this.draining
      ? ["draining", "provider is draining"]
      : this.attempts.size >= this.options.maxConcurrency
        ? ["busy", "at max concurrency"]
        : !this.options.engine.models().some((m) => m.build_id === frame.model)
          ? ["model_not_loaded", "model not served by this provider"]
          : undefined;
    if (refusal) {
      const [code, message] = refusal;
      this.logger.debug("attempt refused", { request_id: frame.request_id, attempt: frame.attempt, error_code: code });
      this.send(ws, { type: "error", request_id: frame.request_id, attempt: frame.attempt, code, message });
      return;
    }
    const send = (f: ProviderFrame) => this.send(ws, f);
    if (frame.type === "inference") this.attempts.start(frame, send);
    else void this.attempts.startSealed(frame, { privateKey: this.privateKey, session: this.session }, send, this.options.identity);
  }

  private changed(): void {
    if (!this.options.onChange) return;
    try {
      this.options.onChange(this.state());
    } catch {
      // a status line must not break the agent
    }
  }
}
