/**
 * Provider receipts: at the end of an attempt the provider signs, with its P-256 identity key, a canonical
 * byte string that names the request, the model build, digests of the request and the response, and the
 * usage it bills. The coordinator rebuilds the same bytes from what it sent and relayed (never from
 * re-serialized JSON), verifies the signature before settling, and returns the signature and the response
 * hash to the consumer (`se_signature`, `response_hash`).
 *
 * Steps (provider, src/provider/sealed-attempt.ts): bytes = receiptBytes(claims); signature = the identity key's
 *   DER ECDSA P-256 over SHA-256(bytes) (src/provider/identity.ts: software key or Secure Enclave helper).
 * Steps (coordinator, src/fleet/sealed-channel.ts): compute both digests itself (the request plaintext it sealed,
 *   the response content and tool calls it relayed), rebuild the bytes and verify with the identity key
 *   verified at hello (attestation/'s verifyIdentitySignature: strict DER, high-S accepted, STACK.md item 8).
 *
 * Wire format (all integers unsigned big-endian; lp(x) = u32(len(x)) || x; canonical.ts), version 2:
 *   receipt   = lp("umbra-receipt-v2")
 *               || lp(UTF-8(requestId))          1..512 bytes
 *               || lp(UTF-8(modelBuild))         1..512 bytes
 *               || lp(requestSha256)             32 bytes: SHA-256 of the request plaintext (seal.ts input)
 *               || lp(responseSha256)            32 bytes: SHA-256 of the canonical response (below)
 *               || u64(promptTokens) || u64(cachedTokens) || u64(completionTokens)
 *   response  = lp("umbra-response-v2")
 *               || lp(SHA-256(UTF-8(content)))   the answer's content (all `content` deltas in order; "" when
 *                                                null or absent)
 *               || u32(count)                    the number of tool calls
 *               || for each tool call, index 0 .. count-1:
 *                    lp(UTF-8(id)) || lp(UTF-8(name)) || lp(SHA-256(UTF-8(arguments)))
 *                                                (arguments: all its fragments in order; "" when none)
 *   responseSha256 = SHA-256(response)
 *   signature = DER ECDSA P-256 over SHA-256(receipt) by the provider's identity key; unpadded base64url in
 *               JSON (`receipt.signature` on the wire, `se_signature` to the consumer).
 *   responseHash = lowercase hex of responseSha256 (64 characters).
 * UTF-8 is what WHATWG TextEncoder produces (a lone surrogate becomes U+FFFD). Reasoning is not covered.
 * What is hashed is exactly what the consumer receives: `message.content` and `message.tool_calls[i]`'s
 * `id`, `function.name` and `function.arguments` of the JSON answer, or the same assembled from a stream.
 *
 * Invariants:
 * - Usage counts are integers in [0, 2^53 - 1]; what they mean (cached <= prompt, prices) is billing's job.
 * - Tool calls are numbered 0, 1, 2, ... and arrive one after another (ResponseDigest refuses another order).
 */
import { CanonicalBytes } from "./canonical.ts";
import { InvalidInputError } from "./errors.ts";
import { MAX_REQUEST_ID_BYTES } from "./seal.ts";

const RECEIPT_TAG = "umbra-receipt-v2";
/** The receipt version named in response metadata; it changes with the tag. */
export const RECEIPT_VERSION = 2;
const RESPONSE_TAG = "umbra-response-v2";
const SHA256_BYTES = 32;
const MAX_MODEL_BUILD_BYTES = 512;
/** Longest tool-call id or name in the response bytes, in UTF-8 bytes. */
const MAX_TOOL_FIELD_BYTES = 4096;
/** Most tool calls the response bytes hold. */
const MAX_RESPONSE_TOOL_CALLS = 1024;

const UTF8 = new TextEncoder();

export interface ReceiptUsage {
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly completionTokens: number;
}

/** What a receipt states. Digests are raw 32-byte SHA-256 values. */
export interface ReceiptClaims {
  readonly requestId: string;
  readonly modelBuild: string;
  readonly requestSha256: Uint8Array;
  readonly responseSha256: Uint8Array;
  readonly usage: ReceiptUsage;
}

/** SHA-256 of bytes (32 bytes). @throws InvalidInputError for a non-byte input. */
export function sha256(bytes: Uint8Array): Uint8Array {
  if (!(bytes instanceof Uint8Array)) throw new InvalidInputError("sha256 input must be bytes");
  const out = new Uint8Array(32);
  Bun.CryptoHasher.hash("sha256", bytes, out);
  return out;
}

/**
 * The canonical receipt bytes (layout in the file header): what is signed and verified.
 * @throws InvalidInputError when a field is missing or out of range.
 */
export function receiptBytes(claims: ReceiptClaims): Uint8Array<ArrayBuffer> {
  const usage = claims.usage ?? ({} as ReceiptUsage);
  return CanonicalBytes.tagged(RECEIPT_TAG)
    .text("requestId", claims.requestId, MAX_REQUEST_ID_BYTES)
    .text("modelBuild", claims.modelBuild, MAX_MODEL_BUILD_BYTES)
    .bytes("requestSha256", claims.requestSha256, SHA256_BYTES, true)
    .bytes("responseSha256", claims.responseSha256, SHA256_BYTES, true)
    .u64("promptTokens", usage.promptTokens)
    .u64("cachedTokens", usage.cachedTokens)
    .u64("completionTokens", usage.completionTokens)
    .finish();
}

/** A tool call as the response bytes name it: its arguments by their digest. */
export interface ResponseToolCall {
  readonly id: string;
  readonly name: string;
  /** SHA-256 of the UTF-8 of the call's whole `arguments` text. */
  readonly argumentsSha256: Uint8Array;
}

/**
 * The canonical response bytes (layout in the file header), from the content's digest and the tool calls.
 * @throws InvalidInputError when a field is missing or out of range.
 */
export function responseBytes(contentSha256: Uint8Array, toolCalls: readonly ResponseToolCall[]): Uint8Array<ArrayBuffer> {
  if (!Array.isArray(toolCalls) || toolCalls.length > MAX_RESPONSE_TOOL_CALLS) {
    throw new InvalidInputError(`toolCalls must be an array of at most ${MAX_RESPONSE_TOOL_CALLS}`);
  }
  const out = CanonicalBytes.tagged(RESPONSE_TAG)
    .bytes("contentSha256", contentSha256, SHA256_BYTES, true)
    .u32("toolCalls", toolCalls.length);
  for (const call of toolCalls) {
    if (typeof call?.id !== "string" || typeof call.name !== "string")
      throw new InvalidInputError("a tool call needs a string id and name");
    out
      .bytes("toolCall.id", UTF8.encode(call.id), MAX_TOOL_FIELD_BYTES)
      .bytes("toolCall.name", UTF8.encode(call.name), MAX_TOOL_FIELD_BYTES)
      .bytes("toolCall.argumentsSha256", call.argumentsSha256, SHA256_BYTES, true);
  }
  return out.finish();
}

/**
 * The response digest (responseSha256) of a whole answer as a consumer holds it: its content (null for
 * none) and its tool calls in index order. @throws InvalidInputError as responseBytes.
 */
export function responseSha256(
  content: string | null,
  toolCalls: readonly { readonly id: string; readonly name: string; readonly arguments: string }[] = [],
): Uint8Array {
  const calls = toolCalls.map((c) => ({ id: c.id, name: c.name, argumentsSha256: sha256(UTF8.encode(c.arguments)) }));
  return sha256(responseBytes(sha256(UTF8.encode(content ?? "")), calls));
}

/**
 * responseSha256 built as an answer streams: content and tool-call fragments are hashed as they come, so
 * neither side holds the text for it. Fragments of tool calls must come one call after another: index
 * `n` (the number of calls so far) with `id` and `name` opens the next call, the last call's index
 * without them continues it.
 */
export class ResponseDigest {
  private readonly content = new TextHasher();
  private readonly calls: { readonly id: string; readonly name: string; readonly args: TextHasher }[] = [];

  addContent(text: string): void {
    this.content.update(text);
  }

  /** @throws InvalidInputError for a fragment out of order (another index, or id and name on a continuation). */
  addToolCall(fragment: { readonly index: number; readonly id?: string; readonly name?: string; readonly arguments?: string }): void {
    const opens = fragment.id !== undefined || fragment.name !== undefined;
    if (opens) {
      if (fragment.index !== this.calls.length || fragment.id === undefined || fragment.name === undefined) {
        throw new InvalidInputError(`tool call ${fragment.index} cannot open here (next is ${this.calls.length})`);
      }
      if (this.calls.length >= MAX_RESPONSE_TOOL_CALLS) throw new InvalidInputError("too many tool calls");
      this.calls.push({ id: fragment.id, name: fragment.name, args: new TextHasher() });
    } else if (fragment.index !== this.calls.length - 1) {
      throw new InvalidInputError(`tool call ${fragment.index} cannot continue here (last is ${this.calls.length - 1})`);
    }
    const call = this.calls[fragment.index];
    if (call && fragment.arguments) call.args.update(fragment.arguments);
  }

  /** The digest of everything added so far (32 bytes); adding more afterwards is allowed. */
  digest(): Uint8Array {
    const calls = this.calls.map((c) => ({ id: c.id, name: c.name, argumentsSha256: c.args.digest() }));
    return sha256(responseBytes(this.content.digest(), calls));
  }
}

/**
 * SHA-256 of the UTF-8 of a text given in pieces, equal to the digest of the pieces joined: a high
 * surrogate ending one piece waits for the next (a pair split over two pieces is one code point). The
 * hasher takes the text itself: its UTF-8 is what TextEncoder writes, a lone surrogate included (U+FFFD;
 * tests), without a byte array per piece.
 */
class TextHasher {
  private readonly hasher = new Bun.CryptoHasher("sha256");
  private held = "";

  update(text: string): void {
    if (text.length === 0) return;
    const whole = this.held === "" ? text : this.held + text;
    const last = whole.charCodeAt(whole.length - 1);
    if (last >= 0xd800 && last <= 0xdbff) {
      this.held = whole.slice(-1);
      if (whole.length > 1) this.hasher.update(whole.slice(0, -1));
      return;
    }
    this.held = "";
    this.hasher.update(whole);
  }

  digest(): Uint8Array {
    const copy = this.hasher.copy();
    if (this.held) copy.update(this.held);
    return new Uint8Array(copy.digest());
  }
}
