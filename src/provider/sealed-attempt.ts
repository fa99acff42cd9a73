/**
 * The sealed side of an attempt (attempts.ts): opening a `sealed_inference` (under the session's keys when
 * it carries a counter `n`, src/crypto/session.ts, else with its own HPKE setup to the connection's key;
 * either binds protocol version, request id and attempt), the sealer for its answer, and the receipt the
 * identity key signs over request and answer (src/crypto/receipts.ts).
 */
import { ChunkSealer } from "../crypto/chunks.ts";
import { fromBase64url, toBase64url } from "../crypto/encoding.ts";
import { ResponseDigest, receiptBytes, sha256 } from "../crypto/receipts.ts";
import { type OpenedRequest, openRequest, type RequestBinding } from "../crypto/seal.ts";
import type { SessionOpener } from "../crypto/session.ts";
import { type EngineRequestBody, PROTOCOL_VERSION, type SealedInference, type Usage } from "../protocol/frames.ts";
import { parseEngineRequest } from "../protocol/parse.ts";

/** Refuses invalid UTF-8; stateless for whole decodes, so one serves every request. */
const UTF8_STRICT = new TextDecoder("utf-8", { fatal: true });

/** The provider's identity key as receipts need it: DER ECDSA P-256 over SHA-256(message) (identity.ts). */
export interface ReceiptSigner {
  sign(message: Uint8Array): Uint8Array | Promise<Uint8Array>;
}

/** What a connection opens sealed requests with. */
export interface SealKeys {
  /** The connection's X25519 private key; gone once session keys replaced it. */
  readonly privateKey: Uint8Array | undefined;
  /** The session's opener (pending while its set-up runs); undefined without session keys. */
  readonly session: Promise<SessionOpener> | undefined;
  /** The same opener once its set-up is done: requests then open without waiting for a promise. */
  readonly ready: SessionOpener | undefined;
}

/** What a receipt covers, gathered while the attempt runs. */
export interface PendingReceipt {
  readonly signer: ReceiptSigner;
  readonly requestSha256: Uint8Array;
  readonly response: ResponseDigest;
  readonly model: string;
}

export interface OpenedAttempt {
  readonly request: EngineRequestBody;
  readonly sealer: ChunkSealer;
  /** Present when the provider has an identity key. */
  readonly receipt: PendingReceipt | undefined;
}

/**
 * Opens a sealed request and parses its body; throws (or rejects) when it does not open (a replayed `n`
 * included) or parse. Synchronous under session keys already set up (every request but the first few).
 */
export function openSealedAttempt(
  frame: SealedInference,
  keys: SealKeys,
  signer: ReceiptSigner | undefined,
): OpenedAttempt | Promise<OpenedAttempt> {
  const binding = { protocolVersion: PROTOCOL_VERSION, requestId: frame.request_id, attempt: frame.attempt };
  const opened = openSealed(frame, keys, binding);
  return opened instanceof Promise ? openedLater(frame, opened, signer) : attemptOf(frame, opened, signer);
}

async function openedLater(
  frame: SealedInference,
  opened: Promise<OpenedRequest>,
  signer: ReceiptSigner | undefined,
): Promise<OpenedAttempt> {
  return attemptOf(frame, await opened, signer);
}

function attemptOf(frame: SealedInference, opened: OpenedRequest, signer: ReceiptSigner | undefined): OpenedAttempt {
  const request = parseEngineRequest(JSON.parse(UTF8_STRICT.decode(opened.plaintext)));
  const requestSha256 = sha256(opened.plaintext);
  const sealer = new ChunkSealer({ responseKey: opened.responseKey, requestId: frame.request_id, attempt: frame.attempt });
  const receipt = signer ? { signer, requestSha256, response: new ResponseDigest(), model: frame.model } : undefined;
  return { request, sealer, receipt };
}

/** Opens a sealed request: under the session's keys when it carries `n`, else with its own HPKE setup (`enc`). */
function openSealed(frame: SealedInference, keys: SealKeys, binding: RequestBinding): OpenedRequest | Promise<OpenedRequest> {
  const ciphertext = fromBase64url(frame.ciphertext, "ciphertext");
  if (frame.n !== undefined) {
    if (keys.ready !== undefined) return keys.ready.open(frame.n, ciphertext, binding);
    return openLater(keys.session, frame.n, ciphertext, binding);
  }
  if (keys.privateKey === undefined) throw new Error("no private key on this connection");
  return openRequest(keys.privateKey, fromBase64url(frame.enc ?? "", "enc"), ciphertext, binding);
}

/** A request that arrived while the session's set-up ran: opened once it is done, in arrival order. */
async function openLater(
  pending: Promise<SessionOpener> | undefined,
  n: number,
  ciphertext: Uint8Array,
  binding: RequestBinding,
): Promise<OpenedRequest> {
  const session = await pending;
  if (session === undefined) throw new Error("no session keys on this connection");
  return session.open(n, ciphertext, binding);
}

type Signed = { receipt?: { signature: string } };

/**
 * The receipt of a completed sealed attempt: the identity key's signature over the receipt bytes.
 * Synchronous when the key signs synchronously (a software identity); a helper process's is a promise.
 */
export function signReceipt(receipt: PendingReceipt | undefined, requestId: string, usage: Usage): Signed | Promise<Signed> {
  if (!receipt) return {};
  const bytes = receiptBytes({
    requestId,
    modelBuild: receipt.model,
    requestSha256: receipt.requestSha256,
    responseSha256: receipt.response.digest(),
    usage: { promptTokens: usage.prompt_tokens, cachedTokens: usage.cached_tokens ?? 0, completionTokens: usage.completion_tokens },
  });
  const signature = receipt.signer.sign(bytes);
  return signature instanceof Promise ? signature.then(signedWith) : signedWith(signature);
}

function signedWith(signature: Uint8Array): Signed {
  return { receipt: { signature: toBase64url(signature) } };
}
