/**
 * Privacy canary harness (docs/security.md, "What is never stored or logged"): a distinctive string
 * planted in prompts and pass-through fields, a byte scanner that finds it in UTF-8 and UTF-16LE (as
 * written and lower-cased) and says where, with context, and real processes (coordinator, provider)
 * whose whole stdout and stderr are kept for scanning. Handles are AsyncDisposable.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { BUN, ROOT } from "./processes.ts";
import { waitFor } from "./wait.ts";

/** The planted string. Every search covers it as written and lower-cased, in UTF-8 and UTF-16LE. */
export const CANARY = "CANARY-7f3a9c";

export interface Finding {
  /** The sink: a file, a process stream, a response. */
  readonly sink: string;
  /** Where in the sink: "byte N", or "line L, byte N" for text scanned by line. */
  readonly place: string;
  readonly encoding: "utf8" | "utf16le";
  /** Up to 40 bytes either side of the hit, decoded and JSON-escaped. */
  readonly context: string;
}

const NEEDLES = [CANARY, CANARY.toLowerCase()].flatMap((text) => [
  { encoding: "utf8" as const, bytes: Buffer.from(text, "utf8") },
  { encoding: "utf16le" as const, bytes: Buffer.from(text, "utf16le") },
]);
const CONTEXT_BYTES = 40;

/** Every occurrence of the canary in `data` (bytes, or text taken as UTF-8). */
export function scan(sink: string, data: Uint8Array | string, placePrefix = ""): Finding[] {
  const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const found: Finding[] = [];
  for (const needle of NEEDLES) {
    for (let at = bytes.indexOf(needle.bytes); at >= 0; at = bytes.indexOf(needle.bytes, at + 1)) {
      const start = Math.max(0, at - CONTEXT_BYTES);
      const end = Math.min(bytes.byteLength, at + needle.bytes.byteLength + CONTEXT_BYTES);
      const context = JSON.stringify(bytes.toString(needle.encoding, start, end));
      found.push({ sink, place: `${placePrefix}byte ${at}`, encoding: needle.encoding, context });
    }
  }
  return found;
}

/** Scans text line by line, so a finding names its line (log output). */
export function scanLines(sink: string, text: string): Finding[] {
  return text.split("\n").flatMap((line, i) => scan(sink, line, `line ${i + 1}, `));
}

/** Findings grouped by sink and encoding: how many, and the first one with its place and context. */
export interface Leak {
  readonly sink: string;
  readonly encoding: Finding["encoding"];
  readonly count: number;
  readonly first: string;
}

export function leaks(findings: readonly Finding[]): Leak[] {
  const groups = new Map<string, Leak>();
  for (const f of findings) {
    const key = `${f.sink}\u0000${f.encoding}`;
    const seen = groups.get(key);
    groups.set(
      key,
      seen ? { ...seen, count: seen.count + 1 } : { sink: f.sink, encoding: f.encoding, count: 1, first: `${f.place}: ${f.context}` },
    );
  }
  return [...groups.values()];
}

/** Scans every file in `dir` (the database, its -wal and -shm, anything else written there). */
export function scanDir(sink: string, dir: string): Finding[] {
  return readdirSync(dir)
    .filter((name) => statSync(join(dir, name)).isFile())
    .flatMap((name) => scan(`${sink}: ${name}`, readFileSync(join(dir, name))));
}

/** A process whose stdout and stderr are read to the end and kept whole. */
export interface CapturedProcess {
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;
  /** Everything written so far. */
  output(): { stdout: string; stderr: string };
  /** Resolves once the process exited and both streams were read to their end. */
  readonly drained: Promise<{ stdout: string; stderr: string }>;
}

function capture(proc: Subprocess<"ignore", "pipe", "pipe">): CapturedProcess {
  const text = { stdout: "", stderr: "" };
  const read = async (name: "stdout" | "stderr") => {
    const decoder = new TextDecoder();
    for await (const chunk of proc[name]) text[name] += decoder.decode(chunk, { stream: true });
    text[name] += decoder.decode();
  };
  const drained = Promise.all([read("stdout"), read("stderr"), proc.exited]).then(() => ({ ...text }));
  return { proc, output: () => ({ ...text }), drained };
}

async function waitForOutput(p: CapturedProcess, pattern: RegExp, what: string): Promise<string> {
  const match = await waitFor(
    () => {
      const found = pattern.exec(p.output().stderr);
      if (!found && p.proc.exitCode !== null) throw exitedEarly(p, what);
      return found;
    },
    what,
    15_000,
  );
  return match[1] ?? match[0];
}

function exitedEarly(p: CapturedProcess, what: string): Error {
  const { stdout, stderr } = p.output();
  return new Error(`${what}: the process exited (${p.proc.exitCode}) first:\n${(stdout + stderr).slice(-2000)}`);
}

export const CANARY_ADMIN_TOKEN = "canary-admin-token-0123456789abcdef0123456789";

export interface CanaryCoordinator extends CapturedProcess, AsyncDisposable {
  readonly url: string;
  /** The folder holding umbra.db (and its -wal and -shm while running). */
  readonly dir: string;
  /** An admin call; returns status and parsed body without throwing. */
  admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown; text: string }>;
  /** SIGTERM (graceful: drains, flushes, closes the store) and the exit code. */
  stop(): Promise<number>;
}

/** `umbra-coordinator serve` in development mode on a fresh temp database, port 0. */
export async function startCanaryCoordinator(env: Record<string, string>): Promise<CanaryCoordinator> {
  const dir = mkdtempSync(join(tmpdir(), "umbra-canary-"));
  const proc = Bun.spawn([BUN, join(ROOT, "src/coordinator/main.ts"), "serve", "--listen", "127.0.0.1:0", "--db", join(dir, "umbra.db")], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? dir,
      UMBRA_MODE: "development",
      UMBRA_ADMIN_TOKEN: CANARY_ADMIN_TOKEN,
      ...env,
    },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const captured = capture(proc);
  const dispose = async () => {
    proc.kill("SIGKILL");
    await captured.drained;
    rmSync(dir, { recursive: true, force: true });
  };
  let url: string;
  try {
    url = await waitForOutput(captured, /"msg":"coordinator listening","url":"(http:\/\/[^"]+)"/, "coordinator listening");
  } catch (e) {
    await dispose();
    throw e;
  }
  return {
    ...captured,
    url,
    dir,
    async admin(method, path, body) {
      const response = await fetch(`${url}/admin/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${CANARY_ADMIN_TOKEN}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
      });
      const text = await response.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {}
      return { status: response.status, body: parsed, text };
    },
    async stop() {
      proc.kill("SIGTERM");
      await captured.drained;
      return proc.exitCode ?? -1;
    },
    [Symbol.asyncDispose]: dispose,
  };
}

export interface CanaryProvider extends CapturedProcess, AsyncDisposable {
  /** Resolves with the provider id once the coordinator welcomed it. */
  readonly connected: Promise<string>;
  /** The tool's folder (UMBRA_PROVIDER_HOME): pid and state files. */
  readonly home: string;
}

/** `umbra-provider start` with the given flags, debug logging, every output byte kept. */
export function startCanaryProvider(args: readonly string[]): CanaryProvider {
  const home = mkdtempSync(join(tmpdir(), "umbra-provider-home-"));
  const proc = Bun.spawn([BUN, join(ROOT, "src/provider/main.ts"), "start", ...args], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? tmpdir(),
      UMBRA_PROVIDER_HOME: home,
      UMBRA_PROVIDER_LOG_LEVEL: "debug",
    },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const captured = capture(proc);
  const connected = waitForOutput(captured, /"msg":"connected to coordinator","provider_id":"([^"]+)"/, "provider connected");
  connected.catch(() => {});
  return {
    ...captured,
    connected,
    home,
    async [Symbol.asyncDispose]() {
      proc.kill("SIGKILL");
      await captured.drained;
    },
  };
}
