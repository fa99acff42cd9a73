/**
 * Bytes allocated per operation of the hot path's pieces (issue 25 point 3), by alloc.ts's method (the
 * GC log, BUN_JSC_logGC=1): each operation runs in a loop for BENCH_SECONDS in a process of its own, and
 * what it allocated is summed over the collections and divided by the operations. alloc.ts's per-request
 * figure spreads by several KB between rounds; this one resolves a lever of a few hundred bytes, so each
 * allocation commit's before/after comes from here (bench/HISTORY.md). The operations use the product's
 * own functions with fixed inputs (a 25-character request id, a 16-word request). Not a speed benchmark.
 */
import { SoftwareIdentity } from "../attestation/provider/software-identity.ts";
import { readBody } from "../src/api/body.ts";
import { ChunkOpener, ChunkSealer } from "../src/crypto/chunks.ts";
import { fromBase64url, toBase64url } from "../src/crypto/encoding.ts";
import { receiptBytes, sha256 } from "../src/crypto/receipts.ts";
import { requestKeyInfo, SessionOpener, SessionSealer } from "../src/crypto/session.ts";
import { Attempt } from "../src/fleet/attempt.ts";
import { openSealed, SealedChannel } from "../src/fleet/sealed-channel.ts";
import { benchList, benchNumber } from "./lib/env.ts";
import { allocatedKb } from "./lib/gc-log.ts";
import { writeResult } from "./lib/results.ts";

const seconds = benchNumber("BENCH_SECONDS", 3);
const REQUEST_ID = "req_0mwy3ohvlxGWsMCc6zYrb";
const BINDING = { protocolVersion: 2, requestId: REQUEST_ID, attempt: 0 };
const BODY = {
  messages: [
    { role: "user" as const, content: "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen" },
  ],
  max_tokens: 64,
};
const KEY = new Uint8Array(32).fill(7);

/** One operation, run in a loop (a promise it returns is awaited). */
interface Op {
  readonly what: string;
  readonly run: () => unknown;
}

function ops(): Record<string, Op> {
  const sealer = new ChunkSealer({ responseKey: KEY, requestId: REQUEST_ID, attempt: 0 });
  const chunks = Array.from({ length: 4096 }, () =>
    toBase64url(sealer.seal(new TextEncoder().encode('{"content":"word "}'), false).ciphertext),
  );
  let opener = new ChunkOpener({ responseKey: KEY, requestId: REQUEST_ID, attempt: 0 });
  let seq = 0;
  const channel = new SealedChannel(new Uint8Array(32).fill(5), new SessionSealer(new Uint8Array(32).fill(3)));
  const inference = {
    type: "inference",
    request_id: REQUEST_ID,
    attempt: 0,
    model: "bench/echo",
    first_content_deadline_ms: 30_000,
    request: BODY,
  } as const;
  const serialized = JSON.stringify(BODY);
  const plaintext = new TextEncoder().encode(serialized);
  const sessionSealer = new SessionSealer(new Uint8Array(32).fill(9));
  const sessionOpener = new SessionOpener(new Uint8Array(32).fill(9));
  const identity = SoftwareIdentity.generate();
  const message = new Uint8Array(200).fill(3);
  const hash = new Uint8Array(32).fill(1);
  const body = JSON.stringify({ model: "bench/echo", ...BODY });
  const attempt = new Attempt(REQUEST_ID, 0, "prov_1", "acct_1", 0, { release: () => {} });
  const ACCEPTED = { type: "accepted" } as const;
  const listener = { attemptEvent: () => {} };
  // Awaited after each push: the hand-off's microtask, queued first, runs before the await resumes.
  const handedOver = Promise.resolve();
  return {
    "request key info": { what: "the HKDF info of a session request (canonical bytes)", run: () => requestKeyInfo(1, BINDING) },
    "receipt bytes": {
      what: "the canonical receipt bytes",
      run: () =>
        receiptBytes({
          requestId: REQUEST_ID,
          modelBuild: "bench/echo",
          requestSha256: hash,
          responseSha256: hash,
          usage: { promptTokens: 20, cachedTokens: 0, completionTokens: 16 },
        }),
    },
    sha256: { what: "SHA-256 of the 16-word request", run: () => sha256(plaintext) },
    "base64url decode": { what: "a sealed chunk's text to bytes", run: () => fromBase64url(chunks[seq++ % chunks.length] as string) },
    "chunk opener": {
      what: "a new ChunkOpener (per attempt)",
      run: () => new ChunkOpener({ responseKey: KEY, requestId: REQUEST_ID, attempt: 0 }),
    },
    "open sealed chunk": {
      what: "one sealed chunk opened and its delta read (per frame)",
      run: () => {
        if (seq === chunks.length) {
          seq = 0;
          opener = new ChunkOpener({ responseKey: KEY, requestId: REQUEST_ID, attempt: 0 });
        }
        const s = seq++;
        return openSealed(opener, { type: "sealed_chunk", request_id: REQUEST_ID, attempt: 0, seq: s, sealed: chunks[s] as string });
      },
    },
    "session seal": { what: "SessionSealer.seal of the request (per request)", run: () => sessionSealer.seal(plaintext, BINDING) },
    "session open": {
      what: "SessionSealer.seal then SessionOpener.open (the provider's open, with the seal it needs)",
      run: () => {
        const sealed = sessionSealer.seal(plaintext, BINDING);
        return sessionOpener.open(sealed.n, sealed.ciphertext, BINDING);
      },
    },
    "sealed channel seal": {
      what: "SealedChannel.seal: the request sealed and framed, its opener made",
      run: () => channel.seal(inference, serialized),
    },
    "receipt signature": { what: "a development identity's receipt signature (low-S DER)", run: () => identity.sign(message) },
    "body read": {
      what: "readBody of a Request with a 16-word JSON body (the Request itself included)",
      run: () =>
        readBody(
          new Request("http://h/v1/chat/completions", { method: "POST", body, headers: { "content-length": String(body.length) } }),
          {
            maxBytes: 1 << 20,
            timeoutMs: 30_000,
          },
        ),
    },
    "attempt wait": {
      what: "Attempt.wait with a listener, the event pushed right after and handed over (the microtask awaited)",
      run: () => {
        attempt.wait(listener);
        attempt.push(ACCEPTED);
        return handedOver;
      },
    },
  };
}

const child = process.env.ALLOC_OPS_CHILD;
if (child !== undefined) {
  const op = ops()[child];
  if (op === undefined) throw new Error(`no operation ${child}`);
  let n = 0;
  const until = performance.now() + seconds * 1000;
  while (performance.now() < until) {
    for (let i = 0; i < 100; i++) {
      const out = op.run();
      if (out instanceof Promise) await out;
    }
    n += 100;
  }
  console.log(n);
  process.exit(0);
}

const names = benchList("BENCH_ALLOC_OPS", Object.keys(ops()));
const rows = [];
for (const name of names) {
  const what = ops()[name]?.what;
  if (what === undefined) throw new Error(`BENCH_ALLOC_OPS: no operation '${name}' (have: ${Object.keys(ops()).join(", ")})`);
  const proc = Bun.spawn([process.execPath, import.meta.path], {
    env: { ...process.env, ALLOC_OPS_CHILD: name, BUN_JSC_logGC: "1" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, log] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  if ((await proc.exited) !== 0) throw new Error(`${name} failed: ${log.slice(-500)}`);
  const operations = Number(out.trim());
  const { kb, collections } = allocatedKb(log);
  rows.push({ operation: name, bytes_per_op: Math.round((kb * 1024) / operations), operations, collections, what });
}
console.log(`Bytes allocated per operation (GC log, ${seconds} s each):`);
console.table(rows.map(({ what: _, ...r }) => r));
const result = { date: new Date().toISOString(), bun: Bun.version, seconds, rows };
console.log(`written ${writeResult("alloc-ops", result)}`);
