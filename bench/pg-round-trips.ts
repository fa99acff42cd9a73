/**
 * Diagnosis (not in `make bench`): the Postgres statements one chat request makes in cluster mode. A
 * replica (bench/lib/deployment.ts's set-up, one provider) reaches Postgres through a TCP proxy in this
 * process that reads the frontend protocol: each Sync (extended protocol) or Query (simple protocol) is
 * one statement sent, named by its SQL (Bind names the statement Parse defined on that connection).
 * Counted over `N` requests, `C` at a time (1), non-streaming then streaming, less what the replica sends on
 * its own (renewals, sweeps) over an idle window of the same length. Prints a table per case: statements
 * per request by SQL text (first 110 characters; parameters are not read, so no value is shown).
 * Usage: bun bench/pg-round-trips.ts   (N, 200; C, 1)
 */
import { startCoordinator, startProvider } from "../test/support/processes.ts";
import { benchDatabase, benchPrefix, missingServices, NATS_URL, PG_URL, REDIS_URL, removeKeys } from "./lib/cluster-services.ts";
import { BUILD, CREDIT, LIMITS } from "./lib/deployment.ts";
import { benchNumber } from "./lib/env.ts";

const N = benchNumber("N", 200);
const C = benchNumber("C", 1);
const missing = await missingServices();
if (missing.length > 0) {
  console.log(`skipped: no ${missing.join(", no ")} answers`);
  process.exit(0);
}

const counts = new Map<string, number>();
const SSL_REQUEST = 80877103;
/** The row counting Parse messages (statements parsed and planned by the server, not statements sent). */
const PARSE = "(Parse messages: statements the server parses)";

/** Reads one connection's frontend messages, counting each statement sent under its SQL. */
function frontendReader() {
  let buffer = new Uint8Array(0);
  let startup = true;
  const names = new Map<string, string>();
  let unnamed = "";
  let pending = "";
  const decoder = new TextDecoder();
  const cstring = (b: Uint8Array, at: number): [string, number] => {
    const end = b.indexOf(0, at);
    return [decoder.decode(b.subarray(at, end)), end + 1];
  };
  return (chunk: Uint8Array) => {
    const joined = new Uint8Array(buffer.length + chunk.length);
    joined.set(buffer);
    joined.set(chunk, buffer.length);
    buffer = joined;
    for (;;) {
      const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
      if (startup) {
        if (buffer.length < 8) return;
        const length = view.getInt32(0);
        if (buffer.length < length) return;
        startup = view.getInt32(4) === SSL_REQUEST;
        buffer = buffer.subarray(length);
        continue;
      }
      if (buffer.length < 5) return;
      const type = String.fromCharCode(buffer[0] as number);
      const length = view.getInt32(1);
      if (buffer.length < 1 + length) return;
      const body = buffer.subarray(5, 1 + length);
      if (type === "P") {
        const [name, at] = cstring(body, 0);
        const [query] = cstring(body, at);
        counts.set(PARSE, (counts.get(PARSE) ?? 0) + 1);
        if (name === "") unnamed = query;
        else names.set(name, query);
      } else if (type === "B") {
        const [, at] = cstring(body, 0);
        const [statement] = cstring(body, at);
        pending = statement === "" ? unnamed : (names.get(statement) ?? `(statement ${statement})`);
      } else if (type === "S") {
        if (pending !== "") counts.set(pending, (counts.get(pending) ?? 0) + 1);
        pending = "";
      } else if (type === "Q") {
        const [query] = cstring(body, 0);
        counts.set(query, (counts.get(query) ?? 0) + 1);
      }
      buffer = buffer.subarray(1 + length);
    }
  };
}

const target = new URL(PG_URL);
type Sock = import("bun").Socket<Link>;
/** Writes all of `bytes` in order: what the socket does not take now waits for its drain. */
class Writer {
  private pending: Uint8Array[] = [];
  socket?: { write(b: Uint8Array): number };
  write(bytes: Uint8Array) {
    this.pending.push(new Uint8Array(bytes));
    this.drain();
  }
  drain() {
    while (this.socket && this.pending.length > 0) {
      const head = this.pending[0] as Uint8Array;
      const n = this.socket.write(head);
      if (n < head.length) {
        this.pending[0] = head.subarray(Math.max(0, n));
        return;
      }
      this.pending.shift();
    }
  }
}
interface Link {
  toServer: Writer;
  toClient: Writer;
  read: (c: Uint8Array) => void;
  upstream?: { end(): void };
}
const proxy = Bun.listen<Link>({
  hostname: "127.0.0.1",
  port: 0,
  socket: {
    open(client: Sock) {
      const link: Link = { toServer: new Writer(), toClient: new Writer(), read: frontendReader() };
      link.toClient.socket = client;
      client.data = link;
      void Bun.connect({
        hostname: target.hostname,
        port: Number(target.port || 5432),
        socket: {
          open(upstream) {
            link.upstream = upstream;
            link.toServer.socket = upstream;
            link.toServer.drain();
          },
          data(_, chunk) {
            link.toClient.write(chunk);
          },
          drain() {
            link.toServer.drain();
          },
          close() {
            client.end();
          },
        },
      });
    },
    data(client: Sock, chunk) {
      client.data.read(chunk);
      client.data.toServer.write(chunk);
    },
    drain(client: Sock) {
      client.data.toClient.drain();
    },
    close(client: Sock) {
      client.data.upstream?.end();
    },
  },
});

await using database = await benchDatabase();
const prefix = benchPrefix();
const url = new URL(database.url);
url.port = String(proxy.port);
await using coordinator = await startCoordinator(
  { UMBRA_METERING: "on", UMBRA_REDIS_URL: REDIS_URL, UMBRA_NATS_URL: NATS_URL, UMBRA_CLUSTER_PREFIX: prefix },
  { db: url.toString() },
);
const { apiKey, providerToken } = await coordinator.seed([BUILD], LIMITS, CREDIT);
await using provider = startProvider([
  ...["--coordinator", coordinator.url, "--token", providerToken, "--engine", "echo", "--model", BUILD],
  ...["--dev-attestation", "on"],
]);
await provider.connected;

const chat = async (stream: boolean) => {
  const r = await fetch(`${coordinator.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: BUILD, stream, messages: [{ role: "user", content: "count the statements" }] }),
  });
  await r.text();
  if (r.status !== 200) throw new Error(`status ${r.status}`);
};

/** Statements per request (or per idle window of the same length) by SQL, over `run`. */
async function measure(run: () => Promise<void>): Promise<{ ms: number; counts: Map<string, number> }> {
  counts.clear();
  const t = performance.now();
  await run();
  await Bun.sleep(200);
  return { ms: performance.now() - t, counts: new Map(counts) };
}

for (let i = 0; i < 20; i++) await chat(false);
for (const stream of [false, true]) {
  const busy = await measure(async () => {
    let sent = 0;
    await Promise.all(
      Array.from({ length: C }, async () => {
        while (sent++ < N) await chat(stream);
      }),
    );
  });
  const idle = await measure(() => Bun.sleep(busy.ms - 200));
  const rows = [...busy.counts]
    .map(([sql, n]) => ({
      sql: sql.replace(/\s+/g, " ").slice(0, 110),
      per_request: Number(((n - (idle.counts.get(sql) ?? 0)) / N).toFixed(2)),
    }))
    .filter((r) => r.per_request >= 0.01)
    .sort((a, b) => b.per_request - a.per_request);
  const total = rows.filter((r) => !r.sql.startsWith("(Parse")).reduce((n, r) => n + r.per_request, 0);
  console.log(`${stream ? "streaming" : "non-streaming"}: ${total.toFixed(2)} statements per request (${N} requests, ${C} at a time)`);
  console.table(rows);
}
proxy.stop(true);
await removeKeys(prefix);
