/**
 * Coordinator <-> provider protocol, version 2: the frame types, limits and close codes, shared by both
 * binaries. docs/protocol.md is the contract (transport, one attempt, tool calls, sealed sessions).
 *
 * One JSON object per WebSocket text frame, discriminated by `type`; the provider speaks first (`hello`).
 * src/protocol/parse.ts parses every frame: one that is malformed, of unknown `type` or over MAX_FRAME_BYTES
 * throws ProtocolError, and the receiving side ends the session with that reason (never with content).
 * An attempt runs inference -> accepted -> chunk / tool_call (one seq over both) -> complete, or ends in
 * error or cancel. A sealed session (the hello carries `encryption_key`) never carries a plaintext frame.
 */
import type { ChatMessage } from "./chat-messages.ts";

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
   * The provider can send binary batches (src/protocol/binary.ts); it does once the welcome says
   * `binary_frames` too.
   */
  readonly binary_frames?: boolean;
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
  /** base64url text in a JSON frame; the bytes themselves in a binary record (src/protocol/binary.ts). */
  readonly sealed: string | Uint8Array;
}

/** A tool-call fragment of a sealed session: the tool_call object as JSON, sealed (final = false), base64url. */
export interface SealedToolCall {
  readonly type: "sealed_tool_call";
  readonly request_id: string;
  readonly attempt: number;
  readonly seq: number;
  /** base64url text in a JSON frame; the bytes themselves in a binary record (src/protocol/binary.ts). */
  readonly sealed: string | Uint8Array;
}

/** The end of a sealed attempt: `{finish_reason, usage}` as JSON, sealed with final = true. */
export interface SealedComplete {
  readonly type: "sealed_complete";
  readonly request_id: string;
  readonly attempt: number;
  /** The seq of this final frame: the number of chunk and tool-call frames before it. */
  readonly seq: number;
  /** base64url text in a JSON frame; the bytes themselves in a binary record (src/protocol/binary.ts). */
  readonly sealed: string | Uint8Array;
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
  /** Sent when the hello offered `binary_frames`: the coordinator accepts binary batches (src/protocol/binary.ts). */
  readonly binary_frames?: boolean;
  /**
   * Sent when the hello offered `session_keys`: the HPKE `enc` (43 base64url) of this session's secret.
   * Every `sealed_inference` of the session then carries `n` instead of `enc`.
   */
  readonly session_enc?: string;
  /** The hello's models that are not catalog builds (at most MAX_MODELS_PER_HELLO; absent when every model is a build). */
  readonly model_warnings?: readonly ModelWarning[];
}

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

/** One frame as the text of a WebSocket message. */
export function encode(frame: ProviderFrame | CoordinatorFrame): string {
  return JSON.stringify(frame);
}

/** Encodes frames for one message: the frame itself when alone, else a batch (JSON array). */
export function encodeBatch(encodedFrames: readonly string[]): string {
  return encodedFrames.length === 1 ? (encodedFrames[0] as string) : `[${encodedFrames.join(",")}]`;
}
