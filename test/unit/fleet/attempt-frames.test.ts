/**
 * One attempt's frames (src/fleet/attempt-frames.ts), without a socket: an attempt of a sealed session
 * refuses a plaintext answer from its start, before its request is even sealed (the window while HPKE
 * runs), and a sealed frame that early is a protocol error; a plaintext session relays plaintext frames.
 */
import { describe, expect, test } from "bun:test";
import { Attempt } from "../../../src/fleet/attempt.ts";
import { applyAttemptFrame, type FrameContext } from "../../../src/fleet/attempt-frames.ts";
import { ProtocolError } from "../../../src/protocol/parse.ts";

const ctx: FrameContext = { now: () => 1_000, signer: { attestation: undefined, trust: "none" } };
const ids = { request_id: "req_1", attempt: 0 };

function started(sealedSession: boolean): Attempt {
  const attempt = new Attempt("req_1", 0, "prov_1", "acct_1", 0, { release: () => {} });
  if (sealedSession) attempt.expectSealed();
  expect(applyAttemptFrame(attempt, { type: "accepted", ...ids }, ctx)).toEqual({});
  return attempt;
}

describe("attempt frames", () => {
  test("a sealed session's attempt refuses a plaintext chunk, tool call or complete before sealWith", () => {
    const frames = [
      { type: "chunk", seq: 0, delta: { content: "hi" }, ...ids },
      { type: "tool_call", seq: 0, tool_call: { index: 0, id: "c", name: "f", arguments: "{}" }, ...ids },
      { type: "complete", seq: 0, finish_reason: "stop", usage: { prompt_tokens: 1, completion_tokens: 1 }, ...ids },
    ] as const;
    for (const frame of frames) {
      expect(applyAttemptFrame(started(true), frame as never, ctx)).toEqual({ invalid: "plaintext frame in a sealed session" });
    }
  });

  test("a sealed frame before the request was sealed is a protocol error", () => {
    const frame = { type: "sealed_chunk", seq: 0, sealed: "AAAA", ...ids } as const;
    expect(() => applyAttemptFrame(started(true), frame as never, ctx)).toThrow(
      new ProtocolError("sealed frame before its request was sent"),
    );
    expect(() => applyAttemptFrame(started(false), frame as never, ctx)).toThrow(new ProtocolError("sealed frame in a plaintext session"));
  });

  test("a plaintext session's attempt relays a plaintext chunk", () => {
    const attempt = started(false);
    expect(applyAttemptFrame(attempt, { type: "chunk", seq: 0, delta: { content: "hi" }, ...ids } as never, ctx).invalid).toBeUndefined();
    expect(attempt.relayed.chunks).toBe(1);
  });
});
