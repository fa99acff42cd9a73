/**
 * Verifies a provider's signed receipt as a consumer can: one chat request, then the signature over
 * the receipt bytes with the provider's identity key from GET /v1/providers/attestation.
 *
 *   node_modules/.bin/bun docs/examples/verify-receipt.ts http://127.0.0.1:8080 sk-umbra-... meta-llama/llama-3.2-3b-instruct
 *
 * Receipt bytes (src/crypto/receipts.ts): domain tag "umbra-receipt-v1", then length-prefixed request id
 * (the x-request-id header), model build (metadata.model_build), SHA-256 of the request the coordinator
 * sealed (metadata.request_hash), SHA-256 of the response content (response_hash; check it yourself
 * against the content you received), then prompt, cached and completion tokens as big-endian u64.
 * The signature (se_signature) is DER ECDSA P-256 over SHA-256 of those bytes.
 */
import { createHash } from "node:crypto";
import { parseIdentityKey, verifyIdentitySignature } from "../../attestation/src/index.ts";
import { receiptBytes } from "../../src/crypto/receipts.ts";

const [url, apiKey, model] = process.argv.slice(2);
if (!url || !apiKey || !model) {
  console.error("usage: verify-receipt.ts BASE_URL API_KEY MODEL");
  process.exit(2);
}

const response = await fetch(`${url}/v1/chat/completions`, {
  method: "POST",
  headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
  body: JSON.stringify({ model, messages: [{ role: "user", content: "Please sign this answer" }] }),
});
const answer = (await response.json()) as {
  choices: { message: { content: string } }[];
  usage: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens: number } };
  se_signature?: string;
  response_hash?: string;
  metadata?: { provider_key_id: string; request_hash: string; model_build: string; trust_level: string };
};
if (!answer.se_signature || !answer.response_hash || !answer.metadata) {
  console.error("no receipt: the serving provider has no verified identity (trust level none)");
  process.exit(1);
}
const content = answer.choices[0]?.message.content ?? "";
if (createHash("sha256").update(content).digest("hex") !== answer.response_hash) {
  console.error("response_hash does not match the content received");
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
console.log(`receipt verified: provider ${answer.metadata.provider_key_id.slice(0, 16)}... (${provider.trust_level}) signed this answer`);
