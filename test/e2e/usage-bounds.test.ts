/**
 * Usage a provider reports is bounded by what the coordinator knows (src/billing/usage-bounds.ts), over
 * real sockets: a dishonest provider inflating its counts fails the answer as invalid_provider_output
 * (502 before the answer, one in-band error after), is cut off (1002) and counted in metrics; the
 * consumer pays no more than what was relayed (the failure rule's estimate) and the provider earns only
 * its share of that. An honest report at exactly the bounds is billed as reported, tool calls' bytes
 * (names and arguments) counting as relayed output.
 */
import { describe, expect, test } from "bun:test";
import { buildEvidence, FULL_SECURITY, SoftwareIdentity } from "../../attestation/provider/index.ts";
import { chargeFor, estimatedUsage, feeFor, promptTokenBound, promptTokenEstimate } from "../../src/billing/billing.ts";
import { OUTPUT_ALLOWANCE_TOKENS, PROMPT_TEMPLATE_ALLOWANCE, TOOL_CALL_ALLOWANCE_TOKENS } from "../../src/billing/usage-bounds.ts";
import type { ChatMessage } from "../../src/protocol/chat-messages.ts";
import { CLOSE, type Usage } from "../../src/protocol/frames.ts";
import { startAgent } from "../../src/provider/agent.ts";
import { createEchoEngine } from "../../src/provider/engines/echo.ts";
import type { Engine } from "../../src/provider/engines/engine.ts";
import { PLATFORM_ACCOUNT_ID } from "../../src/store/types.ts";
import { connectFakeProvider, type FakeProvider, type Step } from "../support/fake-provider.ts";
import { seedCatalog, type TestApp, testApp } from "../support/harness.ts";
import { chatBody, postChat, providerToken, readSse, startServer, type TestServer } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
/** Prices set on org/model, µUSD per million tokens (cache reads at the default half); the default budget is 2,048. */
const RATES = { input: 65_000_000, output: 130_000_000, cacheRead: 32_500_000, source: "model" as const };
const FEE_PERCENT = 10;
const PROMPT: ChatMessage[] = [{ role: "user", content: "hi" }];
/** The most prompt tokens believable for PROMPT without forwarded fields: 30 + 512. */
const PROMPT_LIMIT = promptTokenBound(PROMPT) + PROMPT_TEMPLATE_ALLOWANCE;

interface Ctx extends AsyncDisposable {
  readonly t: TestApp;
  readonly server: TestServer;
  readonly apiKey: string;
  readonly consumer: string;
  /** The provider machine's account (it earns). */
  readonly machine: string;
  readonly token: string;
  provider(steps: readonly Step[]): Promise<FakeProvider>;
  /** The consumer's charges, the machine's earnings and the platform's fees (one request per test). */
  money(): Promise<{ charge: number; earning: number; fee: number }>;
  rejected(): Promise<string[]>;
}

async function setup(): Promise<Ctx> {
  const t = await testApp({ env: { UMBRA_PLATFORM_FEE: String(FEE_PERCENT) } });
  await seedCatalog(t);
  await t.app.admin.setPrice("org/model", { input_price: RATES.input, output_price: RATES.output });
  const consumer = await t.app.admin.createAccount({ name: "consumer" });
  await t.app.admin.creditAccount(consumer.id, { amount_micro_usd: 1_000_000 });
  const key = await t.app.admin.createKey({ account_id: consumer.id });
  const machine = await t.app.admin.createAccount({ name: "machine" });
  const token = await providerToken(t, machine.id);
  const server = startServer(t);
  const providers: FakeProvider[] = [];
  const balance = async (account: string) => (await t.store.accounts.get(account))?.balance ?? 0;
  return {
    t,
    server,
    apiKey: key.key,
    consumer: consumer.id,
    machine: machine.id,
    token,
    async provider(steps) {
      const p = await connectFakeProvider({ url: server.url, token, models: [BUILD], behave: () => steps });
      providers.push(p);
      return p;
    },
    async money() {
      await t.app.flush();
      const charges = (await t.store.accounts.ledger(consumer.id, 100)).filter((e) => e.kind === "charge");
      return {
        charge: -charges.reduce((s, e) => s + e.amount, 0),
        earning: await balance(machine.id),
        fee: await balance(PLATFORM_ACCOUNT_ID),
      };
    },
    async rejected() {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      return text.split("\n").filter((line) => line.startsWith("umbra_provider_usage_rejected_total{"));
    },
    async [Symbol.asyncDispose]() {
      for (const p of providers) await p[Symbol.asyncDispose]();
      await server[Symbol.asyncDispose]();
      await t[Symbol.asyncDispose]();
    },
  };
}

/** Accept, relay `text` (and `reasoning`), then complete with `usage`. */
function answer(usage: Usage, text = "ok", reasoning?: string, finishReason = "stop"): readonly Step[] {
  return [
    { do: "accept" },
    ...(reasoning ? [{ do: "chunk", delta: { reasoning_content: reasoning } } as const] : []),
    { do: "chunk", delta: { content: text } },
    { do: "complete", finishReason, usage },
  ];
}

const TOOLS = { tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }] };
/** Two tool calls (`get_weather` {"city":"Paris"}, `get_time` {}): 11 + 16 + 8 + 2 = 37 bytes of names and arguments. */
const TWO_CALLS: readonly Step[] = [
  { do: "tool_call", call: { index: 0, id: "call_a", name: "get_weather", arguments: '{"city":' } },
  { do: "tool_call", call: { index: 0, arguments: '"Paris"}' } },
  { do: "tool_call", call: { index: 1, id: "call_b", name: "get_time", arguments: "{}" } },
];
const TWO_CALLS_LIMIT = 37 + 2 * TOOL_CALL_ALLOWANCE_TOKENS + OUTPUT_ALLOWANCE_TOKENS;

/** Accept, relay the tool calls (and `text`), then complete with `usage`. */
function toolAnswer(usage: Usage, calls: readonly Step[], text?: string): readonly Step[] {
  return [
    { do: "accept" },
    ...(text ? [{ do: "chunk", delta: { content: text } } as const] : []),
    ...calls,
    { do: "complete", finishReason: "tool_calls", usage },
  ];
}

/** What the failure rule charges for PROMPT with `chars` characters relayed: the estimate, at most the budget. */
function failureMoney(chars: number) {
  const charge = chargeFor(estimatedUsage(promptTokenEstimate(PROMPT), chars), RATES);
  const fee = feeFor(charge, FEE_PERCENT);
  return { charge, earning: charge - fee, fee };
}

const INVALID = {
  error: { message: "the provider's output failed verification", type: "provider_error", code: "invalid_provider_output" },
};

describe("the attack: 9,000 prompt and 8,000 completion tokens reported for 'hi' -> 'ok'", () => {
  const inflated = { prompt_tokens: 9_000, completion_tokens: 8_000 };

  test("JSON: 502 invalid_provider_output, the provider cut off and counted, the consumer pays for 'ok' only", async () => {
    await using ctx = await setup();
    const p = await ctx.provider(answer(inflated));
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("hi"));
    expect({ status: response.status, body: await response.json() }).toEqual({ status: 502, body: INVALID });
    expect(await p.closed).toEqual({ code: CLOSE.protocolError, reason: "usage beyond its bound: prompt_tokens" });
    expect(await ctx.rejected()).toEqual(['umbra_provider_usage_rejected_total{bound="prompt_tokens"} 1']);
    expect(await ctx.money()).toEqual(failureMoney(2));
    const [row] = await ctx.t.store.usage.list(ctx.consumer, 1);
    expect([row?.outcome, row?.promptTokens, row?.completionTokens]).toEqual(["failed", promptTokenEstimate(PROMPT), 1]);
  });

  test("stream: the relayed content, then one in-band invalid_provider_output error and no [DONE]", async () => {
    await using ctx = await setup();
    const p = await ctx.provider(answer(inflated));
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("hi", { stream: true }));
    expect(response.status).toBe(200);
    const { data } = await readSse(response);
    expect(data.map((d) => JSON.parse(d) as unknown)).toEqual([
      expect.objectContaining({ choices: [{ index: 0, delta: { role: "assistant", content: "ok" }, finish_reason: null }] }),
      INVALID,
    ]);
    expect((await p.closed).code).toBe(CLOSE.protocolError);
    expect(await ctx.rejected()).toEqual(['umbra_provider_usage_rejected_total{bound="prompt_tokens"} 1']);
    expect(await ctx.money()).toEqual(failureMoney(2));
  });

  test("an attested provider that signs a receipt over the inflated usage fails the same way, and no receipt is shown", async () => {
    await using ctx = await setup();
    const { devRoot } = await ctx.t.app.trust();
    if (!devRoot) throw new Error("no development root");
    const identity = SoftwareIdentity.generate();
    const posture = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;
    const echo = createEchoEngine({ models: [BUILD] });
    // An honest echo, except for the counts it reports (and the agent signs).
    const lying: Engine = {
      ...echo,
      async *generate(request, signal) {
        for await (const event of echo.generate(request, signal)) yield event.type === "done" ? { ...event, usage: inflated } : event;
      },
    };
    const agent = startAgent({
      identity,
      url: `${ctx.server.url.replace(/^http/, "ws")}/v1/provider/connect`,
      token: ctx.token,
      engine: lying,
      maxConcurrency: 1,
      evidence: async (encryptionKey) => {
        const mdaChain = await devRoot.issueDeviceChain({ identityKey: identity.publicKey(), posture });
        return buildEvidence({ identity, encryptionKey, posture, timestamp: Date.now(), mdaChain }).wire;
      },
    });
    try {
      await waitFor(() => agent.state().trustLevel === "hardware", "welcome at hardware");
      const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("ok"));
      expect({ status: response.status, body: await response.json() }).toEqual({ status: 502, body: INVALID });
      expect(await ctx.rejected()).toEqual(['umbra_provider_usage_rejected_total{bound="prompt_tokens"} 1']);
    } finally {
      await agent.stop();
    }
  });
});

describe.each<[string, Record<string, unknown>, readonly Step[], string]>([
  ["prompt tokens beyond the prompt's byte bound", {}, answer({ prompt_tokens: PROMPT_LIMIT + 1, completion_tokens: 1 }), "prompt_tokens"],
  [
    "completion tokens beyond the output budget",
    { max_tokens: 4 },
    answer({ prompt_tokens: 5, completion_tokens: 5 }, "x".repeat(100)),
    "completion_budget",
  ],
  [
    "completion tokens beyond the relayed bytes and the allowance",
    {},
    answer({ prompt_tokens: 5, completion_tokens: 2 + OUTPUT_ALLOWANCE_TOKENS + 1 }),
    "completion_output",
  ],
  [
    "reasoning tokens beyond the relayed reasoning bytes and the allowance",
    {},
    answer({ prompt_tokens: 5, completion_tokens: 100, reasoning_tokens: 3 + OUTPUT_ALLOWANCE_TOKENS + 1 }, "x".repeat(100), "hmm"),
    "reasoning_tokens",
  ],
  [
    "the whole budget claimed for 'ok' with `tools` forwarded (tool calls are relayed and counted: none came)",
    { max_tokens: 100, ...TOOLS },
    answer({ prompt_tokens: 30, completion_tokens: 100 }, "ok"),
    "completion_output",
  ],
  [
    "completion tokens one beyond two relayed tool calls' bytes and allowances",
    { max_tokens: 1000, ...TOOLS },
    toolAnswer({ prompt_tokens: 30, completion_tokens: TWO_CALLS_LIMIT + 1 }, TWO_CALLS),
    "completion_output",
  ],
])("a report with %s", (_, extra, steps, bound) => {
  test("is invalid provider output: 502, the session closed with 1002, counted by bound", async () => {
    await using ctx = await setup();
    const p = await ctx.provider(steps);
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("hi", extra));
    expect({ status: response.status, body: await response.json() }).toEqual({ status: 502, body: INVALID });
    expect(await p.closed).toEqual({ code: CLOSE.protocolError, reason: `usage beyond its bound: ${bound}` });
    expect(await ctx.rejected()).toEqual([`umbra_provider_usage_rejected_total{bound="${bound}"} 1`]);
  });
});

describe.each<[string, Record<string, unknown>, readonly Step[], Usage]>([
  [
    "prompt, cached, completion and reasoning at their bounds",
    {},
    answer(
      {
        prompt_tokens: PROMPT_LIMIT,
        cached_tokens: PROMPT_LIMIT,
        completion_tokens: 2 + 3 + OUTPUT_ALLOWANCE_TOKENS,
        reasoning_tokens: 3 + OUTPUT_ALLOWANCE_TOKENS,
      },
      "ok",
      "hmm",
    ),
    {
      prompt_tokens: PROMPT_LIMIT,
      cached_tokens: PROMPT_LIMIT,
      completion_tokens: 2 + 3 + OUTPUT_ALLOWANCE_TOKENS,
      reasoning_tokens: 3 + OUTPUT_ALLOWANCE_TOKENS,
    },
  ],
  [
    "two tool calls, completion at their bytes and allowances (`tools` forwarded)",
    { max_tokens: 1000, ...TOOLS },
    toolAnswer({ prompt_tokens: 30, completion_tokens: TWO_CALLS_LIMIT }, TWO_CALLS),
    { prompt_tokens: 30, completion_tokens: TWO_CALLS_LIMIT },
  ],
  [
    "content and a tool call, completion at their bytes and allowances",
    { max_tokens: 1000, ...TOOLS },
    toolAnswer(
      { prompt_tokens: 30, completion_tokens: 2 + 27 + TOOL_CALL_ALLOWANCE_TOKENS + OUTPUT_ALLOWANCE_TOKENS },
      TWO_CALLS.slice(0, 2),
      "ok",
    ),
    { prompt_tokens: 30, completion_tokens: 2 + 27 + TOOL_CALL_ALLOWANCE_TOKENS + OUTPUT_ALLOWANCE_TOKENS },
  ],
  [
    "a matched stop string counted but not returned",
    { stop: ["<END OF ANSWER>"] },
    answer({ prompt_tokens: 20, completion_tokens: 2 + OUTPUT_ALLOWANCE_TOKENS + 15 }, "ok"),
    { prompt_tokens: 20, completion_tokens: 2 + OUTPUT_ALLOWANCE_TOKENS + 15 },
  ],
])("an honest report with %s", (_, extra, steps, usage) => {
  test("is answered and billed as reported; the provider stays connected and earns its share", async () => {
    await using ctx = await setup();
    await ctx.provider(steps);
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("hi", extra));
    const body = (await response.json()) as { usage: unknown };
    expect({ status: response.status, usage: body.usage }).toEqual({
      status: 200,
      usage: {
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        total_tokens: usage.prompt_tokens + usage.completion_tokens,
        ...(usage.cached_tokens !== undefined ? { prompt_tokens_details: { cached_tokens: usage.cached_tokens } } : {}),
        ...(usage.reasoning_tokens !== undefined ? { completion_tokens_details: { reasoning_tokens: usage.reasoning_tokens } } : {}),
      },
    });
    const charge = chargeFor(usage, RATES);
    const fee = feeFor(charge, FEE_PERCENT);
    expect(await ctx.money()).toEqual({ charge, earning: charge - fee, fee });
    expect(await ctx.rejected()).toEqual([]);
    expect(ctx.t.app.fleet.candidates(BUILD)).toHaveLength(1);
  });
});

describe("finish_reason", () => {
  test.each([
    ["length below the budget", "length", 3, 10, "stop"],
    ["length at the budget", "length", 10, 10, "length"],
    ["stop at the budget", "stop", 10, 10, "length"],
    ["stop below the budget", "stop", 3, 10, "stop"],
    ["another reason below the budget", "content_filter", 3, 10, "content_filter"],
  ])("the provider says %s: %p with %d of %d tokens -> %p", async (_, reported, used, budget, expected) => {
    await using ctx = await setup();
    await ctx.provider(answer({ prompt_tokens: 5, completion_tokens: used }, "a few words", undefined, reported));
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("hi", { max_tokens: budget }));
    const body = (await response.json()) as { choices: { finish_reason: string }[] };
    expect({ status: response.status, finish: body.choices[0]?.finish_reason }).toEqual({ status: 200, finish: expected });
  });
});
