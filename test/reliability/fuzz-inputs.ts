/**
 * Inputs and oracles for fuzzing the consumer API (issue 7 point 2 d), shared by the in-process fuzz
 * (fuzz.test.ts) and the one against a coordinator process (fuzz-process.test.ts).
 *
 * The oracle is written from the contract (../shared/spec/consumer-api.md and docs/api.md), not from
 * src/: which request is invalid and for which parameter, which model id exists, what budget a valid
 * request gets (budget rules 1 to 4, clamped to the model's max_output_length). Where the contract leaves
 * a choice (an over-long or empty model id: 400 on `model` or 404 model_not_found) both are accepted.
 *
 * Fuzzed requests carry synthetic words only; the providers answer with the budget they were given, so
 * no answer carries request text either.
 */
import fc from "fast-check";

/** Fixed seeds: a failure prints its seed and counterexample; FUZZ_SEED overrides every seed to explore. */
export function seedOf(fixed: number): number {
  const override = process.env.FUZZ_SEED;
  return override === undefined ? fixed : Number(override);
}

/** Runs per property, scaled by FUZZ_RUNS_SCALE (e.g. 10 for a long exploration). */
export function runsOf(base: number): number {
  return Math.max(1, Math.round(base * Number(process.env.FUZZ_RUNS_SCALE ?? 1)));
}

// ---------------------------------------------------------------- the error vocabulary (docs/api.md)

/** Status -> accepted types and codes, from the spec's Errors table and docs/api.md. 500 is never accepted. */
const VOCABULARY: Readonly<Record<number, { readonly types: readonly string[]; readonly codes: readonly string[] }>> = {
  400: { types: ["invalid_request_error"], codes: ["invalid_json", "missing_field", "invalid_value", "unsupported_value"] },
  401: { types: ["authentication_error"], codes: ["invalid_api_key", "invalid_token"] },
  402: { types: ["insufficient_funds", "insufficient_quota"], codes: ["insufficient_quota"] },
  403: { types: ["permission_error"], codes: ["model_not_allowed", "forbidden"] },
  404: { types: ["not_found_error"], codes: ["model_not_found", "not_found"] },
  409: { types: ["conflict_error"], codes: ["self_route_conflict"] },
  413: { types: ["request_too_large"], codes: ["request_too_large", "prompt_too_large"] },
  422: { types: ["invalid_request_error"], codes: ["tool_schema_invalid"] },
  429: { types: ["rate_limit_error"], codes: ["rate_limit_exceeded", "capacity_exhausted", "first_content_timeout"] },
  502: { types: ["provider_error"], codes: ["provider_error", "invalid_provider_output"] },
  503: { types: ["service_unavailable"], codes: ["service_unavailable", "model_unavailable", "provider_error"] },
  504: { types: ["timeout"], codes: ["timeout", "provider_error"] },
};

export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  /** Parsed JSON, or the text when not JSON. */
  readonly body: unknown;
}

export interface ErrorBody {
  readonly message: string;
  readonly type: string;
  readonly code: string;
  readonly param?: string;
}

/**
 * Checks that an error answer is the spec's envelope with a status, type and code the contract lists
 * (and Retry-After on a 429). Returns the error object; throws a description of what is wrong.
 */
export function expectEnvelope(answer: Answer): ErrorBody {
  const where = `status ${answer.status}, body ${JSON.stringify(answer.body)?.slice(0, 300)}`;
  const allowed = VOCABULARY[answer.status];
  if (!allowed) throw new Error(`a status the spec does not list for an error: ${where}`);
  if (!answer.headers.get("content-type")?.startsWith("application/json")) throw new Error(`error not JSON: ${where}`);
  const body = answer.body;
  if (typeof body !== "object" || body === null || Object.keys(body).join() !== "error") throw new Error(`not an envelope: ${where}`);
  const error = (body as { error: unknown }).error;
  if (typeof error !== "object" || error === null) throw new Error(`envelope without an error object: ${where}`);
  const e = error as Record<string, unknown>;
  const extra = Object.keys(e).filter((k) => !["message", "type", "code", "param"].includes(k));
  if (extra.length > 0) throw new Error(`envelope with unknown keys ${extra.join()}: ${where}`);
  if (typeof e.message !== "string" || e.message.length === 0) throw new Error(`envelope without a message: ${where}`);
  if (typeof e.type !== "string" || !allowed.types.includes(e.type)) throw new Error(`type not listed for the status: ${where}`);
  if (typeof e.code !== "string" || !allowed.codes.includes(e.code)) throw new Error(`code not listed for the status: ${where}`);
  if (e.param !== undefined && typeof e.param !== "string") throw new Error(`param not a string: ${where}`);
  if (answer.status === 429 && !/^\d+$/.test(answer.headers.get("retry-after") ?? "")) throw new Error(`429 without Retry-After: ${where}`);
  return e as unknown as ErrorBody;
}

// ---------------------------------------------------------------- the catalog the fuzz runs against

/** Builds and aliases seeded for fuzzing: [id, max_output_length or null]. The alias resolves to its build. */
export const FUZZ_BUILD = "org/fuzz-build-4bit";
export const FUZZ_PLAIN = "other/fuzz-plain";
export const FUZZ_ALIAS = "org/fuzz";
export const FUZZ_BUILD_LIMIT = 2048;
/** The model ids that exist, with the output limit each resolves to. */
export const KNOWN_MODELS: ReadonlyMap<string, number | null> = new Map([
  [FUZZ_BUILD, FUZZ_BUILD_LIMIT],
  [FUZZ_PLAIN, null],
  [FUZZ_ALIAS, FUZZ_BUILD_LIMIT],
]);
/** The server default budget the fuzzed coordinators are started with (UMBRA_DEFAULT_MAX_TOKENS). */
export const FUZZ_DEFAULT_MAX_TOKENS = 3000;
/** The protocol's ceiling on a budget (docs/protocol.md: max_tokens at most 100,000,000). */
export const PROTOCOL_MAX_TOKENS = 100_000_000;

/** The budget a valid request must reach its provider with (spec budget rules 1, 2, 4; model limits). */
export function expectedBudget(model: string, maxTokens: unknown, maxCompletionTokens: unknown): number {
  const positive = (v: unknown) => (typeof v === "number" && v > 0 ? v : typeof v === "bigint" && v > 0n ? Number(v) : undefined);
  const requested = positive(maxTokens) ?? positive(maxCompletionTokens) ?? FUZZ_DEFAULT_MAX_TOKENS;
  const limit = KNOWN_MODELS.get(model) ?? null;
  return Math.min(requested, PROTOCOL_MAX_TOKENS, limit ?? Number.POSITIVE_INFINITY);
}

// ---------------------------------------------------------------- the request oracle

/** What the contract says a request must get. */
export type Expected =
  | { readonly kind: "invalid"; readonly params: readonly (string | undefined)[] }
  | { readonly kind: "not_found" }
  /** An over-long or empty model id: 400 on `model`, or 404 model_not_found. */
  | { readonly kind: "bad_or_unknown_model" }
  | { readonly kind: "self_route_conflict" }
  | { readonly kind: "ok"; readonly model: string; readonly stream: boolean; readonly budget: number };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const absent = (v: unknown) => v === undefined || v === null;
/**
 * int64 with minimum 0: an integer from 0 to 2^63 - 1; null or absent allowed. A double of 2^63 or more
 * is beyond (the literal 2^63 - 1 arrives as a bigint from parseBody).
 */
const validBudget = (v: unknown) =>
  absent(v) ||
  (typeof v === "bigint" && v >= 0n && v <= 9223372036854775807n) ||
  (typeof v === "number" && Number.isInteger(v) && v >= 0 && v < 2 ** 63);

/**
 * The oracle's reading of a body's text: JSON.parse, except that budgets written as plain integer
 * literals beyond 2^53 are read exactly, as bigints (the double cannot tell 2^63 - 1 from 2^63).
 */
export function parseBody(text: string): unknown {
  return JSON.parse(text, (key: string, v: unknown, context?: { source?: string }) => {
    const exact = (key === "max_tokens" || key === "max_completion_tokens") && typeof v === "number" && !Number.isSafeInteger(v);
    return exact && context?.source !== undefined && /^-?\d+$/.test(context.source) ? BigInt(context.source) : v;
  });
}

// Messages and tool fields as docs/api.md states them ("Messages", "Tools and structured output").
const ROLES = ["system", "developer", "user", "assistant", "tool"];
const nonEmpty = (v: unknown) => typeof v === "string" && v.length > 0;
const textPart = (p: unknown) => isObject(p) && p.type === "text" && typeof p.text === "string";
const imagePart = (p: unknown) =>
  isObject(p) &&
  p.type === "image_url" &&
  isObject(p.image_url) &&
  nonEmpty(p.image_url.url) &&
  (absent(p.image_url.detail) || ["auto", "low", "high"].includes(p.image_url.detail as string));
/** string, or a non-empty array of text parts (and image parts where `images`). */
const contentOk = (v: unknown, images: boolean) =>
  typeof v === "string" || (Array.isArray(v) && v.length > 0 && v.every((p) => textPart(p) || (images && imagePart(p))));
const toolCallOk = (c: unknown) =>
  isObject(c) &&
  nonEmpty(c.id) &&
  c.type === "function" &&
  isObject(c.function) &&
  nonEmpty(c.function.name) &&
  typeof c.function.arguments === "string";
function messageOk(m: Record<string, unknown>): boolean {
  if (typeof m.role !== "string" || !ROLES.includes(m.role)) return false;
  if (m.role === "tool") return !absent(m.content) && contentOk(m.content, false) && nonEmpty(m.tool_call_id);
  if (!absent(m.name) && typeof m.name !== "string") return false;
  if (m.role !== "assistant") return !absent(m.content) && contentOk(m.content, m.role === "user");
  const calls = m.tool_calls;
  if (!absent(calls) && !(Array.isArray(calls) && calls.every(toolCallOk))) return false;
  if (!absent(m.refusal) && typeof m.refusal !== "string") return false;
  if (absent(m.content)) return (Array.isArray(calls) && calls.length > 0) || typeof m.refusal === "string";
  return contentOk(m.content, false);
}
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const optionalType = (o: Record<string, unknown>, key: string, type: string) => absent(o[key]) || typeof o[key] === type;
/** The tool and response-format fields' faults (field names), and the tool names declared. */
function toolFieldFaults(body: Record<string, unknown>): string[] {
  const bad: string[] = [];
  const names = new Set<string>();
  const tools = body.tools;
  if (!absent(tools)) {
    const ok =
      Array.isArray(tools) &&
      tools.length >= 1 &&
      tools.length <= 128 &&
      tools.every((t) => {
        if (!isObject(t) || t.type !== "function" || !isObject(t.function)) return false;
        const f = t.function;
        if (typeof f.name !== "string" || !TOOL_NAME.test(f.name) || names.has(f.name)) return false;
        names.add(f.name);
        return (
          optionalType(f, "description", "string") &&
          optionalType(f, "strict", "boolean") &&
          (absent(f.parameters) || isObject(f.parameters))
        );
      });
    if (!ok) bad.push("tools");
  }
  const choice = body.tool_choice;
  if (!absent(choice)) {
    const ok =
      choice === "none" ||
      choice === "auto" ||
      (choice === "required" && !absent(tools)) ||
      (isObject(choice) && choice.type === "function" && isObject(choice.function) && names.has(choice.function.name as string));
    if (!ok) bad.push("tool_choice");
  }
  if (!absent(body.parallel_tool_calls) && typeof body.parallel_tool_calls !== "boolean") bad.push("parallel_tool_calls");
  const format = body.response_format;
  if (!absent(format)) {
    const js = isObject(format) ? format.json_schema : undefined;
    const ok =
      isObject(format) &&
      (format.type === "text" ||
        format.type === "json_object" ||
        (format.type === "json_schema" &&
          isObject(js) &&
          typeof js.name === "string" &&
          TOOL_NAME.test(js.name) &&
          optionalType(js, "description", "string") &&
          optionalType(js, "strict", "boolean") &&
          (absent(js.schema) || isObject(js.schema))));
    if (!ok) bad.push("response_format");
  }
  return bad;
}

/** How deep a chat body may nest, the body itself being level 1 (docs/api.md, Limits). */
const MAX_DEPTH = 64;

/** How many levels of objects and arrays `value` holds (0 for a scalar), without recursion. */
function depthOf(value: unknown): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 1]];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const [v, level] = top;
    if (typeof v !== "object" || v === null) continue;
    deepest = Math.max(deepest, level);
    for (const child of Object.values(v)) stack.push([child, level + 1]);
  }
  return deepest;
}

/**
 * The expected outcome of POST /v1/chat/completions with this parsed body, for a funded key without
 * limits whose account has no provider machine. `body` undefined means the body was not JSON.
 */
export function expectedChat(body: unknown, parsed: boolean): Expected {
  if (!parsed || !isObject(body)) return { kind: "invalid", params: [undefined] };
  const bad: (string | undefined)[] = [];
  const model = body.model;
  let modelShape: "ok" | "odd" | "bad" = "ok";
  if (absent(model) || typeof model !== "string") {
    modelShape = "bad";
    bad.push("model");
  } else if (model.length === 0 || model.length > 256) modelShape = "odd";

  const messages = body.messages;
  if (absent(messages) || !Array.isArray(messages) || messages.length === 0) bad.push("messages");
  else {
    messages.forEach((m: unknown, i) => {
      if (!isObject(m) || !messageOk(m)) bad.push(`messages[${i}]`);
    });
  }
  bad.push(...toolFieldFaults(body));
  // Nesting deeper than 64 levels (the body being level 1) anywhere names its top-level field.
  for (const [name, value] of Object.entries(body)) if (1 + depthOf(value) > MAX_DEPTH) bad.push(name);
  if (!absent(body.stream) && typeof body.stream !== "boolean") bad.push("stream");
  if (!absent(body.stream_options) && !isObject(body.stream_options)) bad.push("stream_options");
  if (!absent(body.self_route) && typeof body.self_route !== "boolean") bad.push("self_route");
  if (!validBudget(body.max_tokens)) bad.push("max_tokens");
  if (!validBudget(body.max_completion_tokens)) bad.push("max_completion_tokens");
  if (!absent(body.n) && body.n !== 1) bad.push("n");
  for (const name of ["temperature", "top_p"]) {
    const v = body[name];
    if (!absent(v) && (typeof v !== "number" || !Number.isFinite(v))) bad.push(name);
  }
  const stop = body.stop;
  if (!absent(stop) && typeof stop !== "string" && !(Array.isArray(stop) && stop.every((s) => typeof s === "string"))) bad.push("stop");

  // An over-long or empty model id may be the 400's parameter too (checked in any order).
  if (bad.length > 0) return { kind: "invalid", params: modelShape === "odd" ? ["model", ...bad] : bad };
  if (modelShape === "odd") return { kind: "bad_or_unknown_model" };
  const id = model as string;
  if (!KNOWN_MODELS.has(id)) return { kind: "not_found" };
  // Image parts, once the model is known: the fuzz catalog's models take text only.
  const withImage = (messages as Record<string, unknown>[]).findIndex((m) => Array.isArray(m.content) && m.content.some(imagePart));
  if (withImage >= 0) return { kind: "invalid", params: [`messages[${withImage}]`] };
  if (body.self_route === true) return { kind: "self_route_conflict" };
  return { kind: "ok", model: id, stream: body.stream === true, budget: expectedBudget(id, body.max_tokens, body.max_completion_tokens) };
}

/**
 * Asserts an answer against the oracle. `content` is the completion text (JSON or joined stream deltas);
 * `want` the text the provider answers a valid request with (by default its budget, as text).
 */
export function checkChat(
  expected: Expected,
  answer: Answer,
  content: string | undefined,
  want: (ok: Extract<Expected, { kind: "ok" }>) => string | undefined = (ok) => String(ok.budget),
): void {
  const where = () => `expected ${JSON.stringify(expected)}, got status ${answer.status} ${JSON.stringify(answer.body)?.slice(0, 300)}`;
  if (answer.status !== 200) {
    const e = expectEnvelope(answer);
    const ok =
      (expected.kind === "invalid" &&
        answer.status === 400 &&
        (expected.params.includes(e.param) || paramUnder(expected.params, e.param))) ||
      (expected.kind === "not_found" && answer.status === 404 && e.code === "model_not_found") ||
      (expected.kind === "bad_or_unknown_model" &&
        ((answer.status === 400 && e.param === "model") || (answer.status === 404 && e.code === "model_not_found"))) ||
      (expected.kind === "self_route_conflict" && answer.status === 409 && e.code === "self_route_conflict");
    if (!ok) throw new Error(where());
    return;
  }
  if (expected.kind !== "ok") throw new Error(where());
  const wanted = want(expected);
  if (wanted !== undefined && content !== wanted)
    throw new Error(`${where()}: the answer's content is not what a provider given budget ${expected.budget} answers`);
}

/**
 * What the echo engine (src/provider/engines/echo.ts, documented behaviour) answers: the words of the last
 * message, at most `budget` of them, each followed by one space except the reply's final word. Undefined
 * (not checked) when the body declares tools or asks for JSON: the engine may shape that answer otherwise.
 */
export function echoReply(body: Record<string, unknown>, budget: number): string | undefined {
  const format = isObject(body.response_format) ? body.response_format.type : undefined;
  if ((Array.isArray(body.tools) && body.tools.length > 0) || format === "json_schema" || format === "json_object") return undefined;
  const last = (body.messages as { content?: unknown }[]).at(-1)?.content;
  // The last message's text: its string content, or its text parts joined.
  const text = typeof last === "string" ? last : Array.isArray(last) ? last.map((p: { text?: string }) => p.text ?? "").join("") : "";
  const words = text.split(/\s+/).filter((w) => w.length > 0);
  return words
    .slice(0, budget)
    .map((w, i) => (i < words.length - 1 ? `${w} ` : w))
    .join("");
}

/** A param inside a reported one (`messages[0].role` under `messages[0]`)? Only prefixes of the form a / a[i] / a.b. */
function paramUnder(params: readonly (string | undefined)[], param: string | undefined): boolean {
  if (param === undefined) return false;
  return params.some((p) => p !== undefined && (param.startsWith(`${p}[`) || param.startsWith(`${p}.`)));
}

// ---------------------------------------------------------------- arbitraries

/** Synthetic words (never real prompt text). */
const word = fc.constantFrom("alpha", "beta", "gamma", "delta", "x", "42", "ü", "日本", "🙂", "a\u0000b", "\\", '"', "\ud800");
const text = fc.array(word, { maxLength: 12 }).map((w) => w.join(" "));

/** Any JSON-ish value, including the awkward ones. */
const oddValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, true, false, 0, -0, -1, 1.5, "", "1", "null", [], {}, [1], { a: 1 }),
  fc.integer(),
  fc.double(),
  fc.string({ maxLength: 20 }),
  fc.jsonValue({ maxDepth: 3 }),
);

/** Budget values: the awkward numbers the contract has rules for, and things that are not numbers. */
export const budgetValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.integer({ min: 0, max: 5000 }) },
  { weight: 2, arbitrary: fc.integer({ min: -5000, max: -1 }) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      0,
      -0,
      1,
      2 ** 31,
      2 ** 53 - 1,
      2 ** 53 + 2,
      2 ** 63,
      1e20,
      1e308,
      -1e308,
      Number.MAX_VALUE,
      Number.MIN_VALUE,
      0.5,
      1.5,
      -0.5,
      PROTOCOL_MAX_TOKENS,
      PROTOCOL_MAX_TOKENS + 1,
    ),
  },
  { weight: 2, arbitrary: fc.double({ noNaN: true, noDefaultInfinity: true }) },
  { weight: 2, arbitrary: fc.constantFrom(null, "100", "", "-1", true, false, [], [100], {}, { value: 10 }) },
);

/** Model ids: known ones, near misses, and odd strings. */
export const modelId: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...KNOWN_MODELS.keys()) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      "ORG/FUZZ",
      "org/fuzz ",
      " org/fuzz",
      "org//fuzz",
      "org/fuzz/",
      "/org/fuzz",
      "org%2Ffuzz",
      "org/fuzz-build-4bit/extra",
      "org",
      "..",
      "../org/fuzz",
      "org/./fuzz",
      "",
      "x".repeat(256),
      "x".repeat(257),
      "\u0000",
      "org/fuzz\u0000",
      "\ud800",
      "🙂/🙂",
      "%",
      "%zz",
      "a?b",
      "a#b",
      "a b",
    ),
  },
  { weight: 2, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.array(fc.constantFrom("org", "fuzz", "a", "%2F", "-", "."), { maxLength: 5 }).map((p) => p.join("/")) },
);

const textParts = fc.array(fc.record({ type: fc.constant("text"), text }), { minLength: 1, maxLength: 3 });
/** Mostly well-formed tool calls; sometimes an empty id, another type or arguments that are not a string. */
const toolCall = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record({
      id: fc.constantFrom("call_1", "call_2"),
      type: fc.constant("function"),
      function: fc.record({ name: fc.constantFrom("lookup", "get_weather"), arguments: fc.oneof(fc.constant('{"q":"x"}'), text) }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom({ id: "", type: "function", function: { name: "f", arguments: "{}" } }, { id: "c", type: "custom" }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      id: fc.constant("c"),
      type: fc.constant("function"),
      function: fc.record({ name: fc.constant("f"), arguments: oddValue }),
    }),
  },
);
const message: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 24, arbitrary: fc.record({ role: fc.constantFrom("user", "system", "developer", "assistant"), content: text }) },
  {
    weight: 3,
    arbitrary: fc.record({ role: fc.constantFrom("user", "system", "developer"), content: textParts, name: fc.string({ maxLength: 8 }) }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      role: fc.constant("tool"),
      content: fc.oneof(text, textParts),
      tool_call_id: fc.constantFrom("call_1", "call_2"),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record(
      {
        role: fc.constant("assistant"),
        content: fc.constantFrom(null, "", "ok"),
        tool_calls: fc.array(toolCall, { minLength: 1, maxLength: 2 }),
        refusal: fc.constantFrom(null, "no"),
      },
      { requiredKeys: ["role", "tool_calls"] },
    ),
  },
  {
    // Tool-calling shapes that break a rule, and an image part (the fuzz catalog's models take text only).
    weight: 1,
    arbitrary: fc.oneof(
      fc.record({ role: fc.constant("tool"), content: text, tool_call_id: fc.constantFrom("", 7) }, { requiredKeys: ["role"] }),
      fc.record({ role: fc.constant("assistant"), content: fc.constant(null), tool_calls: fc.constant([]) }),
      fc.record({
        role: fc.constant("user"),
        content: fc.constant([{ type: "image_url", image_url: { url: "data:image/png;base64,AA" } }]),
      }),
    ),
  },
  {
    weight: 1,
    arbitrary: fc.record(
      { role: fc.oneof(fc.constantFrom("user", ""), oddValue), content: fc.oneof(text, oddValue), name: fc.string({ maxLength: 8 }) },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: oddValue },
);

/** A budget field in a whole body: mostly valid (the budget property covers the invalid ones at length). */
const budgetField = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.oneof(fc.integer({ min: 0, max: 5000 }), fc.constantFrom(null, 0, 2 ** 53 - 1, 2 ** 63, PROTOCOL_MAX_TOKENS + 1)),
  },
  { weight: 1, arbitrary: budgetValue },
);

/** One optional field: mostly well-formed, sometimes wrong (null and absent are both valid). */
const mostly = <T>(good: fc.Arbitrary<T>) => fc.oneof({ weight: 12, arbitrary: good }, { weight: 1, arbitrary: oddValue });

const JSON_SCHEMA_FORMAT = {
  type: "json_schema",
  json_schema: { name: "answer", schema: { type: "object", properties: { a: { type: "string" } } } },
};
const TOOLS = [
  { type: "function", function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } } },
  { type: "function", function: { name: "get_weather", description: "d", strict: false } },
];
/** The tool fields, mostly absent or consistent; sometimes a malformed tool, choice or flag. */
const tooling: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  { weight: 8, arbitrary: fc.constant({}) },
  {
    weight: 8,
    arbitrary: fc.record(
      {
        tools: fc.constant(TOOLS),
        tool_choice: fc.constantFrom("none", "auto", "required", { type: "function", function: { name: "lookup" } }),
        parallel_tool_calls: fc.boolean(),
      },
      { requiredKeys: ["tools"] },
    ),
  },
  {
    weight: 1,
    arbitrary: fc.record(
      {
        tools: fc.oneof(fc.constant([]), fc.constant([{ type: "function", function: { name: "bad name" } }]), oddValue),
        tool_choice: fc.oneof(fc.constantFrom("any", { type: "function", function: { name: "missing" } }), oddValue),
        parallel_tool_calls: oddValue,
      },
      { requiredKeys: [] },
    ),
  },
);

/** A chat request body: model and messages usually present, every other field optional and sometimes wrong. */
export const chatBody: fc.Arbitrary<Record<string, unknown>> = fc
  .tuple(
    fc.record(
      {
        model: fc.oneof(
          { weight: 16, arbitrary: fc.constantFrom(...KNOWN_MODELS.keys()) },
          { weight: 8, arbitrary: modelId },
          { weight: 1, arbitrary: oddValue },
        ),
        messages: fc.oneof(
          { weight: 12, arbitrary: fc.array(message, { minLength: 1, maxLength: 4 }) },
          { weight: 1, arbitrary: fc.oneof(fc.constant([]), oddValue) },
        ),
      },
      { requiredKeys: [] },
    ),
    fc.record(
      {
        stream: mostly(fc.boolean()),
        stream_options: mostly(fc.constant({ include_usage: true })),
        max_tokens: budgetField,
        max_completion_tokens: budgetField,
        n: fc.oneof(
          { weight: 12, arbitrary: fc.constant(1) },
          { weight: 1, arbitrary: fc.constantFrom(2, 0, -1, 1.5, 100) },
          { weight: 1, arbitrary: oddValue },
        ),
        temperature: mostly(fc.double({ min: 0, max: 2, noNaN: true })),
        top_p: mostly(fc.double({ min: 0, max: 1, noNaN: true })),
        stop: mostly(fc.oneof(fc.string({ maxLength: 5 }), fc.array(fc.string({ maxLength: 5 }), { maxLength: 3 }))),
        self_route: fc.oneof(
          { weight: 12, arbitrary: fc.constant(false) },
          { weight: 1, arbitrary: fc.constant(true) },
          { weight: 1, arbitrary: oddValue },
        ),
        // Pass-through and identity fields: never validated by the coordinator beyond the nesting bound.
        seed: fc.integer(),
        user: fc.string({ maxLength: 10 }),
        metadata: fc.dictionary(fc.string({ maxLength: 5 }), fc.string({ maxLength: 5 }), { maxKeys: 3 }),
        response_format: fc.oneof(
          { weight: 12, arbitrary: fc.constantFrom({ type: "text" }, { type: "json_object" }, JSON_SCHEMA_FORMAT) },
          { weight: 1, arbitrary: fc.oneof(fc.constant({ type: "json_schema", json_schema: { name: "a b" } }), oddValue) },
        ),
        extra: fc.jsonValue({ maxDepth: 4 }),
        // Mostly within the nesting bound (62 arrays and {} under the body are its 64 levels), sometimes far over.
        deep: fc
          .oneof({ weight: 4, arbitrary: fc.integer({ min: 1, max: 62 }) }, { weight: 1, arbitrary: fc.integer({ min: 63, max: 2000 }) })
          .map(nested),
      },
      { requiredKeys: [] },
    ),
    tooling,
  )
  .map(([head, rest, tools]) => ({ ...head, ...rest, ...tools }));

/** `[[[...{}...]]]` nested `depth` times. */
function nested(depth: number): unknown {
  let v: unknown = {};
  for (let i = 0; i < depth; i++) v = [v];
  return v;
}

/** Raw JSON text for a budget field: literals JSON.stringify never writes (1e400, -0, 1.0, 1E2, 0x10...). */
export const budgetLiteral: fc.Arbitrary<string | undefined> = fc.oneof(
  fc.constant(undefined),
  budgetValue.map((v) => JSON.stringify(v)),
  fc.constantFrom(
    "1e400",
    "-1e400",
    "-0",
    "-0.0",
    "1.0",
    "100.000",
    "1E2",
    "1e-7",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "9223372036854776832",
    "99999999999999999999999999",
    "0.0000001e7",
    "1e2",
    "0x10",
    "01",
    "+1",
    ".5",
    "NaN",
    "Infinity",
    "-",
    "1_000",
  ),
);

/** Headers: authorization variants (the caller substitutes KEY, PROVIDER_TOKEN), content types, noise. */
export const headerSet = fc.record({
  authorization: fc.oneof(
    { weight: 6, arbitrary: fc.constant("Bearer KEY") },
    {
      weight: 3,
      arbitrary: fc.constantFrom(
        undefined,
        "",
        "Bearer",
        "Bearer ",
        "Bearer  KEY",
        "Bearer KEY ",
        "Bearer KEYx",
        "Bearer KEY KEY",
        "Basic KEY",
        "KEY",
        "Bearer PROVIDER_TOKEN",
        "Bearer umbra-sk-",
        "Bearer eyJhbGciOiJub25lIn0.e30.",
        "Bearer a.b.c",
      ),
    },
    { weight: 1, arbitrary: fc.string({ unit: "grapheme-ascii", maxLength: 60 }).map((s) => `Bearer ${s}`) },
  ),
  contentType: fc.constantFrom(
    undefined,
    "application/json",
    "application/json; charset=utf-8",
    "APPLICATION/JSON",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/vnd.umbra.sealed+json",
    "application/vnd.umbra.sealed+json; charset=utf-8",
    "garbage",
    "",
  ),
  extra: fc.dictionary(
    fc.stringMatching(/^x-[a-z0-9-]{1,20}$/),
    fc.string({ unit: "grapheme-ascii", maxLength: 40 }).map((s) => s.trim()),
    { maxKeys: 4 },
  ),
  accept: fc.constantFrom(undefined, "*/*", "text/event-stream", "application/json", "garbage"),
});

export type HeaderSet = typeof headerSet extends fc.Arbitrary<infer T> ? T : never;

/** Raw bytes that are mostly not a chat request: broken JSON, JSON of the wrong shape, binary. */
export const rawBody: fc.Arbitrary<Uint8Array> = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }).map((v) => new TextEncoder().encode(JSON.stringify(v))),
  fc.string({ maxLength: 200 }).map((s) => new TextEncoder().encode(s)),
  fc.uint8Array({ maxLength: 300 }),
  chatBody
    .map((b) => JSON.stringify(b))
    .chain((s) => fc.nat({ max: Math.max(0, s.length) }).map((cut) => new TextEncoder().encode(s.slice(0, cut)))),
  fc
    .constantFrom(
      "",
      " ",
      "null",
      "[]",
      "{}",
      '{"model":',
      "\ufeff{}",
      '{"model":"org/fuzz","messages":[{"role":"user","content":"x"}]} trailing',
      '{"model":"org/fuzz","model":5,"messages":[{"role":"user","content":"x"}]}',
      '{"__proto__":{"model":"org/fuzz"},"messages":[{"role":"user","content":"x"}]}',
      '{"constructor":{"prototype":{"x":1}},"model":"org/fuzz","messages":[{"role":"user","content":"x"}]}',
    )
    .map((s) => new TextEncoder().encode(s)),
);
