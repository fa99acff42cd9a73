/**
 * The receipt check's cost on the event loop (issue 25, lever 1): main-thread CPU and wall per P-256
 * verify of a receipt, for today's synchronous node:crypto path and the candidates that move the work off
 * the loop: WebCrypto `crypto.subtle.verify` (key imported once, DER -> r||s), node:crypto's callback form
 * (production's since issue 25), a pool of BENCH_WORKERS (2) Workers.
 * Rounds interleave the cases; each case verifies BENCH_VERIFIES receipts, BENCH_IN_FLIGHT at a time.
 * Main-thread CPU is the main thread's own run time (/proc/self/task/<pid>/schedstat); "all" is every
 * thread (process.cpuUsage). Medians over rounds; compare within a run only.
 */
import { verify as nodeVerify } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseIdentityKey, SoftwareIdentity, verifyIdentitySignature } from "../attestation/provider/index.ts";
import { receiptBytes, sha256 } from "../src/crypto/receipts.ts";
import { benchNumber } from "./lib/env.ts";
import { writeResult } from "./lib/results.ts";
import { median } from "./lib/stats.ts";

const rounds = benchNumber("BENCH_ROUNDS", 5);
const verifies = benchNumber("BENCH_VERIFIES", 2000);
const inFlight = benchNumber("BENCH_IN_FLIGHT", 16);

const identity = SoftwareIdentity.generate();
const key = parseIdentityKey(identity.publicKey());
const message = receiptBytes({
  requestId: "req_0mhz3k0qs9Xr2bTq1LmN4vWk",
  modelBuild: "llama-3.1-8b@q4",
  requestSha256: sha256(new Uint8Array(4096).fill(97)),
  responseSha256: sha256(new Uint8Array(800).fill(98)),
  usage: { promptTokens: 120, cachedTokens: 0, completionTokens: 50 },
});
const der = identity.sign(message);
const spki = Buffer.concat([Buffer.from("3059301306072a8648ce3d020106082a8648ce3d030107034200", "hex"), key.point]);
const subtleKey = await crypto.subtle.importKey("spki", spki, { name: "ECDSA", namedCurve: "P-256" }, false, ["verify"]);
const { createPublicKey } = await import("node:crypto");
const keyObject = createPublicKey({ key: spki, format: "der", type: "spki" });

/** DER Ecdsa-Sig-Value -> r||s (32 bytes each); the bench's signatures are well formed. */
function derToRaw(sig: Uint8Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(64);
  let i = 2;
  const rLen = sig[i + 1] as number;
  const r = sig.subarray(i + 2, i + 2 + rLen);
  i += 2 + rLen;
  const sLen = sig[i + 1] as number;
  const s = sig.subarray(i + 2, i + 2 + sLen);
  out.set(r.subarray(Math.max(0, r.length - 32)), 32 - Math.min(32, r.length));
  out.set(s.subarray(Math.max(0, s.length - 32)), 64 - Math.min(32, s.length));
  return out;
}

// (d) A pool of BENCH_WORKERS Workers, each verifying with node:crypto sync; one message each way per verify.
const workerSource = `
const { createPublicKey, verify } = require("node:crypto");
let key;
self.onmessage = (e) => {
  const m = e.data;
  if (m.spki) { key = createPublicKey({ key: Buffer.from(m.spki), format: "der", type: "spki" }); return; }
  let ok = false;
  try { ok = verify("sha256", m.message, { key, dsaEncoding: "der" }, m.der); } catch {}
  self.postMessage({ id: m.id, ok });
};`;
const workerUrl = URL.createObjectURL(new Blob([workerSource], { type: "application/javascript" }));
const workers = Array.from({ length: benchNumber("BENCH_WORKERS", 2) }, () => new Worker(workerUrl));
const waiting = new Map<number, (ok: boolean) => void>();
for (const w of workers) {
  w.postMessage({ spki });
  w.onmessage = (e: MessageEvent<{ id: number; ok: boolean }>) => {
    waiting.get(e.data.id)?.(e.data.ok);
    waiting.delete(e.data.id);
  };
}
let nextId = 0;
function workerVerify(): Promise<boolean> {
  const id = nextId++;
  return new Promise((resolve) => {
    waiting.set(id, resolve);
    (workers[id % workers.length] as Worker).postMessage({ id, message, der });
  });
}

type Case = { name: string; run: () => boolean | Promise<boolean> };
const cases: Case[] = [
  {
    name: "node:crypto verify, sync (before)",
    run: () => {
      verifyIdentitySignature(key, message, der, "receipt");
      return true;
    },
  },
  {
    name: "crypto.subtle.verify (raw r||s)",
    run: () => crypto.subtle.verify({ name: "ECDSA", hash: "SHA-256" }, subtleKey, derToRaw(der), new Uint8Array(message)),
  },
  {
    name: "node:crypto verify, callback (now)",
    run: () =>
      new Promise<boolean>((resolve, reject) =>
        nodeVerify("sha256", message, { key: keyObject, dsaEncoding: "der" }, der, (e, ok) => (e ? reject(e) : resolve(ok))),
      ),
  },
  { name: `Worker pool (${workers.length}), node:crypto sync`, run: workerVerify },
];

function mainThreadNs(): number {
  return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, "utf8").split(" ")[0]);
}

async function measure(c: Case): Promise<{ mainUs: number; allUs: number; wallUs: number }> {
  const cpu0 = process.cpuUsage();
  const main0 = mainThreadNs();
  const t0 = performance.now();
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < verifies) {
      next += 1;
      if (!(await c.run())) throw new Error(`${c.name}: did not verify`);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
  const wall = performance.now() - t0;
  const main = (mainThreadNs() - main0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { mainUs: main / verifies, allUs: (cpu.user + cpu.system) / verifies, wallUs: (wall * 1000) / verifies };
}

/** One verify at a time: the latency one receipt adds when idle. */
async function latency(c: Case): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 200; i += 1) {
    const t0 = performance.now();
    await c.run();
    samples.push((performance.now() - t0) * 1000);
  }
  return median(samples);
}

for (const c of cases) await measure(c); // warm-up
const byCase = new Map(
  cases.map((c) => [c.name, { main: [] as number[], all: [] as number[], wall: [] as number[], idle: [] as number[] }]),
);
for (let r = 0; r < rounds; r += 1) {
  for (const c of r % 2 === 0 ? cases : [...cases].reverse()) {
    const m = await measure(c);
    const row = byCase.get(c.name);
    row?.main.push(m.mainUs);
    row?.all.push(m.allUs);
    row?.wall.push(m.wallUs);
    row?.idle.push(await latency(c));
  }
}
const rows = cases.map((c) => {
  const s = byCase.get(c.name) as { main: number[]; all: number[]; wall: number[]; idle: number[] };
  return { case: c.name, mainThreadUs: median(s.main), allThreadsUs: median(s.all), wallUs: median(s.wall), idleLatencyUs: median(s.idle) };
});
console.log(`receipt verify, ${rounds} interleaved rounds of ${verifies} verifies, ${inFlight} in flight (medians, us per verify)`);
console.table(
  rows.map((r) => ({
    ...r,
    mainThreadUs: r.mainThreadUs.toFixed(1),
    allThreadsUs: r.allThreadsUs.toFixed(1),
    wallUs: r.wallUs.toFixed(1),
    idleLatencyUs: r.idleLatencyUs.toFixed(1),
  })),
);
const { loadavg } = await import("node:os");
console.log(
  `written ${writeResult("receipt-verify", { date: new Date().toISOString(), bun: Bun.version, loadavg: loadavg(), settings: { rounds, verifies, inFlight }, rows } as { date: string })}`,
);
process.exit(0); // the Workers' handles would keep the process alive
