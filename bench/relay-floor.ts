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
  // One back connection; requests are matched to answers by id.
  const waiting = new Map<number, (answer: string) => void>();
  let nextId = 0;
  let back: Bun.ServerWebSocket<undefined> | undefined;
  const server = Bun.serve({
    port: 0,
    async fetch(request, srv) {
      if (new URL(request.url).pathname === "/back") return srv.upgrade(request) ? undefined : new Response("upgrade", { status: 400 });
      if (!back) return new Response("no back", { status: 503 });
      const body = await request.text();
      const id = nextId++;
      const answer = await new Promise<string>((resolve) => {
        waiting.set(id, resolve);
        back?.send(JSON.stringify({ id, body }));
      });
      return new Response(answer, { headers: { "content-type": "application/json" } });
    },
    websocket: {
      open(ws) {
        back = ws;
        console.log(JSON.stringify({ url: `http://127.0.0.1:${server.port}` }));
      },
      message(_ws, message) {
        const { id, answer } = JSON.parse(String(message)) as { id: number; answer: string };
        waiting.get(id)?.(answer);
        waiting.delete(id);
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
    ws.send(JSON.stringify({ id, answer: await response.text() }));
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
