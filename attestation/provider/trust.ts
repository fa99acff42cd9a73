/**
 * Trust levels and the policy that grants them.
 *
 *   none < self_signed < hardware
 *   none         no evidence, or evidence that failed any check (fails closed: a bad MDA chain, or a
 *                chain contradicting the blob, does not fall back to self_signed)
 *   self_signed  Secure Enclave evidence verified (secure-enclave.ts): a P-256 key signed the hello's
 *                encryption key and a posture that meets policy. Software could hold such a key; the
 *                posture is self-reported.
 *   hardware     self_signed plus an MDA chain to the anchor (mda-chain.ts) whose leaf is bound to the
 *                identity key (freshness code) and proves the same posture (oids.ts). Here: the hello's
 *                own chain, from the development root only (an Apple-rooted one earns self_signed: its
 *                constant freshness code proves no fresh posture); Apple's vouches through a stored MDM
 *                chain fetched with an epoch nonce (levels.ts vouchedAttestation, mda-answer.ts).
 *
 * Routing floor: providers below `floor` are not routable. Production defaults to `hardware` and
 * refuses a development anchor; development defaults to `none`.
 *
 * /v1/models metadata (summarizeAttestation) is computed only from verified results:
 *   attestedProviders  providers above none
 *   trustLevel         the highest level among them ("none" without any)
 *   attestation        present when attestedProviders > 0; each boolean holds only when every attested
 *                      provider's verified evidence proves it: secureEnclave (blob signature verified),
 *                      sipEnabled and secureBoot (proven by an Apple chain, so false while any attested
 *                      provider is only self_signed: a self-reported posture proves nothing)
 */
import { ChallengeSession } from "./challenge.ts";
import { AttestationError } from "./errors.ts";
import { meetsTrustFloor, NO_EVIDENCE, type ProviderAttestation, type TrustLevel } from "./levels.ts";
import { DEFAULT_MAX_CERTIFICATE_AGE_MS, verifyMdaChain } from "./mda-chain.ts";
import { checkAppleDeviceClaims } from "./oids.ts";
import { samePosture } from "./posture.ts";
import { assertAnchorAllowed, type TrustAnchor, type TrustMode } from "./roots.ts";
import { MAX_EVIDENCE_SKEW_MS, parseEvidenceEnvelope, verifySecureEnclaveEvidence } from "./secure-enclave.ts";

export {
  type AttestationSummary,
  isTrustLevel,
  meetsTrustFloor,
  type ProviderAttestation,
  summarizeAttestation,
  TRUST_LEVELS,
  type TrustLevel,
  trustRank,
  withdrawTrust,
} from "./levels.ts";

export interface TrustPolicy {
  readonly mode: TrustMode;
  readonly anchor: TrustAnchor;
  /** Routing floor. */
  readonly floor: TrustLevel;
  readonly maxEvidenceSkewMs: number;
  readonly maxCertificateAgeMs: number;
  readonly minOsVersion?: string;
  readonly challengeIntervalMs?: number;
  readonly challengeTimeoutMs?: number;
}

export type TrustPolicyOptions = Partial<Omit<TrustPolicy, "mode" | "anchor">> & Pick<TrustPolicy, "mode" | "anchor">;

/**
 * Builds a frozen policy with defaults (floor: hardware in production, none in development).
 * Throws AttestationError("development_root") for a development anchor in production mode.
 */
export function createTrustPolicy(options: TrustPolicyOptions): TrustPolicy {
  assertAnchorAllowed(options.anchor, options.mode);
  return Object.freeze({
    maxEvidenceSkewMs: MAX_EVIDENCE_SKEW_MS,
    maxCertificateAgeMs: DEFAULT_MAX_CERTIFICATE_AGE_MS,
    ...options,
    floor: options.floor ?? (options.mode === "production" ? "hardware" : "none"),
  });
}

export interface AssessOptions {
  /** The X25519 key from the same hello frame, raw 32 bytes. */
  readonly helloEncryptionKey: Uint8Array;
  readonly policy: TrustPolicy;
  readonly now: () => number;
}

/**
 * Verifies a hello's `evidence` value and returns the level it earns. Evidence problems never throw:
 * they give level none with `failure` naming the check. Throws AttestationError("development_root")
 * only for a policy that should not exist (development anchor in production).
 */
export async function assessProviderEvidence(evidence: unknown, options: AssessOptions): Promise<ProviderAttestation> {
  const { policy, now } = options;
  assertAnchorAllowed(policy.anchor, policy.mode);
  if (evidence === undefined || evidence === null) return NO_EVIDENCE;
  try {
    const envelope = parseEvidenceEnvelope(evidence);
    const se = verifySecureEnclaveEvidence(envelope.payload, envelope.signature, {
      helloEncryptionKey: options.helloEncryptionKey,
      now,
      maxSkewMs: policy.maxEvidenceSkewMs,
      posturePolicy: policy.minOsVersion === undefined ? {} : { minOsVersion: policy.minOsVersion },
    });
    const base = { secureEnclave: true, identityKey: se.identityKey, encryptionKey: se.encryptionKey, posture: se.posture };
    if (!envelope.mdaChain) return { level: "self_signed", mdaVerified: false, ...base };
    const chain = await verifyMdaChain(envelope.mdaChain, {
      anchor: policy.anchor,
      mode: policy.mode,
      now,
      maxCertificateAgeMs: policy.maxCertificateAgeMs,
    });
    checkAppleDeviceClaims(chain.claims, se.identityKey, policy.minOsVersion === undefined ? {} : { minOsVersion: policy.minOsVersion });
    if (!samePosture(chain.claims.posture, se.posture)) {
      throw new AttestationError("posture_mismatch", "the evidence posture differs from the posture the chain proves");
    }
    // A hello's chain is bound by the constant freshness rule (SHA-256 of the identity key): under Apple's
    // cache an old SIP-on leaf would stay valid for ever. Only the development root vouches this way; an
    // Apple chain vouches only when the coordinator fetched it with an epoch nonce (MDM, mda-answer.ts).
    if (policy.anchor.kind !== "development") return { level: "self_signed", mdaVerified: false, ...base };
    return { level: "hardware", mdaVerified: true, ...base };
  } catch (e) {
    if (!(e instanceof AttestationError)) throw e;
    return { ...NO_EVIDENCE, failure: { check: e.check, message: e.message } };
  }
}

export function isRoutable(attestation: ProviderAttestation, policy: TrustPolicy): boolean {
  return meetsTrustFloor(attestation.level, policy.floor);
}

/**
 * Starts the challenge schedule for an attested provider. Throws RangeError for a provider without
 * verified evidence (there is no key to challenge).
 */
export function startChallenges(
  attestation: ProviderAttestation,
  policy: TrustPolicy,
  now: () => number,
  randomBytes?: (n: number) => Uint8Array,
): ChallengeSession {
  const { identityKey, posture } = attestation;
  if (attestation.level === "none" || !identityKey || !posture) throw new RangeError("only an attested provider can be challenged");
  return new ChallengeSession({
    identityKey,
    posture,
    now,
    ...(policy.challengeIntervalMs === undefined ? {} : { intervalMs: policy.challengeIntervalMs }),
    ...(policy.challengeTimeoutMs === undefined ? {} : { timeoutMs: policy.challengeTimeoutMs }),
    ...(randomBytes ? { randomBytes } : {}),
  });
}
