/**
 * The parsers of protocol v2 frames (src/protocol/frames.ts, docs/protocol.md), for both binaries. A frame
 * that is not JSON, has an unknown `type`, a missing or mistyped field, a value outside its vocabulary
 * or bounds, or exceeds its size limit throws ProtocolError; the receiver ends the session with that
 * reason (never with content).
 */
import { type MessageFault, readChatMessages } from "./chat-messages.ts";
import {
  CANCEL_REASONS,
  type CoordinatorFrame,
  type Delta,
  type EngineRequestBody,
  type Hello,
  MAX_BATCH_FRAMES,
  MAX_BUILD_ID,
  MAX_CONCURRENCY,
  MAX_FRAME_BYTES,
  MAX_INFERENCE_FRAME_BYTES,
  MAX_MODELS_PER_HELLO,
  MAX_TOKENS_LIMIT,
  MAX_TOOL_CALL_ID,
  MAX_TOOL_CALLS,
  MAX_TOOL_NAME,
  type ModelWarning,
  PROVIDER_ERROR_CODES,
  PROVIDER_STATUSES,
  type ProviderFrame,
  type ServedModel,
  type ToolCallDelta,
  type Usage,
} from "./frames.ts";

/** Frames that arrive as bytes are read as UTF-8 (invalid sequences become U+FFFD, then fail as JSON or a field). */
const UTF8 = new TextDecoder();

export class ProtocolError extends Error {
  override readonly name = "ProtocolError";
}

type Obj = Record<string, unknown>;

function fail(reason: string): never {
  throw new ProtocolError(reason);
}

function str(o: Obj, k: string, max = 256): string {
  const v = o[k];
  if (typeof v !== "string" || v.length === 0 || v.length > max) fail(`field '${k}' must be a string of 1..${max} characters`);
  return v;
}

function optStr(o: Obj, k: string, max = 256): string | undefined {
  return o[k] === undefined ? undefined : str(o, k, max);
}

function int(o: Obj, k: string, min = 0, max = 2 ** 31): number {
  const v = o[k];
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) fail(`field '${k}' must be an integer in ${min}..${max}`);
  return v;
}

function optInt(o: Obj, k: string, min = 0, max = 2 ** 31): number | undefined {
  return o[k] === undefined ? undefined : int(o, k, min, max);
}

function strArray(o: Obj, k: string, maxItems = 256): string[] {
  const v = o[k];
  if (!Array.isArray(v) || v.length > maxItems || !v.every((x) => typeof x === "string" && x.length > 0 && x.length <= 256)) {
    fail(`field '${k}' must be an array of at most ${maxItems} strings`);
  }
  return v as string[];
}

/** A value of one closed vocabulary (an `as const` list). */
function isOneOf<T extends string>(values: readonly T[], v: unknown): v is T {
  return typeof v === "string" && (values as readonly string[]).includes(v);
}

function obj(v: unknown, what: string): Obj {
  if (typeof v !== "object" || v === null || Array.isArray(v)) fail(`${what} must be an object`);
  return v as Obj;
}

function decode(text: string | Buffer | ArrayBuffer | Uint8Array, max: number): Obj {
  return obj(decodeJson(text, max), "frame");
}

function decodeJson(text: string | Buffer | ArrayBuffer | Uint8Array, max: number): unknown {
  // A string of n UTF-16 code units is at most 3n bytes of UTF-8: count only when it could be too long.
  const size = typeof text === "string" ? (text.length * 3 <= max ? 0 : Buffer.byteLength(text)) : text.byteLength;
  if (size > max) fail(`frame of ${size} bytes exceeds ${max}`);
  try {
    return JSON.parse(typeof text === "string" ? text : UTF8.decode(text));
  } catch {
    return fail("frame is not JSON");
  }
}

/** Unpadded base64url text of `min`..`max` characters. */
function b64url(o: Obj, k: string, min: number, max: number): string {
  const v = o[k];
  if (typeof v !== "string" || v.length < min || v.length > max || !/^[A-Za-z0-9_-]+$/.test(v)) {
    fail(`field '${k}' must be base64url of ${min}..${max} characters`);
  }
  return v;
}

function attemptIds(o: Obj): { request_id: string; attempt: number } {
  return { request_id: str(o, "request_id", 128), attempt: int(o, "attempt", 0, 64) };
}

/** A sealed answer frame, built as one object (the hot path: no spread of attemptIds). */
function sealedFrameOf<T extends "sealed_chunk" | "sealed_tool_call" | "sealed_complete">(type: T, o: Obj) {
  const request_id = str(o, "request_id", 128);
  const attempt = int(o, "attempt", 0, 64);
  return { type, request_id, attempt, seq: int(o, "seq"), sealed: b64url(o, "sealed", 22, MAX_FRAME_BYTES) };
}

/** A message fault of an engine request as the protocol's error (module-level: no closure per request). */
const engineMessageFault = (fault: MessageFault): never => fail(fault.message);

/** Validates a delta (plaintext chunks, and the opened payload of a sealed chunk). Throws ProtocolError. */
export function parseDelta(v: unknown): Delta {
  const o = obj(v, "delta");
  const content = o.content;
  const reasoning = o.reasoning_content;
  if (content !== undefined && typeof content !== "string") fail("delta.content must be a string");
  if (reasoning !== undefined && typeof reasoning !== "string") fail("delta.reasoning_content must be a string");
  return deltaWith(content, reasoning) ?? {};
}

/** A delta of the fields given, built as one object (a chunk's hot path: no spread of temporaries); undefined for neither. */
export function deltaWith(content: string | undefined, reasoning: string | undefined): Delta | undefined {
  if (reasoning === undefined) return content === undefined ? undefined : { content };
  return content === undefined ? { reasoning_content: reasoning } : { content, reasoning_content: reasoning };
}

/**
 * Validates a tool-call fragment (tool_call frames, and the opened payload of a sealed_tool_call): index
 * 0..MAX_TOOL_CALLS - 1; `id` and `name` together (the first fragment of an index) or neither (then
 * `arguments` is required). Whether the index opens or continues a call is the receiver's check (order).
 * Throws ProtocolError.
 */
export function parseToolCall(v: unknown): ToolCallDelta {
  const o = obj(v, "tool_call");
  const index = int(o, "index", 0, MAX_TOOL_CALLS - 1);
  const id = optStr(o, "id", MAX_TOOL_CALL_ID);
  const name = optStr(o, "name", MAX_TOOL_NAME);
  const args = o.arguments;
  if (args !== undefined && (typeof args !== "string" || args.length > MAX_FRAME_BYTES)) fail("tool_call.arguments must be a string");
  if ((id === undefined) !== (name === undefined)) fail("tool_call.id and tool_call.name come together (the first fragment of a call)");
  if (id === undefined && args === undefined) fail("a tool_call fragment without id and name needs arguments");
  return {
    index,
    ...(id !== undefined ? { id } : {}),
    ...(name !== undefined ? { name } : {}),
    ...(args !== undefined ? { arguments: args } : {}),
  };
}

/**
 * Validates the end of an attempt: `{finish_reason, usage}` (plaintext complete frames, and the opened
 * payload of a sealed complete). Throws ProtocolError.
 */
export function parseFinal(v: unknown): { finish_reason: string; usage: Usage; receipt?: { signature: string } } {
  const o = obj(v, "final");
  const u = obj(o.usage, "usage");
  const cached = optInt(u, "cached_tokens", 0, 2 ** 40);
  const reasoning = optInt(u, "reasoning_tokens", 0, 2 ** 40);
  const usage: Usage = {
    prompt_tokens: int(u, "prompt_tokens", 0, 2 ** 40),
    completion_tokens: int(u, "completion_tokens", 0, 2 ** 40),
    ...(cached !== undefined ? { cached_tokens: cached } : {}),
    ...(reasoning !== undefined ? { reasoning_tokens: reasoning } : {}),
  };
  if ((usage.cached_tokens ?? 0) > usage.prompt_tokens) fail("usage.cached_tokens exceeds prompt_tokens");
  // A receipt (sealed finals only): the identity key's DER signature over src/crypto/receipts.ts bytes.
  const receipt = o.receipt === undefined ? undefined : { signature: b64url(obj(o.receipt, "receipt"), "signature", 16, 256) };
  return { finish_reason: str(o, "finish_reason", 64), usage, ...(receipt ? { receipt } : {}) };
}

/** Validates a request body (plaintext inference frames, and the opened payload of a sealed one). */
export function parseEngineRequest(v: unknown): EngineRequestBody {
  const request = obj(v, "request");
  const { messages } = readChatMessages(request.messages, engineMessageFault, "request.messages");
  const max_tokens = int(request, "max_tokens", 1, MAX_TOKENS_LIMIT);
  return { ...request, messages, max_tokens };
}

/** Parses and validates one frame a provider sent. Throws ProtocolError. */
export function parseProviderFrame(text: string | Buffer | ArrayBuffer | Uint8Array): ProviderFrame {
  return providerFrameOf(decode(text, MAX_FRAME_BYTES));
}

/**
 * Parses one WebSocket message from a provider: one frame, or a batch (a JSON array of 1..MAX_BATCH_FRAMES
 * frames, in order; sent only to a coordinator whose welcome says `batch_frames`). Throws ProtocolError,
 * for the whole message, at the first invalid frame.
 */
export function parseProviderMessage(text: string | Buffer | ArrayBuffer | Uint8Array): ProviderFrame[] {
  const value = decodeJson(text, MAX_FRAME_BYTES);
  if (!Array.isArray(value)) return [providerFrameOf(obj(value, "frame"))];
  if (value.length === 0 || value.length > MAX_BATCH_FRAMES) fail(`a batch must hold 1..${MAX_BATCH_FRAMES} frames`);
  const frames: ProviderFrame[] = new Array(value.length);
  for (let i = 0; i < value.length; i++) frames[i] = providerFrameOf(obj(value[i], "frame"));
  return frames;
}

function providerFrameOf(o: Obj): ProviderFrame {
  switch (o.type) {
    case "hello": {
      const versions = o.protocol_versions;
      if (!Array.isArray(versions) || versions.length === 0 || versions.length > 16 || !versions.every((v) => Number.isInteger(v))) {
        fail("field 'protocol_versions' must be a non-empty array of integers");
      }
      const modelsRaw = o.models;
      if (!Array.isArray(modelsRaw) || modelsRaw.length === 0 || modelsRaw.length > MAX_MODELS_PER_HELLO) {
        fail(`field 'models' must hold 1..${MAX_MODELS_PER_HELLO} models`);
      }
      const models = modelsRaw.map((m): ServedModel => {
        const mo = obj(m, "model");
        const quantization = optStr(mo, "quantization", 64);
        const context = optInt(mo, "context_length", 1, MAX_TOKENS_LIMIT);
        const maxOut = optInt(mo, "max_output_length", 1, MAX_TOKENS_LIMIT);
        const weightHash = optStr(mo, "weight_hash", 128);
        return {
          build_id: str(mo, "build_id", MAX_BUILD_ID),
          ...(quantization !== undefined ? { quantization } : {}),
          ...(context !== undefined ? { context_length: context } : {}),
          ...(maxOut !== undefined ? { max_output_length: maxOut } : {}),
          ...(weightHash !== undefined ? { weight_hash: weightHash } : {}),
        };
      });
      let hardware: Hello["hardware"];
      if (o.hardware !== undefined) {
        const h = obj(o.hardware, "hardware");
        const chip = optStr(h, "chip", 128);
        const memory = optInt(h, "memory_gb", 0, 1_000_000);
        hardware = { ...(chip !== undefined ? { chip } : {}), ...(memory !== undefined ? { memory_gb: memory } : {}) };
      }
      const encryptionKey = o.encryption_key === undefined ? undefined : b64url(o, "encryption_key", 43, 43);
      return {
        type: "hello",
        protocol_versions: versions as number[],
        provider_version: str(o, "provider_version", 64),
        engine: str(o, "engine", 64),
        ...(hardware ? { hardware } : {}),
        models,
        max_concurrency: int(o, "max_concurrency", 1, MAX_CONCURRENCY),
        ...(encryptionKey !== undefined ? { encryption_key: encryptionKey } : {}),
        ...(o.session_keys === true ? { session_keys: true } : {}),
        ...(o.binary_frames === true ? { binary_frames: true } : {}),
        ...(o.evidence !== undefined ? { evidence: obj(o.evidence, "evidence") } : {}),
      };
    }
    case "heartbeat": {
      const status = o.status;
      if (!isOneOf(PROVIDER_STATUSES, status)) fail(`field 'status' must be one of ${PROVIDER_STATUSES.join(", ")}`);
      return {
        type: "heartbeat",
        status,
        warm_models: strArray(o, "warm_models"),
        active: int(o, "active", 0, 1_000_000),
        queued: int(o, "queued", 0, 1_000_000),
      };
    }
    case "accepted":
      return { type: "accepted", request_id: str(o, "request_id", 128), attempt: int(o, "attempt", 0, 64) };
    case "chunk":
      return { type: "chunk", ...attemptIds(o), seq: int(o, "seq"), delta: parseDelta(o.delta) };
    case "tool_call":
      return { type: "tool_call", ...attemptIds(o), seq: int(o, "seq"), tool_call: parseToolCall(o.tool_call) };
    case "challenge_response":
      // The fields are checked by attestation/ (parseChallengeAnswer) against the outstanding challenge.
      return { type: "challenge_response", payload: str(o, "payload", 8192), signature: str(o, "signature", 512) };
    case "sealed_chunk":
    case "sealed_tool_call":
    case "sealed_complete":
      return sealedFrameOf(o.type, o);
    case "complete":
      return { type: "complete", ...attemptIds(o), seq: int(o, "seq"), ...parseFinal(o) };
    case "error": {
      const code = o.code;
      if (!isOneOf(PROVIDER_ERROR_CODES, code)) fail("field 'code' is not in the error vocabulary");
      const message = o.message === undefined ? undefined : str(o, "message", 200);
      return { type: "error", ...attemptIds(o), code, ...(message !== undefined ? { message } : {}) };
    }
    default:
      return fail("unknown frame type");
  }
}

function modelWarnings(v: unknown): ModelWarning[] {
  if (!Array.isArray(v) || v.length === 0 || v.length > MAX_MODELS_PER_HELLO) {
    fail(`field 'model_warnings' must hold 1..${MAX_MODELS_PER_HELLO} warnings`);
  }
  return v.map((w): ModelWarning => {
    const o = obj(w, "model warning");
    const buildId = optStr(o, "build_id");
    return { model: str(o, "model"), reason: str(o, "reason", 64), ...(buildId !== undefined ? { build_id: buildId } : {}) };
  });
}

/** Parses and validates one frame the coordinator sent. Throws ProtocolError. */
export function parseCoordinatorFrame(text: string | Buffer | ArrayBuffer | Uint8Array): CoordinatorFrame {
  const o = decode(text, MAX_INFERENCE_FRAME_BYTES);
  switch (o.type) {
    case "welcome":
      return {
        type: "welcome",
        protocol_version: int(o, "protocol_version", 1, 1000),
        provider_id: str(o, "provider_id"),
        trust_level: str(o, "trust_level", 32),
        heartbeat_interval_ms: int(o, "heartbeat_interval_ms", 10, 3_600_000),
        liveness_timeout_ms: int(o, "liveness_timeout_ms", 10, 3_600_000),
        ...(o.batch_frames === true ? { batch_frames: true } : {}),
        ...(o.binary_frames === true ? { binary_frames: true } : {}),
        ...(o.session_enc !== undefined ? { session_enc: b64url(o, "session_enc", 43, 43) } : {}),
        ...(o.model_warnings !== undefined ? { model_warnings: modelWarnings(o.model_warnings) } : {}),
      };
    case "inference": {
      return {
        type: "inference",
        ...attemptIds(o),
        model: str(o, "model"),
        first_content_deadline_ms: int(o, "first_content_deadline_ms", 1, 86_400_000),
        request: parseEngineRequest(o.request),
      };
    }
    case "challenge":
      return { type: "challenge", nonce: str(o, "nonce", 64), timestamp: int(o, "timestamp", 0, Number.MAX_SAFE_INTEGER) };
    case "sealed_inference": {
      if ((o.enc === undefined) === (o.n === undefined)) fail("sealed_inference needs exactly one of 'enc' and 'n'");
      return {
        type: "sealed_inference",
        ...attemptIds(o),
        model: str(o, "model"),
        first_content_deadline_ms: int(o, "first_content_deadline_ms", 1, 86_400_000),
        ...(o.enc !== undefined ? { enc: b64url(o, "enc", 43, 43) } : { n: int(o, "n", 1, Number.MAX_SAFE_INTEGER) }),
        ciphertext: b64url(o, "ciphertext", 22, MAX_INFERENCE_FRAME_BYTES),
      };
    }
    case "cancel": {
      const reason = o.reason;
      if (!isOneOf(CANCEL_REASONS, reason)) fail("unknown cancel reason");
      return { type: "cancel", ...attemptIds(o), reason };
    }
    default:
      return fail("unknown frame type");
  }
}
