/**
 * The usage bounds (src/billing/usage-bounds.ts): the limits of a request from what the coordinator
 * sends (the reservation's prompt bound, forwarded fields, budget, stop strings), and which bound a
 * report breaks, each bound tested at its edge (at it: believed; one above: the bound named).
 */
import { describe, expect, test } from "bun:test";
import { promptTokenBound } from "../../../src/billing/billing.ts";
import {
  OUTPUT_ALLOWANCE_TOKENS,
  PROMPT_TEMPLATE_ALLOWANCE,
  type RelayedOutput,
  TOOL_CALL_ALLOWANCE_TOKENS,
  type UsageBound,
  type UsageLimits,
  usageLimits,
  usageViolation,
} from "../../../src/billing/usage-bounds.ts";
import type { ChatMessage } from "../../../src/protocol/chat-messages.ts";
import type { EngineRequestBody, Usage } from "../../../src/protocol/frames.ts";

const MESSAGES: ChatMessage[] = [
  { role: "system", content: "be brief" },
  { role: "user", content: "héllo 日本" },
];
/** 16 + (6 + 8 + 8) + (4 + 13 + 8) = 63: promptTokenBound, the reservation's bound. */
const BOUND = promptTokenBound(MESSAGES);

describe("usageLimits", () => {
  test.each<[string, Record<string, unknown>, UsageLimits]>([
    ["no forwarded field", {}, { promptTokens: BOUND + PROMPT_TEMPLATE_ALLOWANCE, budget: 50, outputAllowance: OUTPUT_ALLOWANCE_TOKENS }],
    [
      "sampling fields: their JSON bytes count toward the prompt",
      { temperature: 0.5, seed: 7 },
      { promptTokens: BOUND + 28 + PROMPT_TEMPLATE_ALLOWANCE, budget: 50, outputAllowance: OUTPUT_ALLOWANCE_TOKENS },
    ],
    [
      "stop strings: their UTF-8 bytes join the output allowance",
      { stop: ["ÉND", "\n\n"] },
      { promptTokens: BOUND + 24 + PROMPT_TEMPLATE_ALLOWANCE, budget: 50, outputAllowance: OUTPUT_ALLOWANCE_TOKENS + 6 },
    ],
    [
      "one stop string",
      { stop: "###" },
      { promptTokens: BOUND + 14 + PROMPT_TEMPLATE_ALLOWANCE, budget: 50, outputAllowance: OUTPUT_ALLOWANCE_TOKENS + 3 },
    ],
    [
      "tools, tool_choice, parallel_tool_calls: tool calls are relayed (and counted), so output stays bounded by it",
      { tools: [{ type: "function" }], tool_choice: "auto", parallel_tool_calls: false },
      { promptTokens: BOUND + 80 + PROMPT_TEMPLATE_ALLOWANCE, budget: 50, outputAllowance: OUTPUT_ALLOWANCE_TOKENS },
    ],
    [
      "an unknown runtime switch: output may be hidden",
      { include_reasoning: false },
      { promptTokens: BOUND + 27 + PROMPT_TEMPLATE_ALLOWANCE, budget: 50, outputAllowance: undefined },
    ],
  ])("%s (the forwarded fields' compact JSON in UTF-8 joins the prompt bound)", (_, forwarded, expected) => {
    const body: EngineRequestBody = { ...forwarded, messages: MESSAGES, max_tokens: 50 };
    expect(usageLimits(body)).toEqual(expected);
  });
});

describe("usageViolation", () => {
  const limits: UsageLimits = { promptTokens: 100, budget: 60, outputAllowance: OUTPUT_ALLOWANCE_TOKENS };
  const hidden: UsageLimits = { ...limits, outputAllowance: undefined };
  /** 10 bytes of content and 5 of reasoning relayed: completion at most 15 + 32 = 47, reasoning 5 + 32 = 37. */
  const relayed: RelayedOutput = { contentBytes: 10, reasoningBytes: 5, toolCallBytes: 0, toolCalls: 0 };
  const manyBytes: RelayedOutput = { contentBytes: 1_000, reasoningBytes: 0, toolCallBytes: 0, toolCalls: 0 };
  /** Besides that, two tool calls of 20 bytes of names and arguments: completion at most 15 + 20 + 2 x 32 + 32 = 131. */
  const withCalls: RelayedOutput = { ...relayed, toolCallBytes: 20, toolCalls: 2 };
  const callLimits: UsageLimits = { ...limits, budget: 1_000 };
  const usage = (u: Partial<Usage>): Usage => ({ prompt_tokens: 10, completion_tokens: 5, ...u });

  test.each<[string, Usage, UsageLimits, RelayedOutput, UsageBound | undefined]>([
    ["an ordinary report", usage({}), limits, relayed, undefined],
    ["prompt at its bound", usage({ prompt_tokens: 100 }), limits, relayed, undefined],
    ["prompt one above", usage({ prompt_tokens: 101 }), limits, relayed, "prompt_tokens"],
    ["cached equal to prompt", usage({ prompt_tokens: 100, cached_tokens: 100 }), limits, relayed, undefined],
    ["cached above prompt", usage({ prompt_tokens: 50, cached_tokens: 51 }), limits, relayed, "cached_tokens"],
    ["completion at the relayed bytes + allowance", usage({ completion_tokens: 47 }), limits, relayed, undefined],
    ["completion one above the relayed bytes + allowance", usage({ completion_tokens: 48 }), limits, relayed, "completion_output"],
    ["completion at the budget, within the bytes", usage({ completion_tokens: 60 }), limits, manyBytes, undefined],
    [
      "with tool calls: completion at the relayed bytes (tool calls' included) + allowances",
      usage({ completion_tokens: 15 + 20 + 2 * TOOL_CALL_ALLOWANCE_TOKENS + OUTPUT_ALLOWANCE_TOKENS }),
      callLimits,
      withCalls,
      undefined,
    ],
    [
      "with tool calls: one above",
      usage({ completion_tokens: 15 + 20 + 2 * TOOL_CALL_ALLOWANCE_TOKENS + OUTPUT_ALLOWANCE_TOKENS + 1 }),
      callLimits,
      withCalls,
      "completion_output",
    ],
    ["completion one above the budget, within the bytes", usage({ completion_tokens: 61 }), limits, manyBytes, "completion_budget"],
    ["completion at the budget, output hidden", usage({ completion_tokens: 60 }), hidden, relayed, undefined],
    ["completion one above the budget, output hidden", usage({ completion_tokens: 61 }), hidden, relayed, "completion_budget"],
    [
      "reasoning at the relayed reasoning bytes + allowance",
      usage({ completion_tokens: 47, reasoning_tokens: 37 }),
      limits,
      relayed,
      undefined,
    ],
    ["reasoning one above", usage({ completion_tokens: 47, reasoning_tokens: 38 }), limits, relayed, "reasoning_tokens"],
    ["reasoning above completion", usage({ completion_tokens: 5, reasoning_tokens: 6 }), limits, relayed, "reasoning_tokens"],
    [
      "reasoning above completion, output hidden",
      usage({ completion_tokens: 50, reasoning_tokens: 51 }),
      hidden,
      relayed,
      "reasoning_tokens",
    ],
    ["reasoning far above its bytes, output hidden", usage({ completion_tokens: 60, reasoning_tokens: 60 }), hidden, relayed, undefined],
    [
      "nothing relayed, nothing reported",
      usage({ prompt_tokens: 0, completion_tokens: 0 }),
      limits,
      { contentBytes: 0, reasoningBytes: 0, toolCallBytes: 0, toolCalls: 0 },
      undefined,
    ],
  ])("%s", (_, reported, l, output, expected) => {
    expect(usageViolation(reported, l, output)).toBe(expected);
  });

  test("the issue's attack: 9,000 prompt and 8,000 completion tokens for a 2-byte prompt and a 2-character answer", () => {
    const body: EngineRequestBody = { messages: [{ role: "user", content: "hi" }], max_tokens: 2048 };
    const bounds = usageLimits(body);
    const at = (u: Usage) => usageViolation(u, bounds, { contentBytes: 2, reasoningBytes: 0, toolCallBytes: 0, toolCalls: 0 });
    expect([
      at({ prompt_tokens: 9_000, completion_tokens: 8_000 }),
      at({ prompt_tokens: 30, completion_tokens: 8_000 }),
      at({ prompt_tokens: 30, completion_tokens: 2 + OUTPUT_ALLOWANCE_TOKENS + 1 }),
      at({ prompt_tokens: 30 + PROMPT_TEMPLATE_ALLOWANCE, completion_tokens: 2 + OUTPUT_ALLOWANCE_TOKENS }),
    ]).toEqual(["prompt_tokens", "completion_budget", "completion_output", undefined]);
  });
});
