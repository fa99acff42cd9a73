/**
 * The MDA nonce construction (attestation/provider/mda-nonce.ts), pinned by a fixed vector that the test
 * also recomputes independently with node:crypto over the exact bytes docs/security.md lists.
 */
import { describe, expect, test } from "bun:test";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  acceptedMdaNonces,
  MDA_EPOCH_MS,
  mdaEpoch,
  mdaEpochAcceptedUntil,
  mdaEpochStart,
  mdaNonce,
  mdaNonceMessage,
  SoftwareIdentity,
} from "../../../attestation/provider/index.ts";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

// The vector of docs/security.md "MDA nonces".
const SEED = Uint8Array.from({ length: 32 }, (_, i) => i); // 00 01 02 ... 1f
/** The P-256 base point G, uncompressed: a public point anyone can check. */
const POINT = Buffer.from(
  "046b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c2964fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5",
  "hex",
);
const AT = Date.parse("2026-11-26T12:00:00Z");
const EPOCH = 2969; // starts 2026-11-26T00:00:00Z, a Thursday (epochs start on Thursdays, 00:00 UTC)
const MESSAGE_HEX =
  "756d6272612d6d64612d7631" + // "umbra-mda-v1"
  "0000000000000b99" + // u64 big-endian 2969
  POINT.toString("hex");
const NONCE_HEX = "2235d9924bd29aaa0b8da814390b77991e763aaa3c4c61854b988e6b5cfef1d5";

describe("MDA nonce", () => {
  test("epochs are 7 days from the Unix epoch", () => {
    expect(MDA_EPOCH_MS).toBe(604_800_000);
    expect([mdaEpoch(0), mdaEpoch(MDA_EPOCH_MS - 1), mdaEpoch(MDA_EPOCH_MS), mdaEpoch(AT)]).toEqual([0, 0, 1, EPOCH]);
    expect(new Date(mdaEpochStart(EPOCH)).toISOString()).toBe("2026-11-26T00:00:00.000Z");
    expect(mdaEpochAcceptedUntil(EPOCH)).toBe(mdaEpochStart(EPOCH + 3) - 1);
  });

  test("the fixed vector: message bytes and HMAC, recomputed with node:crypto", () => {
    const message = mdaNonceMessage(EPOCH, POINT);
    expect(hex(message)).toBe(MESSAGE_HEX);
    expect(message.length).toBe(12 + 8 + 65);
    const independent = createHmac("sha256", Buffer.from(SEED))
      .update(Buffer.concat([Buffer.from("umbra-mda-v1", "utf8"), Buffer.from("0000000000000b99", "hex"), POINT]))
      .digest("hex");
    expect([hex(mdaNonce(SEED, EPOCH, POINT)), independent]).toEqual([NONCE_HEX, NONCE_HEX]);
  });

  test("docs/security.md states this vector and the construction's bytes", () => {
    const doc = readFileSync(join(import.meta.dir, "..", "..", "..", "docs", "security.md"), "utf8");
    const oneLine = doc.replace(/\s+/g, " ");
    const stated = [
      NONCE_HEX,
      hex(SEED),
      MESSAGE_HEX,
      "75 6d 62 72 61 2d 6d 64 61 2d 76 31",
      "floor(t / 604800000)",
      "epoch 2969 = 0x0b99",
    ];
    expect(stated.filter((s) => !oneLine.includes(s) && !doc.includes(s))).toEqual([]);
  });

  test("random seeds, keys and epochs agree with node:crypto", () => {
    for (let i = 0; i < 20; i++) {
      const seed = crypto.getRandomValues(new Uint8Array(32 + i));
      const point = SoftwareIdentity.generate().publicKey(65);
      const epoch = Math.floor(Math.random() * 2 ** 40);
      const be = Buffer.alloc(8);
      be.writeBigUInt64BE(BigInt(epoch));
      const expected = createHmac("sha256", seed)
        .update(Buffer.concat([Buffer.from("umbra-mda-v1"), be, point]))
        .digest("hex");
      expect(hex(mdaNonce(seed, epoch, point))).toBe(expected);
    }
  });

  test("accepted: the current epoch and the two before it, for this key only", () => {
    const other = SoftwareIdentity.generate().publicKey(65);
    const accepted = acceptedMdaNonces(SEED, AT, POINT);
    expect(accepted.map((n) => [n.epoch, hex(n.nonce)])).toEqual(
      [EPOCH, EPOCH - 1, EPOCH - 2].map((e) => [e, hex(mdaNonce(SEED, e, POINT))]),
    );
    expect(accepted[0] && hex(accepted[0].nonce)).toBe(NONCE_HEX);
    const theirs = acceptedMdaNonces(SEED, AT, other).map((n) => hex(n.nonce));
    expect(accepted.filter((n) => theirs.includes(hex(n.nonce)))).toEqual([]);
    expect(acceptedMdaNonces(SEED, MDA_EPOCH_MS + 1, POINT).map((n) => n.epoch)).toEqual([1, 0]);
  });

  test("the seed, the epoch and the key each change the nonce", () => {
    const base = hex(mdaNonce(SEED, EPOCH, POINT));
    const seed2 = Uint8Array.from(SEED, (b, i) => (i === 31 ? b ^ 1 : b));
    const point2 = SoftwareIdentity.generate().publicKey(65);
    expect(
      new Set([base, hex(mdaNonce(seed2, EPOCH, POINT)), hex(mdaNonce(SEED, EPOCH + 1, POINT)), hex(mdaNonce(SEED, EPOCH, point2))]).size,
    ).toBe(4);
  });

  test.each([
    ["a seed under 32 bytes", () => mdaNonce(new Uint8Array(31), EPOCH, POINT)],
    ["a 64-byte key (not the canonical point)", () => mdaNonce(SEED, EPOCH, POINT.subarray(1))],
    ["a compressed key", () => mdaNonce(SEED, EPOCH, Uint8Array.from([0x02, ...POINT.subarray(1, 33)]))],
    ["a negative epoch", () => mdaNonce(SEED, -1, POINT)],
    ["a fractional epoch", () => mdaNonce(SEED, 1.5, POINT)],
    ["a negative time", () => mdaEpoch(-1)],
  ])("refuses %s", (_, call) => {
    expect(call).toThrow(RangeError);
  });
});
