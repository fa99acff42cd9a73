/**
 * A sealed chat request, as a consumer would send it: the body is sealed with HPKE to the coordinator's
 * sealing key from GET /v1/attestation, bound to the API key it is sent with and to the current time, and
 * the answer (JSON or event stream) is opened on this side with the key its x-umbra-response-nonce names.
 *
 *   node_modules/.bin/bun docs/examples/sealed-chat.ts http://127.0.0.1:8080 sk-umbra-... meta-llama/llama-3.2-3b-instruct [--stream]
 *
 * In production, verify the attestation first (docs/examples/verify-attestation.ts): it proves the sealing
 * key belongs to the attested coordinator. The format is in docs/api.md ("Sealed transport") and
 * src/crypto/consumer-seal.ts.
 */
import { createParser } from "eventsource-parser";
import { RESPONSE_NONCE_HEADER, SEALED_CONTENT_TYPE, sealConsumerRequest } from "../../src/crypto/consumer-seal.ts";
import { fromBase64url } from "../../src/crypto/encoding.ts";

export interface SealedAnswer {
  readonly status: number;
  /** False when the coordinator answered before opening the body (bad envelope, bad credentials). */
  readonly sealed: boolean;
  /** The opened JSON body (non-streaming answers and every error). */
  readonly json?: unknown;
  /** The opened event stream's data fields, in order ("[DONE]" included). */
  readonly events?: readonly string[];
}

/**
 * Fetches the sealing key, seals `body` for `apiKey` and this second, posts it and opens the answer.
 * Throws if the answer does not open. Each call seals afresh: an envelope is accepted once.
 */
export async function sealedChat(baseUrl: string, apiKey: string, body: unknown): Promise<SealedAnswer> {
  const attestation = (await (await fetch(`${baseUrl}/v1/attestation`)).json()) as { sealing_public_key: string };
  const key = fromBase64url(attestation.sealing_public_key, "sealing_public_key");
  const binding = { path: "/v1/chat/completions", credential: apiKey, timestamp: Math.floor(Date.now() / 1000) };
  const { envelope, answers } = await sealConsumerRequest(key, new TextEncoder().encode(JSON.stringify(body)), binding);
  const response = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": SEALED_CONTENT_TYPE },
    body: JSON.stringify(envelope),
  });
  const type = response.headers.get("content-type") ?? "";
  if (!type.startsWith(SEALED_CONTENT_TYPE) && !type.startsWith("text/event-stream")) {
    return { status: response.status, sealed: false, json: await response.json() };
  }
  // Each answer is sealed under its own key, derived from the request's secret and this nonce.
  const opener = answers.opener(response.headers.get(RESPONSE_NONCE_HEADER));
  if (type.startsWith(SEALED_CONTENT_TYPE)) {
    const plaintext = opener.body(await response.json());
    return { status: response.status, sealed: true, json: JSON.parse(new TextDecoder().decode(plaintext)) };
  }

  // Two parsers: the outer one reads sealed events, the inner one the opened bytes of the ordinary stream.
  const events: string[] = [];
  const inner = createParser({ onEvent: (event) => events.push(event.data) });
  const decoder = new TextDecoder();
  const outer = createParser({
    onEvent: (event) => {
      const bytes = opener.stream(event.data);
      if (bytes !== null) inner.feed(decoder.decode(bytes, { stream: true }));
    },
  });
  const text = new TextDecoder();
  for await (const piece of response.body ?? []) outer.feed(text.decode(piece, { stream: true }));
  opener.finish();
  return { status: response.status, sealed: true, events };
}

if (import.meta.main) {
  const [url, apiKey, model, flag] = process.argv.slice(2);
  if (!url || !apiKey || !model) {
    console.error("usage: sealed-chat.ts BASE_URL API_KEY MODEL [--stream]");
    process.exit(2);
  }
  const stream = flag === "--stream";
  const answer = await sealedChat(url, apiKey, { model, stream, messages: [{ role: "user", content: "Hello over a sealed body" }] });
  console.log(JSON.stringify(answer, null, 2));
}
