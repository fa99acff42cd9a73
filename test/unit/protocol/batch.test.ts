/**
 * Batched provider frames (docs/protocol.md "Transport"): a provider whose welcome says `batch_frames`
 * may send the frames of one event-loop turn as one message, a JSON array; the coordinator applies them
 * in order and refuses the whole message at the first invalid frame.
 */
import { describe, expect, test } from "bun:test";
import {
  encode,
  encodeBatch,
  MAX_BATCH_CHARS,
  MAX_BATCH_FRAMES,
  MAX_FRAME_BYTES,
  type ProviderFrame,
} from "../../../src/protocol/frames.ts";
import { ProtocolError, parseCoordinatorFrame, parseProviderMessage } from "../../../src/protocol/parse.ts";
import { WELCOME } from "../../support/frames.ts";

const ids = { request_id: "req_1", attempt: 0 };
const FRAMES: ProviderFrame[] = [
  { type: "accepted", ...ids },
  { type: "chunk", ...ids, seq: 0, delta: { content: "hello" } },
  { type: "complete", ...ids, seq: 1, finish_reason: "stop", usage: { prompt_tokens: 1, completion_tokens: 1 } },
];

describe("batched provider frames", () => {
  test("one frame is sent as itself; several as a JSON array, parsed back in order", () => {
    expect(encodeBatch([encode(FRAMES[0] as ProviderFrame)])).toBe(encode(FRAMES[0] as ProviderFrame));
    const batch = encodeBatch(FRAMES.map(encode));
    expect(batch.startsWith("[")).toBe(true);
    expect(parseProviderMessage(batch)).toEqual(FRAMES);
    expect(parseProviderMessage(encode(FRAMES[1] as ProviderFrame))).toEqual([FRAMES[1] as ProviderFrame]);
    expect(parseProviderMessage(Buffer.from(batch))).toEqual(FRAMES);
  });

  test("an empty batch, an oversized batch, a non-object element or one invalid frame refuses the whole message", () => {
    const heartbeat = JSON.stringify({ type: "heartbeat", status: "idle", warm_models: [], active: 0, queued: 0 });
    expect(() => parseProviderMessage("[]")).toThrow(ProtocolError);
    expect(() =>
      parseProviderMessage(
        `[${Array(MAX_BATCH_FRAMES + 1)
          .fill(heartbeat)
          .join(",")}]`,
      ),
    ).toThrow("1..4096 frames");
    expect(parseProviderMessage(`[${Array(MAX_BATCH_FRAMES).fill(heartbeat).join(",")}]`)).toHaveLength(MAX_BATCH_FRAMES);
    expect(() => parseProviderMessage(`[${heartbeat},7]`)).toThrow(ProtocolError);
    expect(() => parseProviderMessage(`[${heartbeat},{"type":"teleport"}]`)).toThrow("unknown frame type");
    expect(() => parseProviderMessage(`[${heartbeat}`)).toThrow("not JSON");
  });

  test("a batch larger than MAX_FRAME_BYTES is refused; MAX_BATCH_CHARS of any text stays under it", () => {
    expect(MAX_BATCH_CHARS * 3).toBeLessThanOrEqual(MAX_FRAME_BYTES);
    const big = JSON.stringify({ type: "heartbeat", status: "idle", warm_models: ["€".repeat(MAX_FRAME_BYTES / 3)], active: 0, queued: 0 });
    expect(() => parseProviderMessage(`[${big}]`)).toThrow("exceeds");
  });

  test("welcome.batch_frames is read only when it is exactly true (otherwise the provider sends frames one by one)", () => {
    expect(parseCoordinatorFrame(JSON.stringify({ ...WELCOME, batch_frames: true }))).toEqual({ ...WELCOME, batch_frames: true } as never);
    expect(parseCoordinatorFrame(JSON.stringify(WELCOME))).toEqual(WELCOME as never);
    expect(parseCoordinatorFrame(JSON.stringify({ ...WELCOME, batch_frames: "yes" }))).toEqual(WELCOME as never);
  });
});
