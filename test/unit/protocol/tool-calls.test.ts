/**
 * Tool-call frames on the wire (protocol version 2, docs/protocol.md "Tool calls"): `tool_call` and
 * `sealed_tool_call` read as sent, every malformed shape refused as a protocol error (the session then
 * ends with 1002), and the version constants both binaries use.
 */
import { describe, expect, test } from "bun:test";
import { MAX_TOOL_CALLS, PROTOCOL_VERSION, RETIRED_V1_REASON } from "../../../src/protocol/frames.ts";
import { ProtocolError, parseProviderFrame, parseProviderMessage, parseToolCall } from "../../../src/protocol/parse.ts";

const ids = { request_id: "req_1", attempt: 0 };
const parse = (o: unknown) => parseProviderFrame(JSON.stringify(o));

describe("tool_call frames", () => {
  test("version 2; version 1 is retired with a reason that says what to do", () => {
    expect([PROTOCOL_VERSION, RETIRED_V1_REASON]).toEqual([2, "protocol version 1 is retired: upgrade umbra-provider"]);
  });

  test("a call's first fragment (id, name, optional arguments) and a continuation are read as sent", () => {
    const first = {
      type: "tool_call" as const,
      ...ids,
      seq: 0,
      tool_call: { index: 0, id: "call_a", name: "get_weather", arguments: '{"ci' },
    };
    const bare = { type: "tool_call" as const, ...ids, seq: 1, tool_call: { index: 1, id: "call_b", name: "get_time" } };
    const next = { type: "tool_call" as const, ...ids, seq: 2, tool_call: { index: 1, arguments: "{}" } };
    const empty = { type: "tool_call" as const, ...ids, seq: 3, tool_call: { index: 1, arguments: "" } };
    expect(parseProviderMessage(JSON.stringify([first, bare, next, empty]))).toEqual([first, bare, next, empty]);
  });

  test("unknown fields of the fragment are dropped", () => {
    expect(parse({ type: "tool_call", ...ids, seq: 0, tool_call: { index: 0, id: "a", name: "f", type: "function", extra: 1 } })).toEqual({
      type: "tool_call",
      ...ids,
      seq: 0,
      tool_call: { index: 0, id: "a", name: "f" },
    });
  });

  test("a sealed tool call is read as sent", () => {
    const frame = { type: "sealed_tool_call" as const, ...ids, seq: 4, sealed: "A".repeat(40) };
    expect(parse(frame)).toEqual(frame);
  });

  test.each<[string, unknown]>([
    ["no tool_call", undefined],
    ["tool_call not an object", "call"],
    ["a negative index", { index: -1, id: "a", name: "f" }],
    ["a fractional index", { index: 0.5, id: "a", name: "f" }],
    [`index ${MAX_TOOL_CALLS}`, { index: MAX_TOOL_CALLS, id: "a", name: "f" }],
    ["an id without a name", { index: 0, id: "a", arguments: "{}" }],
    ["a name without an id", { index: 0, name: "f", arguments: "{}" }],
    ["an empty id", { index: 0, id: "", name: "f" }],
    ["an empty name", { index: 0, id: "a", name: "" }],
    ["a 257-character name", { index: 0, id: "a", name: "f".repeat(257) }],
    ["a 257-character id", { index: 0, id: "a".repeat(257), name: "f" }],
    ["arguments not a string", { index: 0, id: "a", name: "f", arguments: { city: "Paris" } }],
    ["a continuation without arguments", { index: 0 }],
  ])("%s is a protocol error", (_, toolCall) => {
    expect(() => parse({ type: "tool_call", ...ids, seq: 0, tool_call: toolCall })).toThrow(ProtocolError);
    if (toolCall !== undefined) expect(() => parseToolCall(toolCall)).toThrow(ProtocolError);
  });

  test.each<[string, Record<string, unknown>]>([
    ["a missing seq", { type: "tool_call", ...ids, tool_call: { index: 0, id: "a", name: "f" } }],
    ["a missing request id", { type: "tool_call", attempt: 0, seq: 0, tool_call: { index: 0, id: "a", name: "f" } }],
    ["a sealed tool call that is not base64url", { type: "sealed_tool_call", ...ids, seq: 0, sealed: "not base64url!".repeat(3) }],
    ["a sealed tool call too short to hold a tag", { type: "sealed_tool_call", ...ids, seq: 0, sealed: "AAAA" }],
  ])("%s is a protocol error", (_, frame) => {
    expect(() => parse(frame)).toThrow(ProtocolError);
  });
});
