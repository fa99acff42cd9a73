/**
 * A session's trust and stored device chains (src/fleet/session-trust.ts over attestation/provider/levels.ts):
 * a passing chain raises self_signed to hardware; its acceptedUntil passing brings it back to self_signed
 * until a fresh one; a posture contradicting the chain, a `none` session or a withdrawn one are never raised;
 * the hello's own chain (source `evidence`) is left alone.
 */
import { describe, expect, test } from "bun:test";
import { ChallengeSession } from "../../../attestation/provider/challenge.ts";
import { parseIdentityKey } from "../../../attestation/provider/identity-key.ts";
import { type DeviceChainVouch, deviceChainSource, type ProviderAttestation } from "../../../attestation/provider/levels.ts";
import { FULL_SECURITY } from "../../../attestation/provider/posture.ts";
import { SoftwareIdentity } from "../../../attestation/provider/software-identity.ts";
import { SessionTrust } from "../../../src/fleet/session-trust.ts";

const POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.5" } as const;
const identityKey = parseIdentityKey(SoftwareIdentity.generate().publicKey());
const selfSigned: ProviderAttestation = { level: "self_signed", secureEnclave: true, mdaVerified: false, identityKey, posture: POSTURE };
const vouch = (acceptedUntil: number, chainSha256 = "c1"): DeviceChainVouch => ({
  source: "mdm",
  acceptedUntil,
  posture: { ...POSTURE, osVersion: "15.6" },
  chainSha256,
});

function trustOf(attestation: ProviderAttestation): SessionTrust {
  const trust = new SessionTrust();
  trust.earned(attestation, undefined);
  return trust;
}

describe("stored device chains and a session's level", () => {
  test("raised while the chain passes, back to self_signed when it lapses, raised again by a fresh one", () => {
    const trust = trustOf(selfSigned);
    const steps = [
      trust.vouch(vouch(1_000), 10),
      [trust.level, deviceChainSource(trust.attestation), trust.attestation?.posture?.osVersion],
      trust.expire(1_000),
      trust.expire(1_001),
      [trust.level, deviceChainSource(trust.attestation), trust.attestation?.mdaVerified],
      trust.vouch(vouch(5_000, "c2"), 1_002),
      trust.level,
      trust.vouch(undefined, 1_003),
      trust.level,
    ];
    expect(steps).toEqual([
      true,
      ["hardware", "mdm", "15.5"], // the posture the challenges check stays the one the hello signed
      false,
      true,
      ["self_signed", null, false],
      true,
      "hardware",
      true,
      "self_signed",
    ]);
  });

  test("never raised: a lapsed chain, a contradicting posture, level none, a withdrawn session", () => {
    const lapsed = trustOf(selfSigned);
    const sipOff = trustOf({ ...selfSigned, posture: { ...POSTURE, sipEnabled: false } });
    const none = trustOf({ level: "none", secureEnclave: false, mdaVerified: false });
    // Withdrawn by an unsolicited challenge answer (no challenge outstanding).
    const withdrawn = new SessionTrust();
    withdrawn.earned(selfSigned, new ChallengeSession({ identityKey, posture: POSTURE, now: () => 0 }));
    expect(withdrawn.answer({ type: "challenge_response", payload: "", signature: "" })?.check).toBe("challenge_nonce");
    expect([
      lapsed.vouch(vouch(99), 100),
      sipOff.vouch(vouch(1_000), 10),
      none.vouch(vouch(1_000), 10),
      withdrawn.vouch(vouch(1_000), 10),
    ]).toEqual([false, false, false, false]);
    expect([lapsed.level, sipOff.level, none.level, withdrawn.level]).toEqual(["self_signed", "self_signed", "none", "none"]);
  });

  test("the hello's own chain (development evidence) is neither lowered nor relabelled", () => {
    const hello = trustOf({ ...selfSigned, level: "hardware", mdaVerified: true });
    expect([hello.vouch(undefined, 10), hello.expire(10), hello.level, deviceChainSource(hello.attestation)]).toEqual([
      false,
      false,
      "hardware",
      "evidence",
    ]);
  });
});
