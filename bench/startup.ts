/**
 * Start-up of the compiled coordinator (issue 7, point 1d): from spawn to the first successful answer.
 *
 * The binary is built with the Makefile's BUILD_FLAGS (read from the Makefile, so they cannot drift)
 * into a temp folder; when dist/umbra-coordinator exists it is compared with that build (builds are
 * reproducible: the same SHA-256 means dist is current). Each start runs `umbra-coordinator serve` in
 * production mode (the default) on port 0 in its own temp folder, and the clock runs from just before
 * the spawn to:
 *   listening  the "coordinator listening" log line (it carries the port);
 *   first 200  the first answer with status 200 to one request sent right after it: each start sends
 *              only its one request, so a later request never rides on an earlier one's warm-up;
 *   CPU        the coordinator's CPU time (all threads) when that answer arrived: on a shared machine
 *              the wall clock also measures the neighbours, this mostly the coordinator.
 * Cases (interleaved, BENCH_STARTS starts each; median and max):
 *   fresh database     no database file (created and migrated at start): GET /healthz, and GET
 *                      /admin/v1/accounts with the admin token (the only credential a fresh database has);
 *   existing database  a copy of a database provisioned by an earlier start (account, credit, build, API
 *                      key): GET /healthz, and GET /v1/models with the API key (key lookup, catalog).
 * For reference, the floor: a compiled `Bun.serve` that answers "ok", built with the same flags.
 * Target: first answer within 100 ms. Results: printed table and bench/results/startup-<timestamp>.json.
 *
 * Environment: BENCH_STARTS (10).
 */
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { BUN, ROOT } from "../test/support/processes.ts";
import { benchNumber } from "./lib/env.ts";
import { threadCpuMs } from "./lib/proc.ts";
import { writeResult } from "./lib/results.ts";
import { median } from "./lib/stats.ts";

const starts = benchNumber("BENCH_STARTS", 10);
const TARGET_MS = 100;
const ADMIN = "bench-startup-admin-token-0123456789abcdef";
const BUILD = "bench/startup";
const work = mkdtempSync(join(tmpdir(), "umbra-startup-"));
const loadBefore = loadavg().map((x) => Number(x.toFixed(2)));

const round1 = (n: number) => Number(n.toFixed(1));
const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

/** The Makefile's BUILD_FLAGS, as `make build` passes them. */
function buildFlags(): string[] {
  const line = /^BUILD_FLAGS\s*:=\s*(.+)$/m.exec(readFileSync(join(ROOT, "Makefile"), "utf8"))?.[1];
  if (!line) throw new Error("BUILD_FLAGS not found in the Makefile");
  return line.trim().split(/\s+/);
}

async function build(entry: string, out: string): Promise<{ flags: string[]; ms: number }> {
  const flags = buildFlags();
  const started = performance.now();
  const proc = Bun.spawn([BUN, "build", ...flags, entry, "--outfile", out], {
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
  });
  if ((await proc.exited) !== 0) throw new Error(`build failed: ${await new Response(proc.stderr).text()}`);
  return { flags, ms: performance.now() - started };
}

interface Started {
  readonly url: string;
  readonly pid: number;
  readonly listeningMs: number;
  readonly t0: number;
  stop(): Promise<number>;
}

/** Spawns the binary on `dir`/umbra.db and waits for its "listening" line. */
async function start(binary: string, dir: string): Promise<Started> {
  const t0 = performance.now();
  const proc = Bun.spawn([binary, "serve", "--listen", "127.0.0.1:0", "--db", join(dir, "umbra.db")], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "", HOME: dir, UMBRA_ADMIN_TOKEN: ADMIN, UMBRA_LOG_LEVEL: "info" },
    stdin: "ignore",
    stdout: "ignore",
    stderr: "pipe",
  });
  const reader = proc.stderr.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let url: string | undefined;
  while (url === undefined) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`coordinator exited before listening:\n${text.slice(-2000)}`);
    text += decoder.decode(value, { stream: true });
    url = /"msg":"coordinator listening","url":"(http:\/\/[^"]+)"/.exec(text)?.[1];
  }
  const listeningMs = performance.now() - t0;
  void (async () => {
    for (;;) if ((await reader.read()).done) return;
  })();
  return {
    url,
    pid: proc.pid,
    listeningMs,
    t0,
    async stop() {
      proc.kill("SIGTERM");
      return proc.exited;
    },
  };
}

/** A database with an account, credit, a build and an API key, left by a cleanly stopped coordinator. */
async function provision(binary: string): Promise<{ dir: string; apiKey: string }> {
  const dir = join(work, "seed");
  mkdirSync(dir);
  const c = await start(binary, dir);
  const admin = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${c.url}/admin/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!response.ok) throw new Error(`admin ${method} ${path}: ${response.status}`);
    return (await response.json()) as Record<string, unknown>;
  };
  const account = await admin("POST", "/accounts", { name: "bench" });
  await admin("POST", `/accounts/${account.id}/credit`, { amount_micro_usd: 1_000_000_000 });
  await admin("PUT", `/models/${BUILD}`, {});
  const key = await admin("POST", "/keys", { account_id: account.id });
  if ((await c.stop()) !== 0) throw new Error("the provisioning coordinator did not stop cleanly");
  return { dir, apiKey: String(key.key) };
}

interface Case {
  /** The bare Bun.serve binary instead of the coordinator. */
  readonly baseline?: boolean;
  readonly database: "fresh" | "existing" | "none";
  readonly request: string;
  readonly path: string;
  readonly headers: Record<string, string>;
}

interface Sample {
  readonly listeningMs: number;
  readonly firstMs: number;
  /** The coordinator's CPU time (all threads) when the first 200 arrived. */
  readonly cpuMs: number;
  readonly attempts: number;
}

/** One start: spawn, wait for listening, then send the case's request until it answers 200. */
async function once(c: Case, seedDir: string, n: number): Promise<Sample> {
  const dir = join(work, `${c.database}-${c.request.replace(/\W+/g, "_")}-${n}`);
  mkdirSync(dir);
  if (c.database === "existing") {
    for (const name of readdirSync(seedDir)) copyFileSync(join(seedDir, name), join(dir, name));
  }
  const s = await start(c.baseline ? baseline : binary, dir);
  let attempts = 0;
  let firstMs = Number.NaN;
  let cpu = Number.NaN;
  try {
    for (;;) {
      attempts++;
      const response = await fetch(`${s.url}${c.path}`, { headers: c.headers });
      await response.arrayBuffer();
      if (response.status === 200) {
        firstMs = performance.now() - s.t0;
        cpu = threadCpuMs(s.pid);
        break;
      }
      if (attempts >= 100) throw new Error(`${c.request}: no 200 after ${attempts} attempts (last ${response.status})`);
    }
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return { listeningMs: s.listeningMs, firstMs, cpuMs: cpu, attempts };
}

const binaryDir = join(work, "bin");
mkdirSync(binaryDir);
const binary = join(binaryDir, "umbra-coordinator");
const built = await build(join(ROOT, "src/coordinator/main.ts"), binary);
// The floor: a compiled Bun.serve answering "ok", same flags, announcing itself like the coordinator.
const baseline = join(binaryDir, "bare-bun-serve");
const baselineEntry = join(work, "bare-bun-serve.ts");
writeFileSync(
  baselineEntry,
  `const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("ok") });
process.stderr.write(JSON.stringify({ msg: "coordinator listening", url: "http://127.0.0.1:" + server.port }) + "\\n");
`,
);
await build(baselineEntry, baseline);
const builtSha = sha256(binary);
const dist = join(ROOT, "dist/umbra-coordinator");
const distState = existsSync(dist) ? (sha256(dist) === builtSha ? "current" : "stale (differs from a build of these sources)") : "absent";
const seed = await provision(binary);

const adminHeaders = { authorization: `Bearer ${ADMIN}` };
const cases: Case[] = [
  { baseline: true, database: "none", request: "GET / (bare Bun.serve binary, same flags)", path: "/", headers: {} },
  { database: "fresh", request: "GET /healthz", path: "/healthz", headers: {} },
  { database: "fresh", request: "GET /admin/v1/accounts (admin token)", path: "/admin/v1/accounts", headers: adminHeaders },
  { database: "existing", request: "GET /healthz", path: "/healthz", headers: {} },
  { database: "existing", request: "GET /v1/models (API key)", path: "/v1/models", headers: { authorization: `Bearer ${seed.apiKey}` } },
];
// One unmeasured start first: the page cache then holds the binary for every measured start alike.
await once(cases[1] as Case, seed.dir, -1);
const samples = cases.map(() => [] as Sample[]);
for (let i = 0; i < starts; i++) {
  for (const [k, c] of cases.entries()) samples[k]?.push(await once(c, seed.dir, i));
}
rmSync(work, { recursive: true, force: true });

const rows = cases.map((c, k) => {
  const xs = samples[k] as Sample[];
  const first = xs.map((x) => x.firstMs);
  const listening = xs.map((x) => x.listeningMs);
  return {
    database: c.database,
    request: c.request,
    starts: xs.length,
    listening_median_ms: round1(median(listening)),
    listening_max_ms: round1(Math.max(...listening)),
    first_200_median_ms: round1(median(first)),
    first_200_max_ms: round1(Math.max(...first)),
    first_200_ms: first.map(round1),
    cpu_to_first_200_median_ms: round1(median(xs.map((x) => x.cpuMs))),
    cpu_to_first_200_max_ms: round1(Math.max(...xs.map((x) => x.cpuMs))),
    requests_before_200: Math.max(...xs.map((x) => x.attempts)),
    target_met: Math.max(...first) < TARGET_MS,
  };
});
const result = {
  benchmark: "startup",
  date: new Date().toISOString(),
  machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown", load_average_before: loadBefore },
  versions: { bun: Bun.version },
  settings: { starts, mode: "production", build_flags: built.flags, build_ms: Math.round(built.ms) },
  binary: { sha256: builtSha, dist: distState },
  rows,
  target: `first 200 < ${TARGET_MS} ms (every start)`,
};
console.log(
  `Compiled coordinator, spawn to first answer, and its CPU time by then (ms; ${starts} starts per row; load average before ${loadBefore.join(" ")}; built in ${Math.round(built.ms)} ms; dist/umbra-coordinator ${distState}):`,
);
console.table(
  rows.map((r) => ({
    database: r.database,
    request: r.request,
    "listening median": r.listening_median_ms,
    "listening max": r.listening_max_ms,
    "first 200 median": r.first_200_median_ms,
    "first 200 max": r.first_200_max_ms,
    "CPU median": r.cpu_to_first_200_median_ms,
    "CPU max": r.cpu_to_first_200_max_ms,
    "< 100 ms": r.target_met ? "met" : "missed",
  })),
);
console.log(`written ${writeResult("startup", result)}`);
