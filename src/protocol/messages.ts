/**
 * Coordinator <-> provider protocol, version 2 (docs/protocol.md). Shared by both binaries.
 *
 * Transport: one WebSocket per provider (`GET /v1/provider/connect`, bearer = provider device token),
 * one JSON object per text frame, discriminated by `type`. The provider speaks first (`hello`); the
 * coordinator answers `welcome` or closes. Every frame is parsed by the functions below: a frame that
 * is not JSON, has an unknown `type`, a missing or mistyped field, or exceeds MAX_FRAME_BYTES throws
 * ProtocolError, and the receiving side ends the session with that reason (never with content).
 *
 * Flow of one attempt (request id + attempt number):
 *   C->P inference -> P->C accepted -> P->C chunk / tool_call (one seq over both: 0, 1, 2, ...) ->
 *   P->C complete (seq = chunk and tool_call frames sent)
 *   or, at any point: P->C error, or C->P cancel (after which late frames for the attempt are ignored).
 * Tool calls (version 2): one call after another, index 0, 1, 2, ...; the first fragment of an index
 * carries `id` and `name`, later fragments of it only `arguments`.
 *
 * Sealed sessions (the provider's hello carries an X25519 `encryption_key`): the same flow with
 * `sealed_inference` (the request HPKE-sealed to that key), `sealed_chunk` (each delta sealed with the
 * exported response key, numbered, final = false), `sealed_tool_call` (a tool_call object, sealed the
 * same way in the same numbered sequence) and `sealed_complete` (`{finish_reason, usage}`
 * sealed with final = true), per src/crypto. A sealed session never carries a plaintext frame. A provider
 * whose hello offers `session_keys` gets `welcome.session_enc` (one HPKE setup for the connection) and then
 * `sealed_inference` frames with a request counter `n` in place of a per-request `enc`.
 */
import { type ChatMessage, readChatMessages } from "./chat-messages.ts";

export const PROTOCOL_VERSION = 2;
/** The close reason for a hello that offers only protocol version 1 (retired: it cannot relay tool calls). */
export const RETIRED_V1_REASON = "protocol version 1 is retired: upgrade umbra-provider";
/** Largest frame either side accepts, in bytes (a WebSocket larger than this is closed with 1009). */
export const MAX_FRAME_BYTES = 1024 * 1024;
/** Most frames in one batch message (a provider talking to a coordinator whose welcome says `batch_frames`). */
export const MAX_BATCH_FRAMES = 4096;
/**
 * Most UTF-16 code units a provider puts in one batch message: at most 3 bytes of UTF-8 each, so a batch
 * stays under MAX_FRAME_BYTES (a frame longer than this on its own is sent alone).
 */
export const MAX_BATCH_CHARS = 256 * 1024;
/** Largest output budget (and model context) the protocol carries, in tokens. */
export const MAX_TOKENS_LIMIT = 100_000_000;
/** Most tool calls in one answer (indexes 0..MAX_TOOL_CALLS - 1). */
export const MAX_TOOL_CALLS = 128;
/** Longest tool-call id and function name, in UTF-16 code units. */
export const MAX_TOOL_CALL_ID = 256;
export const MAX_TOOL_NAME = 256;
/** Largest inference frame the coordinator sends (a whole chat request). */
export const MAX_INFERENCE_FRAME_BYTES = 8 * 1024 * 1024;
/** Longest build id a hello may name, in UTF-16 code units. */
export const MAX_BUILD_ID = 256;
/** Most models one hello may offer (and so most `welcome.model_warnings`). */
export const MAX_MODELS_PER_HELLO = 64;
/** Largest `max_concurrency` a hello may declare. */
export const MAX_CONCURRENCY = 4096;

/** WebSocket close codes used by both sides. */
export const CLOSE = {
  normal: 1000,
  goingAway: 1001,
  protocolError: 1002,
  tooBig: 1009,
  /** Authentication refused or revoked. */
  unauthorized: 4001,
  /** Unsupported protocol version. */
  version: 4002,
  /** Production: the hello's evidence earned no trust (none, or refused); the session is not admitted. */
  untrusted: 4003,
  /** Liveness: no heartbeat in time. */
  timeout: 4008,
  /** Too many connections: this device token's session limit, or too many awaiting `welcome`. */
  tooManySessions: 4029,
} as const;

/** What a provider's heartbeat says it is doing. */
export const PROVIDER_STATUSES = ["idle", "serving", "draining"] as const;
export type ProviderStatus = (typeof PROVIDER_STATUSES)[number];

/** Why the coordinator cancels an attempt. */
export const CANCEL_REASONS = ["client_gone", "deadline", "failover", "shutdown"] as const;
export type CancelReason = (typeof CANCEL_REASONS)[number];

/** The closed vocabulary of provider errors. */
export const PROVIDER_ERROR_CODES = [
  "busy",
  "draining",
  "model_not_loaded",
  "invalid_request",
  "context_length_exceeded",
  "engine_error",
  "engine_unavailable",
  "timeout",
  "cancelled",
] as const;
export type ProviderErrorCode = (typeof PROVIDER_ERROR_CODES)[number];

export interface ServedModel {
  readonly build_id: string;
  readonly quantization?: string;
  readonly context_length?: number;
  readonly max_output_length?: number;
  readonly weight_hash?: string;
}

/**
 * A `hello` model the coordinator cannot route to (`welcome.model_warnings`): `alias` (the id is an alias;
 * `build_id` names the build to serve instead) or `not_in_catalog` (no build has this id). Receivers
 * treat another `reason` as a warning they cannot explain.
 */
export interface ModelWarning {
  readonly model: string;
  readonly reason: string;
  readonly build_id?: string;
}

export interface Hello {
  readonly type: "hello";
  readonly protocol_versions: readonly number[];
  readonly provider_version: string;
  readonly engine: string;
  readonly hardware?: { readonly chip?: string; readonly memory_gb?: number };
  readonly models: readonly ServedModel[];
  readonly max_concurrency: number;
  /**
   * The provider's X25519 public key for this connection (raw 32 bytes, base64url). When present, the
   * session is sealed; when absent, plaintext, which only a development coordinator accepts.
   */
  readonly encryption_key?: string;
  /**
   * The provider opens requests sealed under session keys (one HPKE setup per connection, answered by
   * `welcome.session_enc`; src/crypto/session.ts). Only meaningful with `encryption_key`.
   */
  readonly session_keys?: boolean;
  /**
   * Attestation evidence binding `encryption_key` to the machine's identity key (and, for hardware
   * trust, an Apple Managed Device Attestation chain): verified by attestation/ (format in its README).
   * Absent or failing evidence earns trust level `none`.
   */
  readonly evidence?: Readonly<Record<string, unknown>>;
}

export interface Heartbeat {
  readonly type: "heartbeat";
  readonly status: ProviderStatus;
  readonly warm_models: readonly string[];
  readonly active: number;
  readonly queued: number;
}

export interface Accepted {
  readonly type: "accepted";
  readonly request_id: string;
  readonly attempt: number;
}

export interface Delta {
  readonly content?: string;
  readonly reasoning_content?: string;
}

/**
 * One fragment of a tool call (version 2). The first fragment of an index carries `id` and `name` (and
 * optionally the first `arguments` text); later fragments of the same index carry only `arguments`.
 */
export interface ToolCallDelta {
  readonly index: number;
  readonly id?: string;
  readonly name?: string;
  readonly arguments?: string;
}

export interface ToolCallFrame {
  readonly type: "tool_call";
  readonly request_id: string;
  readonly attempt: number;
  /** One sequence with the attempt's chunk frames. */
  readonly seq: number;
  readonly tool_call: ToolCallDelta;
}

export interface Chunk {
  readonly type: "chunk";
  readonly request_id: string;
  readonly attempt: number;
  readonly seq: number;
  readonly delta: Delta;
}

export interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly cached_tokens?: number;
  readonly reasoning_tokens?: number;
}

export interface Complete {
  readonly type: "complete";
  readonly request_id: string;
  readonly attempt: number;
  /** Number of chunk and tool_call frames sent before this frame. */
  readonly seq: number;
  readonly finish_reason: string;
  readonly usage: Usage;
}

export interface ProviderError {
  readonly type: "error";
  readonly request_id: string;
  readonly attempt: number;
  readonly code: ProviderErrorCode;
  /** Short operator-facing reason; never content. */
  readonly message?: string;
}

/** A chunk of a sealed session: the delta as JSON, sealed (final = false), base64url. */
export interface SealedChunk {
  readonly type: "sealed_chunk";
  readonly request_id: string;
  readonly attempt: number;
  readonly seq: number;
  readonly sealed: string;
}

/** A tool-call fragment of a sealed session: the tool_call object as JSON, sealed (final = false), base64url. */
export interface SealedToolCall {
  readonly type: "sealed_tool_call";
  readonly request_id: string;
  readonly attempt: number;
  readonly seq: number;
  readonly sealed: string;
}

/** The end of a sealed attempt: `{finish_reason, usage}` as JSON, sealed with final = true. */
export interface SealedComplete {
  readonly type: "sealed_complete";
  readonly request_id: string;
  readonly attempt: number;
  /** The seq of this final frame: the number of chunk and tool-call frames before it. */
  readonly seq: number;
  readonly sealed: string;
}

/** The answer to a challenge: the identity key's signature over nonce, timestamp and posture (attestation/). */
export interface ChallengeResponse {
  readonly type: "challenge_response";
  readonly payload: string;
  readonly signature: string;
}

export type ProviderFrame =
  | Hello
  | Heartbeat
  | Accepted
  | Chunk
  | ToolCallFrame
  | Complete
  | SealedChunk
  | SealedToolCall
  | SealedComplete
  | ProviderError
  | ChallengeResponse;

export interface Welcome {
  readonly type: "welcome";
  readonly protocol_version: number;
  readonly provider_id: string;
  readonly trust_level: string;
  readonly heartbeat_interval_ms: number;
  readonly liveness_timeout_ms: number;
  /** The coordinator accepts a JSON array of provider frames in one message (parseProviderMessage). */
  readonly batch_frames?: boolean;
  /**
   * Sent when the hello offered `session_keys`: the HPKE `enc` (43 base64url) of this session's secret.
   * Every `sealed_inference` of the session then carries `n` instead of `enc`.
   */
  readonly session_enc?: string;
  /** The hello's models that are not catalog builds (at most MAX_MODELS_PER_HELLO; absent when every model is a build). */
  readonly model_warnings?: readonly ModelWarning[];
}

export type {
  AssistantMessage,
  ChatMessage,
  ImagePart,
  SystemMessage,
  TextPart,
  ToolCall,
  ToolMessage,
  UserMessage,
} from "./chat-messages.ts";
export { messageText } from "./chat-messages.ts";

/**
 * The chat request as the engine sees it: messages (OpenAI's shapes, src/protocol/chat-messages.ts), output
 * budget, sampling and pass-through fields (tools, tool_choice, response_format ... as the consumer sent them).
 */
export interface EngineRequestBody {
  readonly messages: readonly ChatMessage[];
  readonly max_tokens: number;
  readonly [field: string]: unknown;
}

export interface Inference {
  readonly type: "inference";
  readonly request_id: string;
  readonly attempt: number;
  readonly model: string;
  /** Milliseconds the provider has to produce its first content before the coordinator gives up. */
  readonly first_content_deadline_ms: number;
  readonly request: EngineRequestBody;
}

/**
 * An inference for a sealed session: the request JSON, sealed to the hello's key (base64url), either by its
 * own HPKE setup (`enc`) or under the session's keys (`n`, the session's request counter); exactly one of the two.
 */
export interface SealedInference {
  readonly type: "sealed_inference";
  readonly request_id: string;
  readonly attempt: number;
  readonly model: string;
  readonly first_content_deadline_ms: number;
  readonly enc?: string;
  readonly n?: number;
  readonly ciphertext: string;
}

export interface Cancel {
  readonly type: "cancel";
  readonly request_id: string;
  readonly attempt: number;
  readonly reason: CancelReason;
}

/** A fresh nonce (base64) and the coordinator's time: answer with `challenge_response` in time. */
export interface ChallengeFrame {
  readonly type: "challenge";
  readonly nonce: string;
  readonly timestamp: number;
}

export type CoordinatorFrame = Welcome | Inference | SealedInference | Cancel | ChallengeFrame;

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
    return JSON.parse(typeof text === "string" ? text : Buffer.from(text as Uint8Array).toString("utf8"));
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

/** Validates a delta (plaintext chunks, and the opened payload of a sealed chunk). Throws ProtocolError. */
export function parseDelta(v: unknown): Delta {
  const o = obj(v, "delta");
  const content = o.content;
  const reasoning = o.reasoning_content;
  if (content !== undefined && typeof content !== "string") fail("delta.content must be a string");
  if (reasoning !== undefined && typeof reasoning !== "string") fail("delta.reasoning_content must be a string");
  return { ...(content !== undefined ? { content } : {}), ...(reasoning !== undefined ? { reasoning_content: reasoning } : {}) };
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
  const { messages } = readChatMessages(request.messages, (fault) => fail(fault.message), "request.messages");
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
  return value.map((frame) => providerFrameOf(obj(frame, "frame")));
}

/** Encodes frames for one message: the frame itself when alone, else a batch (JSON array). */
export function encodeBatch(encodedFrames: readonly string[]): string {
  return encodedFrames.length === 1 ? (encodedFrames[0] as string) : `[${encodedFrames.join(",")}]`;
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
      return { type: "accepted", ...attemptIds(o) };
    case "chunk":
      return { type: "chunk", ...attemptIds(o), seq: int(o, "seq"), delta: parseDelta(o.delta) };
    case "tool_call":
      return { type: "tool_call", ...attemptIds(o), seq: int(o, "seq"), tool_call: parseToolCall(o.tool_call) };
    case "challenge_response":
      // The fields are checked by attestation/ (parseChallengeAnswer) against the outstanding challenge.
      return { type: "challenge_response", payload: str(o, "payload", 8192), signature: str(o, "signature", 512) };
    case "sealed_chunk":
      return { type: "sealed_chunk", ...attemptIds(o), seq: int(o, "seq"), sealed: b64url(o, "sealed", 22, MAX_FRAME_BYTES) };
    case "sealed_tool_call":
      return { type: "sealed_tool_call", ...attemptIds(o), seq: int(o, "seq"), sealed: b64url(o, "sealed", 22, MAX_FRAME_BYTES) };
    case "sealed_complete":
      return { type: "sealed_complete", ...attemptIds(o), seq: int(o, "seq"), sealed: b64url(o, "sealed", 22, MAX_FRAME_BYTES) };
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

export function encode(frame: ProviderFrame | CoordinatorFrame): string {
  return JSON.stringify(frame);
}
