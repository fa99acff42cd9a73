/**
 * Verifies a provider's signed receipt as a consumer can: one chat request, then the signature over
 * the receipt bytes with the provider's identity key from GET /v1/providers/attestation.
 *
 *   node_modules/.bin/bun docs/examples/verify-receipt.ts http://127.0.0.1:8080 sk-umbra-... meta-llama/llama-3.2-3b-instruct [--tools]
 *
 * `--tools` offers the model one function tool (`get_weather`) and asks it to call it, so the receipt
 * covers a tool call (a model may still answer with text: both verify the same way).
 * Receipt version 2 (src/crypto/receipts.ts, docs/security.md "Verifying a receipt"): response_hash =
 * SHA-256 of the canonical response (tag "umbra-response-v2", SHA-256 of the content, the number of tool
 * calls, each call's id, function name and SHA-256 of its arguments), recomputed here from the answer
 * received; the receipt bytes: tag "umbra-receipt-v2", then length-prefixed request id (the x-request-id
 * header), model build (metadata.model_build), SHA-256 of the request the coordinator sealed
 * (metadata.request_hash), response_hash, then prompt, cached and completion tokens as big-endian u64.
 * The signature (se_signature) is DER ECDSA P-256 over SHA-256 of those bytes.
 */
import { parseIdentityKey, verifyIdentitySignature } from "../../attestation/provider/index.ts";
import { toHex } from "../../src/crypto/encoding.ts";
import { receiptBytes, responseSha256 } from "../../src/crypto/receipts.ts";

const [url, apiKey, model, flag] = process.argv.slice(2);
if (!url || !apiKey || !model || (flag !== undefined && flag !== "--tools")) {
  console.error("usage: verify-receipt.ts BASE_URL API_KEY MODEL [--tools]");
  process.exit(2);
}

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
];
const response = await fetch(`${url}/v1/chat/completions`, {
  method: "POST",
  headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
  body: JSON.stringify({
    model,
    messages: [{ role: "user", content: flag ? "Please call get_weather for Paris" : "Please sign this answer" }],
    ...(flag ? { tools } : {}),
  }),
});
const answer = (await response.json()) as {
  choices: { message: { content: string | null; tool_calls?: { id: string; function: { name: string; arguments: string } }[] } }[];
  usage: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens: number } };
  se_signature?: string;
  response_hash?: string;
  metadata?: { provider_key_id: string; request_hash: string; model_build: string; trust_level: string };
};
if (!answer.se_signature || !answer.response_hash || !answer.metadata) {
  console.error("no receipt: the serving provider has no verified identity (trust level none)");
  process.exit(1);
}
const message = answer.choices[0]?.message;
const calls = (message?.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments }));
if (toHex(responseSha256(message?.content ?? null, calls)) !== answer.response_hash) {
  console.error("response_hash does not match the content and tool calls received");
  process.exit(1);
}
// Only the signer: a fleet may list more providers than one page holds.
const keyId = encodeURIComponent(answer.metadata.provider_key_id);
const providers = (await (await fetch(`${url}/v1/providers/attestation?identity_key_sha256=${keyId}`)).json()) as {
  data: { identity_key: string | null; identity_key_sha256: string | null; trust_level: string }[];
};
const provider = providers.data.find((p) => p.identity_key_sha256 === answer.metadata?.provider_key_id);
if (!provider?.identity_key) {
  console.error("the signing provider is not in /v1/providers/attestation");
  process.exit(1);
}
const bytes = receiptBytes({
  requestId: response.headers.get("x-request-id") ?? "",
  modelBuild: answer.metadata.model_build,
  requestSha256: Buffer.from(answer.metadata.request_hash, "hex"),
  responseSha256: Buffer.from(answer.response_hash, "hex"),
  usage: {
    promptTokens: answer.usage.prompt_tokens,
    cachedTokens: answer.usage.prompt_tokens_details?.cached_tokens ?? 0,
    completionTokens: answer.usage.completion_tokens,
  },
});
verifyIdentitySignature(parseIdentityKey(Buffer.from(provider.identity_key, "base64url")), bytes, Buffer.from(answer.se_signature, "base64url"), "receipt");
const covered = calls.length > 0 ? ` (${calls.length} tool call${calls.length > 1 ? "s" : ""}: ${calls.map((c) => c.name).join(", ")})` : "";
console.log(`receipt verified: provider ${answer.metadata.provider_key_id.slice(0, 16)}... (${provider.trust_level}) signed this answer${covered}`);
