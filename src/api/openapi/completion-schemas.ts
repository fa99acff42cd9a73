/**
 * The OpenAPI document's chat answers: ChatCompletion (stream false), the chunks of an event stream, token
 * usage, the provider receipt fields, and the sealed transport's answer shapes. Field names are those
 * src/inference/responses.ts writes (collectCompletion, the stream framing, usageJson, receiptJson) and
 * src/crypto/consumer-seal.ts (sealed bodies and frames).
 *
 * The event stream: `ChatStreamEvent` is the schema of each event's data, read as JSON except the literal
 * `[DONE]` (see the `x-sse-data` extension on the text/event-stream media type, paths.ts).
 */

import { TRUST_LEVELS } from "../../../attestation/provider/levels.ts";
import { RECEIPT_VERSION } from "../../crypto/receipts.ts";
import { int64, type JsonSchema, object, ref, string } from "./schema.ts";

const count = (description?: string) => int64(description, 0);
const receiptFields = {
  se_signature: string("The serving provider's receipt signature: base64url DER ECDSA P-256 (only with a verified identity key)."),
  response_hash: {
    type: "string",
    pattern: "^[0-9a-f]{64}$",
    description: "Hex SHA-256 of the canonical response (content and tool calls).",
  },
  metadata: ref("ReceiptMetadata"),
};
const headFields = (objectName: string) => ({
  id: string("`chatcmpl-...`."),
  object: { type: "string", const: objectName },
  created: int64("Unix seconds."),
  model: string("The id requested (an alias stays the alias)."),
});
const finishReason = string("The runtime's reason (`stop`, `tool_calls` ...), `length` exactly when the output budget was used up.");

export function completionSchemas(): Record<string, JsonSchema> {
  return {
    Usage: object(
      {
        prompt_tokens: count(),
        completion_tokens: count("Never more than the output budget."),
        total_tokens: count(),
        prompt_tokens_details: object({ cached_tokens: count() }, ["cached_tokens"], "When the runtime reported it."),
        completion_tokens_details: object({ reasoning_tokens: count() }, ["reasoning_tokens"], "When the runtime reported it."),
      },
      ["prompt_tokens", "completion_tokens", "total_tokens"],
    ),
    ReceiptMetadata: object(
      {
        receipt_version: { type: "integer", const: RECEIPT_VERSION },
        provider_key_id: {
          type: "string",
          pattern: "^[0-9a-f]{64}$",
          description: "SHA-256 of the provider's identity key (GET /v1/providers/attestation).",
        },
        trust_level: { type: "string", enum: [...TRUST_LEVELS] },
        request_hash: { type: "string", pattern: "^[0-9a-f]{64}$" },
        model_build: string("The build that served the request."),
      },
      ["receipt_version", "provider_key_id", "trust_level", "request_hash", "model_build"],
      "The signed receipt's claims (docs/security.md shows how to verify it).",
    ),
    ChatCompletion: object(
      { ...headFields("chat.completion"), choices: { type: "array", items: ref("ChatChoice") }, usage: ref("Usage"), ...receiptFields },
      ["id", "object", "created", "model", "choices", "usage"],
    ),
    ChatChoice: object({ index: count(), message: ref("ChatCompletionMessage"), finish_reason: finishReason }, [
      "index",
      "message",
      "finish_reason",
    ]),
    ChatCompletionMessage: object(
      {
        role: { type: "string", const: "assistant" },
        content: { type: "string", description: "Empty when the model wrote no text beside tool calls." },
        reasoning_content: string("When the model produced reasoning."),
        tool_calls: { type: "array", items: ref("ToolCall"), description: "In index order (a request with `tools`)." },
      },
      ["role", "content"],
    ),
    ChatCompletionChunk: object(
      {
        ...headFields("chat.completion.chunk"),
        choices: {
          type: "array",
          items: ref("ChunkChoice"),
          maxItems: 1,
          description: "One choice per content chunk and on the terminal chunk; empty on the usage-only chunk.",
        },
        usage: ref("Usage"),
        ...receiptFields,
      },
      ["id", "object", "created", "model", "choices"],
      "Content chunks, then a usage-only chunk (`choices: []`), then the terminal chunk (empty delta, `finish_reason`, the receipt fields), then `[DONE]`.",
    ),
    ChunkChoice: object(
      {
        index: count(),
        delta: ref("ChunkDelta"),
        finish_reason: { anyOf: [finishReason, { type: "null" }], description: "Null until the terminal chunk." },
      },
      ["index", "delta", "finish_reason"],
    ),
    ChunkDelta: object(
      {
        role: { type: "string", const: "assistant", description: "On the answer's first delta only." },
        content: string(),
        reasoning_content: string(),
        tool_calls: { type: "array", items: ref("ToolCallDelta"), minItems: 1, maxItems: 1 },
      },
      [],
      "Empty on the terminal chunk.",
    ),
    ToolCallDelta: object(
      {
        index: count("The call's index (0, 1, ... for parallel calls)."),
        id: string("On a call's first fragment."),
        type: { type: "string", const: "function", description: "On a call's first fragment." },
        function: object(
          {
            name: string("On a call's first fragment."),
            arguments: string("This fragment of the arguments; a call's fragments joined are its arguments."),
          },
          ["arguments"],
        ),
      },
      ["index", "function"],
    ),
    ChatStreamEvent: {
      oneOf: [
        ref("ChatCompletionChunk"),
        { ...ref("Error"), description: "A failure after the stream committed: the last event, no `[DONE]` follows." },
        { type: "string", const: "[DONE]", description: "The literal data of the last event of a completed answer." },
      ],
      description: "The data of one event of a chat event stream (JSON, except the literal `[DONE]`).",
    },
    SealedFrame: object(
      {
        seq: count("0, 1, ... strictly in order."),
        final: { type: "boolean", description: "True on the last frame (of a stream: an empty one; one without it was cut)." },
        ciphertext: {
          type: "string",
          pattern: "^[A-Za-z0-9_-]*$",
          description: "ChaCha20-Poly1305 under the answer's key, unpadded base64url.",
        },
      },
      ["seq", "final", "ciphertext"],
    ),
    SealedBody: object(
      { version: { type: "integer", const: 2 }, chunks: { type: "array", minItems: 1, items: ref("SealedFrame") } },
      ["version", "chunks"],
      "A sealed JSON answer (any status): the chunks' plaintexts, concatenated, are the ordinary body.",
    ),
    SealedStreamEvent: {
      ...ref("SealedFrame"),
      description: "The data of one event of a sealed event stream: the plaintexts, concatenated, are the ordinary event stream.",
    },
  };
}
