/**
 * The receipt check on the thread pool (src/fleet/sealed-channel.ts verifyReceiptThen, through
 * src/fleet/attempt-frames.ts): the same verdicts as the synchronous check; a forged receipt after content
 * leaves the content relayed and ends the attempt as invalid output, never complete; until the verdict no
 * terminal event is queued; concurrent attempts' receipts are each checked against their own answer.
 * While the coordinator is quiet (FrameContext.inlineReceipts) the same check runs at once, same verdicts.
 */
import { describe, expect, test } from "bun:test";
import { type IdentityKey, parseIdentityKey, SoftwareIdentity } from "../../../attestation/provider/index.ts";
import { ChunkOpener, ChunkSealer } from "../../../src/crypto/chunks.ts";
import { toBase64url } from "../../../src/crypto/encoding.ts";
import { ResponseDigest, receiptBytes, sha256 } from "../../../src/crypto/receipts.ts";
import { Attempt, type AttemptEvent } from "../../../src/fleet/attempt.ts";
import { applyAttemptFrame, type FrameContext, type FrameOutcome } from "../../../src/fleet/attempt-frames.ts";
import { FleetLoad, INLINE_RECEIPTS_UP_TO } from "../../../src/fleet/fleet-load.ts";
import { type ReceiptSigner, sealedFailure, verifyReceipt, verifyReceiptThen } from "../../../src/fleet/sealed-channel.ts";

const encoder = new TextEncoder();
const USAGE = { prompt_tokens: 5, completion_tokens: 2 };
const identity = SoftwareIdentity.generate();
const identityKey: IdentityKey = parseIdentityKey(identity.publicKey());
const signer: ReceiptSigner = {
  attestation: { level: "self_signed", secureEnclave: false, mdaVerified: false, identityKey },
  trust: "self_signed",
};
const ctx: FrameContext = { now: () => 1_000, signer };

/** The off-loop check as one promise of the receipt: rejected with the AttestationError of a bad signature. */
const verifyReceiptOffLoop = (s: ReceiptSigner, answer: Parameters<typeof verifyReceipt>[1], end: Parameters<typeof verifyReceipt>[2]) =>
  verifyReceiptThen(s, answer, end, (receipt, refused) => (refused ? Promise.reject(refused) : Promise.resolve(receipt)));

/** One sealed attempt with its provider side: the attempt, the provider's sealer, the request digest. */
function sealedAttempt(requestId: string) {
  const responseKey = crypto.getRandomValues(new Uint8Array(32));
  const attempt = new Attempt(requestId, 0, "prov_1", "acct_1", 0, { release: () => {} });
  const requestSha256 = sha256(encoder.encode(`request of ${requestId}`));
  attempt.sealWith({ opener: new ChunkOpener({ responseKey, requestId, attempt: 0 }), requestSha256, model: "build-a" });
  const provider = new ChunkSealer({ responseKey, requestId, attempt: 0 });
  const frame = (type: "sealed_chunk" | "sealed_complete", payload: unknown) => {
    const sealed = provider.seal(encoder.encode(JSON.stringify(payload)), type === "sealed_complete");
    return { type, request_id: requestId, attempt: 0, seq: sealed.seq, sealed: toBase64url(sealed.ciphertext) } as const;
  };
  /** The provider's signature over this answer (content `text`), by `by`. */
  const sign = (text: string, by = identity) => {
    const digest = new ResponseDigest();
    digest.addContent(text);
    const bytes = receiptBytes({
      requestId,
      modelBuild: "build-a",
      requestSha256,
      responseSha256: digest.digest(),
      usage: { promptTokens: 5, cachedTokens: 0, completionTokens: 2 },
    });
    return toBase64url(by.sign(bytes));
  };
  expect(applyAttemptFrame(attempt, { type: "accepted", request_id: requestId, attempt: 0 }, ctx)).toEqual({});
  return { attempt, frame, sign };
}

function queued(attempt: Attempt): AttemptEvent[] {
  const events: AttemptEvent[] = [];
  while (attempt.backlog > 0) events.push(Bun.peek(attempt.next()) as AttemptEvent);
  return events;
}

describe("receipts verified off the event loop", () => {
  test("a forged receipt after content: the content is relayed, the attempt ends invalid, never complete", async () => {
    const a = sealedAttempt("req_forged");
    expect(applyAttemptFrame(a.attempt, a.frame("sealed_chunk", { content: "hello" }), ctx)).toEqual({ firstContentMs: 1_000 });
    const forged = a.sign("hello", SoftwareIdentity.generate());
    const pending = applyAttemptFrame(
      a.attempt,
      a.frame("sealed_complete", { finish_reason: "stop", usage: USAGE, receipt: { signature: forged } }),
      ctx,
    );
    expect(pending).toBeInstanceOf(Promise);
    expect(a.attempt.done).toBe(false); // nothing terminal before the verdict
    expect(await pending).toEqual({ invalid: "receipt rejected: signature" });
    expect(queued(a.attempt).map((e) => e.type)).toEqual(["accepted", "chunk"]);
    expect(a.attempt.done).toBe(false); // the session ends it (untrust: `invalid`, then the close)
  });

  test("a missing receipt or a malformed signature is refused at once, as before", () => {
    const a = sealedAttempt("req_missing");
    expect(applyAttemptFrame(a.attempt, a.frame("sealed_complete", { finish_reason: "stop", usage: USAGE }), ctx)).toEqual({
      invalid: "receipt rejected: signature",
    });
    const b = sealedAttempt("req_not_base64");
    const outcome = applyAttemptFrame(
      b.attempt,
      b.frame("sealed_complete", { finish_reason: "stop", usage: USAGE, receipt: { signature: "***" } }),
      ctx,
    );
    expect(outcome).toEqual({ invalid: "sealed payload: field 'signature' must be base64url of 16..256 characters" });
  });

  test("concurrent attempts: each receipt is checked against its own answer (no cross-talk)", async () => {
    const attempts = Array.from({ length: 24 }, (_, i) => ({ i, ...sealedAttempt(`req_${i}`) }));
    const pending: Promise<FrameOutcome>[] = [];
    const signatures: string[] = [];
    for (const a of attempts) applyAttemptFrame(a.attempt, a.frame("sealed_chunk", { content: `text ${a.i}` }), ctx);
    for (const a of attempts) {
      // Every third attempt carries the valid receipt of its neighbour's answer; the rest their own.
      const other = attempts[(a.i + 1) % attempts.length] as (typeof attempts)[number];
      const signature = a.i % 3 === 0 ? other.sign(`text ${other.i}`) : a.sign(`text ${a.i}`);
      const outcome = applyAttemptFrame(
        a.attempt,
        a.frame("sealed_complete", { finish_reason: "stop", usage: USAGE, receipt: { signature } }),
        ctx,
      );
      signatures.push(signature);
      pending.push(outcome as Promise<FrameOutcome>);
    }
    const outcomes = await Promise.all(pending);
    expect(outcomes).toEqual(attempts.map((a) => (a.i % 3 === 0 ? { invalid: "receipt rejected: signature" } : {})));
    for (const a of attempts) {
      const last = queued(a.attempt).at(-1);
      if (a.i % 3 === 0) expect(last?.type).toBe("chunk");
      else expect(last).toMatchObject({ type: "complete", receipt: { signature: signatures[a.i], providerKeyId: identityKey.id } });
    }
  });

  test("the same verdicts as the synchronous check", async () => {
    const digest = new ResponseDigest();
    digest.addContent("x");
    const seal = {
      opener: new ChunkOpener({ responseKey: new Uint8Array(32), requestId: "req_v", attempt: 0 }),
      requestSha256: sha256(encoder.encode("r")),
      model: "build-a",
    };
    const answer = { requestId: "req_v", seal, responseSha256: digest.digest() };
    const bytes = receiptBytes({
      requestId: "req_v",
      modelBuild: "build-a",
      requestSha256: seal.requestSha256,
      responseSha256: answer.responseSha256,
      usage: { promptTokens: 5, cachedTokens: 0, completionTokens: 2 },
    });
    const end = (by: SoftwareIdentity) => ({ finish_reason: "stop", usage: USAGE, receipt: { signature: toBase64url(by.sign(bytes)) } });
    const good = end(identity);
    expect(await verifyReceiptOffLoop(signer, answer, good)).toEqual(verifyReceipt(signer, answer, good) as never);
    const bad = end(SoftwareIdentity.generate());
    const verdict = await verifyReceiptOffLoop(signer, answer, bad)?.then(() => "verified", sealedFailure);
    let sync = "verified";
    try {
      verifyReceipt(signer, answer, bad);
    } catch (e) {
      sync = sealedFailure(e);
    }
    expect([verdict, sync]).toEqual(["receipt rejected: signature", "receipt rejected: signature"]);
    // Bytes that are no DER signature at all: refused the same way, and never before the call returns.
    const notDer = { ...good, receipt: { signature: toBase64url(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8])) } };
    let settled = false;
    const pending = verifyReceiptOffLoop(signer, answer, notDer)?.then(
      () => "verified",
      (e: unknown) => {
        settled = true;
        return sealedFailure(e);
      },
    );
    expect(settled).toBe(false);
    expect(await pending).toBe("receipt rejected: signature");
    expect(verifyReceiptOffLoop({ attestation: undefined, trust: "none" }, answer, good)).toBeUndefined();
  });
});

describe("receipts verified inline while the coordinator is quiet", () => {
  const inline: FrameContext = { ...ctx, inlineReceipts: () => true };

  test("a valid receipt completes the attempt at once, without a promise", () => {
    const a = sealedAttempt("req_inline");
    applyAttemptFrame(a.attempt, a.frame("sealed_chunk", { content: "hello" }), inline);
    const signature = a.sign("hello");
    const outcome = applyAttemptFrame(
      a.attempt,
      a.frame("sealed_complete", { finish_reason: "stop", usage: USAGE, receipt: { signature } }),
      inline,
    );
    expect(outcome).toEqual({});
    expect(queued(a.attempt).at(-1)).toMatchObject({ type: "complete", receipt: { signature, providerKeyId: identityKey.id } });
  });

  test("a forged receipt is refused at once: the content relayed, never complete", () => {
    const a = sealedAttempt("req_inline_forged");
    applyAttemptFrame(a.attempt, a.frame("sealed_chunk", { content: "hello" }), inline);
    const forged = a.sign("hello", SoftwareIdentity.generate());
    const outcome = applyAttemptFrame(
      a.attempt,
      a.frame("sealed_complete", { finish_reason: "stop", usage: USAGE, receipt: { signature: forged } }),
      inline,
    );
    expect(outcome).toEqual({ invalid: "receipt rejected: signature" });
    expect(queued(a.attempt).map((e) => e.type)).toEqual(["accepted", "chunk"]);
    // A valid signature over another answer (the content differs) is refused the same way.
    const b = sealedAttempt("req_inline_other");
    applyAttemptFrame(b.attempt, b.frame("sealed_chunk", { content: "hello" }), inline);
    const other = applyAttemptFrame(
      b.attempt,
      b.frame("sealed_complete", { finish_reason: "stop", usage: USAGE, receipt: { signature: b.sign("bye") } }),
      inline,
    );
    expect(other).toEqual({ invalid: "receipt rejected: signature" });
  });

  test("the fleet's load: sessions count attempts in and out; quiet up to INLINE_RECEIPTS_UP_TO", () => {
    const load = new FleetLoad();
    expect(load.quiet()).toBe(true);
    load.running = INLINE_RECEIPTS_UP_TO;
    expect(load.quiet()).toBe(true);
    load.running = INLINE_RECEIPTS_UP_TO + 1;
    expect(load.quiet()).toBe(false);
  });
});
