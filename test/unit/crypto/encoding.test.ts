/**
 * The byte-level building blocks of src/crypto: canonical bytes (length prefixes, fixed-width big-endian
 * integers, well-formed UTF-8, domain tags) and the strict text forms (unpadded canonical base64url,
 * lowercase hex). Every refusal is an InvalidInputError.
 */
import { describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { CanonicalBytes } from "../../../src/crypto/canonical.ts";
import { fromBase64url, fromHex, toBase64url, toHex } from "../../../src/crypto/encoding.ts";
import { InvalidInputError } from "../../../src/crypto/errors.ts";

describe("CanonicalBytes", () => {
  test("layout: tag, text, bytes, flag, u32, u64 (hand-written bytes)", () => {
    const bytes = CanonicalBytes.tagged("t-1")
      .text("a", "é", 8)
      .bytes("b", Uint8Array.of(0xaa, 0xbb), 2, true)
      .flag("c", true)
      .flag("d", false)
      .u32("e", 0x01020304)
      .u64("f", Number.MAX_SAFE_INTEGER)
      .finish();
    expect(toHex(bytes)).toBe(
      [
        "00000003 742d31", // lp("t-1")
        "00000002 c3a9", // lp(UTF-8 "é")
        "00000002 aabb",
        "01",
        "00",
        "01020304",
        "001fffffffffffff",
      ]
        .join("")
        .replaceAll(" ", ""),
    );
  });

  test("length prefixes keep field boundaries: ('ab', 'c') and ('a', 'bc') differ", () => {
    const one = CanonicalBytes.tagged("x").text("p", "ab", 8).text("q", "c", 8).finish();
    const two = CanonicalBytes.tagged("x").text("p", "a", 8).text("q", "bc", 8).finish();
    expect(toHex(one)).not.toBe(toHex(two));
  });

  test("a surrogate pair (emoji) is accepted and encoded as 4 UTF-8 bytes", () => {
    expect(toHex(CanonicalBytes.tagged("x").text("t", "🔒", 4).finish())).toBe("0000000178" + "00000004f09f9492");
  });

  test.each([
    ["empty text", () => CanonicalBytes.tagged("x").text("t", "", 8)],
    ["lone high surrogate", () => CanonicalBytes.tagged("x").text("t", "a\uD800", 8)],
    ["lone low surrogate", () => CanonicalBytes.tagged("x").text("t", "\uDC00a", 8)],
    ["text over its byte bound (é is 2 bytes)", () => CanonicalBytes.tagged("x").text("t", "éé", 3)],
    ["non-string text", () => CanonicalBytes.tagged("x").text("t", 5 as unknown as string, 8)],
    ["bytes of the wrong exact length", () => CanonicalBytes.tagged("x").bytes("b", new Uint8Array(31), 32, true)],
    ["bytes over the bound", () => CanonicalBytes.tagged("x").bytes("b", new Uint8Array(33), 32)],
    ["non-bytes", () => CanonicalBytes.tagged("x").bytes("b", [1, 2] as unknown as Uint8Array, 32)],
    ["u32 of 2^32", () => CanonicalBytes.tagged("x").u32("n", 2 ** 32)],
    ["u32 negative", () => CanonicalBytes.tagged("x").u32("n", -1)],
    ["u32 fractional", () => CanonicalBytes.tagged("x").u32("n", 1.5)],
    ["u32 NaN", () => CanonicalBytes.tagged("x").u32("n", Number.NaN)],
    ["u64 of 2^53 (not a safe integer)", () => CanonicalBytes.tagged("x").u64("n", 2 ** 53)],
    ["non-boolean flag", () => CanonicalBytes.tagged("x").flag("f", 1 as unknown as boolean)],
    ["tag with capitals", () => CanonicalBytes.tagged("Umbra")],
    ["empty tag", () => CanonicalBytes.tagged("")],
  ])("refuses %s", (_name, build) => {
    expect(build).toThrow(InvalidInputError);
  });

  // Builders share one spare buffer (taken by one at a time): these pin that sharing never mixes bytes.
  const reference = (id: string) =>
    `00000001 78 ${id.length.toString(16).padStart(8, "0")} ${toHex(new TextEncoder().encode(id))}`.replaceAll(" ", "");
  const build = (id: string) => toHex(CanonicalBytes.tagged("x").text("id", id, 64).finish());

  test("a builder made inside another's chain writes its own buffer; both come out whole", () => {
    const inner = () => CanonicalBytes.tagged("x").text("id", "inner-id", 64).finish();
    const outer = CanonicalBytes.tagged("y").text("a", "outer-a", 64).bytes("in", inner(), 64).text("b", "outer-b", 64).finish();
    expect(toHex(outer)).toBe(
      toHex(CanonicalBytes.tagged("y").text("a", "outer-a", 64).bytes("in", inner(), 64).text("b", "outer-b", 64).finish()),
    );
    expect(toHex(outer).includes(toHex(inner()))).toBe(true);
    expect(build("req_1")).toBe(reference("req_1"));
  });

  test("after a refused field, a throw outside the builder, or a long build, the next builds are right", () => {
    expect(() => CanonicalBytes.tagged("x").text("a", "ok", 8).u32("n", -1)).toThrow(InvalidInputError);
    expect(build("après-refus")).toBe(toHex(CanonicalBytes.tagged("x").text("id", "après-refus", 64).finish()));
    const abandoned = CanonicalBytes.tagged("x").text("a", "abandoned", 64);
    expect(build("req_2")).toBe(reference("req_2"));
    expect(toHex(abandoned.finish())).toBe(reference("abandoned"));
    const long = "z".repeat(3000);
    expect(build(long.slice(0, 64))).toBe(reference(long.slice(0, 64)));
    expect(CanonicalBytes.tagged("x").bytes("long", new Uint8Array(3000).fill(7), 4096).finish().byteLength).toBe(5 + 4 + 3000);
    expect(build("req_3")).toBe(reference("req_3"));
  });

  test("a builder is used once: after finish() it refuses more fields and a second finish", () => {
    const b = CanonicalBytes.tagged("x").text("a", "once", 8);
    b.finish();
    expect(() => b.text("b", "again", 8)).toThrow("used once");
    expect(() => b.finish()).toThrow("used once");
    expect(build("req_4")).toBe(reference("req_4"));
  });

  test("ASCII and non-ASCII text of the same field encode as UTF-8 either way (the fast path is exact)", () => {
    for (const id of ["a", "req_0mwy3ohvlxGWsMCc6zYrb", "org/model-4bit", "a\u007f", "\u0080", "mixé", "名前", "🔒x"]) {
      const text = JSON.parse(`"${id}"`) as string;
      const utf8 = new TextEncoder().encode(text);
      expect(toHex(CanonicalBytes.tagged("x").text("t", text, 64).finish())).toBe(
        `0000000178${utf8.byteLength.toString(16).padStart(8, "0")}${toHex(utf8)}`,
      );
    }
    expect(() => CanonicalBytes.tagged("x").text("t", "abcd", 3)).toThrow(InvalidInputError);
  });
});

describe("base64url", () => {
  test("round-trips every length from 0 to 40 bytes", () => {
    for (let length = 0; length <= 40; length++) {
      const bytes = new Uint8Array(randomBytes(length));
      const text = toBase64url(bytes);
      expect(text).toMatch(/^[A-Za-z0-9_-]*$/);
      expect(fromBase64url(text)).toEqual(bytes);
    }
  });

  test("known values", () => {
    expect(toBase64url(Uint8Array.of(0xfb, 0xff, 0xbf))).toBe("-_-_");
    expect(fromBase64url("AQID")).toEqual(Uint8Array.of(1, 2, 3));
    expect(fromBase64url("")).toEqual(new Uint8Array(0));
  });

  test("decodes a view into a larger buffer correctly", () => {
    const big = Uint8Array.of(9, 9, 1, 2, 3, 9);
    expect(toBase64url(big.subarray(2, 5))).toBe("AQID");
  });

  test.each([
    ["padding", "AQI="],
    ["standard alphabet +", "+/8"],
    ["whitespace", "AQ ID"],
    ["length 1 mod 4", "AQIDB"],
    ["non-zero unused trailing bits (second spelling of 0x00)", "AB"],
    ["non-ASCII", "AQ\u00e9D"],
  ])("refuses %s", (_name, text) => {
    expect(() => fromBase64url(text)).toThrow(InvalidInputError);
  });
});

describe("hex", () => {
  test("round trip and known value", () => {
    expect(toHex(Uint8Array.of(0, 0xab, 0xff))).toBe("00abff");
    expect(fromHex("00abff")).toEqual(Uint8Array.of(0, 0xab, 0xff));
  });

  test.each([
    ["uppercase", "00ABFF"],
    ["odd length", "abc"],
    ["non-hex", "zz"],
    ["0x prefix", "0xab"],
  ])("refuses %s", (_name, text) => {
    expect(() => fromHex(text)).toThrow(InvalidInputError);
  });
});
