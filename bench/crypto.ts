import { cpus } from "node:os";
import { parseIdentityKey, SoftwareIdentity, verifyIdentitySignature } from "../attestation/provider/index.ts";
import { type ChunkFrame, ChunkOpener, ChunkSealer } from "../src/crypto/chunks.ts";
import { type ReceiptClaims, receiptBytes, sha256 } from "../src/crypto/receipts.ts";
import { generateX25519KeyPair, openRequest, type RequestBinding, sealRequest } from "../src/crypto/seal.ts";
import { openRecipientSession, openSenderSession } from "../src/crypto/session.ts";
import { HPKE_SUITES, type KemImplementation } from "../test/support/hpke-suites.ts";
import { benchNumber } from "./lib/env.ts";
import { writeResult } from "./lib/results.ts";
import { median } from "./lib/stats.ts";

const seconds = benchNumber("BENCH_SECONDS", 6);
const rounds = benchNumber("BENCH_ROUNDS", 3);
const chunkBytes = benchNumber("BENCH_CHUNK_BYTES", 80);
const concurrency = benchNumber("BENCH_IN_FLIGHT", 32);
const REQUEST_BYTES = 4096;
const CHUNKS = 50;
const KEMS: KemImplementation[] = ["native", "webcrypto", "noble"];

const binding: RequestBinding = { protocolVersion: 1, requestId: "req_0mhz3k0qs9Xr2bTq1LmN4vWk", attempt: 0 };
const request = new Uint8Array(REQUEST_BYTES).map((_, i) => 32 + (i % 95));
const chunkTexts = Array.from({ length: CHUNKS }, (_, i) => new Uint8Array(i === CHUNKS - 1 ? 0 : chunkBytes).fill(97 + (i % 26)));
const responseContent = new Uint8Array(chunkTexts.reduce((n, c) => n + c.byteLength, 0)).fill(97);
const keys = await generateX25519KeyPair();
// Receipts as the product signs and checks them: the provider's identity key (the software key here; a
// Secure Enclave signs the same bytes) and attestation/'s DER verification with the key from hello.
const identity = SoftwareIdentity.generate();
const verifyKey = parseIdentityKey(identity.publicKey());
const sealedOnce = await sealRequest(keys.publicKey, request, binding);
// Session keys (src/crypto/session.ts): one HPKE setup for the connection, then per request one chain step
// (HMAC), HKDF and AES-256-GCM.
// Two sessions: one only seals (the coordinator's cost), one seals and opens in step (both sides).
const session = await openSenderSession(keys.publicKey, { protocolVersion: 1, providerId: "prov_bench" });
const pairSession = await openSenderSession(keys.publicKey, { protocolVersion: 1, providerId: "prov_bench" });
const sessionOpener = await openRecipientSession(keys.privateKey, pairSession.enc, { protocolVersion: 1, providerId: "prov_bench" });
function sessionSealAndOpen(): void {
  const sealed = pairSession.sealer.seal(request, binding);
  sessionOpener.open(sealed.n, sealed.ciphertext, binding);
}
const stream = { responseKey: sealedOnce.responseKey, requestId: binding.requestId, attempt: binding.attempt };
const frames: ChunkFrame[] = (() => {
  const sealer = new ChunkSealer(stream);
  return chunkTexts.map((text, i) => sealer.seal(text, i === CHUNKS - 1));
})();

function claims(): ReceiptClaims {
  return {
    requestId: binding.requestId,
    modelBuild: "mlx-community/Llama-3.2-3B-Instruct-4bit",
    requestSha256: sha256(request),
    responseSha256: sha256(responseContent),
    usage: { promptTokens: 1024, cachedTokens: 0, completionTokens: CHUNKS },
  };
}
/** Provider side: the digests of what it received and produced, the canonical bytes, the signature. */
function signReceipt(): Uint8Array {
  return identity.sign(receiptBytes(claims()));
}
/** Coordinator side: its own digests, the canonical bytes, the signature check. */
function verifyReceipt(signature: Uint8Array): void {
  verifyIdentitySignature(verifyKey, receiptBytes(claims()), signature, "receipt");
}
const signedOnce = signReceipt();

const steps = {
  chunkSeals(): void {
    const sealer = new ChunkSealer(stream);
    for (let i = 0; i < CHUNKS; i++) sealer.seal(chunkTexts[i]!, i === CHUNKS - 1);
  },
  chunkOpens(): void {
    const opener = new ChunkOpener(stream);
    for (const frame of frames) opener.open(frame);
    opener.finish();
  },
  receiptSign(): void {
    signReceipt();
  },
  receiptVerify(): void {
    verifyReceipt(signedOnce);
  },
};

/** One request's crypto, end to end, both sides, in order. */
async function wholeRequest(kem: KemImplementation): Promise<void> {
  const sealed = await sealRequest(keys.publicKey, request, binding, { suite: HPKE_SUITES[kem] });
  const s = { responseKey: sealed.responseKey, requestId: binding.requestId, attempt: binding.attempt };
  const sealer = new ChunkSealer(s);
  const opener = new ChunkOpener(s);
  for (let i = 0; i < CHUNKS; i++) opener.open(sealer.seal(chunkTexts[i]!, i === CHUNKS - 1));
  opener.finish();
  verifyReceipt(signReceipt());
}

/** Operations per second of `op`, run back to back by `workers` concurrent loops for `ms` milliseconds. */
async function rate(op: () => unknown, ms: number, workers = 1): Promise<number> {
  let count = 0;
  const start = performance.now();
  const deadline = start + ms;
  const loop = async () => {
    while (performance.now() < deadline) {
      for (let i = 0; i < 4; i++) await op();
      count += 4;
    }
  };
  await Promise.all(Array.from({ length: workers }, loop));
  return (count * 1000) / (performance.now() - start);
}

interface Case {
  readonly name: string;
  readonly kem: string;
  readonly inFlight: number;
  readonly op: () => unknown;
}

const WHOLE = "whole request";
const cases: Case[] = [
  ...KEMS.flatMap((kem): Case[] => [
    {
      name: `seal ${REQUEST_BYTES} B request (HPKE)`,
      kem,
      inFlight: 1,
      op: () => sealRequest(keys.publicKey, request, binding, { suite: HPKE_SUITES[kem] }),
    },
    {
      name: `open ${REQUEST_BYTES} B request (HPKE, provider)`,
      kem,
      inFlight: 1,
      op: () => openRequest(keys.privateKey, sealedOnce.enc, sealedOnce.ciphertext, binding, { suite: HPKE_SUITES[kem] }),
    },
    { name: WHOLE, kem, inFlight: 1, op: () => wholeRequest(kem) },
    { name: WHOLE, kem, inFlight: concurrency, op: () => wholeRequest(kem) },
  ]),
  {
    name: `seal ${REQUEST_BYTES} B request (HMAC + HKDF + AES-256-GCM)`,
    kem: "session keys",
    inFlight: 1,
    op: () => session.sealer.seal(request, binding),
  },
  { name: `seal + open ${REQUEST_BYTES} B request`, kem: "session keys", inFlight: 1, op: sessionSealAndOpen },
  { name: `${CHUNKS} chunk seals (${chunkBytes} B each)`, kem: "-", inFlight: 1, op: steps.chunkSeals },
  { name: `${CHUNKS} chunk opens + finish`, kem: "-", inFlight: 1, op: steps.chunkOpens },
  { name: "receipt sign (2 x SHA-256 + ECDSA P-256)", kem: "-", inFlight: 1, op: steps.receiptSign },
  { name: "receipt verify (2 x SHA-256 + ECDSA P-256)", kem: "-", inFlight: 1, op: steps.receiptVerify },
];

// Warm-up: JIT and WebCrypto set-up for every case.
for (const c of cases) await rate(c.op, 300, c.inFlight);

const samples = new Map<Case, number[]>(cases.map((c) => [c, []]));
for (let round = 0; round < rounds; round++) {
  for (const c of cases) samples.get(c)!.push(await rate(c.op, (seconds * 1000) / rounds, c.inFlight));
}

const round2 = (n: number) => Number(n.toFixed(2));
const rows = cases.map((c) => {
  const ops = median(samples.get(c)!);
  return { case: c.name, kem: c.kem, in_flight: c.inFlight, ops_per_s: Math.round(ops), us_per_op: round2(1e6 / ops) };
});
const row = (name: string, kem = "-", inFlight = 1) =>
  rows.find((r) => r.case.startsWith(name) && r.kem === kem && r.in_flight === inFlight)!;
const summary = KEMS.map((kem) => ({
  kem,
  seal_us: row("seal", kem).us_per_op,
  open_us: row("open", kem).us_per_op,
  sum_of_steps_us: round2(
    row("seal", kem).us_per_op +
      row(`${CHUNKS} chunk seals`).us_per_op +
      row(`${CHUNKS} chunk opens`).us_per_op +
      row("receipt sign").us_per_op +
      row("receipt verify").us_per_op,
  ),
  request_us_sequential: row(WHOLE, kem).us_per_op,
  requests_per_s_sequential: row(WHOLE, kem).ops_per_s,
  [`requests_per_s_${concurrency}_in_flight`]: row(WHOLE, kem, concurrency).ops_per_s,
}));
const byLatency = [...KEMS].sort((a, b) => row(WHOLE, a).us_per_op - row(WHOLE, b).us_per_op);
const byThroughput = [...KEMS].sort((a, b) => row(WHOLE, b, concurrency).ops_per_s - row(WHOLE, a, concurrency).ops_per_s);

const result = {
  benchmark: "crypto",
  date: new Date().toISOString(),
  machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown" },
  versions: { bun: Bun.version },
  settings: {
    seconds_per_case: seconds,
    rounds,
    in_flight: concurrency,
    request_bytes: REQUEST_BYTES,
    chunks: CHUNKS,
    chunk_bytes: chunkBytes,
  },
  rows,
  summary,
  fastest_kem: { latency: byLatency[0], throughput: byThroughput[0] },
  seal_speedup: round2(row("seal", byLatency[1]).us_per_op / row("seal", byLatency[0]).us_per_op),
  request_speedup: round2(row(WHOLE, byLatency[1]).us_per_op / row(WHOLE, byLatency[0]).us_per_op),
  /** How many times cheaper a request's sealing is with session keys than with one native HPKE setup per request. */
  session_keys_vs_native_hpke: {
    seal: round2(row("seal", "native").us_per_op / row(`seal ${REQUEST_BYTES}`, "session keys").us_per_op),
    seal_and_open: round2(
      (row("seal", "native").us_per_op + row("open", "native").us_per_op) / row("seal + open", "session keys").us_per_op,
    ),
  },
  native_vs_webcrypto: {
    seal: round2(row("seal", "webcrypto").us_per_op / row("seal", "native").us_per_op),
    open: round2(row("open", "webcrypto").us_per_op / row("open", "native").us_per_op),
    request_sequential: round2(row(WHOLE, "webcrypto").us_per_op / row(WHOLE, "native").us_per_op),
    request_in_flight: round2(row(WHOLE, "native", concurrency).ops_per_s / row(WHOLE, "webcrypto", concurrency).ops_per_s),
  },
};
console.log(`Per-request crypto (median of ${rounds} rounds, ${seconds} s per case; in_flight 1 = one at a time):`);
console.table(rows);
console.log(`One request = seal + ${CHUNKS} chunk seals + ${CHUNKS} chunk opens + receipt sign + receipt verify:`);
console.table(summary);
console.log(
  `fastest KEM: ${byLatency[0]} by latency (seal ${result.seal_speedup}x, request ${result.request_speedup}x over the next), ${byThroughput[0]} by throughput`,
);
console.log("native over webcrypto (x faster):", result.native_vs_webcrypto);
console.log("session keys over one native HPKE setup per request (x cheaper):", result.session_keys_vs_native_hpke);
console.log(`written ${writeResult("crypto", result)}`);
