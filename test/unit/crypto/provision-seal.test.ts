/**
 * Sealed provisioning messages (src/crypto/provision-seal.ts): they open only for the sealing key, the
 * report (measurement, report data) and the nonce they were sealed for; any changed byte refuses them.
 */
import { describe, expect, test } from "bun:test";
import { toBase64url } from "../../../src/crypto/encoding.ts";
import { RequestOpenError } from "../../../src/crypto/errors.ts";
import {
  openProvisioning,
  PROVISION_INFO_TAG,
  provisionInfo,
  readProvisionEnvelope,
  sealProvisioning,
} from "../../../src/crypto/provision-seal.ts";
import { generateX25519KeyPair } from "../../../src/crypto/seal.ts";

const binding = {
  measurement: new Uint8Array(48).fill(0x4d),
  reportData: new Uint8Array(64).fill(0x11),
  nonce: new Uint8Array(32).fill(7),
};
const secrets = new TextEncoder().encode('{"admin_token":"t"}');

async function sealed() {
  const key = await generateX25519KeyPair();
  const envelope = await sealProvisioning(key.publicKey, secrets, binding);
  const read = readProvisionEnvelope(envelope);
  if (!read.ok) throw new Error(read.message);
  return { key, envelope, read };
}

describe("provision seal", () => {
  test("info: the tag, then measurement, report data and nonce, each length-prefixed", () => {
    const info = provisionInfo(binding);
    const hex = Buffer.from(info).toString("hex");
    expect([info.length, hex.slice(0, 8), Buffer.from(info.subarray(4, 22)).toString()]).toEqual([
      4 + 18 + 4 + 48 + 4 + 64 + 4 + 32,
      "00000012",
      PROVISION_INFO_TAG,
    ]);
  });

  test("opens for its binding", async () => {
    const { key, read } = await sealed();
    expect(Buffer.from(await openProvisioning(key.privateKey, read.enc, read.ciphertext, binding)).toString()).toBe('{"admin_token":"t"}');
  });

  test.each([
    ["another nonce", { ...binding, nonce: new Uint8Array(32).fill(8) }],
    ["another measurement", { ...binding, measurement: new Uint8Array(48).fill(0x4e) }],
    ["another report data (another boot's keys)", { ...binding, reportData: new Uint8Array(64).fill(0x12) }],
  ])("does not open under %s", async (_, other) => {
    const { key, read } = await sealed();
    await expect(openProvisioning(key.privateKey, read.enc, read.ciphertext, other)).rejects.toThrow(RequestOpenError);
  });

  test("does not open with another key, or with a flipped bit in enc or ciphertext", async () => {
    const { key, read } = await sealed();
    const other = await generateX25519KeyPair();
    const flip = (b: Uint8Array, i: number) => {
      const c = b.slice();
      c[i] = (c[i] ?? 0) ^ 1;
      return c;
    };
    const attempts = [
      openProvisioning(other.privateKey, read.enc, read.ciphertext, binding),
      openProvisioning(key.privateKey, flip(read.enc, 3), read.ciphertext, binding),
      openProvisioning(key.privateKey, read.enc, flip(read.ciphertext, 0), binding),
      openProvisioning(key.privateKey, read.enc, flip(read.ciphertext, read.ciphertext.length - 1), binding),
    ];
    const outcomes = await Promise.all(
      attempts.map((p) =>
        p.then(
          () => "opened",
          (e: unknown) => (e as Error).name,
        ),
      ),
    );
    expect(outcomes).toEqual(["RequestOpenError", "RequestOpenError", "RequestOpenError", "RequestOpenError"]);
  });

  test.each([
    [null, "body"],
    [{ version: 2, nonce: "", enc: "", ciphertext: "" }, "version"],
    [{ version: 1, enc: "", ciphertext: "" }, "nonce"],
    [
      {
        version: 1,
        nonce: toBase64url(new Uint8Array(31)),
        enc: toBase64url(new Uint8Array(32)),
        ciphertext: toBase64url(new Uint8Array(16)),
      },
      "nonce",
    ],
    [{ version: 1, nonce: toBase64url(new Uint8Array(32)), enc: "+/", ciphertext: toBase64url(new Uint8Array(16)) }, "enc"],
    [
      {
        version: 1,
        nonce: toBase64url(new Uint8Array(32)),
        enc: toBase64url(new Uint8Array(32)),
        ciphertext: toBase64url(new Uint8Array(15)),
      },
      "ciphertext",
    ],
  ])("a malformed envelope names its field: %p", (value, param) => {
    const read = readProvisionEnvelope(value);
    expect(read.ok ? "ok" : read.param).toBe(param);
  });
});
