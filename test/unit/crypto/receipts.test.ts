/**
 * Provider receipts (src/crypto/receipts.ts), version 2: the canonical receipt and response bytes against
 * a fixed vector from an independent implementation (test/fixtures/crypto/receipt.json, Python
 * cryptography / OpenSSL), its signature verified as the coordinator does (attestation/'s DER check with
 * the identity key), a negative test for every field the bytes bind, and the streamed digest
 * (ResponseDigest) equal to the whole answer's.
 */
import { describe, expect, test } from "bun:test";
import { p256 } from "@noble/curves/nist.js";
import { parseIdentityKey, SoftwareIdentity, verifyIdentitySignature } from "../../../attestation/provider/index.ts";
import { fromBase64url, fromHex, toHex } from "../../../src/crypto/encoding.ts";
import { InvalidInputError } from "../../../src/crypto/errors.ts";
import { type ReceiptClaims, ResponseDigest, receiptBytes, responseBytes, responseSha256, sha256 } from "../../../src/crypto/receipts.ts";
import vector from "../../fixtures/crypto/receipt.json" with { type: "json" };

const claims: ReceiptClaims = {
  requestId: vector.claims.requestId,
  modelBuild: vector.claims.modelBuild,
  requestSha256: fromHex(vector.claims.requestSha256),
  responseSha256: fromHex(vector.claims.responseSha256),
  usage: vector.claims.usage,
};
const key = parseIdentityKey(fromHex(vector.publicKeyRaw));
/** The vector's r || s signature in the DER form receipts carry. */
const der = p256.Signature.fromBytes(fromBase64url(vector.signatureLowS), "compact").toBytes("der");

describe("receipt bytes (receipt.json)", () => {
  test("receiptBytes gives the golden bytes", () => {
    expect(toHex(receiptBytes(claims))).toBe(vector.bytes);
  });

  test("the response hash is SHA-256 of the canonical response: content and tool calls (and content alone)", () => {
    const content = new TextDecoder().decode(fromHex(vector.responseContent));
    const calls = vector.responseToolCalls.map((c) => ({
      id: c.id,
      name: c.name,
      argumentsSha256: sha256(new TextEncoder().encode(c.arguments)),
    }));
    expect([
      toHex(responseBytes(sha256(fromHex(vector.responseContent)), calls)),
      toHex(responseSha256(content, vector.responseToolCalls)),
      toHex(responseBytes(sha256(fromHex(vector.responseContent)), [])),
      toHex(responseSha256(content)),
    ]).toEqual([vector.responseBytes, vector.responseHash, vector.responseBytesContentOnly, vector.responseHashContentOnly]);
    expect(vector.responseHash).toBe(vector.claims.responseSha256);
  });

  test("streamed (content and argument fragments, a surrogate pair split over two) gives the whole answer's digest", () => {
    const content = new TextDecoder().decode(fromHex(vector.responseContent));
    const [first, second] = vector.responseToolCalls as [{ id: string; name: string; arguments: string }, { id: string; name: string }];
    const digest = new ResponseDigest();
    const lock = content.indexOf("\u{1F512}");
    digest.addContent(content.slice(0, lock + 1));
    digest.addContent(content.slice(lock + 1));
    digest.addToolCall({ index: 0, id: first.id, name: first.name, arguments: first.arguments.slice(0, 5) });
    digest.addToolCall({ index: 0, arguments: first.arguments.slice(5, 9) });
    digest.addToolCall({ index: 0, arguments: first.arguments.slice(9) });
    digest.addToolCall({ index: 1, id: second.id, name: second.name });
    expect(toHex(digest.digest())).toBe(vector.responseHash);
    // Content arriving after the calls is still content.
    const late = new ResponseDigest();
    late.addToolCall({ index: 0, id: first.id, name: first.name, arguments: first.arguments });
    late.addContent(content);
    late.addToolCall({ index: 1, id: second.id, name: second.name });
    expect(toHex(late.digest())).toBe(vector.responseHash);
  });

  test("any split of any text, lone surrogates included, gives the digest of the whole (TextEncoder's UTF-8)", () => {
    const texts = ["plain", "a\u{1F512}b\u{1F512}", "lone \ud800 high", "\udc00 lone low", "ends high \ud83d", "\ud83d", "é世界"];
    for (const text of texts) {
      const whole = toHex(responseSha256(text));
      for (let cut = 0; cut <= text.length; cut++) {
        for (let cut2 = cut; cut2 <= text.length; cut2++) {
          const digest = new ResponseDigest();
          for (const piece of [text.slice(0, cut), text.slice(cut, cut2), text.slice(cut2)]) digest.addContent(piece);
          expect(toHex(digest.digest())).toBe(whole);
        }
      }
    }
  });

  test.each<[string, string | null, { id: string; name: string; arguments: string }[]]>([
    ["another content", "x", []],
    ["no tool calls", null, []],
    ["one call fewer", null, [{ id: "call_0_5e1f", name: "get_weather", arguments: '{"city":"Zürich","unit":"c"}' }]],
    [
      "the calls swapped",
      null,
      [
        { id: "call_1_5e1f", name: "get_time", arguments: "" },
        { id: "call_0_5e1f", name: "get_weather", arguments: '{"city":"Zürich","unit":"c"}' },
      ],
    ],
    [
      "another id",
      null,
      [
        { id: "call_0_5e1g", name: "get_weather", arguments: '{"city":"Zürich","unit":"c"}' },
        { id: "call_1_5e1f", name: "get_time", arguments: "" },
      ],
    ],
    [
      "another name",
      null,
      [
        { id: "call_0_5e1f", name: "get_weathers", arguments: '{"city":"Zürich","unit":"c"}' },
        { id: "call_1_5e1f", name: "get_time", arguments: "" },
      ],
    ],
    [
      "other arguments",
      null,
      [
        { id: "call_0_5e1f", name: "get_weather", arguments: '{"city":"Zürich","unit":"f"}' },
        { id: "call_1_5e1f", name: "get_time", arguments: "" },
      ],
    ],
    [
      "arguments moved between calls",
      null,
      [
        { id: "call_0_5e1f", name: "get_weather", arguments: "" },
        { id: "call_1_5e1f", name: "get_time", arguments: '{"city":"Zürich","unit":"c"}' },
      ],
    ],
  ])("%s gives another response hash", (_, contentOverride, calls) => {
    const content = contentOverride ?? new TextDecoder().decode(fromHex(vector.responseContent));
    expect(toHex(responseSha256(content, calls))).not.toBe(vector.responseHash);
  });

  test.each<[string, (d: ResponseDigest) => void]>([
    ["a continuation before any call", (d) => d.addToolCall({ index: 0, arguments: "{}" })],
    ["index 1 opening first", (d) => d.addToolCall({ index: 1, id: "a", name: "f" })],
    [
      "going back to an earlier call",
      (d) => {
        d.addToolCall({ index: 0, id: "a", name: "f" });
        d.addToolCall({ index: 1, id: "b", name: "g" });
        d.addToolCall({ index: 0, arguments: "{}" });
      },
    ],
    ["an id without a name", (d) => d.addToolCall({ index: 0, id: "a" })],
  ])("ResponseDigest refuses %s", (_, steps) => {
    expect(() => steps(new ResponseDigest())).toThrow(InvalidInputError);
  });

  test("the independent signer's signature verifies over the bytes, as the coordinator checks it", () => {
    expect(() => verifyIdentitySignature(key, receiptBytes(claims), der, "receipt")).not.toThrow();
  });

  test.each<[string, Partial<ReceiptClaims>]>([
    ["request id", { requestId: `${claims.requestId}x` }],
    ["model build", { modelBuild: `${claims.modelBuild}x` }],
    ["request digest", { requestSha256: sha256(new Uint8Array(1)) }],
    ["response digest", { responseSha256: sha256(new Uint8Array(1)) }],
    ["prompt tokens", { usage: { ...claims.usage, promptTokens: claims.usage.promptTokens + 1 } }],
    ["cached tokens", { usage: { ...claims.usage, cachedTokens: claims.usage.cachedTokens + 1 } }],
    ["completion tokens", { usage: { ...claims.usage, completionTokens: claims.usage.completionTokens + 1 } }],
  ])("another %s does not verify", (_, change) => {
    expect(() => verifyIdentitySignature(key, receiptBytes({ ...claims, ...change }), der, "receipt")).toThrow();
  });

  test("a receipt signed by another identity key does not verify", () => {
    const other = SoftwareIdentity.generate().sign(receiptBytes(claims));
    expect(() => verifyIdentitySignature(key, receiptBytes(claims), other, "receipt")).toThrow();
  });

  test.each<[string, Partial<ReceiptClaims>]>([
    ["an empty request id", { requestId: "" }],
    ["a 513-byte model build", { modelBuild: "m".repeat(513) }],
    ["a 31-byte digest", { requestSha256: new Uint8Array(31) }],
    ["a negative count", { usage: { ...claims.usage, promptTokens: -1 } }],
    ["a fractional count", { usage: { ...claims.usage, completionTokens: 1.5 } }],
    ["a count above 2^53 - 1", { usage: { ...claims.usage, cachedTokens: 2 ** 53 } }],
  ])("%s is refused", (_, change) => {
    expect(() => receiptBytes({ ...claims, ...change })).toThrow(InvalidInputError);
  });

  test("sha256 refuses a non-byte input", () => {
    expect(() => sha256("text" as unknown as Uint8Array)).toThrow(InvalidInputError);
  });
});
