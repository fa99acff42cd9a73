/**
 * The overhead benchmark's checks before measuring (bench/overhead.ts): every side answers each case
 * correctly, and Umbra has every governance feature on.
 *
 * Per side, non-streaming and streaming: 200, the mock's whole answer (ANSWER), usage with WORDS
 * completion tokens, a stream ending with `data: [DONE]`; Portkey must have routed as `openai`.
 * Umbra, besides: the answer's receipt (`se_signature`, `response_hash`, `metadata`; on a stream's
 * terminal chunk) verified as a consumer can (docs/examples/verify-receipt.ts: the response hash, the
 * identity key from GET /v1/providers/attestation, the signature over the receipt bytes), which also
 * proves the hop was sealed (receipts only travel in sealed frames); the request's charge in the payer's
 * ledger; the key's x-ratelimit-* headers; 401 without a key and with a wrong one; and a key with rpm 1
 * answered 200 then 429. Throws on the first failure; returns what it saw for the results file.
 */
import { parseIdentityKey, verifyIdentitySignature } from "../attestation/provider/identity-key.ts";
import { toHex } from "../src/crypto/encoding.ts";
import { receiptBytes, responseSha256 } from "../src/crypto/receipts.ts";
import type { CoordinatorProcess } from "../test/support/processes.ts";

export const MODEL = "bench/mock";
/** The mock's answer (bench/mock-upstream.ts with its default MOCK_WORDS). */
export const WORDS = 16;
export const ANSWER = Array.from({ length: WORDS }, (_, i) => `alpha${i}`).join(" ");
/** The benchmark key's limits: high enough never to refuse, but enforced (checked, headers, true-up). */
export const LIMITS = { rpm: 1_000_000_000, tpm: 1_000_000_000_000 };

export type SideName = "direct" | "umbra" | "portkey" | "floor";
export interface Side {
  readonly name: SideName;
  readonly url: string;
  readonly key?: string;
  readonly headers?: Record<string, string>;
  /** The processes serving this side (CPU per request). */
  readonly pids: Record<string, number>;
}

export const caseName = (stream: boolean) => (stream ? "streaming" : "non-streaming");

interface Answer {
  status: number;
  headers: Headers;
  content: string;
  usage?: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens: number } };
  /** The non-streaming body, or the stream's terminal chunk (where Umbra puts the receipt). */
  final: Record<string, unknown>;
  done: boolean;
}

export async function ask(side: Side, stream: boolean, key = side.key): Promise<Answer> {
  const response = await fetch(`${side.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...side.headers, ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({
      model: MODEL,
      stream,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
      messages: [{ role: "user", content: "check the answer" }],
    }),
  });
  const text = await response.text();
  const answer: Answer = { status: response.status, headers: response.headers, content: "", final: {}, done: false };
  if (response.status !== 200) return answer;
  if (!stream) {
    const body = JSON.parse(text) as Record<string, unknown> & { choices: { message: { content: string } }[]; usage: Answer["usage"] };
    return { ...answer, content: body.choices[0]?.message.content ?? "", usage: body.usage, final: body, done: true };
  }
  for (const event of text.split("\n\n")) {
    if (!event.startsWith("data: ")) continue;
    const data = event.slice(6);
    if (data === "[DONE]") {
      answer.done = text.endsWith("data: [DONE]\n\n");
      continue;
    }
    const chunk = JSON.parse(data) as Record<string, unknown> & {
      choices?: { delta?: { content?: string }; finish_reason?: string | null }[];
    };
    if (chunk.usage) answer.usage = chunk.usage as Answer["usage"];
    const choice = chunk.choices?.[0];
    answer.content += choice?.delta?.content ?? "";
    if (choice?.finish_reason) answer.final = chunk;
  }
  return answer;
}

function expectAnswer(side: SideName, stream: boolean, a: Answer): void {
  const what = `${side} ${caseName(stream)}`;
  if (a.status !== 200) throw new Error(`${what}: status ${a.status}`);
  if (a.content !== ANSWER) throw new Error(`${what}: content ${JSON.stringify(a.content)}`);
  if (!a.usage || a.usage.completion_tokens !== WORDS) throw new Error(`${what}: usage ${JSON.stringify(a.usage)}`);
  if (!a.done) throw new Error(`${what}: no [DONE] at the end`);
}

/** Verifies Umbra's receipt on an answer as a consumer can (docs/examples/verify-receipt.ts). */
async function verifyReceipt(url: string, a: Answer): Promise<{ trust_level: string; provider_key_id: string }> {
  const { se_signature, response_hash, metadata } = a.final as {
    se_signature?: string;
    response_hash?: string;
    metadata?: Record<string, string>;
  };
  if (!se_signature || !response_hash || !metadata) throw new Error("umbra: the answer carries no receipt");
  if (toHex(responseSha256(a.content)) !== response_hash) throw new Error("umbra: response_hash does not match");
  const providers = (await (await fetch(`${url}/v1/providers/attestation`)).json()) as {
    data: { identity_key: string | null; identity_key_sha256: string | null }[];
  };
  const identity = providers.data.find((p) => p.identity_key_sha256 === metadata.provider_key_id)?.identity_key;
  if (!identity) throw new Error("umbra: the signing provider is not listed");
  const bytes = receiptBytes({
    requestId: a.headers.get("x-request-id") ?? "",
    modelBuild: metadata.model_build ?? "",
    requestSha256: Buffer.from(metadata.request_hash ?? "", "hex"),
    responseSha256: Buffer.from(response_hash, "hex"),
    usage: {
      promptTokens: a.usage?.prompt_tokens ?? 0,
      cachedTokens: a.usage?.prompt_tokens_details?.cached_tokens ?? 0,
      completionTokens: a.usage?.completion_tokens ?? 0,
    },
  });
  verifyIdentitySignature(parseIdentityKey(Buffer.from(identity, "base64url")), bytes, Buffer.from(se_signature, "base64url"), "receipt");
  return { trust_level: metadata.trust_level ?? "", provider_key_id: metadata.provider_key_id ?? "" };
}

/** Checks every side and case, and proves Umbra's governance features are on; returns what was seen. */
export async function check(sides: Side[], coordinator: CoordinatorProcess, payer: string): Promise<Record<string, unknown>> {
  const umbra = sides.find((s) => s.name === "umbra") as Side;
  const governance: Record<string, unknown> = {};
  for (const stream of [false, true]) {
    for (const side of sides) {
      const a = await ask(side, stream);
      expectAnswer(side.name, stream, a);
      if (side.name === "portkey" && a.headers.get("x-portkey-provider") !== "openai") throw new Error("portkey: not routed as openai");
      if (side.name !== "umbra") continue;
      const requestId = a.headers.get("x-request-id") ?? "";
      const ledger = await coordinator.admin<{ data: { kind: string; amount_micro_usd: number; request_id: string | null }[] }>(
        "GET",
        `/accounts/${payer}/ledger?limit=20`,
      );
      const charge = ledger.data.find((e) => e.request_id === requestId && e.kind === "charge");
      if (!charge || charge.amount_micro_usd >= 0) throw new Error(`umbra ${caseName(stream)}: no charge in the ledger`);
      const limit = a.headers.get("x-ratelimit-limit-requests");
      if (limit !== String(LIMITS.rpm)) throw new Error(`umbra: x-ratelimit-limit-requests ${limit}`);
      governance[caseName(stream)] = {
        receipt: { verified: true, ...(await verifyReceipt(umbra.url, a)) },
        charge_micro_usd: -charge.amount_micro_usd,
        ratelimit_headers: Object.fromEntries([...a.headers].filter(([k]) => k.startsWith("x-ratelimit-"))),
      };
    }
  }
  const anonymous = await ask({ ...umbra, key: undefined }, false, undefined);
  const wrong = await ask(umbra, false, "sk-umbra-not-a-key");
  if (anonymous.status !== 401 || wrong.status !== 401) throw new Error("umbra: authentication not enforced");
  const { key: limited } = await coordinator.admin<{ key: string }>("POST", "/keys", { account_id: payer, rpm: 1 });
  const first = await ask(umbra, false, limited);
  const second = await ask(umbra, false, limited);
  if (first.status !== 200 || second.status !== 429) throw new Error(`umbra: rpm 1 gave ${first.status} then ${second.status}`);
  return {
    ...governance,
    authentication: "401 without a key and with a wrong key",
    rate_limits: { key: LIMITS, enforced: "a key with rpm 1: 200 then 429" },
    billing: "metering on; each checked answer has its charge in the payer's ledger",
    sealing: "provider hop sealed with HPKE, chunks sealed: the receipt, verified above, is only sent on sealed sessions",
  };
}
