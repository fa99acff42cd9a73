/**
 * The provider identity interface: the software key and a signing helper process (the Secure Enclave
 * helper's line protocol, played by test/fixtures/fake-identity-helper.ts) produce evidence and challenge
 * answers that attestation/ verifies; a helper that misbehaves is refused with a clear IdentityError.
 */
import { describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import {
  FULL_SECURITY,
  parseChallengeAnswer,
  parseEvidenceEnvelope,
  parseIdentityKey,
  SoftwareIdentity,
  verifyChallengeResponse,
  verifyIdentitySignature,
  verifySecureEnclaveEvidence,
} from "../../../attestation/provider/index.ts";
import {
  helperIdentity,
  IdentityError,
  type ProviderIdentity,
  signChallengeAnswer,
  signEvidence,
  softwareIdentity,
} from "../../../src/provider/identity.ts";

const HELPER = [process.execPath, join(import.meta.dir, "../../fixtures/fake-identity-helper.ts")];
const POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;

async function checkIdentity(identity: ProviderIdentity) {
  expect(identity.publicKey.byteLength).toBe(65);
  const encryptionKey = new Uint8Array(randomBytes(32));
  const envelope = parseEvidenceEnvelope(await signEvidence(identity, encryptionKey, POSTURE));
  const evidence = verifySecureEnclaveEvidence(envelope.payload, envelope.signature, { helloEncryptionKey: encryptionKey, now: Date.now });
  expect(Buffer.from(evidence.identityKey.point)).toEqual(Buffer.from(identity.publicKey));

  const challenge = { nonce: new Uint8Array(randomBytes(32)), timestamp: Date.now() };
  const answer = await signChallengeAnswer(identity, challenge, POSTURE);
  verifyChallengeResponse(parseChallengeAnswer(answer), {
    challenge,
    identityKey: parseIdentityKey(identity.publicKey),
    posture: POSTURE,
    now: Date.now,
    timeoutMs: 5_000,
  });
}

describe("provider identity", () => {
  test("software key: evidence and challenge answers verify", async () => {
    await checkIdentity(softwareIdentity(SoftwareIdentity.generate()));
  });

  test("signing helper: evidence and challenge answers verify; concurrent signatures are matched by id", async () => {
    for (const mode of ["ok", "noisy"]) {
      const identity = await helperIdentity([...HELPER, mode]);
      try {
        expect(identity.kind).toBe("helper");
        await checkIdentity(identity);
        const messages = Array.from({ length: 20 }, (_, i) => new TextEncoder().encode(`m${i}`));
        const signatures = await Promise.all(messages.map((m) => identity.sign(m)));
        const key = parseIdentityKey(identity.publicKey);
        for (const [i, signature] of signatures.entries()) verifyIdentitySignature(key, messages[i] as Uint8Array, signature, "helper");
      } finally {
        identity.close();
      }
    }
  });

  test.each([
    ["bad-key", "no valid P-256 public key"],
    ["wrong-signature", "does not verify"],
    ["refuse", "refused: user presence required"],
    ["exit-on-sign", "exited"],
  ])("a helper that answers %s is refused at start", async (mode, message) => {
    const started = helperIdentity([...HELPER, mode]);
    await expect(started).rejects.toBeInstanceOf(IdentityError);
    await expect(started).rejects.toThrow(message);
  });

  test("a helper that never answers times out; a missing helper cannot start", async () => {
    await expect(helperIdentity([...HELPER, "silent-sign"], 300)).rejects.toThrow("did not answer within 300 ms");
    await expect(helperIdentity(["/nonexistent/umbra-se-helper"])).rejects.toBeInstanceOf(IdentityError);
  });

  test("after close, signing fails with IdentityError", async () => {
    const identity = await helperIdentity([...HELPER, "ok"]);
    identity.close();
    await expect(identity.sign(new Uint8Array(1))).rejects.toThrow("stopped");
  });
});
