/**
 * Binary batches, provider -> coordinator (docs/protocol.md, "Binary batches", has the layout): one
 * event-loop turn's frames in one binary WebSocket message, sealed frames as their bytes (kinds 2-4)
 * instead of base64url inside JSON, any other frame as its JSON (kind 1). Sent only where the hello
 * offered `binary_frames` and the welcome agreed. parseProviderBinary refuses the whole message
 * (ProtocolError) at its first fault; BinaryBatch writes messages on the provider.
 */
import { MAX_BATCH_FRAMES, MAX_FRAME_BYTES, type ProviderFrame } from "./frames.ts";
import { ProtocolError, parseProviderFrame, parseProviderMessage } from "./parse.ts";

/** The first byte of every binary batch. */
export const BINARY_BATCH_VERSION = 1;
export const RECORD_JSON = 1;
export const RECORD_SEALED_CHUNK = 2;
export const RECORD_SEALED_TOOL_CALL = 3;
export const RECORD_SEALED_COMPLETE = 4;
/** Longest request id, in characters (as in JSON frames). */
const MAX_REQUEST_ID = 128;
/** Shortest sealed payload: the AEAD tag alone (an empty final). */
const MIN_SEALED_BYTES = 16;

type SealedType = "sealed_chunk" | "sealed_tool_call" | "sealed_complete";

const KIND_OF: Readonly<Record<SealedType, number>> = {
  sealed_chunk: RECORD_SEALED_CHUNK,
  sealed_tool_call: RECORD_SEALED_TOOL_CALL,
  sealed_complete: RECORD_SEALED_COMPLETE,
};
const TYPE_OF: readonly (SealedType | undefined)[] = [undefined, undefined, "sealed_chunk", "sealed_tool_call", "sealed_complete"];

const UTF8 = new TextEncoder();
/** Unpadded base64url, as src/crypto/encoding.ts writes it (protocol/ does not import crypto/). */
const BASE64URL = { alphabet: "base64url", omitPadding: true } as const;
/** Refuses invalid UTF-8 in a request id; stateless for whole decodes. */
const UTF8_STRICT = new TextDecoder("utf-8", { fatal: true });

function fail(reason: string): never {
  throw new ProtocolError(`binary batch: ${reason}`);
}

/** Refuses a record that runs past the message's end. */
function need(bytes: Uint8Array, at: number, n: number): void {
  if (at + n > bytes.byteLength) fail("record cut short");
}

/** The big-endian u32 at `at` (the caller checked the bounds). */
function u32(bytes: Uint8Array, at: number): number {
  const high = ((bytes[at] as number) << 24) | ((bytes[at + 1] as number) << 16);
  return (high | ((bytes[at + 2] as number) << 8) | (bytes[at + 3] as number)) >>> 0;
}

/**
 * Parses one binary message from a provider into its frames, in order. Sealed frames carry their bytes
 * as views into `bytes` (read before the message handler returns). Throws ProtocolError.
 */
export function parseProviderBinary(bytes: Uint8Array): ProviderFrame[] {
  if (bytes.byteLength > MAX_FRAME_BYTES) fail(`message of ${bytes.byteLength} bytes exceeds ${MAX_FRAME_BYTES}`);
  if (bytes.byteLength < 1 || bytes[0] !== BINARY_BATCH_VERSION) fail(`version must be ${BINARY_BATCH_VERSION}`);
  // No DataView and no closure over `at` per message (a message per turn, per token on a streamed answer).
  const frames: ProviderFrame[] = [];
  let at = 1;
  while (at < bytes.byteLength) {
    if (frames.length === MAX_BATCH_FRAMES) fail(`more than ${MAX_BATCH_FRAMES} records`);
    const kind = bytes[at] as number;
    at += 1;
    if (kind === RECORD_JSON) {
      need(bytes, at, 4);
      const n = u32(bytes, at);
      at += 4;
      need(bytes, at, n);
      frames.push(parseProviderFrame(bytes.subarray(at, at + n)));
      at += n;
      continue;
    }
    const type = TYPE_OF[kind];
    if (type === undefined) fail(`unknown record kind ${kind}`);
    need(bytes, at, 1);
    const idBytes = bytes[at] as number;
    at += 1;
    need(bytes, at, idBytes + 1 + 4 + 4);
    let request_id: string;
    try {
      request_id = UTF8_STRICT.decode(bytes.subarray(at, at + idBytes));
    } catch {
      return fail("request_id is not UTF-8");
    }
    if (request_id.length === 0 || request_id.length > MAX_REQUEST_ID) fail(`request_id must be 1..${MAX_REQUEST_ID} characters`);
    at += idBytes;
    const attempt = bytes[at] as number;
    if (attempt > 64) fail("attempt must be in 0..64");
    const seq = u32(bytes, at + 1);
    if (seq > 2 ** 31) fail(`seq must be in 0..${2 ** 31}`);
    const m = u32(bytes, at + 5);
    at += 9;
    if (m < MIN_SEALED_BYTES) fail(`sealed bytes must be at least ${MIN_SEALED_BYTES}`);
    need(bytes, at, m);
    frames.push({ type, request_id, attempt, seq, sealed: bytes.subarray(at, at + m) });
    at += m;
  }
  if (frames.length === 0) fail("no records");
  return frames;
}

/**
 * One WebSocket message from a provider: a binary batch when it came as bytes on a session that agreed to
 * them (`binary`), else JSON: one frame or a batch (parseProviderMessage). Throws ProtocolError.
 */
export function parseProviderData(data: string | Uint8Array | ArrayBuffer, binary: boolean): ProviderFrame[] {
  if (!binary || typeof data === "string") return parseProviderMessage(data);
  // A plain Uint8Array over the same bytes (not the socket's Buffer): its views are the same kind as
  // every other byte array on the hot path.
  return parseProviderBinary(
    data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
  );
}

/**
 * The provider's side: the records of one message, written into a buffer it reuses; `take` returns the
 * message (a copy of the written bytes) and starts the next. Frames other than the sealed three go as
 * JSON records; `size` says how long the message would be (the caller keeps it under MAX_FRAME_BYTES).
 */
export class BinaryBatch {
  private buffer = new Uint8Array(16 * 1024);
  private view = new DataView(this.buffer.buffer);
  private length = 1;
  private records = 0;

  get size(): number {
    return this.length;
  }

  get count(): number {
    return this.records;
  }

  /** Adds one frame; a sealed one carrying its bytes becomes a sealed record, any other a JSON record. */
  add(frame: ProviderFrame): void {
    if (!isSealed(frame) || typeof frame.sealed === "string") {
      this.addJson(frameJson(frame));
      return;
    }
    const kind = KIND_OF[frame.type];
    const sealed = frame.sealed;
    const id = frame.request_id;
    // UTF-8 of n UTF-16 units is at most 3n bytes.
    this.reserve(1 + 1 + id.length * 3 + 1 + 4 + 4 + sealed.byteLength);
    const start = this.length;
    this.buffer[start] = kind;
    const written = UTF8.encodeInto(id, this.buffer.subarray(start + 2, start + 2 + id.length * 3)).written;
    if (written > 255) {
      // A request id whose UTF-8 does not fit its length byte goes as a JSON record (nothing was counted).
      this.addJson(frameJson(frame));
      return;
    }
    this.buffer[start + 1] = written;
    let at = start + 2 + written;
    this.buffer[at] = frame.attempt;
    this.view.setUint32(at + 1, frame.seq);
    this.view.setUint32(at + 5, sealed.byteLength);
    at += 9;
    this.buffer.set(sealed, at);
    this.length = at + sealed.byteLength;
    this.records++;
  }

  /** Drops what the batch holds. */
  clear(): void {
    this.length = 1;
    this.records = 0;
  }

  /** The message so far (its own bytes); the batch is empty again. */
  take(): Uint8Array {
    this.buffer[0] = BINARY_BATCH_VERSION;
    const message = this.buffer.slice(0, this.length);
    this.length = 1;
    this.records = 0;
    return message;
  }

  private addJson(text: string): void {
    this.reserve(1 + 4 + text.length * 3);
    const start = this.length;
    this.buffer[start] = RECORD_JSON;
    const written = UTF8.encodeInto(text, this.buffer.subarray(start + 5)).written;
    this.view.setUint32(start + 1, written);
    this.length = start + 5 + written;
    this.records++;
  }

  private reserve(bytes: number): void {
    if (this.length + bytes <= this.buffer.byteLength) return;
    let size = this.buffer.byteLength * 2;
    while (size < this.length + bytes) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.buffer.subarray(0, this.length));
    this.buffer = grown;
    this.view = new DataView(grown.buffer);
  }
}

/** One provider frame as JSON text: a sealed frame's bytes as base64url (its JSON form). */
export function frameJson(frame: ProviderFrame): string {
  if (isSealed(frame) && typeof frame.sealed !== "string") return JSON.stringify({ ...frame, sealed: frame.sealed.toBase64(BASE64URL) });
  return JSON.stringify(frame);
}

function isSealed(frame: ProviderFrame): frame is Extract<ProviderFrame, { type: SealedType }> {
  return frame.type === "sealed_chunk" || frame.type === "sealed_tool_call" || frame.type === "sealed_complete";
}
