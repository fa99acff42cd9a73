/** The listening socket: Bun.serve around the app's handler. Port 0 picks a free port (tests). */
import { Errors } from "../errors/api-error.ts";
import type { App } from "./app.ts";

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

export function listen(app: App, host = app.config.host, port = app.config.port): RunningServer {
  const server = Bun.serve({
    hostname: host,
    port,
    // Generous for ordinary requests; quiet streams opt out per request (see inference/).
    idleTimeout: 120,
    fetch: (request) => app.http.handle(request),
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
