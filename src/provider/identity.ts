/**
 * The provider's identity key, behind one interface: it signs the attestation evidence of every
 * connection, every challenge answer and every receipt (attestation/README.md for the formats).
 * Evidence and challenge answers are the exact bytes of attestation/'s builders, signed by whichever
 * implementation holds the key:
 * - software: a P-256 key in memory (attestation/'s SoftwareIdentity). Linux, development and tests.
 * - helper: a small process that holds the key elsewhere and signs on request (`helperIdentity`); on a
 *   Mac, src/provider/secure-enclave/umbra-se-helper.swift keeps a Secure Enclave key that never leaves
 *   the chip (its README documents build and use).
 */
import { type Subprocess, spawn } from "bun";
import type { Challenge } from "../../attestation/provider/challenge.ts";
import { parseIdentityKey, verifyIdentitySignature } from "../../attestation/provider/identity-key.ts";
import type { Posture } from "../../attestation/provider/posture.ts";
import {
  challengeResponsePayload,
  evidencePayload,
  evidenceWire,
  type SoftwareIdentity,
} from "../../attestation/provider/software-identity.ts";

export interface ProviderIdentity {
  readonly kind: "software" | "helper";
  /** The canonical 65-byte uncompressed public key. */
  readonly publicKey: Uint8Array;
  /** DER ECDSA P-256 over SHA-256(message). Rejects with IdentityError when the key cannot sign. */
  sign(message: Uint8Array): Promise<Uint8Array>;
  close(): void;
}

export class IdentityError extends Error {
  override readonly name = "IdentityError";
}

/** An in-memory software key as a ProviderIdentity. */
export function softwareIdentity(key: SoftwareIdentity): ProviderIdentity {
  return { kind: "software", publicKey: key.publicKey(65), sign: async (message) => key.sign(message), close: () => {} };
}

/** The hello frame's evidence for one connection's X25519 key, signed by `identity`. */
export async function signEvidence(
  identity: ProviderIdentity,
  encryptionKey: Uint8Array,
  posture: Posture,
  mdaChain?: readonly Uint8Array[],
  now = Date.now(),
): Promise<Record<string, unknown>> {
  const payload = evidencePayload({ identityKey: identity.publicKey, encryptionKey, posture, timestamp: now });
  return evidenceWire(payload, await identity.sign(payload), mdaChain);
}

/** A challenge_response's payload and signature (base64), signed by `identity`. */
export async function signChallengeAnswer(
  identity: ProviderIdentity,
  challenge: Challenge,
  posture: Posture,
): Promise<{ payload: string; signature: string }> {
  const payload = challengeResponsePayload(challenge, posture);
  const signature = await identity.sign(payload);
  return { payload: Buffer.from(payload).toString("base64"), signature: Buffer.from(signature).toString("base64") };
}

const HELPER_TIMEOUT_MS = 10_000;

/**
 * Starts a signing helper (`command` is argv) and checks it: it must name a valid P-256 key and sign a
 * probe that verifies under it. Rejects with IdentityError otherwise (the helper is stopped).
 * Protocol, one JSON object per line on stdin/stdout:
 *   -> {"id": n, "op": "public_key"}                 <- {"id": n, "public_key": "<base64, 65 bytes>"}
 *   -> {"id": n, "op": "sign", "message": "<base64>"} <- {"id": n, "signature": "<base64 DER>"}
 *   <- {"id": n, "error": "<text>"}                   for a request the helper refuses
 * The signature is ECDSA P-256 over SHA-256(message), DER; the helper hashes.
 */
export async function helperIdentity(command: readonly string[], timeoutMs = HELPER_TIMEOUT_MS): Promise<ProviderIdentity> {
  const helper = new HelperProcess(command, timeoutMs);
  try {
    const reply = await helper.call({ op: "public_key" });
    let publicKey: Uint8Array;
    try {
      publicKey = parseIdentityKey(base64Field(reply, "public_key")).point;
    } catch {
      throw new IdentityError("the identity helper named no valid P-256 public key");
    }
    const identity: ProviderIdentity = {
      kind: "helper",
      publicKey,
      sign: async (message) =>
        base64Field(await helper.call({ op: "sign", message: Buffer.from(message).toString("base64") }), "signature"),
      close: () => helper.close(),
    };
    const probe = crypto.getRandomValues(new Uint8Array(32));
    const signature = await identity.sign(probe);
    try {
      verifyIdentitySignature(parseIdentityKey(publicKey), probe, signature, "the identity helper's probe");
    } catch {
      throw new IdentityError("the identity helper's signature does not verify under its public key");
    }
    return identity;
  } catch (error) {
    helper.close();
    throw error;
  }
}

function base64Field(reply: Record<string, unknown>, field: string): Uint8Array {
  const value = reply[field];
  if (typeof value !== "string" || value === "") throw new IdentityError(`the identity helper's answer has no ${field}`);
  return new Uint8Array(Buffer.from(value, "base64"));
}

/** One helper process and its pending requests, matched by id. */
class HelperProcess {
  private readonly process: Subprocess<"pipe", "pipe", "inherit">;
  private readonly pending = new Map<number, { resolve: (r: Record<string, unknown>) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  private failure: IdentityError | undefined;

  constructor(
    command: readonly string[],
    private readonly timeoutMs: number,
  ) {
    try {
      this.process = spawn([...command], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    } catch {
      throw new IdentityError(`the identity helper could not be started: ${command[0] ?? "(empty command)"}`);
    }
    void this.read();
    void this.process.exited.then((code) => this.fail(`the identity helper exited (code ${code})`));
  }

  call(request: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new IdentityError(`the identity helper did not answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.pending.set(id, {
        resolve: (reply) => {
          clearTimeout(timer);
          if (typeof reply.error === "string") reject(new IdentityError(`the identity helper refused: ${reply.error.slice(0, 200)}`));
          else resolve(reply);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      try {
        this.process.stdin.write(`${JSON.stringify({ id, ...request })}\n`);
        this.process.stdin.flush();
      } catch {
        this.fail("the identity helper's input is closed");
      }
    });
  }

  close(): void {
    this.fail("the identity helper was stopped");
    try {
      this.process.kill();
    } catch {
      // already gone
    }
  }

  private fail(message: string): void {
    this.failure ??= new IdentityError(message);
    for (const { reject } of this.pending.values()) reject(this.failure);
    this.pending.clear();
  }

  private async read(): Promise<void> {
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const piece of this.process.stdout) {
      buffered += decoder.decode(piece, { stream: true });
      let newline = buffered.indexOf("\n");
      while (newline >= 0) {
        this.onLine(buffered.slice(0, newline));
        buffered = buffered.slice(newline + 1);
        newline = buffered.indexOf("\n");
      }
    }
  }

  private onLine(line: string): void {
    let reply: unknown;
    try {
      reply = JSON.parse(line);
    } catch {
      return; // not ours: helpers write diagnostics to stderr, but a stray line must not break signing
    }
    if (typeof reply !== "object" || reply === null) return;
    const id = (reply as { id?: unknown }).id;
    if (typeof id !== "number") return;
    this.pending.get(id)?.resolve(reply as Record<string, unknown>);
    this.pending.delete(id);
  }
}
