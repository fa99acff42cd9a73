import { describe, expect, test } from "bun:test";
import { decodeInteger, encodeInteger } from "../../../attestation/provider/der.ts";
import { bytesEqual, parseSignedJson } from "../../../attestation/provider/encoding.ts";
import { AttestationError } from "../../../attestation/provider/index.ts";

const utf8 = (s: string) => new TextEncoder().encode(s);

function failedCheck(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    if (e instanceof AttestationError) return e.check;
    throw e;
  }
  return "no error";
}

describe("DER INTEGER", () => {
  test.each([
    [[0x02, 0x01, 0x00], 0n],
    [[0x02, 0x01, 0x01], 1n],
    [[0x02, 0x01, 0x7f], 127n],
    [[0x02, 0x02, 0x00, 0x80], 128n],
    [[0x02, 0x01, 0xff], -1n],
    [[0x02, 0x01, 0x80], -128n],
  ])("decodes %p as %p and encodes it back", (bytes, value) => {
    expect(decodeInteger(Uint8Array.from(bytes), "sip", "x")).toBe(value);
    expect([...encodeInteger(value)]).toEqual(bytes);
  });

  test.each([
    ["empty input", []],
    ["another tag", [0x04, 0x01, 0x00]],
    ["empty contents", [0x02, 0x00]],
    ["a redundant 0x00", [0x02, 0x02, 0x00, 0x01]],
    ["a redundant 0xff", [0x02, 0x02, 0xff, 0x80]],
    ["a truncated value", [0x02, 0x02, 0x00]],
    ["a trailing byte", [0x02, 0x01, 0x00, 0x00]],
    ["indefinite length", [0x02, 0x80, 0x00, 0x00, 0x00]],
    ["non-minimal long-form length", [0x02, 0x81, 0x01, 0x00]],
  ])("refuses %s", (_, bytes) => {
    expect(failedCheck(() => decodeInteger(Uint8Array.from(bytes), "sip", "x"))).toBe("sip");
  });
});

describe("signed JSON", () => {
  test("accepts the same key in different objects", () => {
    expect(parseSignedJson(utf8('{"a":{"k":1},"b":[{"k":2},{"k":3}],"k":"{\\"k\\":0}"}'), "evidence_format")).toEqual({
      a: { k: 1 },
      b: [{ k: 2 }, { k: 3 }],
      k: '{"k":0}',
    });
  });

  test.each([
    ["a repeated top-level key", '{"a":1,"a":2}'],
    ["a repeated nested key", '{"p":{"x":true,"y":1,"x":false}}'],
    ["a repeated key written with an escape", '{"ab":1,"a\\u0062":2}'],
    ["a repeated key inside an array element", '{"l":[{"z":1,"z":1}]}'],
    ["an array", "[1]"],
    ["a byte order mark", "\ufeff{}"],
    ["not JSON", "{"],
  ])("refuses %s", (_, text) => {
    expect(failedCheck(() => parseSignedJson(utf8(text), "evidence_format"))).toBe("evidence_format");
  });

  test("bytesEqual compares lengths and contents", () => {
    expect([bytesEqual(utf8("ab"), utf8("ab")), bytesEqual(utf8("ab"), utf8("ac")), bytesEqual(utf8("ab"), utf8("a"))]).toEqual([
      true,
      false,
      false,
    ]);
  });
});
