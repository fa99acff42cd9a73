/**
 * One connection's session (the protocol: docs/protocol.md): the hello with a fresh X25519 key (and
 * evidence), the welcome (session keys set up, then the connection's private key wiped), heartbeats, and
 * the coordinator's frames: inference (refused here, or run by attempts.ts), challenge, cancel. A
 * malformed or out-of-order frame closes the connection with 1002 (agent-connection.ts dials again).
 */
import { fromBase64url, toBase64url } from "../crypto/encoding.ts";
import { generateX25519KeyPair } from "../crypto/seal.ts";
import { openRecipientSession, type SessionOpener } from "../crypto/session.ts";
import type { Logger } from "../observability/logger.ts";
import {
  CLOSE,
  type CoordinatorFrame,
  type Hello,
  type Inference,
  PROTOCOL_VERSION,
  type ProviderErrorCode,
  type ProviderFrame,
  type ProviderStatus,
  type SealedInference,
  type Welcome,
} from "../protocol/frames.ts";
import { ProtocolError, parseCoordinatorFrame } from "../protocol/parse.ts";
import { VERSION } from "../version.ts";
import type { AgentConnection, SendMode } from "./agent-connection.ts";
import type { AgentExit } from "./agent-state.ts";
import type { Attempts } from "./attempts.ts";
import type { Engine } from "./engines/engine.ts";
import type { ReceiptSigner } from "./sealed-attempt.ts";

export interface SessionOptions {
  readonly engine: Engine;
  readonly maxConcurrency: number;
  readonly hardware?: Hello["hardware"];
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
  /**
   * Offer session keys in the hello (one HPKE setup per connection instead of one per request;
   * src/crypto/session.ts). Default true; false makes the coordinator seal every request on its own.
   */
  readonly sessionKeys?: boolean;
  /**
   * Offer binary batches in the hello (sealed frames as bytes, src/protocol/binary.ts). Default true;
   * false keeps every message JSON.
   */
  readonly binaryFrames?: boolean;
}

/** What a session uses of the agent that owns it. */
export interface SessionHost {
  readonly options: SessionOptions;
  readonly logger: Logger;
  readonly attempts: Attempts;
  readonly connection: AgentConnection;
  /** True once drain() began: new attempts are refused and heartbeats say so. */
  readonly draining: () => boolean;
  /** Stops the agent for good (the welcome chose a protocol version this provider does not speak). */
  readonly finish: (exit: AgentExit, closeCode: number) => void;
  /** The welcome was accepted (a session more; the state changed). */
  readonly welcomed: () => void;
}

export class CoordinatorSession {
  private accepted: Welcome | undefined;
  /** How frames leave, set by the welcome: before it, one by one. */
  private mode: SendMode = "one";
  /** This connection's X25519 private key (sealed requests); wiped once the session keys are set up. */
  private privateKey: Uint8Array | undefined;
  /** This connection's session keys, once the welcome set them up (pending while the setup runs). */
  private opener: Promise<SessionOpener> | undefined;
  /** The opener once set up (SealKeys.ready). */
  private ready: SessionOpener | undefined;
  private heartbeatTimer: ReturnType<typeof setInterval> | undefined;

  constructor(
    readonly ws: WebSocket,
    private readonly host: SessionHost,
  ) {}

  /** The welcome, once it arrived. */
  get welcome(): Welcome | undefined {
    return this.accepted;
  }

  /** Sends the hello, with a fresh X25519 key: requests are sealed to it, and it dies with the socket. */
  async hello(): Promise<void> {
    const { options, connection } = this.host;
    const keys = await generateX25519KeyPair();
    const evidence = options.evidence ? await options.evidence(keys.publicKey) : undefined;
    if (connection.current !== this.ws) return;
    this.privateKey = keys.privateKey;
    this.send({
      type: "hello",
      protocol_versions: [PROTOCOL_VERSION],
      provider_version: VERSION,
      engine: options.engine.name,
      ...(options.hardware ? { hardware: options.hardware } : {}),
      models: options.engine.models(),
      max_concurrency: options.maxConcurrency,
      encryption_key: toBase64url(keys.publicKey),
      ...(options.sessionKeys !== false ? { session_keys: true } : {}),
      ...(options.binaryFrames !== false ? { binary_frames: true } : {}),
      ...(evidence ? { evidence } : {}),
    });
  }

  /** The connection is gone: no more heartbeats. */
  end(): void {
    clearInterval(this.heartbeatTimer);
  }

  onMessage(data: unknown): void {
    const { logger, connection, attempts, options } = this.host;
    let frame: CoordinatorFrame;
    try {
      if (typeof data !== "string" && !(data instanceof ArrayBuffer) && !(data instanceof Uint8Array)) {
        throw new ProtocolError("unsupported frame payload");
      }
      frame = parseCoordinatorFrame(data);
      if (!this.accepted && frame.type !== "welcome") throw new ProtocolError(`expected welcome, got ${frame.type}`);
      if (this.accepted && frame.type === "welcome") throw new ProtocolError("second welcome");
    } catch (e) {
      const reason = e instanceof ProtocolError ? e.message : "unreadable frame";
      logger.warn("malformed coordinator frame", { reason });
      connection.drop(this.ws, CLOSE.protocolError, reason);
      return;
    }
    switch (frame.type) {
      case "welcome":
        this.onWelcome(frame);
        return;
      case "inference":
      case "sealed_inference":
        this.onInference(frame);
        return;
      case "challenge":
        if (options.answerChallenge) {
          const answering = options.answerChallenge;
          // A key that cannot sign leaves the challenge unanswered: the coordinator withdraws trust.
          void (async () => answering({ nonce: frame.nonce, timestamp: frame.timestamp }))().then(
            (answer) => this.send({ type: "challenge_response", payload: answer.payload, signature: answer.signature }),
            () => logger.warn("challenge not answered", { reason: "identity_key" }),
          );
        }
        return;
      case "cancel":
        if (attempts.cancel(frame.request_id, frame.attempt)) {
          logger.debug("attempt cancelled", { request_id: frame.request_id, attempt: frame.attempt, reason: frame.reason });
        }
        return;
    }
  }

  /** Sends the heartbeat (status, warm models, active attempts); nothing before the welcome. */
  heartbeat(): void {
    if (!this.accepted) return;
    const { attempts, options } = this.host;
    const status: ProviderStatus = this.host.draining() ? "draining" : attempts.size > 0 ? "serving" : "idle";
    this.send({
      type: "heartbeat",
      status,
      warm_models: [...options.engine.warmModels()],
      active: attempts.size,
      queued: 0,
    });
  }

  private send(frame: ProviderFrame): boolean {
    return this.host.connection.send(this.ws, frame, this.mode);
  }

  private onWelcome(welcome: Welcome): void {
    const { logger, connection, options } = this.host;
    if (welcome.protocol_version !== PROTOCOL_VERSION) {
      this.host.finish(
        {
          reason: "version",
          message: `the coordinator chose protocol version ${welcome.protocol_version}; this provider speaks ${PROTOCOL_VERSION}`,
        },
        CLOSE.version,
      );
      return;
    }
    connection.welcomed();
    this.accepted = welcome;
    // Binary only where the hello offered it and the welcome agreed.
    const binary = welcome.binary_frames === true && options.binaryFrames !== false;
    this.mode = binary ? "binary" : welcome.batch_frames === true ? "batch" : "one";
    if (welcome.session_enc !== undefined && options.sessionKeys !== false && this.privateKey !== undefined) {
      this.openSessionKeys(this.privateKey, welcome.session_enc, welcome.provider_id);
    }
    logger.info("connected to coordinator", { provider_id: welcome.provider_id, status: welcome.trust_level, version: VERSION });
    for (const w of welcome.model_warnings ?? []) {
      logger.warn("the coordinator routes no requests to this model", {
        model: w.model,
        reason: w.reason,
        ...(w.build_id !== undefined ? { build_id: w.build_id } : {}),
      });
    }
    this.heartbeat();
    this.heartbeatTimer = setInterval(() => this.heartbeat(), welcome.heartbeat_interval_ms);
    this.host.welcomed();
  }

  /** Sets up the session keys from the welcome's `enc`; a failure closes the connection with 1002. */
  private openSessionKeys(privateKey: Uint8Array, enc: string, providerId: string): void {
    // Any failure, a non-canonical `enc` included, rejects (never throws into the message handler).
    const opener = (async () =>
      openRecipientSession(privateKey, fromBase64url(enc, "session_enc"), { protocolVersion: PROTOCOL_VERSION, providerId }))();
    // Requests that arrive while the setup runs wait for it in order (attempts.ts).
    this.opener = opener;
    opener.then(
      (ready) => {
        if (this.opener === opener) this.ready = ready;
        // The session's chain is all this connection needs now: wipe the private key, so that this
        // process's memory cannot re-derive the keys of requests already opened (docs/security.md).
        privateKey.fill(0);
        if (this.privateKey === privateKey) this.privateKey = undefined;
      },
      () => {
        if (this.host.connection.current !== this.ws) return;
        this.host.logger.warn("malformed coordinator frame", { reason: "session key setup failed" });
        this.host.connection.drop(this.ws, CLOSE.protocolError, "session key setup failed");
      },
    );
  }

  private onInference(frame: Inference | SealedInference): void {
    const { logger, connection, attempts, options } = this.host;
    if (attempts.has(frame.request_id, frame.attempt)) {
      logger.warn("malformed coordinator frame", { reason: "duplicate attempt", request_id: frame.request_id });
      connection.drop(this.ws, CLOSE.protocolError, "duplicate attempt");
      return;
    }
    const refusal: [ProviderErrorCode, string] | undefined = this.host.draining()
      ? ["draining", "provider is draining"]
      : attempts.size >= options.maxConcurrency
        ? ["busy", "at max concurrency"]
        : !options.engine.models().some((m) => m.build_id === frame.model)
          ? ["model_not_loaded", "model not served by this provider"]
          : undefined;
    if (refusal) {
      const [code, message] = refusal;
      logger.debug("attempt refused", { request_id: frame.request_id, attempt: frame.attempt, error_code: code });
      this.send({ type: "error", request_id: frame.request_id, attempt: frame.attempt, code, message });
      return;
    }
    const send = (f: ProviderFrame) => this.send(f);
    if (frame.type === "inference") attempts.start(frame, send);
    else attempts.startSealed(frame, { privateKey: this.privateKey, session: this.opener, ready: this.ready }, send, options.identity);
  }
}
