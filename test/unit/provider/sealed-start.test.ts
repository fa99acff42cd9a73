/**
 * Attempts.startSealed (src/provider/attempts.ts, sealed-attempt.ts) with real session keys and HPKE:
 * under session keys already set up a request opens at once (`accepted` sent before startSealed returns,
 * no promise on the way); requests that arrive while the set-up runs wait for it and open in arrival
 * order; a request sealed with its own HPKE setup (`enc`) opens asynchronously; one that does not open
 * (garbage, a replayed `n`) is refused with invalid_request and nothing runs.
 */
import { describe, expect, test } from "bun:test";
import { toBase64url } from "../../../src/crypto/encoding.ts";
import { generateX25519KeyPair, sealRequest } from "../../../src/crypto/seal.ts";
import { openRecipientSession, openSenderSession, type SessionOpener } from "../../../src/crypto/session.ts";
import { createLogger } from "../../../src/observability/logger.ts";
import { PROTOCOL_VERSION, type ProviderFrame, type SealedInference } from "../../../src/protocol/frames.ts";
import { Attempts } from "../../../src/provider/attempts.ts";
import { createEchoEngine } from "../../../src/provider/engines/echo.ts";
import { waitFor } from "../../support/wait.ts";

const MODEL = "org/echo-build";
const BODY = new TextEncoder().encode(JSON.stringify({ messages: [{ role: "user", content: "hi there" }], max_tokens: 8 }));
const binding = (requestId: string) => ({ protocolVersion: PROTOCOL_VERSION, requestId, attempt: 0 });

async function session() {
  const keys = await generateX25519KeyPair();
  const sessionBinding = { protocolVersion: PROTOCOL_VERSION, providerId: "prov_1" };
  const { enc, sealer } = await openSenderSession(keys.publicKey, sessionBinding);
  const opener = () => openRecipientSession(keys.privateKey, enc, sessionBinding);
  return { keys, sealer, opener };
}

function frame(requestId: string, fields: Partial<SealedInference>): SealedInference {
  return {
    type: "sealed_inference",
    request_id: requestId,
    attempt: 0,
    model: MODEL,
    first_content_deadline_ms: 10_000,
    ciphertext: "",
    ...fields,
  };
}

function attempts() {
  const sent: ProviderFrame[] = [];
  const a = new Attempts(
    createEchoEngine({ models: [MODEL] }),
    createLogger("error", () => {}),
    { changed: () => {}, completed: () => {} },
  );
  return { a, sent, send: (f: ProviderFrame) => void sent.push(f) };
}

const kinds = (sent: ProviderFrame[], requestId: string) =>
  sent.filter((f) => "request_id" in f && f.request_id === requestId).map((f) => f.type);

describe("Attempts.startSealed", () => {
  test("under session keys set up: accepted before startSealed returns; the answer sealed", async () => {
    const s = await session();
    const ready = await s.opener();
    const { a, sent, send } = attempts();
    const sealed = s.sealer.seal(BODY, binding("req_1"));
    a.startSealed(
      frame("req_1", { n: sealed.n, ciphertext: toBase64url(sealed.ciphertext) }),
      { privateKey: undefined, session: Promise.resolve(ready), ready },
      send,
    );
    expect(kinds(sent, "req_1")).toEqual(["accepted"]);
    await waitFor(() => kinds(sent, "req_1").includes("sealed_complete"), "the sealed answer");
  });

  test("while the set-up runs, requests wait for it and open in arrival order", async () => {
    const s = await session();
    let release: (o: SessionOpener) => void = () => {};
    const pending = new Promise<SessionOpener>((resolve) => {
      release = resolve;
    });
    const { a, sent, send } = attempts();
    const keys = { privateKey: undefined, session: pending, ready: undefined };
    for (const id of ["req_a", "req_b", "req_c"]) {
      const sealed = s.sealer.seal(BODY, binding(id));
      a.startSealed(frame(id, { n: sealed.n, ciphertext: toBase64url(sealed.ciphertext) }), keys, send);
    }
    await Bun.sleep(10);
    expect(sent).toEqual([]);
    release(await s.opener());
    await waitFor(() => sent.filter((f) => f.type === "accepted").length === 3, "three accepted");
    expect(sent.filter((f) => f.type === "accepted").map((f) => ("request_id" in f ? f.request_id : ""))).toEqual([
      "req_a",
      "req_b",
      "req_c",
    ]);
    expect(sent.some((f) => f.type === "error")).toBe(false);
  });

  test("a request with its own HPKE setup opens asynchronously", async () => {
    const keys = await generateX25519KeyPair();
    const { a, sent, send } = attempts();
    const sealed = await sealRequest(keys.publicKey, BODY, binding("req_h"));
    a.startSealed(
      frame("req_h", { enc: toBase64url(sealed.enc), ciphertext: toBase64url(sealed.ciphertext) }),
      { privateKey: keys.privateKey, session: undefined, ready: undefined },
      send,
    );
    expect(sent).toEqual([]);
    await waitFor(() => kinds(sent, "req_h").includes("sealed_complete"), "the sealed answer");
  });

  test("garbage and a replayed n are refused with invalid_request; nothing runs", async () => {
    const s = await session();
    const ready = await s.opener();
    const { a, sent, send } = attempts();
    const keys = { privateKey: undefined, session: Promise.resolve(ready), ready };
    const sealed = s.sealer.seal(BODY, binding("req_1"));
    const good = frame("req_1", { n: sealed.n, ciphertext: toBase64url(sealed.ciphertext) });
    a.startSealed(good, keys, send);
    a.startSealed({ ...good, request_id: "req_replay" }, keys, send);
    a.startSealed(frame("req_bad", { n: 9, ciphertext: "not base64url!" }), keys, send);
    const refused = sent.filter((f) => f.type === "error");
    expect(refused.map((f) => ("request_id" in f ? f.request_id : ""))).toEqual(["req_replay", "req_bad"]);
    expect(refused.every((f) => f.type === "error" && f.code === "invalid_request")).toBe(true);
    expect(a.has("req_replay", 0) || a.has("req_bad", 0)).toBe(false);
    await waitFor(() => kinds(sent, "req_1").includes("sealed_complete"), "the good request's answer");
  });
});
