/**
 * The sealed hop without a socket (src/fleet/sealed-channel.ts): a request sealed by its own HPKE setup
 * and under session keys opens on the provider's side; the answer's sealed frames open in order; receipts
 * verify. Negative cases: a flipped bit, a replayed, reordered or late frame, a final flag lied about,
 * another attempt's key, a payload that is not JSON or out of shape, and receipts missing, signed by
 * another key, or over another response or usage.
 */
import { describe, expect, test } from "bun:test";
import { AttestationError, parseIdentityKey, SoftwareIdentity } from "../../../attestation/provider/index.ts";
import type { ProviderAttestation } from "../../../attestation/provider/levels.ts";
import { ChunkOpener, ChunkSealer } from "../../../src/crypto/chunks.ts";
import { fromBase64url, toBase64url, toHex } from "../../../src/crypto/encoding.ts";
import { ResponseDigest, receiptBytes, sha256 } from "../../../src/crypto/receipts.ts";
import { generateX25519KeyPair, openRequest } from "../../../src/crypto/seal.ts";
import { openRecipientSession, openSenderSession } from "../../../src/crypto/session.ts";
import type { AttemptSeal } from "../../../src/fleet/attempt.ts";
import {
  type Final,
  openSealed,
  type ReceiptSigner,
  SealedChannel,
  type SealedFrame,
  sealedFailure,
  verifyReceipt,
} from "../../../src/fleet/sealed-channel.ts";
import { type Inference, PROTOCOL_VERSION, type Usage } from "../../../src/protocol/frames.ts";

const encoder = new TextEncoder();
const REQUEST: Inference = {
  type: "inference",
  request_id: "req_1",
  attempt: 2,
  model: "build-a",
  first_content_deadline_ms: 30_000,
  request: { messages: [{ role: "user", content: "hello" }], max_tokens: 8 },
};
const SERIALIZED = JSON.stringify(REQUEST.request);
const BINDING = { protocolVersion: PROTOCOL_VERSION, requestId: "req_1", attempt: 2 };
const SESSION = { protocolVersion: PROTOCOL_VERSION, providerId: "prov_1" };
const USAGE: Usage = { prompt_tokens: 5, completion_tokens: 2 };

interface Hop {
  readonly seal: AttemptSeal;
  readonly wire: Record<string, unknown>;
  /** The request plaintext as the provider opened it. */
  readonly plaintext: string;
  /** The provider's sealer of the answer. */
  readonly provider: ChunkSealer;
}

/** Seals REQUEST to a fresh provider key and opens it on the provider's side. */
async function hop(sessionKeys: boolean): Promise<Hop & { readonly synchronous: boolean }> {
  const keys = await generateX25519KeyPair();
  const session = sessionKeys ? await openSenderSession(keys.publicKey, SESSION) : undefined;
  const pending = new SealedChannel(keys.publicKey, session?.sealer).seal(REQUEST, SERIALIZED);
  const synchronous = !(pending instanceof Promise);
  const { text, seal } = await pending;
  const wire = JSON.parse(text) as Record<string, unknown>;
  const ciphertext = fromBase64url(wire.ciphertext as string);
  const opened = session
    ? (await openRecipientSession(keys.privateKey, session.enc, SESSION)).open(wire.n as number, ciphertext, BINDING)
    : await openRequest(keys.privateKey, fromBase64url(wire.enc as string), ciphertext, BINDING);
  const provider = new ChunkSealer({ responseKey: opened.responseKey, requestId: "req_1", attempt: 2 });
  return { seal, wire, plaintext: new TextDecoder().decode(opened.plaintext), provider, synchronous };
}

/** The provider's next sealed frame carrying `payload` (JSON, or raw bytes). */
function frame(provider: ChunkSealer, type: SealedFrame["type"], payload: unknown, final = type === "sealed_complete"): SealedFrame {
  const bytes = payload instanceof Uint8Array ? payload : encoder.encode(JSON.stringify(payload));
  const sealed = provider.seal(bytes, final);
  return { type, request_id: "req_1", attempt: 2, seq: sealed.seq, sealed: toBase64url(sealed.ciphertext) };
}

/** The reason the session would end with for what `run` throws. */
function failure(run: () => unknown): string {
  try {
    run();
  } catch (e) {
    return sealedFailure(e);
  }
  throw new Error("expected a failure");
}

describe.each([
  ["its own HPKE setup", false],
  ["session keys", true],
])("a request sealed by %s", (_, sessionKeys) => {
  test("opens on the provider's side, bound to the request; the answer opens in order", async () => {
    const h = await hop(sessionKeys);
    expect({ synchronous: h.synchronous, plaintext: h.plaintext, model: h.seal.model }).toEqual({
      synchronous: sessionKeys,
      plaintext: SERIALIZED,
      model: "build-a",
    });
    expect(toHex(h.seal.requestSha256)).toBe(toHex(sha256(encoder.encode(SERIALIZED))));
    const { ciphertext, enc, n, ...head } = h.wire;
    expect(head).toEqual({
      type: "sealed_inference",
      request_id: "req_1",
      attempt: 2,
      model: "build-a",
      first_content_deadline_ms: 30_000,
    });
    expect([typeof ciphertext, sessionKeys ? n : typeof enc]).toEqual(["string", sessionKeys ? 1 : "string"]);
    const opened = [
      openSealed(h.seal.opener, frame(h.provider, "sealed_chunk", { content: "hi" })),
      openSealed(h.seal.opener, frame(h.provider, "sealed_tool_call", { index: 0, id: "call_1", name: "f", arguments: "{}" })),
      openSealed(h.seal.opener, frame(h.provider, "sealed_complete", { finish_reason: "stop", usage: USAGE })),
    ];
    expect(opened).toEqual([
      { type: "chunk", delta: { content: "hi" } },
      { type: "tool_call", call: { index: 0, id: "call_1", name: "f", arguments: "{}" } },
      { type: "complete", end: { finish_reason: "stop", usage: USAGE } },
    ]);
  });
});

describe("opening a sealed frame refuses", () => {
  test("a flipped bit", async () => {
    const h = await hop(false);
    const f = frame(h.provider, "sealed_chunk", { content: "hi" });
    const bytes = fromBase64url(f.sealed as string);
    bytes[0] = (bytes[0] as number) ^ 1;
    expect(failure(() => openSealed(h.seal.opener, { ...f, sealed: toBase64url(bytes) }))).toBe("sealed frame rejected: chunk_auth_failed");
  });

  test("a replayed frame, and every frame after a failure", async () => {
    const h = await hop(false);
    const f = frame(h.provider, "sealed_chunk", { content: "hi" });
    openSealed(h.seal.opener, f);
    expect(failure(() => openSealed(h.seal.opener, f))).toBe("sealed frame rejected: chunk_replayed");
    const next = frame(h.provider, "sealed_chunk", { content: "again" });
    expect(failure(() => openSealed(h.seal.opener, next))).toBe("sealed frame rejected: chunk_replayed");
  });

  test("a frame out of order", async () => {
    const h = await hop(true);
    frame(h.provider, "sealed_chunk", { content: "skipped" });
    const second = frame(h.provider, "sealed_chunk", { content: "second" });
    expect(failure(() => openSealed(h.seal.opener, second))).toBe("sealed frame rejected: chunk_reordered");
  });

  test("a frame after the final one", async () => {
    const h = await hop(false);
    openSealed(h.seal.opener, frame(h.provider, "sealed_complete", { finish_reason: "stop", usage: USAGE }));
    const late = { type: "sealed_chunk", request_id: "req_1", attempt: 2, seq: 1, sealed: toBase64url(new Uint8Array(32)) } as const;
    expect(failure(() => openSealed(h.seal.opener, late))).toBe("sealed frame rejected: chunk_after_final");
  });

  test("a complete whose chunk was not sealed as final, and a final sent as a chunk", async () => {
    const a = await hop(false);
    const notFinal = frame(a.provider, "sealed_chunk", { finish_reason: "stop", usage: USAGE });
    expect(failure(() => openSealed(a.seal.opener, { ...notFinal, type: "sealed_complete" }))).toBe(
      "sealed frame rejected: chunk_auth_failed",
    );
    const b = await hop(false);
    const final = frame(b.provider, "sealed_complete", { content: "x" });
    expect(failure(() => openSealed(b.seal.opener, { ...final, type: "sealed_chunk" }))).toBe("sealed frame rejected: chunk_auth_failed");
  });

  test("another attempt's key", async () => {
    const [h, other] = [await hop(false), await hop(false)];
    const f = frame(other.provider, "sealed_chunk", { content: "hi" });
    expect(failure(() => openSealed(h.seal.opener, f))).toBe("sealed frame rejected: chunk_auth_failed");
    const elsewhere = new ChunkOpener({ responseKey: new Uint8Array(32), requestId: "req_1", attempt: 2 });
    expect(failure(() => openSealed(elsewhere, frame(h.provider, "sealed_chunk", { content: "hi" })))).toBe(
      "sealed frame rejected: chunk_auth_failed",
    );
  });

  test("a payload that is not JSON, or out of shape", async () => {
    const h = await hop(false);
    expect(failure(() => openSealed(h.seal.opener, frame(h.provider, "sealed_chunk", encoder.encode("{not json"))))).toBe(
      "sealed frame is not JSON",
    );
    const g = await hop(false);
    expect(failure(() => openSealed(g.seal.opener, frame(g.provider, "sealed_chunk", { content: 5 })))).toBe(
      "sealed payload: delta.content must be a string",
    );
  });
});

describe("verifyReceipt", () => {
  const identity = SoftwareIdentity.generate();
  const identityKey = parseIdentityKey(identity.publicKey());
  const attested: ReceiptSigner = {
    attestation: { level: "self_signed", secureEnclave: false, mdaVerified: false, identityKey } satisfies ProviderAttestation,
    trust: "self_signed",
  };
  const seal: AttemptSeal = {
    opener: new ChunkOpener({ responseKey: new Uint8Array(32), requestId: "req_1", attempt: 2 }),
    requestSha256: sha256(encoder.encode(SERIALIZED)),
    model: "build-a",
  };
  const digest = new ResponseDigest();
  digest.addContent("hello there");
  const responseSha256 = digest.digest();
  const answer = { requestId: "req_1", seal, responseSha256 };
  const sign = (by: SoftwareIdentity, claims: { responseSha256?: Uint8Array; usage?: Usage } = {}) => {
    const usage = claims.usage ?? USAGE;
    const bytes = receiptBytes({
      requestId: "req_1",
      modelBuild: "build-a",
      requestSha256: seal.requestSha256,
      responseSha256: claims.responseSha256 ?? responseSha256,
      usage: { promptTokens: usage.prompt_tokens, cachedTokens: usage.cached_tokens ?? 0, completionTokens: usage.completion_tokens },
    });
    return toBase64url(by.sign(bytes));
  };
  const end = (signature?: string): Final => ({ finish_reason: "stop", usage: USAGE, ...(signature ? { receipt: { signature } } : {}) });
  const rejected = (signer: ReceiptSigner, final: Final) => failure(() => verifyReceipt(signer, answer, final));

  test("a receipt signed by the identity key over the request, response and usage", () => {
    const signature = sign(identity);
    expect(verifyReceipt(attested, answer, end(signature))).toEqual({
      signature,
      responseHash: toHex(responseSha256),
      requestHash: toHex(seal.requestSha256),
      modelBuild: "build-a",
      providerKeyId: identityKey.id,
      trustLevel: "self_signed",
    });
  });

  test("a provider without a verified identity key signs nothing", () => {
    expect(verifyReceipt({ attestation: undefined, trust: "none" }, answer, end(sign(identity)))).toBeUndefined();
    const unproven = { attestation: { level: "none", secureEnclave: false, mdaVerified: false }, trust: "none" } as const;
    expect(verifyReceipt(unproven, answer, end())).toBeUndefined();
  });

  test("refuses a missing receipt, another key, another response, other usage", () => {
    const other = digest.digest().slice();
    other[0] = (other[0] as number) ^ 1;
    expect([
      rejected(attested, end()),
      rejected(attested, end(sign(SoftwareIdentity.generate()))),
      rejected(attested, end(sign(identity, { responseSha256: other }))),
      rejected(attested, end(sign(identity, { usage: { prompt_tokens: 5, completion_tokens: 3 } }))),
    ]).toEqual(Array(4).fill("receipt rejected: signature"));
    expect(() => verifyReceipt(attested, answer, end())).toThrow(AttestationError);
  });
});
