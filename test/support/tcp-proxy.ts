/**
 * A TCP proxy on 127.0.0.1 port 0 in front of a real server, for tests of a dependency that stops
 * answering: `freeze()` silently drops every byte both ways on every connection (a black hole: sockets
 * stay open, nothing is answered); `cut()` closes every connection and closes each new one at once (a
 * server that is down); `thaw()` forwards again. Small payloads only (a partial write is not retried).
 * `await using` closes it and its connections.
 */
import type { Socket, TCPSocketListener } from "bun";

interface Link {
  upstream?: Socket<undefined>;
  early: Uint8Array[];
}

export interface TcpProxy extends AsyncDisposable {
  readonly port: number;
  freeze(): void;
  cut(): void;
  thaw(): void;
}

export function startTcpProxy(target: { readonly hostname: string; readonly port: number }): TcpProxy {
  let frozen = false;
  let down = false;
  const clients = new Set<Socket<Link>>();
  const server: TCPSocketListener<Link> = Bun.listen<Link>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(client) {
        client.data = { early: [] };
        if (down) {
          client.end();
          return;
        }
        clients.add(client);
        Bun.connect({
          hostname: target.hostname,
          port: target.port,
          socket: {
            data: (_upstream, chunk) => {
              if (!frozen) client.write(chunk);
            },
            close: () => {
              client.end();
            },
            error: () => {
              client.end();
            },
          },
        }).then(
          (upstream) => {
            client.data.upstream = upstream;
            for (const chunk of client.data.early.splice(0)) upstream.write(chunk);
          },
          () => client.end(),
        );
      },
      data(client, chunk) {
        if (frozen) return;
        if (client.data.upstream) client.data.upstream.write(chunk);
        else client.data.early.push(new Uint8Array(chunk));
      },
      close(client) {
        clients.delete(client);
        client.data.upstream?.end();
      },
    },
  });
  return {
    port: server.port,
    freeze: () => {
      frozen = true;
    },
    cut: () => {
      down = true;
      for (const c of clients) c.end();
    },
    thaw: () => {
      frozen = false;
      down = false;
    },
    [Symbol.asyncDispose]: async () => {
      for (const c of clients) c.end();
      server.stop(true);
    },
  };
}
