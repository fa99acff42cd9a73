/**
 * The echo engine's tool mode (src/provider/engines/echo.ts, rules 1-3): tool calls chosen from the last
 * user message (named tools in order, tool_choice, the first tool, parallel_tool_calls false), ids
 * deterministic per request, arguments streamed in fragments that join into JSON valid against the
 * tool's schema (checked by a small validator written here, independent of the generator), the
 * tool-result answer of a loop's second turn, and structured answers (json_schema, json_object).
 */
import { describe, expect, test } from "bun:test";
import type { EngineRequestBody, ToolCallDelta } from "../../../src/protocol/frames.ts";
import { createEchoEngine, fragmentsOf, messageText } from "../../../src/provider/engines/echo.ts";
import type { EngineEvent } from "../../../src/provider/engines/engine.ts";
import { sampleValue } from "../../../src/provider/engines/schema-sample.ts";

const engine = createEchoEngine({ models: ["org/echo"] });

async function collect(body: Record<string, unknown>): Promise<EngineEvent[]> {
  const events: EngineEvent[] = [];
  for await (const e of engine.generate({ model: "org/echo", body: body as unknown as EngineRequestBody }, new AbortController().signal)) {
    events.push(e);
  }
  return events;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

/** A deliberately small JSON Schema check (the keywords these tests use); returns the first violation. */
function violation(schema: unknown, value: unknown, root: unknown = schema, path = "$"): string | undefined {
  if (!isObj(schema)) return undefined;
  if (typeof schema.$ref === "string") return violation(schema.$ref === "#" ? root : refOf(root, schema.$ref), value, root, path);
  if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) return `${path}: not the const`;
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) return `${path}: not in enum`;
  if (Array.isArray(schema.anyOf) && schema.anyOf.every((s) => violation(s, value, root, path) !== undefined)) return `${path}: no anyOf`;
  if (Array.isArray(schema.allOf)) {
    for (const s of schema.allOf) {
      const v = violation(s, value, root, path);
      if (v) return v;
    }
  }
  const types = schema.type === undefined ? [] : Array.isArray(schema.type) ? schema.type : [schema.type];
  const typeOk = (t: unknown) =>
    t === "null"
      ? value === null
      : t === "integer"
        ? Number.isInteger(value)
        : t === "array"
          ? Array.isArray(value)
          : t === "object"
            ? isObj(value)
            : typeof value === t;
  if (types.length > 0 && !types.some(typeOk)) return `${path}: not ${types.join("|")}`;
  if (typeof value === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum) return `${path}: below minimum`;
    if (typeof schema.maximum === "number" && value > schema.maximum) return `${path}: above maximum`;
    if (typeof schema.exclusiveMinimum === "number" && value <= schema.exclusiveMinimum) return `${path}: not above exclusiveMinimum`;
    if (typeof schema.multipleOf === "number" && value % schema.multipleOf !== 0) return `${path}: not a multiple`;
  }
  if (typeof value === "string") {
    if (typeof schema.minLength === "number" && [...value].length < schema.minLength) return `${path}: too short`;
    if (typeof schema.maxLength === "number" && [...value].length > schema.maxLength) return `${path}: too long`;
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === "number" && value.length < schema.minItems) return `${path}: too few items`;
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems) return `${path}: too many items`;
    for (const [i, item] of value.entries()) {
      const v = violation(schema.items, item, root, `${path}[${i}]`);
      if (v) return v;
    }
  }
  if (isObj(value)) {
    const properties = isObj(schema.properties) ? schema.properties : {};
    for (const key of Array.isArray(schema.required) ? schema.required : []) if (!(key in value)) return `${path}: ${key} missing`;
    for (const [key, v] of Object.entries(value)) {
      if (!(key in properties) && schema.additionalProperties === false) return `${path}: ${key} not allowed`;
      const bad = violation(key in properties ? properties[key] : schema.additionalProperties, v, root, `${path}.${key}`);
      if (bad) return bad;
    }
  }
  return undefined;
}

function refOf(root: unknown, ref: string): unknown {
  return ref
    .slice(2)
    .split("/")
    .reduce<unknown>((node, key) => (isObj(node) ? node[key] : undefined), root);
}

const WEATHER = {
  type: "object",
  properties: {
    city: { type: "string", minLength: 3 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
    detailed: { type: "boolean" },
    note: { type: "string" },
  },
  required: ["city", "unit", "days", "detailed"],
  additionalProperties: false,
};
const TIME = { type: "object", properties: { zone: { type: ["string", "null"], maxLength: 4 } }, required: ["zone"] };
const tool = (name: string, parameters: unknown) => ({ type: "function", function: { name, parameters } });
const TOOLS = [tool("get_weather", WEATHER), tool("get_time", TIME), tool("no_params", undefined)];
const user = (content: unknown, extra: Obj = {}) => ({ messages: [{ role: "user", content }], max_tokens: 100, tools: TOOLS, ...extra });

/** The tool calls of an answer, assembled as a consumer does. */
function assemble(events: readonly EngineEvent[]) {
  const calls: { id: string; name: string; arguments: string }[] = [];
  const fragments: ToolCallDelta[] = [];
  for (const e of events) {
    if (e.type !== "tool_call") continue;
    fragments.push(e.call);
    if (e.call.id !== undefined) calls.push({ id: e.call.id, name: e.call.name ?? "", arguments: "" });
    const call = calls[e.call.index];
    if (call) call.arguments += e.call.arguments ?? "";
  }
  return { calls, fragments, done: events.at(-1) };
}

describe("echo engine: tool calls", () => {
  test("each tool named in the last user message, in order of appearance; arguments valid against its schema, in fragments", async () => {
    const events = await collect(user("What time is it (get_time) and the weather (get_weather, get_time again) in Paris?"));
    const { calls, fragments, done } = assemble(events);
    expect(calls.map((c) => c.name)).toEqual(["get_time", "get_weather"]);
    const [time, weather] = calls as [(typeof calls)[0], (typeof calls)[0]];
    expect([violation(TIME, JSON.parse(time.arguments)), violation(WEATHER, JSON.parse(weather.arguments))]).toEqual([
      undefined,
      undefined,
    ]);
    expect(JSON.parse(weather.arguments)).toEqual({
      city: "What time is it (get_time) and the weather (get_weather, get_time again) in Paris?",
      unit: "celsius",
      days: 1,
      detailed: true,
    });
    // Real fragmentation: a call's first fragment has id and name; later ones only arguments, in index order.
    expect(fragments.filter((f) => f.index === 1).length).toBeGreaterThan(1);
    expect(fragments.map((f) => [f.index, f.id !== undefined, f.name !== undefined])).toEqual(
      fragments.map((f, i) => [f.index, i === 0 || fragments[i - 1]?.index !== f.index, i === 0 || fragments[i - 1]?.index !== f.index]),
    );
    expect(done).toEqual({
      type: "done",
      finishReason: "tool_calls",
      usage: { prompt_tokens: 13 + 4, completion_tokens: fragments.length },
    });
  });

  test("ids: call_<n>_<hash of the messages>, the same for the same request, another for another", async () => {
    const a = assemble(await collect(user("get_time and get_weather"))).calls.map((c) => c.id);
    const b = assemble(await collect(user("get_time and get_weather"))).calls.map((c) => c.id);
    const c = assemble(await collect(user("get_time and get_weather please"))).calls.map((x) => x.id);
    expect(a).toEqual(b);
    expect(a).toEqual([expect.stringMatching(/^call_0_[0-9a-f]{8}$/), expect.stringMatching(/^call_1_[0-9a-f]{8}$/)]);
    expect(a[0]?.slice(7)).toBe(a[1]?.slice(7));
    expect(c[0]).not.toBe(a[0]);
  });

  test.each<[string, Obj, string[]]>([
    ["parallel_tool_calls false: only the first named", { parallel_tool_calls: false }, ["get_time"]],
    ["none named: the tool tool_choice names", { tool_choice: { type: "function", function: { name: "get_weather" } } }, ["get_weather"]],
    ["none named, no named choice: the first tool", { tool_choice: "required" }, ["get_weather"]],
  ])("%s", async (_, extra, names) => {
    const text = "parallel_tool_calls" in extra ? "get_time then get_weather" : "hello there";
    expect(assemble(await collect(user(text, extra))).calls.map((c) => c.name)).toEqual(names);
  });

  test("a tool without parameters gets {}; text parts are read as the message's text", async () => {
    const { calls } = assemble(
      await collect(
        user([
          { type: "text", text: "call no_" },
          { type: "text", text: "params" },
        ]),
      ),
    );
    expect(calls.map((c) => [c.name, c.arguments])).toEqual([["no_params", "{}"]]);
  });

  test("tool_choice none, or a last message that is not the user's: no tool calls", async () => {
    expect((await collect(user("get_time", { tool_choice: "none" }))).filter((e) => e.type === "tool_call")).toEqual([]);
    const events = await collect({
      ...user("get_time"),
      messages: [
        { role: "user", content: "x" },
        { role: "assistant", content: "get_time" },
      ],
    });
    expect(events.filter((e) => e.type === "tool_call")).toEqual([]);
  });

  test("max_tokens cuts the fragments: finish_reason length", async () => {
    const events = await collect(user("get_weather", { max_tokens: 2 }));
    expect([events.length, events.at(-1)]).toEqual([
      3,
      expect.objectContaining({ finishReason: "length", usage: expect.objectContaining({ completion_tokens: 2 }) }),
    ]);
  });
});

describe("echo engine: a tool loop's second turn", () => {
  test("the last message a tool result: 'tool result: ' + the tool messages after the last assistant turn", async () => {
    const body = {
      messages: [
        { role: "user", content: "get_time" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "old", type: "function", function: { name: "get_time", arguments: "{}" } }],
        },
        { role: "tool", tool_call_id: "old", content: "stale" },
        { role: "user", content: "again: get_time and get_weather" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "call_0", type: "function", function: { name: "get_time", arguments: "{}" } },
            { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: "tool", tool_call_id: "call_0", content: "12:00" },
        { role: "tool", tool_call_id: "call_1", content: [{ type: "text", text: '{"temp": 21}' }] },
      ],
      max_tokens: 100,
      tools: TOOLS,
    };
    const events = await collect(body);
    const text = events.map((e) => (e.type === "delta" ? e.delta.content : "")).join("");
    expect(text).toBe('tool result: 12:00 {"temp": 21}');
    expect(events.filter((e) => e.type === "delta").length).toBeGreaterThan(1);
    expect(events.at(-1)).toMatchObject({ type: "done", finishReason: "stop" });
  });
});

describe("echo engine: structured answers", () => {
  const SCHEMA = {
    type: "object",
    properties: {
      title: { type: "string", maxLength: 5 },
      tags: { type: "array", items: { type: "string" }, minItems: 2 },
      score: { type: "number", exclusiveMinimum: 0, multipleOf: 0.5 },
      owner: { $ref: "#/$defs/person" },
      kind: { anyOf: [{ type: "null" }, { type: "string", const: "x" }] },
    },
    required: ["title", "tags", "score", "owner", "kind"],
    additionalProperties: false,
    $defs: {
      person: {
        type: "object",
        properties: { name: { type: "string" }, age: { type: "integer", minimum: 18 } },
        required: ["name", "age"],
      },
    },
  };

  test("json_schema: content is a JSON document valid against the schema, in fragments", async () => {
    const events = await collect({
      messages: [{ role: "user", content: "describe it" }],
      max_tokens: 100,
      response_format: { type: "json_schema", json_schema: { name: "thing", strict: true, schema: SCHEMA } },
    });
    const deltas = events.filter((e) => e.type === "delta");
    const document: unknown = JSON.parse(deltas.map((e) => (e.type === "delta" ? e.delta.content : "")).join(""));
    expect([violation(SCHEMA, document), deltas.length > 1]).toEqual([undefined, true]);
    expect(events.at(-1)).toMatchObject({ finishReason: "stop" });
  });

  test('json_object: {"echo": the last user message\'s text}', async () => {
    const events = await collect({
      messages: [{ role: "user", content: 'say "hi"' }],
      max_tokens: 100,
      response_format: { type: "json_object" },
    });
    expect(JSON.parse(events.map((e) => (e.type === "delta" ? e.delta.content : "")).join(""))).toEqual({ echo: 'say "hi"' });
  });

  test.each<[string, unknown]>([
    [
      "formats",
      {
        type: "object",
        properties: { at: { type: "string", format: "date-time" }, id: { type: "string", format: "uuid" } },
        required: ["at", "id"],
      },
    ],
    [
      "nullable and allOf",
      {
        allOf: [
          { type: "object", properties: { a: { type: ["integer", "null"], minimum: 3 } }, required: ["a"] },
          { required: ["b"], properties: { b: { const: 7 } } },
        ],
      },
    ],
    ["a tuple", { type: "array", prefixItems: [{ type: "boolean" }, { enum: [2, 3] }], minItems: 2 }],
    ["a recursive tree", { type: "object", properties: { children: { type: "array", items: { $ref: "#" } } }, required: ["children"] }],
    ["bounds below 1", { type: "number", maximum: -2.5 }],
  ])("sampleValue is valid for %s", (_, schema) => {
    expect(violation(schema, sampleValue(schema, "text"))).toBeUndefined();
  });

  test("fragmentsOf keeps the text whole (surrogate pairs included) in at most three pieces; messageText reads both content forms", () => {
    expect([fragmentsOf("🔒ab🔒"), fragmentsOf(""), fragmentsOf("abcdefg")]).toEqual([["🔒a", "b🔒"], [], ["abc", "def", "g"]]);
    expect([
      messageText({ content: "x" }),
      messageText({ content: [{ type: "text", text: "a" }, { type: "image_url" }, { type: "text", text: "b" }] }),
      messageText({ content: null }),
    ]).toEqual(["x", "ab", ""]);
  });
});
