/**
 * Console API answers for the browser tests that stand in for the data routes (CONSOLE-CONTRACT.md
 * shapes), with XSS payloads in every name a user or a machine chooses (key names, machine names, model
 * ids): the pages must show them as text.
 */

export const XSS = `<img src=x onerror="window.__xss=1">`;
export const XSS_SCRIPT = `<script>window.__xss=2</script>`;
export const MODEL_A = "org/model-a";
export const MODEL_XSS = `org/${XSS}`;

const DAY_MS = 86_400_000;
const today = Date.UTC(2026, 10, 26);

export const session = {
  account: { id: "acct_1", name: `Ada ${XSS_SCRIPT}` },
  csrf_token: "csrf-test-token",
  expires_at: today + 12 * 3_600_000,
  idle_expires_at: today + 2 * 3_600_000,
};

const days = Array.from({ length: 30 }, (_, i) => {
  const date = new Date(today - (29 - i) * DAY_MS).toISOString().slice(0, 10);
  const requests = i % 4 === 0 ? 0 : i + 3;
  return { date, requests, prompt_tokens: requests * 120, completion_tokens: requests * 80, spend_micro_usd: requests * 1700 };
});

export const overview = {
  balance_micro_usd: 12_345_678,
  reserved_micro_usd: 4_000,
  days,
  by_model: [
    { model: MODEL_A, requests: 300, prompt_tokens: 36_000, completion_tokens: 24_000, spend_micro_usd: 510_000 },
    { model: MODEL_XSS, requests: 10, prompt_tokens: 1_200, completion_tokens: 800, spend_micro_usd: 17_000 },
  ],
  by_key: [
    {
      key_id: "key_1",
      name: `ci ${XSS}`,
      hint: "sk-umbra-...abcd",
      requests: 310,
      prompt_tokens: 37_200,
      completion_tokens: 24_800,
      spend_micro_usd: 527_000,
    },
  ],
  daily_by_model: days.flatMap((d, i) => [
    { date: d.date, model: MODEL_A, spend_micro_usd: d.spend_micro_usd, tokens: d.prompt_tokens + d.completion_tokens },
    ...(i % 3 === 0 ? [{ date: d.date, model: MODEL_XSS, spend_micro_usd: 1700, tokens: 200 }] : []),
  ]),
};

export const emptyOverview = {
  ...overview,
  days: days.map((d) => ({ ...d, requests: 0, prompt_tokens: 0, completion_tokens: 0, spend_micro_usd: 0 })),
  by_model: [],
  by_key: [],
  daily_by_model: [],
};

export function key(id: string, name: string, revoked = false) {
  return {
    id,
    name,
    hint: `sk-umbra-...${id.slice(-4)}`,
    created_at: today - 3 * DAY_MS,
    last_used_at: id === "key_1" ? today - 3_600_000 : null,
    revoked_at: revoked ? today - DAY_MS : null,
    allowed_models: id === "key_1" ? [MODEL_A, MODEL_XSS] : null,
    spend_cap_micro_usd: id === "key_1" ? 5_000_000 : null,
    spent_micro_usd: 527_000,
    rpm: 60,
    tpm: null,
    self_route_only: false,
    link_machines: id === "key_1",
  };
}

export const usage = {
  data: Array.from({ length: 5 }, (_, i) => ({
    request_id: `req_${i}`,
    started_at: today - i * 60_000,
    key_id: "key_1",
    key_name: `ci ${XSS}`,
    model: i % 2 === 0 ? MODEL_A : MODEL_XSS,
    prompt_tokens: 120,
    cached_tokens: i === 0 ? 64 : 0,
    completion_tokens: 80,
    cost_micro_usd: 1700,
    outcome: i === 4 ? "failed" : "completed",
    duration_ms: 420 + i,
  })),
  next_cursor: "cursor-2",
};

export const machines = {
  data: [
    {
      id: "pt_1",
      name: `Mac ${XSS}`,
      hint: "umbra-pt-...abcd",
      created_at: today - 5 * DAY_MS,
      expires_at: today + 85 * DAY_MS,
      revoked_at: null,
      online: true,
      trust_level: "hardware",
      trust_source: "managed device attestation",
      models: [MODEL_A, MODEL_XSS],
      requests_served: 1234,
      earnings_micro_usd: 2_500_000,
    },
    {
      id: "pt_2",
      name: null,
      hint: "umbra-pt-...wxyz",
      created_at: today - 9 * DAY_MS,
      expires_at: null,
      revoked_at: null,
      online: false,
      trust_level: null,
      trust_source: null,
      models: [],
      requests_served: 0,
      earnings_micro_usd: 0,
    },
  ],
};

export const device = {
  user_code: "ABCD-EFGH",
  machine_name: `Studio ${XSS}`,
  requested_at: today - 30_000,
  expires_at: today + 570_000,
  models: [MODEL_A, MODEL_XSS],
  trust: { level: "software", verified: false, note: "reported by the machine, verified when it connects" },
};

export const openapi = {
  openapi: "3.1.0",
  info: { title: "Umbra consumer API", version: "1", description: `Plain text, not HTML: ${XSS}` },
  paths: {
    "/v1/chat/completions": {
      post: {
        summary: "Create a chat completion",
        requestBody: { content: { "application/json": { schema: { $ref: "#/components/schemas/ChatRequest" } } } },
        responses: { "200": { description: "The completion" }, "401": { description: "No valid API key" } },
      },
    },
    "/v1/models": {
      get: {
        summary: "List models",
        parameters: [{ name: "limit", in: "query", required: false, schema: { type: "integer" }, description: "At most this many" }],
        responses: { "200": { description: "The models" } },
      },
    },
  },
  components: {
    schemas: {
      ChatRequest: {
        type: "object",
        required: ["model", "messages"],
        properties: { model: { type: "string", description: "A model id" }, messages: { type: "array", items: { type: "object" } } },
      },
    },
  },
};
