/**
 * The listening socket: Bun.serve around the app's HTTP handler, plus the provider WebSocket.
 * Port 0 picks a free port (tests). Chat requests opt out of the idle timeout once their body is in: a
 * quiet stream (a slow model) must never be cut by the server, callers own cancellation (spec: Events),
 * but a request whose body stalls is closed like any other idle connection.
 * A socket that cannot be bound (port in use, address not on this host) is a ListenError naming the
 * address; the CLI binds before it writes anything durable (the dev command's demo key).
 * With `tls` it serves https/wss with the given key and certificate (src/tls/). A renewable certificate
 * (ACME) is replaced by binding a second listener on the same port (SO_REUSEPORT) with the new one, then
 * closing the old listener: connections open on it (provider WebSockets, streams) finish there.
 * With --reuse-port the socket is bound with SO_REUSEPORT: several coordinators on one machine share the
 * port and the kernel spreads new connections among them; without it a busy port refuses the start.
 */

import { CHAT_PATH } from "../api/chat.ts";
import type { Connection } from "../api/connection.ts";
import { pathOf } from "../api/http.ts";
import { PROVIDER_CONNECT_PATH, providerSocket, type SocketData } from "../api/provider-socket.ts";
import { Errors } from "../errors/api-error.ts";
import type { App } from "./app.ts";

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  /**
   * Serves a new certificate (same key) to new connections. Only for a server started with a renewable
   * `tls` option; throws ListenError when the new listener cannot be bound (the old one keeps serving).
   */
  useCertificate(certPem: string): void;
  /**
   * Serves `next` from now on (the app built once provisioned secrets arrived). Requests under way finish
   * on the app they reached; the caller closes that one.
   */
  replaceApp(next: App): void;
  /**
   * Stops listening. With `graceMs`, connections whose answer is still being written get up to that
   * long to finish it; then every connection still open is closed.
   */
  stop(graceMs?: number): Promise<void>;
}

/** A request's connection as the app sees it, one object per request (no closure per hook): the peer's address. */
class AddressOnly implements Connection {
  constructor(
    protected readonly server: Bun.Server<SocketData>,
    protected readonly request: Request,
  ) {}

  address(): string | undefined {
    return this.server.requestIP(this.request)?.address;
  }
}

/**
 * The chat route's connection. A chat answer may wait for its provider longer than the idle timeout:
 * lifted once its body is in, restored once it ended (Bun keeps a connection's timeout for its next
 * requests too).
 */
class ServedConnection extends AddressOnly {
  constructor(
    server: Bun.Server<SocketData>,
    request: Request,
    private readonly idleTimeout: number,
  ) {
    super(server, request);
  }

  bodyRead(): void {
    this.server.timeout(this.request, 0);
  }

  answered(): void {
    this.server.timeout(this.request, this.idleTimeout);
  }
}

/**
 * The request as the app routes it. Elysia finds the path by skipping "http://" (src/api/http.ts), so an
 * https request is handed over with an http URL, and `x-forwarded-proto: https` says how it arrived (the
 * device page builds its links from it). Body and signal are the original's.
 */
function asRouted(request: Request): Request {
  const routed = new Request(`http${request.url.slice(5)}`, request);
  routed.headers.set("x-forwarded-proto", "https");
  return routed;
}

export interface ListenOptions {
  /** Seconds a connection may stay idle (Bun's `idleTimeout`, at most 255); tests shorten it. */
  readonly idleTimeoutSeconds?: number;
  /** Serve https with this key and certificate chain (PEM, memory only). */
  readonly tls?: { readonly keyPem: string; readonly certPem: string; readonly renewable: boolean };
}

const IDLE_TIMEOUT_SECONDS = 120;

/** The listening socket could not be bound; the message names the address (host:port) and why. */
export class ListenError extends Error {
  override readonly name = "ListenError";
}

const LISTEN_REASONS: Readonly<Record<string, string>> = {
  EADDRINUSE: "address already in use",
  EADDRNOTAVAIL: "address not available on this host",
  EACCES: "permission denied",
};

/** `host:port`, with an IPv6 host in brackets. */
function hostPort(host: string, port: number): string {
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

/** Bun.serve, its failure to bind turned into a ListenError. */
function bind<T>(host: string, port: number, options: Bun.Serve.Options<T>): Bun.Server<T> {
  try {
    return Bun.serve<T>(options);
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    const why = typeof code === "string" ? (LISTEN_REASONS[code] ?? code) : e instanceof Error ? e.message : String(e);
    throw new ListenError(`cannot listen on ${hostPort(host, port)}: ${why}`);
  }
}

export function listen(first: App, host = first.config.host, port = first.config.port, options: ListenOptions = {}): RunningServer {
  let app = first;
  const socketOf = (a: App) => providerSocket({ authenticate: a.authenticateProvider, fleet: a.fleet, logger: a.logger });
  let socket = socketOf(app);
  const idleTimeout = options.idleTimeoutSeconds ?? IDLE_TIMEOUT_SECONDS;
  const tls = options.tls;
  // A renewable certificate's next listener binds the same port beside the current one.
  const reusePort = first.config.reusePort || tls?.renewable === true;
  const serveOptions = (boundPort: number, certPem: string | undefined): Bun.Serve.Options<SocketData> => ({
    hostname: host,
    port: boundPort,
    idleTimeout,
    ...(tls && certPem !== undefined ? { tls: { key: tls.keyPem, cert: certPem } } : {}),
    ...(reusePort ? { reusePort: true } : {}),
    // Bun's own limit (128 MiB by default) answers 413 with an empty body, outside the error envelope.
    // Every route reads its body through readBody (src/api/body.ts) with its own bound, refusing a
    // declared length over it before reading and cancelling a stream that grows past it.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    fetch: (request, srv) => {
      const path = pathOf(request.url);
      if (path === PROVIDER_CONNECT_PATH) return app.http.gate(request) ?? socket.upgrade(request, srv);
      const routed = tls ? asRouted(request) : request;
      if (path === CHAT_PATH) return app.http.handle(routed, new ServedConnection(srv, request, idleTimeout));
      return app.http.handle(routed, new AddressOnly(srv, request));
    },
    // The current app's handlers (a replaced app took no provider: the gate refused them until then).
    websocket: {
      ...socket.websocket,
      open: (ws) => socket.websocket.open?.(ws),
      message: (ws, message) => socket.websocket.message?.(ws, message),
      close: (ws, code, reason) => socket.websocket.close?.(ws, code, reason),
    },
    // Only reached when the app's own error boundary failed: logged (class name only), answered 500.
    error: (error) => {
      app.logger.error("unhandled error", { error_name: error instanceof Error ? error.name : typeof error, route: "server" });
      return new Response(JSON.stringify(Errors.internal().toEnvelope()), { status: 500, headers: { "content-type": "application/json" } });
    },
  });
  let server = bind<SocketData>(host, port, serveOptions(port, tls?.certPem));
  const boundPort = server.port ?? port;
  // Listeners replaced by a renewal: closed to new connections, their open ones still served until stop.
  const retired: Bun.Server<SocketData>[] = [];
  return {
    url: `${tls ? "https" : "http"}://${hostPort(host, boundPort)}`,
    port: boundPort,
    replaceApp(next: App) {
      app = next;
      socket = socketOf(next);
    },
    useCertificate(certPem: string) {
      if (!tls?.renewable) throw new ListenError("this listener was not started with a renewable certificate");
      const next = bind<SocketData>(host, boundPort, serveOptions(boundPort, certPem));
      const old = server;
      server = next;
      retired.push(old);
      void old.stop(false);
    },
    async stop(graceMs = 0) {
      const all = [...retired, server];
      if (graceMs > 0) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const grace = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, graceMs);
        });
        await Promise.race([Promise.all(all.map((s) => s.stop(false))), grace]);
        clearTimeout(timer);
      }
      await Promise.all(all.map((s) => s.stop(true)));
    },
  };
}
