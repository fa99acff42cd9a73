import { describe, expect, test } from "bun:test";
import {
  AttestationError,
  answerChallenge,
  assessProviderEvidence,
  buildEvidence,
  createTrustPolicy,
  DevelopmentRoot,
  decodeBase64,
  isRoutable,
  meetsTrustFloor,
  type Posture,
  type ProviderAttestation,
  SoftwareIdentity,
  startChallenges,
  summarizeAttestation,
  TrustAnchor,
  type TrustLevel,
  type TrustPolicy,
  trustRank,
  withdrawTrust,
} from "../../../attestation/provider/index.ts";
import golden from "../../fixtures/attestation/evidence-v1.json";

const NOW = Date.parse("2026-11-21T12:00:00Z");
const now = () => NOW;
const POSTURE: Posture = { sipEnabled: true, secureBoot: "Full Security", thirdPartyKexts: false, osVersion: "15.1" };
const ENCRYPTION_KEY = new Uint8Array(32).fill(5);

const devRoot = await DevelopmentRoot.generate(now);
const devPolicy = createTrustPolicy({ mode: "development", anchor: devRoot.anchor });

async function provider(options: { chain?: "matching" | "other-key" | "other-posture" | "other-root"; posture?: Posture } = {}) {
  const identity = SoftwareIdentity.generate();
  const posture = options.posture ?? POSTURE;
  const issue = async (root: DevelopmentRoot, identityKey: Uint8Array, p: Posture) => root.issueDeviceChain({ identityKey, posture: p });
  let mdaChain: Uint8Array[] | undefined;
  switch (options.chain) {
    case "matching":
      mdaChain = await issue(devRoot, identity.publicKey(64), posture);
      break;
    case "other-key":
      mdaChain = await issue(devRoot, SoftwareIdentity.generate().publicKey(), posture);
      break;
    case "other-posture":
      mdaChain = await issue(devRoot, identity.publicKey(), { ...posture, osVersion: "15.0" });
      break;
    case "other-root":
      mdaChain = await issue(await DevelopmentRoot.generate(now), identity.publicKey(), posture);
      break;
  }
  const { wire } = buildEvidence({ identity, encryptionKey: ENCRYPTION_KEY, posture, timestamp: NOW, ...(mdaChain ? { mdaChain } : {}) });
  return { identity, wire };
}

function assess(evidence: unknown, policy: TrustPolicy = devPolicy) {
  return assessProviderEvidence(evidence, { helloEncryptionKey: ENCRYPTION_KEY, policy, now });
}

const summary = (a: ProviderAttestation) => ({
  level: a.level,
  secureEnclave: a.secureEnclave,
  mdaVerified: a.mdaVerified,
  check: a.failure?.check,
});

describe("trust levels", () => {
  test("are ordered none < self_signed < hardware", () => {
    expect(["hardware", "none", "self_signed"].sort((a, b) => trustRank(a as TrustLevel) - trustRank(b as TrustLevel))).toEqual([
      "none",
      "self_signed",
      "hardware",
    ]);
  });

  test.each([
    ["none", "none", true],
    ["none", "self_signed", false],
    ["self_signed", "self_signed", true],
    ["self_signed", "hardware", false],
    ["hardware", "hardware", true],
    ["hardware", "none", true],
  ] as const)("%s meets floor %s: %p", (level, floor, ok) => {
    expect(meetsTrustFloor(level, floor)).toBe(ok);
  });
});

describe("trust policy", () => {
  test("production defaults to the hardware floor with the Apple root", () => {
    const p = createTrustPolicy({ mode: "production", anchor: TrustAnchor.apple() });
    expect([p.floor, p.maxEvidenceSkewMs, Object.isFrozen(p)]).toEqual(["hardware", 120_000, true]);
  });

  test("development defaults to the none floor; the floor is configurable", () => {
    expect(devPolicy.floor).toBe("none");
    expect(createTrustPolicy({ mode: "production", anchor: TrustAnchor.apple(), floor: "self_signed" }).floor).toBe("self_signed");
  });

  test("production mode refuses a development root", () => {
    let check = "no error";
    try {
      createTrustPolicy({ mode: "production", anchor: devRoot.anchor });
    } catch (e) {
      check = (e as AttestationError).check;
    }
    expect(check).toBe("development_root");
  });

  test("production mode refuses the Apple root's bytes when loaded as a development anchor", async () => {
    const apple = TrustAnchor.apple();
    expect(() => createTrustPolicy({ mode: "production", anchor: TrustAnchor.development(apple.der) })).toThrow(AttestationError);
    // and assessing under a policy object built by hand with a development root in production throws too
    const forged = { ...devPolicy, mode: "production" } as TrustPolicy;
    await expect(assess({}, forged)).rejects.toThrow(AttestationError);
  });
});

describe("assessProviderEvidence", () => {
  test("no evidence: none, no failure", async () => {
    expect(summary(await assess(undefined))).toEqual({ level: "none", secureEnclave: false, mdaVerified: false, check: undefined });
  });

  test("Secure Enclave evidence alone: self_signed", async () => {
    const { wire } = await provider();
    expect(summary(await assess(wire))).toEqual({ level: "self_signed", secureEnclave: true, mdaVerified: false, check: undefined });
  });

  test("with a development chain bound to the key: hardware, through the same verification code", async () => {
    const { identity, wire } = await provider({ chain: "matching" });
    const a = await assess(wire);
    expect(summary(a)).toEqual({ level: "hardware", secureEnclave: true, mdaVerified: true, check: undefined });
    expect([a.identityKey?.point, a.posture]).toEqual([identity.publicKey(65), POSTURE]);
  });

  test.each([
    ["a chain for another identity key", "other-key", "freshness_code"],
    ["a chain proving another posture", "other-posture", "posture_mismatch"],
    ["a chain from another development root", "other-root", "chain_anchor"],
  ] as const)("%s: none, fails closed", async (_, chain, check) => {
    const { wire } = await provider({ chain });
    expect(summary(await assess(wire))).toEqual({ level: "none", secureEnclave: false, mdaVerified: false, check });
  });

  test("a development chain in production mode with the Apple root: none (chain_anchor)", async () => {
    const { wire } = await provider({ chain: "matching" });
    const production = createTrustPolicy({ mode: "production", anchor: TrustAnchor.apple() });
    expect(summary(await assess(wire, production)).check).toBe("chain_anchor");
  });

  test("a hello chain under an Apple-kind anchor: checked, but self_signed (its constant freshness code proves no fresh posture)", async () => {
    // An anchor of kind "apple" over the development root's key (parse is private: Apple's own bytes are pinned).
    const parse = (TrustAnchor as unknown as { parse(kind: "apple", der: Uint8Array): TrustAnchor }).parse;
    const appleKind = createTrustPolicy({ mode: "development", anchor: parse.call(TrustAnchor, "apple", devRoot.anchor.der) });
    const { wire } = await provider({ chain: "matching" });
    expect(summary(await assess(wire, appleKind))).toEqual({
      level: "self_signed",
      secureEnclave: true,
      mdaVerified: false,
      check: undefined,
    });
    const bad = await provider({ chain: "other-key" });
    expect(summary(await assess(bad.wire, appleKind)).check).toBe("freshness_code");
  });

  test("evidence for another hello key: none (encryption_key)", async () => {
    const { wire } = await provider();
    const a = await assessProviderEvidence(wire, { helloEncryptionKey: new Uint8Array(32), policy: devPolicy, now });
    expect(summary(a).check).toBe("encryption_key");
  });

  test("garbage evidence: none (encoding)", async () => {
    expect(summary(await assess("evidence")).check).toBe("encoding");
  });

  test("golden vector: compact evidence with a development chain verifies as hardware at its clock", async () => {
    const v = golden.compact_with_dev_chain;
    const policy = createTrustPolicy({ mode: "development", anchor: TrustAnchor.development(v.development_root_pem) });
    const a = await assessProviderEvidence(v.evidence, {
      helloEncryptionKey: decodeBase64(golden.encryption_key_b64, "encoding", "key"),
      policy,
      now: () => golden.now,
    });
    expect([a.level, a.identityKey?.id]).toEqual(["hardware", golden.freshness_code_hex]);
    // Three minutes later by the injected clock, the same evidence is stale.
    const later = await assessProviderEvidence(v.evidence, {
      helloEncryptionKey: decodeBase64(golden.encryption_key_b64, "encoding", "key"),
      policy,
      now: () => golden.now + 180_000,
    });
    expect(summary(later)).toEqual({ level: "none", secureEnclave: false, mdaVerified: false, check: "timestamp" });
  });

  test("routing follows the floor", async () => {
    const selfSigned = await assess((await provider()).wire);
    const hardware = await assess((await provider({ chain: "matching" })).wire);
    const floor = createTrustPolicy({ mode: "development", anchor: devRoot.anchor, floor: "hardware" });
    expect([isRoutable(selfSigned, floor), isRoutable(hardware, floor), isRoutable(selfSigned, devPolicy)]).toEqual([false, true, true]);
  });
});

describe("challenges on an attested provider", () => {
  test("a failed challenge withdraws trust at once", async () => {
    const { identity, wire } = await provider({ chain: "matching" });
    const a = await assess(wire);
    const clock = { t: NOW };
    const session = startChallenges(a, { ...devPolicy, challengeIntervalMs: 60_000, challengeTimeoutMs: 5_000 }, () => clock.t);
    clock.t += 60_000;
    const challenge = session.poll()!;
    let withdrawn: ProviderAttestation = a;
    try {
      session.answer(answerChallenge(identity, challenge, { ...POSTURE, sipEnabled: false }).wire);
    } catch (e) {
      withdrawn = withdrawTrust(a, e as AttestationError);
    }
    expect(summary(withdrawn)).toEqual({ level: "none", secureEnclave: false, mdaVerified: false, check: "challenge_posture" });
    expect(summarizeAttestation([withdrawn])).toEqual({ attestedProviders: 0, trustLevel: "none" });
  });

  test("a provider without verified evidence cannot be challenged", async () => {
    expect(() =>
      startChallenges(
        withdrawTrust({ level: "none", secureEnclave: false, mdaVerified: false }, new AttestationError("sip", "x")),
        devPolicy,
        now,
      ),
    ).toThrow(RangeError);
  });
});

describe("/v1/models attestation metadata", () => {
  const none: ProviderAttestation = { level: "none", secureEnclave: false, mdaVerified: false };
  const selfSigned: ProviderAttestation = { level: "self_signed", secureEnclave: true, mdaVerified: false, posture: POSTURE };
  const hardware: ProviderAttestation = { level: "hardware", secureEnclave: true, mdaVerified: true, posture: POSTURE };

  test.each([
    ["no providers", [], { attestedProviders: 0, trustLevel: "none" }],
    ["only unattested providers", [none, none], { attestedProviders: 0, trustLevel: "none" }],
    [
      "one self_signed: posture self-reported, so not proven",
      [none, selfSigned],
      {
        attestedProviders: 1,
        trustLevel: "self_signed",
        attestation: { secureEnclave: true, sipEnabled: false, secureBoot: false, deviceChainVerified: false, deviceChainSources: [] },
      },
    ],
    [
      "hardware only: posture proven",
      [hardware, hardware, none],
      {
        attestedProviders: 2,
        trustLevel: "hardware",
        attestation: {
          secureEnclave: true,
          sipEnabled: true,
          secureBoot: true,
          deviceChainVerified: true,
          deviceChainSources: ["evidence"],
        },
      },
    ],
    [
      "mixed: highest level, booleans only when every attested provider proves them",
      [selfSigned, hardware],
      {
        attestedProviders: 2,
        trustLevel: "hardware",
        attestation: {
          secureEnclave: true,
          sipEnabled: false,
          secureBoot: false,
          deviceChainVerified: false,
          deviceChainSources: ["evidence"],
        },
      },
    ],
  ] as const)("%s", (_, providers, expected) => {
    expect(summarizeAttestation(providers)).toEqual(expected);
  });
});
