/**
 * A small fake coordinator for provider tests: Bun.serve on 127.0.0.1 port 0 speaking the coordinator
 * side of protocol v2 at /v1/provider/connect. It checks the bearer (a wrong one is upgraded and closed
 * with 4001, or refused with an HTTP status when `refuseUpgradeWith` is set), answers `hello` with
 * `welcome`, records every frame and close, and lets the test send any frame or raw text. Batches (a
 * JSON array of frames in one message) are accepted as the coordinator accepts them; whether the
 * agent may send them is the welcome's `batch_frames` (off unless the test sets it), and `messages`
 * counts how many frames each message carried (and whether it was a binary batch: only where the test's
 * welcome sets `binary_frames`). With `sessionKeys`, a hello offering session keys is
 * answered with `session_enc` and `sealers` holds each connection's session sealer (to craft requests).
 * Use with `await using`.
 */
import { fromBase64url, toBase64url } from "../../src/crypto/encoding.ts";
import { openSenderSession, type SessionSealer } from "../../src/crypto/session.ts";
import { parseProviderData } from "../../src/protocol/binary.ts";
import { CLOSE, type CoordinatorFrame, encode, PROTOCOL_VERSION, type ProviderFrame, type Welcome } from "../../src/protocol/frames.ts";
import { ProtocolError } from "../../src/protocol/parse.ts";

export const CONNECT_PATH = "/v1/provider/connect";

export interface FakeCoordinatorOptions {
  /** The device token accepted; default "device-token". */
  readonly token?: string;
  /** Fields merged into every welcome. */
  readonly welcome?: Partial<Omit<Welcome, "type">>;
  /** Answer a wrong token with this HTTP status instead of upgrading and closing with 4001. */
  readonly refuseUpgradeWith?: number;
  /** Close every connection with this code right after its hello instead of welcoming it. */
  readonly closeOnHello?: { readonly code: number; readonly reason: string };
  /** Answer a hello that offers session keys with `session_enc` (as the real coordinator does). */
  readonly sessionKeys?: boolean;
  /** Frames sent in the same turn as the welcome (a coordinator with requests already waiting for capacity). */
  readonly afterWelcome?: (conn: number, sealer: SessionSealer | undefined) => readonly CoordinatorFrame[];
}

export interface Received {
  /** 1-based number of the connection the frame arrived on. */
  readonly conn: number;
  readonly frame: ProviderFrame;
}

export interface Closed {
  readonly conn: number;
  readonly code: number;
  readonly reason: string;
}

interface ConnData {
  readonly conn: number;
  readonly authorized: boolean;
}

type Socket = Bun.ServerWebSocket<ConnData>;

export class FakeCoordinator implements AsyncDisposable {
  readonly frames: Received[] = [];
  readonly closes: Closed[] = [];
  /** Authorization headers of every upgrade request, in order. */
  readonly authorizations: (string | null)[] = [];
  /** Frames the fake could not parse (the provider broke the protocol). */
  readonly violations: string[] = [];
  /** Per message received, in order: how many frames it carried, and whether it was a batch (an array). */
  readonly messages: { readonly frames: number; readonly batch: boolean; readonly binary: boolean }[] = [];
  /** Per connection (sessionKeys): the sealer of the session the welcome set up. */
  readonly sealers = new Map<number, SessionSealer>();
  private server: ReturnType<typeof Bun.serve<ConnData>> | undefined;
  private sockets = new Map<number, Socket>();
  private connCount = 0;
  port = 0;

  constructor(private readonly options: FakeCoordinatorOptions = {}) {
    this.listen(0);
  }

  /** The coordinator's base URL (what `--coordinator` takes). */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The WebSocket URL the agent dials. */
  get connectUrl(): string {
    return `ws://127.0.0.1:${this.port}${CONNECT_PATH}`;
  }

  /** Upgrade requests seen so far (accepted or not). */
  get connections(): number {
    return this.connCount;
  }

  /** The number of the newest open connection, or 0. */
  get current(): number {
    return Math.max(0, ...this.sockets.keys());
  }

  private listen(port: number): void {
    const token = this.options.token ?? "device-token";
    this.server = Bun.serve<ConnData>({
      hostname: "127.0.0.1",
      port,
      fetch: (req, server) => {
        if (new URL(req.url).pathname !== CONNECT_PATH) return new Response("not found", { status: 404 });
        const authorization = req.headers.get("authorization");
        this.authorizations.push(authorization);
        const authorized = authorization === `Bearer ${token}`;
        this.connCount++;
        if (!authorized && this.options.refuseUpgradeWith !== undefined) {
          return new Response("unauthorized", { status: this.options.refuseUpgradeWith });
        }
        if (server.upgrade(req, { data: { conn: this.connCount, authorized } })) return undefined;
        return new Response("upgrade expected", { status: 400 });
      },
      websocket: {
        open: (ws) => {
          this.sockets.set(ws.data.conn, ws);
          if (!ws.data.authorized) ws.close(CLOSE.unauthorized, "invalid device token");
        },
        message: (ws, message) => {
          let frames: ProviderFrame[];
          try {
            // Bytes are a binary batch where the welcome agreed to them (as the coordinator reads them).
            frames = parseProviderData(message, this.options.welcome?.binary_frames === true);
          } catch (e) {
            this.violations.push(e instanceof ProtocolError ? e.message : String(e));
            ws.close(CLOSE.protocolError, "malformed frame");
            return;
          }
          const binary = typeof message !== "string";
          this.messages.push({ frames: frames.length, batch: binary || message.startsWith("["), binary });
          for (const frame of frames) this.frames.push({ conn: ws.data.conn, frame });
          const frame = frames[0] as ProviderFrame;
          if (frame.type !== "hello") return;
          if (this.options.closeOnHello) {
            ws.close(this.options.closeOnHello.code, this.options.closeOnHello.reason);
            return;
          }
          void this.welcome(ws, frame);
        },
        close: (ws, code, reason) => {
          this.sockets.delete(ws.data.conn);
          this.closes.push({ conn: ws.data.conn, code, reason });
        },
      },
    });
    this.port = this.server.port ?? 0;
  }

  private async welcome(ws: Socket, hello: Extract<ProviderFrame, { type: "hello" }>): Promise<void> {
    const providerId = `prov_test_${ws.data.conn}`;
    let sessionEnc: string | undefined;
    if (this.options.sessionKeys && hello.session_keys && hello.encryption_key) {
      const session = await openSenderSession(fromBase64url(hello.encryption_key), { protocolVersion: PROTOCOL_VERSION, providerId });
      this.sealers.set(ws.data.conn, session.sealer);
      sessionEnc = toBase64url(session.enc);
    }
    ws.send(
      encode({
        type: "welcome",
        protocol_version: PROTOCOL_VERSION,
        provider_id: providerId,
        trust_level: "none",
        heartbeat_interval_ms: 60_000,
        liveness_timeout_ms: 180_000,
        ...(sessionEnc !== undefined ? { session_enc: sessionEnc } : {}),
        ...this.options.welcome,
      }),
    );
    for (const frame of this.options.afterWelcome?.(ws.data.conn, this.sealers.get(ws.data.conn)) ?? []) ws.send(encode(frame));
  }

  /** Sends a frame (or raw text) on the newest open connection. */
  send(frame: CoordinatorFrame | string): void {
    const ws = this.sockets.get(this.current);
    if (!ws) throw new Error("no open provider connection");
    ws.send(typeof frame === "string" ? frame : encode(frame));
  }

  /** Closes the newest open connection from the coordinator side. */
  closeConnection(code: number, reason = ""): void {
    this.sockets.get(this.current)?.close(code, reason);
  }

  /** Frames of one type, in arrival order. */
  ofType<T extends ProviderFrame["type"]>(type: T): Extract<ProviderFrame, { type: T }>[] {
    return this.frames.map((r) => r.frame).filter((f): f is Extract<ProviderFrame, { type: T }> => f.type === type);
  }

  /** Attempt frames (accepted, chunk, complete, error) for one request, in arrival order. */
  framesFor(requestId: string): ProviderFrame[] {
    return this.frames.map((r) => r.frame).filter((f) => "request_id" in f && f.request_id === requestId);
  }

  /** Stops listening and drops every connection (as a crashed coordinator would). */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    await server?.stop(true);
  }

  /** Listens again on the same port. */
  restart(): void {
    if (this.server) throw new Error("already running");
    this.listen(this.port);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
