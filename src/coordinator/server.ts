/**
 * The listening socket: Bun.serve around the app's HTTP handler, plus the provider WebSocket.
 * Port 0 picks a free port (tests). Chat requests opt out of the idle timeout: a quiet stream (a slow
 * model) must never be cut by the server; callers own cancellation (spec: Events).
 */
import { PROVIDER_CONNECT_PATH, providerSocket, type SocketData } from "../api/provider-socket.ts";
import { Errors } from "../errors/api-error.ts";
import type { App } from "./app.ts";

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

const CHAT_PATH = "/v1/chat/completions";

/** The path of a request URL without parsing the whole URL (hot path). */
function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  const q = url.indexOf("?", start);
  return q < 0 ? url.slice(start) : url.slice(start, q);
}

export function listen(app: App, host = app.config.host, port = app.config.port): RunningServer {
  const socket = providerSocket({ store: app.store, fleet: app.fleet, logger: app.logger });
  const server = Bun.serve<SocketData>({
    hostname: host,
    port,
    idleTimeout: 120,
    fetch: (request, srv) => {
      const path = pathOf(request.url);
      if (path === PROVIDER_CONNECT_PATH) return socket.upgrade(request, srv);
      if (path === CHAT_PATH) srv.timeout(request, 0);
      return app.http.handle(request, srv.requestIP(request)?.address);
    },
    websocket: socket.websocket,
    error: () =>
      new Response(JSON.stringify(Errors.internal().toEnvelope()), { status: 500, headers: { "content-type": "application/json" } }),
  });
  const shownHost = host.includes(":") ? `[${host}]` : host;
  return {
    url: `http://${shownHost}:${server.port}`,
    port: server.port ?? port,
    stop: () => server.stop(true),
  };
}
