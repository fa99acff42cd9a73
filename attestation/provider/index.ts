/**
 * Umbra attestation library: verification of provider evidence (Secure Enclave blob, Apple Managed
 * Device Attestation chain, challenge-response) and the trust levels it earns. Standalone: no
 * framework or application imports; see attestation/README.md for the threat model and formats.
 *
 * The preload import comes first so that reflect-metadata is in place before @peculiar/x509 loads,
 * also in compiled binaries, where bunfig.toml preloads do not apply (STACK.md item 1).
 */
import "./preload.ts";

export {
  CHALLENGE_RESPONSE_KIND,
  CHALLENGE_VERSION,
  type Challenge,
  type ChallengeAnswer,
  type ChallengeCheck,
  ChallengeSession,
  type ChallengeSessionOptions,
  challengeFields,
  DEFAULT_CHALLENGE_INTERVAL_MS,
  DEFAULT_CHALLENGE_TIMEOUT_MS,
  NONCE_BYTES,
  parseChallenge,
  parseChallengeAnswer,
  verifyChallengeResponse,
} from "./challenge.ts";
export {
  appleExtensionValues,
  type CertificateSpec,
  type CurveName,
  caExtensions,
  DEV_INTERMEDIATE_NAME,
  DEV_ROOT_NAME,
  DevelopmentRoot,
  type DeviceChainRequest,
  generateSigningKeys,
  type Issuer,
  issueCertificate,
  leafKeyUsage,
  type SigningKeys,
  toExtensions,
} from "./dev-root.ts";
export { decodeBase64, encodeBase64 } from "./encoding.ts";
export { ATTESTATION_CHECKS, type AttestationCheck, AttestationError } from "./errors.ts";
export {
  freshnessCodeFor,
  type IdentityKey,
  parseIdentityKey,
  verifyIdentitySignature,
  verifyIdentitySignatureThen,
} from "./identity-key.ts";
export {
  checkMdaLeaf,
  decodeMdaLeaf,
  leafExtensions,
  MDA_MAX_LEAF_AGE_MS,
  type MdaAnswerInput,
  type MdaAnswerOptions,
  type MdaClaims,
  type MdaLeafFields,
  type VerifiedMdaAnswer,
  verifyMdaAnswer,
} from "./mda-answer.ts";
export {
  DEFAULT_MAX_CERTIFICATE_AGE_MS,
  type MdaChainOptions,
  type VerifiedMdaChain,
  type VerifiedMdaPath,
  verifyMdaChain,
  verifyMdaPath,
} from "./mda-chain.ts";
export {
  acceptedMdaNonces,
  MDA_EPOCH_MS,
  MDA_NONCE_BYTES,
  MDA_NONCE_TAG,
  MDA_PREVIOUS_EPOCHS,
  MDA_SEED_MIN_BYTES,
  type MdaNonce,
  mdaEpoch,
  mdaEpochAcceptedUntil,
  mdaEpochStart,
  mdaNonce,
  mdaNonceMessage,
} from "./mda-nonce.ts";
export {
  APPLE_OID,
  type AppleDeviceClaims,
  type ApplePolicy,
  checkAppleDeviceClaims,
  decodeAppleDeviceClaims,
  decodeAppleString,
  FRESHNESS_CODE_BYTES,
} from "./oids.ts";
export {
  checkPosture,
  compareOsVersions,
  FULL_SECURITY,
  type Posture,
  type PosturePolicy,
  parsePosture,
  postureJson,
  SECURE_BOOT_LEVELS,
  type SecureBootLevel,
  samePosture,
} from "./posture.ts";
export {
  type AnchorKind,
  APPLE_ROOT_FILE,
  APPLE_ROOT_SHA256,
  assertAnchorAllowed,
  derToPem,
  pemToDer,
  TrustAnchor,
  type TrustMode,
} from "./roots.ts";
export {
  EVIDENCE_KIND,
  EVIDENCE_VERSION,
  type EvidenceEnvelope,
  MAX_CHAIN_CERTIFICATES,
  MAX_EVIDENCE_SKEW_MS,
  parseEvidenceEnvelope,
  type SecureEnclaveEvidence,
  type SecureEnclaveOptions,
  verifySecureEnclaveEvidence,
} from "./secure-enclave.ts";
export {
  answerChallenge,
  buildEvidence,
  challengeResponsePayload,
  type EvidenceRequest,
  evidencePayload,
  evidenceWire,
  SoftwareIdentity,
} from "./software-identity.ts";
export {
  type AssessOptions,
  type AttestationSummary,
  assessProviderEvidence,
  createTrustPolicy,
  isRoutable,
  isTrustLevel,
  meetsTrustFloor,
  type ProviderAttestation,
  startChallenges,
  summarizeAttestation,
  TRUST_LEVELS,
  type TrustLevel,
  type TrustPolicy,
  type TrustPolicyOptions,
  trustRank,
  withdrawTrust,
} from "./trust.ts";
