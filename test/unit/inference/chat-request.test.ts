/** parseChatRequest and the output budget rules of the spec (TextChatRequest, rules 1-5, Limits). */
import { describe, expect, test } from "bun:test";
import { ApiError } from "../../../src/errors/api-error.ts";
import { effectiveBudget, engineBody, parseChatRequest } from "../../../src/inference/chat-request.ts";
import { MAX_TOKENS_LIMIT } from "../../../src/protocol/frames.ts";
import { parseJsonExact } from "../../../src/validation/fields.ts";

const CANARY = "canary-7f3a-secret-prompt";
const DEFAULT = 4096;
const MODEL_LIMIT = 2048;

function base(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: "org/model", messages: [{ role: "user", content: CANARY }], ...extra };
}

/** The rejection of a body, as status + envelope (undefined when the body was accepted). */
function rejection(body: unknown): { status: number; error: { message: string; type: string; code: string; param?: string } } | undefined {
  try {
    parseChatRequest(body);
    return undefined;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return { status: e.status, error: e.toEnvelope().error };
  }
}

/** The max_tokens the engine would receive for this body and the seeded model's limit. */
function budgetOf(body: Record<string, unknown>): number {
  const request = parseChatRequest(body);
  return engineBody(request, effectiveBudget(request.requestedMaxTokens, DEFAULT, MODEL_LIMIT)).max_tokens;
}

describe("output budget", () => {
  describe.each(["max_tokens", "max_completion_tokens"])("%s", (field) => {
    test.each([
      ["omitted", undefined, MODEL_LIMIT],
      ["null", null, MODEL_LIMIT],
      ["0", 0, MODEL_LIMIT],
      ["positive", 100, 100],
      ["positive above the model limit (clamped)", 5000, MODEL_LIMIT],
      ["exactly the model limit", MODEL_LIMIT, MODEL_LIMIT],
    ])("%s -> budget", (_name, value, expected) => {
      expect(budgetOf(base(value === undefined ? {} : { [field]: value }))).toBe(expected);
    });

    test.each([
      ["negative", -1],
      ["fractional", 1.5],
      ["numeric string", "10"],
      ["boolean", true],
      ["object", {}],
      ["NaN-like string", "NaN"],
      ["beyond int64", 2 ** 64],
      ["far beyond int64", 1e300],
    ])("%s -> 400 invalid_value with param", (_name, value) => {
      expect(rejection(base({ [field]: value }))).toEqual({
        status: 400,
        error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_value", param: field },
      });
    });
  });

  test("a budget above what the protocol carries is clamped to MAX_TOKENS_LIMIT (and reserved as such)", () => {
    expect(effectiveBudget(1_000_000_000, DEFAULT, null)).toBe(MAX_TOKENS_LIMIT);
    expect(effectiveBudget(MAX_TOKENS_LIMIT, DEFAULT, null)).toBe(MAX_TOKENS_LIMIT);
    expect(effectiveBudget(1_000_000_000, DEFAULT, 2048)).toBe(2048);
  });

  test("omitted budget without a model limit -> the server default", () => {
    const request = parseChatRequest(base());
    expect(request.requestedMaxTokens).toBeUndefined();
    expect(effectiveBudget(request.requestedMaxTokens, DEFAULT, null)).toBe(DEFAULT);
    expect(effectiveBudget(request.requestedMaxTokens, 100, MODEL_LIMIT)).toBe(100);
  });

  test.each([
    ["max_tokens positive wins over max_completion_tokens", { max_tokens: 10, max_completion_tokens: 20 }, 10],
    ["max_tokens positive wins even when smaller limit is second", { max_tokens: 30, max_completion_tokens: 5 }, 30],
    ["max_completion_tokens copied when max_tokens omitted", { max_completion_tokens: 20 }, 20],
    ["max_completion_tokens copied when max_tokens is 0", { max_tokens: 0, max_completion_tokens: 20 }, 20],
    ["max_completion_tokens copied when max_tokens is null", { max_tokens: null, max_completion_tokens: 20 }, 20],
    ["both 0 -> default (clamped)", { max_tokens: 0, max_completion_tokens: 0 }, MODEL_LIMIT],
    ["copied value clamped to the model limit", { max_completion_tokens: 9999 }, MODEL_LIMIT],
  ])("%s", (_name, fields, expected) => {
    expect(budgetOf(base(fields))).toBe(expected);
  });

  test("a negative max_completion_tokens is rejected even when max_tokens is positive", () => {
    expect(rejection(base({ max_tokens: 10, max_completion_tokens: -1 }))?.error.param).toBe("max_completion_tokens");
  });

  test("the budget fields never reach the runtime as given: only max_tokens, after the rules", () => {
    const request = parseChatRequest(base({ max_tokens: 0, max_completion_tokens: 77 }));
    expect(engineBody(request, 77)).toEqual({ messages: [{ role: "user", content: CANARY }], max_tokens: 77 });
  });
});

describe("n", () => {
  test.each([
    ["absent", undefined],
    ["1", 1],
    ["null", null],
  ])("%s is accepted", (_name, n) => {
    expect(rejection(base(n === undefined ? {} : { n }))).toBeUndefined();
  });

  test("2 -> 400 unsupported_value, param n", () => {
    expect(rejection(base({ n: 2 }))).toEqual({
      status: 400,
      error: { message: expect.any(String), type: "invalid_request_error", code: "unsupported_value", param: "n" },
    });
  });

  test.each([
    ["0", 0],
    ["1.5", 1.5],
    ['"1"', "1"],
    ["-1", -1],
  ])("%s -> 400 invalid_value, param n", (_name, n) => {
    expect(rejection(base({ n }))).toEqual({
      status: 400,
      error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_value", param: "n" },
    });
  });
});

describe("messages and model", () => {
  test.each<[string, Record<string, unknown>, string, string]>([
    ["messages missing", { model: "org/model" }, "missing_field", "messages"],
    ["messages null", { model: "org/model", messages: null }, "missing_field", "messages"],
    ["messages empty", { model: "org/model", messages: [] }, "invalid_value", "messages"],
    ["messages not an array", { model: "org/model", messages: { role: "user", content: CANARY } }, "invalid_value", "messages"],
    ["messages a string", { model: "org/model", messages: CANARY }, "invalid_value", "messages"],
    ["item not an object", { model: "org/model", messages: [CANARY] }, "invalid_value", "messages[0]"],
    ["item an array", { model: "org/model", messages: [[CANARY]] }, "invalid_value", "messages[0]"],
    ["role missing", { model: "org/model", messages: [{ content: CANARY }] }, "missing_field", "messages[0].role"],
    ["role not a string", { model: "org/model", messages: [{ role: 7, content: CANARY }] }, "invalid_value", "messages[0].role"],
    [
      "content an array of strings, not parts (second item)",
      {
        model: "org/model",
        messages: [
          { role: "system", content: CANARY },
          { role: "user", content: [CANARY] },
        ],
      },
      "invalid_value",
      "messages[1].content[0]",
    ],
    ["content a number", { model: "org/model", messages: [{ role: "user", content: 7 }] }, "invalid_value", "messages[0].content"],
    ["content missing", { model: "org/model", messages: [{ role: "user" }] }, "missing_field", "messages[0].content"],
    ["model missing", { messages: [{ role: "user", content: CANARY }] }, "missing_field", "model"],
    ["model not a string", { model: 12, messages: [{ role: "user", content: CANARY }] }, "invalid_value", "model"],
    ["model empty", { model: "", messages: [{ role: "user", content: CANARY }] }, "invalid_value", "model"],
  ])("%s -> 400", (_name, body, code, param) => {
    expect(rejection(body)).toEqual({ status: 400, error: { message: expect.any(String), type: "invalid_request_error", code, param } });
  });

  test("a valid request keeps model, messages and stream", () => {
    const request = parseChatRequest(
      base({
        stream: true,
        messages: [
          { role: "system", content: "s" },
          { role: "user", content: CANARY },
        ],
      }),
    );
    expect(request).toEqual({
      model: "org/model",
      selfRoute: false,
      messages: [
        { role: "system", content: "s" },
        { role: "user", content: CANARY },
      ],
      imageParam: undefined,
      schemas: [],
      stream: true,
      requestedMaxTokens: undefined,
      passThrough: {},
    });
  });

  test("unknown message fields are not forwarded (OpenAI's fields for the role are)", () => {
    const request = parseChatRequest(base({ messages: [{ role: "user", content: "x", name: "bob", tool_call_id: "t", extra: CANARY }] }));
    expect(request.messages).toEqual([{ role: "user", content: "x", name: "bob" }]);
  });
});

describe("typed optional fields", () => {
  test.each<[string, Record<string, unknown>, string | undefined]>([
    ["stream false", { stream: false }, undefined],
    ["stream string", { stream: "true" }, "stream"],
    ["stream number", { stream: 1 }, "stream"],
    ["temperature number", { temperature: 0.7 }, undefined],
    ["temperature string", { temperature: "0.7" }, "temperature"],
    ["top_p number", { top_p: 1 }, undefined],
    ["top_p boolean", { top_p: true }, "top_p"],
    ["stop string", { stop: "END" }, undefined],
    ["stop array of strings", { stop: ["a", "b"] }, undefined],
    ["stop empty array", { stop: [] }, undefined],
    ["stop number", { stop: 5 }, "stop"],
    ["stop array with a number", { stop: ["a", 5] }, "stop"],
    ["stop object", { stop: { a: 1 } }, "stop"],
  ])("%s", (_name, fields, param) => {
    const r = rejection(base(fields));
    if (param === undefined) expect(r).toBeUndefined();
    else
      expect(r).toEqual({
        status: 400,
        error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_value", param },
      });
  });

  test("stream absent means false", () => {
    expect(parseChatRequest(base()).stream).toBe(false);
  });
});

describe("pass-through", () => {
  test("identity fields are dropped; sampling and other fields pass through unchanged", () => {
    const tools = [{ type: "function", function: { name: "f", parameters: {} } }];
    const request = parseChatRequest(
      base({
        user: "user-123",
        safety_identifier: "sid",
        metadata: { k: "v" },
        store: true,
        seed: 42,
        tools,
        response_format: { type: "json_object" },
        frequency_penalty: 0.5,
        temperature: 0.2,
        top_p: 0.9,
        stop: ["x"],
        stream: false,
        stream_options: { include_usage: true },
        max_tokens: 9,
        n: 1,
      }),
    );
    expect(request.passThrough).toEqual({
      seed: 42,
      tools,
      response_format: { type: "json_object" },
      frequency_penalty: 0.5,
      temperature: 0.2,
      top_p: 0.9,
      stop: ["x"],
    });
    expect(engineBody(request, 9)).toEqual({
      seed: 42,
      tools,
      response_format: { type: "json_object" },
      frequency_penalty: 0.5,
      temperature: 0.2,
      top_p: 0.9,
      stop: ["x"],
      messages: [{ role: "user", content: CANARY }],
      max_tokens: 9,
    });
  });

  test("a pass-through field cannot override messages or max_tokens in the engine body", () => {
    const request = parseChatRequest(base({ max_tokens: 3 }));
    expect(engineBody(request, 3).max_tokens).toBe(3);
    expect(engineBody(request, 3).messages).toEqual([{ role: "user", content: CANARY }]);
  });
});

describe("body", () => {
  test.each([
    ["undefined", undefined],
    ["null", null],
    ["an array", [base()]],
    ["a string", "{}"],
    ["a number", 5],
  ])("%s -> 400 invalid_json", (_name, body) => {
    expect(rejection(body)).toEqual({
      status: 400,
      error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_json" },
    });
  });
});

describe("error messages never quote content", () => {
  test.each<[string, Record<string, unknown>]>([
    ["bad role", { model: "org/model", messages: [{ role: 1, content: CANARY }] }],
    ["bad content", { model: "org/model", messages: [{ role: "user", content: [CANARY] }] }],
    ["bad item", { model: "org/model", messages: [CANARY] }],
    ["bad messages", { model: "org/model", messages: CANARY }],
    ["bad model", { model: [CANARY], messages: [{ role: "user", content: CANARY }] }],
    ["bad budget", base({ max_tokens: CANARY })],
    ["bad n", base({ n: CANARY })],
    ["bad stop", base({ stop: [CANARY, 1] })],
    ["bad temperature", base({ temperature: CANARY })],
    ["bad stream", base({ stream: CANARY })],
    ["model too long", { model: CANARY.repeat(20), messages: [{ role: "user", content: CANARY }] }],
  ])("%s", (_name, body) => {
    const r = rejection(body);
    expect(r?.status).toBe(400);
    expect(JSON.stringify(r)).not.toContain(CANARY);
  });
});

describe("nesting", () => {
  /** `[[...]]` with `levels` arrays, built without recursion. */
  const arrays = (levels: number): unknown => {
    let v: unknown = [];
    for (let i = 1; i < levels; i++) v = [v];
    return v;
  };
  const deepError = (param: string) => ({
    status: 400,
    error: { message: "a field nests deeper than 64 levels", type: "invalid_request_error", code: "invalid_value", param },
  });

  test.each([
    ["63 levels under the body", { extra: arrays(63) }, undefined],
    ["64 levels under the body", { extra: arrays(64) }, deepError("extra")],
    ["50,000 levels in a pass-through field", { response_format: arrays(50_000) }, deepError("response_format")],
    ["deep inside an object of objects", { tools: [{ function: { parameters: { properties: arrays(61) } } }] }, deepError("tools")],
    ["deep inside a message", { messages: [{ role: "user", content: "x", name: arrays(100) }] }, deepError("messages")],
    ["deep under an identity field (dropped, but still walked)", { metadata: { a: arrays(100) } }, deepError("metadata")],
  ])("%s", (_name, extra, expected) => {
    expect(rejection(base(extra))).toEqual(expected);
  });

  test("the bound is checked before any other field: a deep body with a bad budget names the deep field", () => {
    expect(rejection(base({ max_tokens: -1, extra: arrays(1000) }))).toEqual(deepError("extra"));
  });
});

describe("budgets near the int64 bound, as JSON literals", () => {
  // JSON.parse reads every literal from 2^63 - 512 to 2^63 + 1024 as the double 2^63: the bound is
  // decided on the literal's digits (parseJsonExact), not on the double.
  const INT64 = { message: "'max_tokens' must be an int64 (at most 9223372036854775807)", param: "max_tokens" };
  const NOT_INTEGER = { message: "'max_tokens' must be an integer", param: "max_tokens" };
  test.each<[string, string, typeof INT64 | undefined]>([
    ["2^63 - 1", "9223372036854775807", undefined],
    ["2^63 - 2", "9223372036854775806", undefined],
    ["2^63 - 1 with a zero fraction", "9223372036854775807.000", undefined],
    ["2^63 - 1 in exponent form", "9.223372036854775807e18", undefined],
    ["2^63 - 1 as a longer mantissa", "92233720368547758070e-1", undefined],
    ["2^53 + 1", "9007199254740993", undefined],
    ["2^63", "9223372036854775808", INT64],
    ["2^63 + 1", "9223372036854775809", INT64],
    ["2^63 + 1024", "9223372036854776832", INT64],
    ["2^63 as JavaScript prints it", "9223372036854776000", INT64],
    ["9.3e18", "9.3e18", INT64],
    ["2^64", "18446744073709551616", INT64],
    ["1e19", "1e19", INT64],
    ["2^63 - 1 and a half", "9223372036854775807.5", NOT_INTEGER],
    ["2^53 + 1 and a half", "9007199254740993.5", NOT_INTEGER],
  ])("%s (%s)", (_name, literal, expected) => {
    const body = parseJsonExact(`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":${literal}}`, ["max_tokens"]);
    expect(rejection(body)).toEqual(
      expected === undefined ? undefined : { status: 400, error: { ...expected, type: "invalid_request_error", code: "invalid_value" } },
    );
    if (expected === undefined) expect(budgetOf(body as Record<string, unknown>)).toBe(MODEL_LIMIT);
  });

  test("read exactly at the top level only, and only the fields named", () => {
    const text = '{"max_tokens":9223372036854775807,"seed":9223372036854775807,"x":{"max_tokens":9223372036854775807}}';
    expect(parseJsonExact(text, ["max_tokens"])).toEqual({
      max_tokens: 9223372036854775807n,
      seed: 2 ** 63,
      x: { max_tokens: 2 ** 63 },
    });
  });

  test("a double of 2^63 given in-process (no literal to read) is refused", () => {
    expect(rejection(base({ max_tokens: 2 ** 63 }))?.error.param).toBe("max_tokens");
  });
});
