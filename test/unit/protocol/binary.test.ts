/**
 * Binary batches (src/protocol/binary.ts, docs/protocol.md "Binary batches"): the independent vector
 * (test/fixtures/crypto/binary-batch.json, written by generate.py from the documented layout) both ways;
 * round trips of every frame kind; and every fault refused for the whole message with ProtocolError.
 */
import { describe, expect, test } from "bun:test";
import { fromBase64url, fromHex, toBase64url, toHex } from "../../../src/crypto/encoding.ts";
import {
  BINARY_BATCH_VERSION,
  BinaryBatch,
  frameJson,
  parseProviderBinary,
  parseProviderData,
  RECORD_JSON,
  RECORD_SEALED_CHUNK,
} from "../../../src/protocol/binary.ts";
import { MAX_BATCH_FRAMES, MAX_FRAME_BYTES, type ProviderFrame } from "../../../src/protocol/frames.ts";
import { ProtocolError } from "../../../src/protocol/parse.ts";
import vector from "../../fixtures/crypto/binary-batch.json";

type Frame = Record<string, unknown>;
/** A frame with its sealed bytes as base64url (the JSON form), to compare with the vector's frames. */
const asJson = (f: ProviderFrame): Frame => JSON.parse(frameJson(f)) as Frame;
/** The vector's frames as the provider holds them: sealed bytes, not text. */
const withBytes = (f: Frame): ProviderFrame =>
  (typeof f.sealed === "string" ? { ...f, sealed: fromBase64url(f.sealed) } : f) as unknown as ProviderFrame;

function refused(bytes: Uint8Array): string {
  try {
    parseProviderBinary(bytes);
  } catch (e) {
    expect(e).toBeInstanceOf(ProtocolError);
    return (e as Error).message;
  }
  throw new Error("accepted");
}

const tag = new Uint8Array(16).fill(7);
const chunk = (seq: number, sealed: Uint8Array = tag): ProviderFrame => ({
  type: "sealed_chunk",
  request_id: "req_a",
  attempt: 1,
  seq,
  sealed,
});

describe("binary batches", () => {
  test("the independent vector parses to its frames, and the batch writer produces its bytes", () => {
    const message = fromHex(vector.message);
    expect(parseProviderBinary(message).map(asJson)).toEqual(vector.frames);
    const batch = new BinaryBatch();
    for (const f of vector.frames) batch.add(withBytes(f));
    expect(batch.count).toBe(vector.frames.length);
    expect(toHex(batch.take())).toBe(vector.message);
    // Taken: the next message starts empty.
    expect(batch.count).toBe(0);
  });

  test("every frame kind round-trips; a sealed frame given as text goes as a JSON record", () => {
    const frames: ProviderFrame[] = [
      { type: "heartbeat", status: "serving", warm_models: ["org/m"], active: 1, queued: 0 },
      { type: "accepted", request_id: "req_é", attempt: 64 },
      { type: "sealed_tool_call", request_id: "req_é", attempt: 64, seq: 2 ** 31, sealed: new Uint8Array(300).fill(1) },
      { type: "sealed_complete", request_id: "req_é", attempt: 64, seq: 0, sealed: tag },
      { type: "sealed_chunk", request_id: "r", attempt: 0, seq: 5, sealed: toBase64url(tag) },
      { type: "error", request_id: "r", attempt: 0, code: "busy" },
    ];
    const batch = new BinaryBatch();
    for (const f of frames) batch.add(f);
    const message = batch.take();
    expect(message[0]).toBe(BINARY_BATCH_VERSION);
    expect(parseProviderBinary(message).map(asJson)).toEqual(frames.map(asJson));
    // The text-carrying sealed frame is the 5th record: a JSON record, parsed back with its text.
    expect(parseProviderBinary(message)[4]).toEqual(frames[4] as ProviderFrame);
  });

  test("a request id whose UTF-8 exceeds the length byte goes as a JSON record, and parses back", () => {
    const id = "é".repeat(128); // 128 characters (the protocol's limit), 256 bytes of UTF-8
    const batch = new BinaryBatch();
    const frame: ProviderFrame = { type: "sealed_chunk", request_id: id, attempt: 0, seq: 0, sealed: tag };
    batch.add(frame);
    batch.add(chunk(1));
    const message = batch.take();
    expect(message[1]).toBe(RECORD_JSON);
    expect(parseProviderBinary(message).map(asJson)).toEqual([frame, chunk(1)].map(asJson));
  });

  test("a batch grows past its first buffer and keeps every byte", () => {
    const batch = new BinaryBatch();
    const big = Array.from({ length: 40 }, (_, i) => chunk(i, new Uint8Array(1000).fill(i)));
    for (const f of big) batch.add(f);
    expect(batch.size).toBeGreaterThan(40_000);
    const parsed = parseProviderBinary(batch.take());
    expect(parsed.map(asJson)).toEqual(big.map(asJson));
  });

  test("bytes are read as a binary batch only where the session agreed; text is always JSON", () => {
    const batch = new BinaryBatch();
    batch.add(chunk(0));
    const message = batch.take();
    expect(parseProviderData(message, true)).toHaveLength(1);
    expect(
      parseProviderData(message.buffer.slice(message.byteOffset, message.byteOffset + message.byteLength) as ArrayBuffer, true),
    ).toHaveLength(1);
    expect(() => parseProviderData(message, false)).toThrow(ProtocolError); // not JSON
    const json = `{"type":"accepted","request_id":"r","attempt":0}`;
    expect(parseProviderData(json, true)).toEqual([{ type: "accepted", request_id: "r", attempt: 0 }]);
    expect(parseProviderData(new TextEncoder().encode(json), false)).toEqual([{ type: "accepted", request_id: "r", attempt: 0 }]);
  });

  test("every fault refuses the whole message", () => {
    const one = (() => {
      const b = new BinaryBatch();
      b.add(chunk(0));
      return b.take();
    })();
    const patched = (at: number, value: number) => {
      const copy = one.slice();
      copy[at] = value;
      return copy;
    };
    const u32At = (bytes: Uint8Array, at: number, value: number) => {
      const copy = bytes.slice();
      new DataView(copy.buffer).setUint32(at, value);
      return copy;
    };
    // Layout of `one`: version, kind, id length 5, "req_a", attempt, seq (4), length (4), 16 bytes.
    expect(refused(new Uint8Array(0))).toBe("binary batch: version must be 1");
    expect(refused(patched(0, 2))).toBe("binary batch: version must be 1");
    expect(refused(new Uint8Array([BINARY_BATCH_VERSION]))).toBe("binary batch: no records");
    expect(refused(patched(1, 9))).toBe("binary batch: unknown record kind 9");
    expect(refused(patched(1, 0))).toBe("binary batch: unknown record kind 0");
    expect(refused(one.subarray(0, one.byteLength - 1))).toBe("binary batch: record cut short");
    expect(refused(one.subarray(0, 4))).toBe("binary batch: record cut short");
    expect(refused(patched(2, 0))).toBe("binary batch: request_id must be 1..128 characters");
    expect(refused(patched(3, 0xff))).toBe("binary batch: request_id is not UTF-8");
    expect(refused(patched(8, 65))).toBe("binary batch: attempt must be in 0..64");
    expect(refused(u32At(one, 9, 2 ** 31 + 1))).toBe(`binary batch: seq must be in 0..${2 ** 31}`);
    expect(refused(u32At(one, 13, 15))).toBe("binary batch: sealed bytes must be at least 16");
    expect(refused(u32At(one, 13, 17))).toBe("binary batch: record cut short");
    // Bytes after the last record begin another record: an unknown kind, or one cut short.
    expect(refused(new Uint8Array([...one, 0]))).toBe("binary batch: unknown record kind 0");
    expect(refused(new Uint8Array([...one, RECORD_SEALED_CHUNK]))).toBe("binary batch: record cut short");
    // A JSON record holding no valid frame, or more than one frame (a batch array).
    const json = (text: string) => {
      const t = new TextEncoder().encode(text);
      const out = new Uint8Array(1 + 5 + t.byteLength);
      out[0] = BINARY_BATCH_VERSION;
      out[1] = RECORD_JSON;
      new DataView(out.buffer).setUint32(2, t.byteLength);
      out.set(t, 6);
      return out;
    };
    expect(refused(json("{nope"))).toBe("frame is not JSON");
    expect(refused(json(`[{"type":"accepted","request_id":"r","attempt":0}]`))).toBe("frame must be an object");
    expect(refused(json(`{"type":"hello!"}`))).toBe("unknown frame type");
    const long = new Uint8Array(200).fill(0x61);
    const idTooLong = new Uint8Array([BINARY_BATCH_VERSION, RECORD_SEALED_CHUNK, 200, ...long, 0, 0, 0, 0, 0, 0, 0, 0, 16, ...tag]);
    expect(refused(idTooLong)).toBe("binary batch: request_id must be 1..128 characters");
  });

  test("at most MAX_BATCH_FRAMES records and MAX_FRAME_BYTES bytes", () => {
    const batch = new BinaryBatch();
    for (let i = 0; i < MAX_BATCH_FRAMES; i++) batch.add(chunk(i));
    const full = batch.take();
    expect(parseProviderBinary(full)).toHaveLength(MAX_BATCH_FRAMES);
    for (let i = 0; i <= MAX_BATCH_FRAMES; i++) batch.add(chunk(i));
    expect(refused(batch.take())).toBe(`binary batch: more than ${MAX_BATCH_FRAMES} records`);
    batch.add(chunk(0, new Uint8Array(MAX_FRAME_BYTES)));
    expect(refused(batch.take())).toMatch(/^binary batch: message of \d+ bytes exceeds 1048576$/);
  });
});
