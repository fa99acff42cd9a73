/**
 * The relay floor (issue 25 point 2): what the two-process topology costs with none of Umbra's work. A
 * front (Bun.serve) hands each request over one WebSocket to a back process, which calls the upstream and
 * sends the answer back (a JSON body in one message; an event stream piece by piece, as a gateway must).
 * Run alone (no role) it measures the floor against the mock called directly; `front` and `back` are its
 * two processes, which bench/overhead.ts also starts as its `floor` side.
 */
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { benchNumber } from "./lib/env.ts";
import { writeResult } from "./lib/results.ts";

const ROOT = join(import.meta.dir, "..");
const BUN = process.execPath;
const rate = benchNumber("BENCH_RATE", 500);
const rounds = benchNumber("BENCH_ROUNDS", 5);
const seconds = benchNumber("BENCH_SECONDS", 4);
const role = process.argv[2];

if (role === "front") {
  // One back connection; requests are matched to answers by id. An answer arrives as one message (a JSON
  // body) or, for an event stream, as a head, its pieces as the upstream sent them, and an end.
  interface Pending {
    readonly head: (head: { status: number; type: string; body?: string }) => void;
    controller?: ReadableStreamDefaultController<Uint8Array>;
  }
  const waiting = new Map<number, Pending>();
  const encoder = new TextEncoder();
  let nextId = 0;
  let back: Bun.ServerWebSocket<undefined> | undefined;
  const server = Bun.serve({
    port: 0,
    async fetch(request, srv) {
      if (new URL(request.url).pathname === "/back") return srv.upgrade(request) ? undefined : new Response("upgrade", { status: 400 });
      if (!back) return new Response("no back", { status: 503 });
      const body = await request.text();
      const id = nextId++;
      const pending: Pending = { head: () => {} };
      const head = await new Promise<{ status: number; type: string; body?: string }>((resolve) => {
        (pending as { head: Pending["head"] }).head = resolve;
        waiting.set(id, pending);
        back?.send(JSON.stringify({ id, body }));
      });
      if (head.body !== undefined) return new Response(head.body, { status: head.status, headers: { "content-type": head.type } });
      const stream = new ReadableStream<Uint8Array>({
        start(controller) {
          pending.controller = controller;
        },
      });
      return new Response(stream, { status: head.status, headers: { "content-type": head.type } });
    },
    websocket: {
      open(ws) {
        back = ws;
        console.log(JSON.stringify({ url: `http://127.0.0.1:${server.port}` }));
      },
      message(_ws, message) {
        const m = JSON.parse(String(message)) as { id: number; status?: number; type?: string; body?: string; piece?: string; end?: true };
        const pending = waiting.get(m.id);
        if (!pending) return;
        if (m.status !== undefined) {
          pending.head({ status: m.status, type: m.type ?? "", ...(m.body !== undefined ? { body: m.body } : {}) });
          if (m.body !== undefined) waiting.delete(m.id);
          return;
        }
        if (m.piece !== undefined) pending.controller?.enqueue(encoder.encode(m.piece));
        if (m.end) {
          pending.controller?.close();
          waiting.delete(m.id);
        }
      },
    },
  });
  console.error(JSON.stringify({ port: server.port }));
} else if (role === "back") {
  const [frontPort, upstream] = process.argv.slice(3) as [string, string];
  const ws = new WebSocket(`ws://127.0.0.1:${frontPort}/back`);
  ws.onmessage = async (event) => {
    const { id, body } = JSON.parse(String(event.data)) as { id: number; body: string };
    const response = await fetch(`${upstream}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    const type = response.headers.get("content-type") ?? "";
    if (!type.startsWith("text/event-stream")) {
      ws.send(JSON.stringify({ id, status: response.status, type, body: await response.text() }));
      return;
    }
    // A stream: relayed piece by piece as the upstream sends it, as a gateway must.
    ws.send(JSON.stringify({ id, status: response.status, type }));
    const decoder = new TextDecoder();
    for await (const bytes of response.body as ReadableStream<Uint8Array>) {
      ws.send(JSON.stringify({ id, piece: decoder.decode(bytes, { stream: true }) }));
    }
    ws.send(JSON.stringify({ id, end: true }));
  };
} else {
  const firstLine = async (stream: ReadableStream<Uint8Array>): Promise<Record<string, unknown>> => {
    const reader = stream.getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    return JSON.parse(text.split("\n")[0] as string);
  };
  const mock = Bun.spawn([BUN, join(ROOT, "bench/mock-upstream.ts")], { stdout: "pipe", stderr: "inherit" });
  const mockUrl = (await firstLine(mock.stdout)).url as string;
  const front = Bun.spawn([BUN, import.meta.path, "front"], { stdout: "pipe", stderr: "pipe" });
  const frontPort = (await firstLine(front.stderr)).port as number;
  const back = Bun.spawn([BUN, import.meta.path, "back", String(frontPort), mockUrl], { stdout: "inherit", stderr: "inherit" });
  const relayUrl = (await firstLine(front.stdout)).url as string;
  const loadAvgStart = loadavg();

  const samples: Record<"direct" | "relay", number[]> = { direct: [], relay: [] };
  let errors = 0;
  const run = async (side: "direct" | "relay") => {
    const options = {
      url: side === "direct" ? mockUrl : relayUrl,
      model: "bench/mock",
      stream: false,
      mode: "open",
      rate,
      seconds,
      warmupSeconds: 1,
      samples: true,
    };
    const proc = Bun.spawn([BUN, join(ROOT, "bench/load.ts"), JSON.stringify(options)], { stdout: "pipe", stderr: "inherit" });
    const result = JSON.parse(await new Response(proc.stdout).text()) as { samples_ms: number[]; errors: number };
    samples[side].push(...result.samples_ms);
    errors += result.errors;
  };
  for (let r = 0; r < rounds; r++)
    for (const side of r % 2 === 0 ? (["direct", "relay"] as const) : (["relay", "direct"] as const)) await run(side);
  for (const p of [mock, front, back]) p.kill();

  const pct = (xs: number[], p: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? Number.NaN;
  };
  const r3 = (n: number) => Number(n.toFixed(3));
  const stats = (xs: number[]) => ({ p50_ms: r3(pct(xs, 50)), p90_ms: r3(pct(xs, 90)), p99_ms: r3(pct(xs, 99)), samples: xs.length });
  const direct = stats(samples.direct);
  const relay = stats(samples.relay);
  const result = {
    benchmark: "relay-floor",
    date: new Date().toISOString(),
    machine: {
      cores: cpus().length,
      cpu: cpus()[0]?.model ?? "unknown",
      loadavg_start: loadAvgStart.map(r3),
      loadavg_end: loadavg().map(r3),
    },
    versions: { bun: Bun.version },
    settings: { rate, rounds, seconds },
    direct,
    relay,
    relay_added_p50_ms: r3(relay.p50_ms - direct.p50_ms),
    relay_added_p99_ms: r3(relay.p99_ms - direct.p99_ms),
    errors,
  };
  console.log(
    `Bare two-process relay against direct, ${rate} req/s open loop, ${rounds} x ${seconds} s (${result.machine.cores} cores, Bun ${Bun.version}):`,
  );
  console.table([
    { side: "direct", ...direct },
    { side: "relay", ...relay },
  ]);
  console.log(`relay adds p50 +${result.relay_added_p50_ms} ms, p99 +${result.relay_added_p99_ms} ms; errors ${errors}`);
  console.log(`written ${writeResult("relay-floor", result)}`);
  process.exit(0);
}
