/**
 * The sealed hop to one provider, apart from the socket: sealing a request, opening the answer's sealed
 * frames and verifying the receipt that ends it.
 *
 * A request is sealed to the provider's X25519 key (HPKE, binding protocol version, request id and
 * attempt), or under the session's keys when the hello offered them (synchronous, so requests leave in
 * counter order). Its answer opens with the exported response key: ChunkOpener enforces order (seq from
 * 0, no replay, nothing after final) and authenticity, then the payload is read like a plaintext frame.
 * An attested provider signs a receipt over the canonical receipt bytes (src/crypto/receipts.ts) of
 * request id, model build, SHA-256 of the request plaintext, the response digest and the usage; the
 * coordinator checks it before the attempt completes: on the event loop while the coordinator is quiet
 * (verifyReceipt), else on the runtime's thread pool (verifyReceiptThen).
 */

import { AttestationError } from "../../attestation/provider/errors.ts";
import { verifyIdentitySignature, verifyIdentitySignatureThen } from "../../attestation/provider/identity-key.ts";
import type { ProviderAttestation, TrustLevel } from "../../attestation/provider/levels.ts";
import { ChunkOpener } from "../crypto/chunks.ts";
import { fromBase64url, toBase64url, toHex } from "../crypto/encoding.ts";
import { CryptoError } from "../crypto/errors.ts";
import { receiptBytes, sha256 } from "../crypto/receipts.ts";
import { sealRequest } from "../crypto/seal.ts";
import type { SessionSealer } from "../crypto/session.ts";
import { type Delta, encode, type Inference, PROTOCOL_VERSION, type ProviderFrame, type ToolCallDelta } from "../protocol/frames.ts";
import { ProtocolError, parseDelta, parseFinal, parseToolCall } from "../protocol/parse.ts";
import type { AttemptSeal, VerifiedReceipt } from "./attempt.ts";

const encoder = new TextEncoder();
/** Refuses invalid UTF-8 (a sealed payload must be text); stateless for whole decodes, so one serves every frame. */
const UTF8_STRICT = new TextDecoder("utf-8", { fatal: true });

/** A request sealed for sending: the frame's text, and what its attempt keeps to open the answer. */
export interface SealedRequest {
  readonly text: string;
  readonly seal: AttemptSeal;
}

export type SealedFrame = Extract<ProviderFrame, { type: "sealed_chunk" | "sealed_tool_call" | "sealed_complete" }>;
export type Final = ReturnType<typeof parseFinal>;

/** What an opened sealed frame carries. */
export type OpenedFrame =
  | { readonly type: "chunk"; readonly delta: Delta }
  | { readonly type: "tool_call"; readonly call: ToolCallDelta }
  | { readonly type: "complete"; readonly end: Final };

export class SealedChannel {
  /** `sessionSealer`: the session's keys, when the hello offered `session_keys`. */
  constructor(
    private readonly providerKey: Uint8Array,
    private readonly sessionSealer?: SessionSealer,
  ) {}

  /**
   * Seals one request: at once under the session's keys, else by its own HPKE setup (a promise).
   * @throws CryptoError (InvalidKeyError, InvalidInputError) as sealRequest and SessionSealer.seal.
   */
  seal(frame: Inference, serialized: string): SealedRequest | Promise<SealedRequest> {
    const binding = { protocolVersion: PROTOCOL_VERSION, requestId: frame.request_id, attempt: frame.attempt };
    const plaintext = encoder.encode(serialized);
    const head = {
      type: "sealed_inference",
      request_id: frame.request_id,
      attempt: frame.attempt,
      model: frame.model,
      first_content_deadline_ms: frame.first_content_deadline_ms,
    } as const;
    const seal = (responseKey: Uint8Array): AttemptSeal => ({
      opener: new ChunkOpener({ responseKey, requestId: frame.request_id, attempt: frame.attempt }),
      requestSha256: sha256(plaintext),
      model: frame.model,
    });
    if (this.sessionSealer !== undefined) {
      const sealed = this.sessionSealer.seal(plaintext, binding);
      return { text: encode({ ...head, n: sealed.n, ciphertext: toBase64url(sealed.ciphertext) }), seal: seal(sealed.responseKey) };
    }
    return sealRequest(this.providerKey, plaintext, binding).then((sealed) => ({
      text: encode({ ...head, enc: toBase64url(sealed.enc), ciphertext: toBase64url(sealed.ciphertext) }),
      seal: seal(sealed.responseKey),
    }));
  }
}

/**
 * Opens one sealed frame of an attempt and reads its payload (a delta, a tool-call fragment, or the
 * final usage and receipt). Throws CryptoError (order, authenticity, a missing final), ProtocolError
 * (a payload out of shape) or SyntaxError (not JSON); sealedFailure names each.
 */
export function openSealed(opener: ChunkOpener, frame: SealedFrame): OpenedFrame {
  const final = frame.type === "sealed_complete";
  const ciphertext = typeof frame.sealed === "string" ? fromBase64url(frame.sealed, "sealed") : frame.sealed;
  const plaintext = opener.open({ seq: frame.seq, final, ciphertext });
  if (final) opener.finish();
  const payload: unknown = JSON.parse(UTF8_STRICT.decode(plaintext));
  if (final) return { type: "complete", end: parseFinal(payload) };
  if (frame.type === "sealed_tool_call") return { type: "tool_call", call: parseToolCall(payload) };
  return { type: "chunk", delta: parseDelta(payload) };
}

/** Why a sealed frame was invalid output (the reason the session ends with). */
export function sealedFailure(e: unknown): string {
  if (e instanceof CryptoError) return `sealed frame rejected: ${e.code}`;
  if (e instanceof ProtocolError) return `sealed payload: ${e.message}`;
  if (e instanceof AttestationError) return `receipt rejected: ${e.check}`;
  return "sealed frame is not JSON";
}

/** The signer's side of a receipt check: what the hello's evidence proved, and the session's level. */
export interface ReceiptSigner {
  readonly attestation: ProviderAttestation | undefined;
  readonly trust: TrustLevel;
}

type Answer = { readonly requestId: string; readonly seal: AttemptSeal; readonly responseSha256: Uint8Array };

/**
 * Verifies the receipt of a sealed answer. A provider without a verified identity key signs nothing
 * (undefined); an attested one must sign. Throws AttestationError (missing or bad signature).
 */
export function verifyReceipt(signer: ReceiptSigner, answer: Answer, end: Final): VerifiedReceipt | undefined {
  const check = receiptCheck(signer, answer, end);
  if (check === undefined) return undefined;
  verifyIdentitySignature(check.identityKey, check.bytes, check.signature, "receipt");
  return check.receipt;
}

/**
 * verifyReceipt with the signature check off the event loop (the runtime's thread pool): the same bytes
 * and verdict. `then` gets the verified receipt, or the AttestationError of a bad signature, and its
 * result is what the one promise made here resolves to (a promise it returns is followed). Undefined at
 * once when the provider signs nothing; a missing receipt or a signature that is not base64url throws at
 * once, as verifyReceipt.
 */
export function verifyReceiptThen<T>(
  signer: ReceiptSigner,
  answer: Answer,
  end: Final,
  then: (receipt: VerifiedReceipt, refused: AttestationError | undefined) => T | PromiseLike<T>,
): Promise<T> | undefined {
  const check = receiptCheck(signer, answer, end);
  if (check === undefined) return undefined;
  return new Promise<T>((resolve, reject) => {
    verifyIdentitySignatureThen(check.identityKey, check.bytes, check.signature, "receipt", (refused) => {
      try {
        resolve(then(check.receipt, refused));
      } catch (e) {
        reject(e);
      }
    });
  });
}

/** What a receipt check needs: the key, the canonical receipt bytes, the signature, and what it proves. */
function receiptCheck(signer: ReceiptSigner, answer: Answer, end: Final) {
  const identityKey = signer.attestation?.identityKey;
  if (!identityKey) return undefined;
  if (!end.receipt) throw new AttestationError("signature", "an attested provider must sign a receipt");
  const { seal, responseSha256 } = answer;
  const bytes = receiptBytes({
    requestId: answer.requestId,
    modelBuild: seal.model,
    requestSha256: seal.requestSha256,
    responseSha256,
    usage: {
      promptTokens: end.usage.prompt_tokens,
      cachedTokens: end.usage.cached_tokens ?? 0,
      completionTokens: end.usage.completion_tokens,
    },
  });
  const signature = fromBase64url(end.receipt.signature, "receipt.signature");
  const receipt: VerifiedReceipt = {
    signature: end.receipt.signature,
    responseHash: toHex(responseSha256),
    requestHash: toHex(seal.requestSha256),
    modelBuild: seal.model,
    providerKeyId: identityKey.id,
    trustLevel: signer.trust,
  };
  return { identityKey, bytes, signature, receipt };
}
