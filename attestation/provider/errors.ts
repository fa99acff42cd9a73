/**
 * The one error type of the attestation library. Every check throws AttestationError with `check` set
 * to the name of the check that failed (a closed vocabulary, below), so a caller can log, count and
 * test failures without matching on message text. Messages describe the failure; they never quote
 * secrets (there are none in evidence) and stay short.
 */

export const ATTESTATION_CHECKS = [
  // Wire envelopes and configuration
  "encoding", // base64, envelope shape, field types
  "root", // the pinned Apple root is missing or its fingerprint does not match
  "development_root", // a development root where production mode needs Apple's
  // Secure Enclave evidence
  "evidence_format", // payload JSON: kind, version, fields, duplicates, unknown fields
  "identity_key", // not a P-256 point in the 64- or 65-byte form
  "signature", // DER ECDSA P-256 signature by the identity key
  "timestamp", // evidence outside the allowed clock skew
  "encryption_key", // evidence encryption_key differs from the hello key
  "posture", // self-reported posture below policy
  // Apple Managed Device Attestation chain
  "chain_format", // certificate parse, trailing bytes, chain length
  "chain_anchor", // does not end at the pinned anchor key
  "chain_name", // issuer name differs from the issuer's subject
  "chain_signature", // a certificate signature does not verify with its issuer's key
  "chain_algorithm", // signature or key algorithm outside ECDSA P-256/P-384
  "chain_validity", // outside notBefore..notAfter at the injected clock
  "chain_age", // leaf older than the maximum certificate age
  "chain_ca", // basic constraints: issuer not a CA, or leaf a CA
  "chain_path_length", // pathLenConstraint exceeded
  "chain_key_usage", // issuer without keyCertSign, or leaf with it
  "chain_critical_extension", // critical extension this library does not process, or duplicates
  // Per-OID decoding of the leaf
  "sip", // 1.2.840.113635.100.8.13.1
  "secure_boot", // 1.2.840.113635.100.8.13.2
  "kernel_extensions", // 1.2.840.113635.100.8.13.3
  "os_version", // 1.2.840.113635.100.8.10.1
  "freshness_code", // 1.2.840.113635.100.8.11.1
  "posture_mismatch", // evidence posture differs from what the chain proves
  // An MDM DeviceInformation answer (mda-answer.ts), after the chain_* checks
  "mda_freshness", // .11.1 absent, or not an accepted epoch nonce of this identity key
  "mda_age", // leaf notBefore more than 21 days ago
  "mda_posture_missing", // no SIP / Secure Boot / kext / OS version OID (macOS below 14.2)
  "mda_sip", // .13.1 not an INTEGER 0
  "mda_secure_boot", // .13.2 not "Full Security"
  "mda_kexts", // .13.3 not an INTEGER 0
  "mda_serial", // leaf serial, answered SerialNumber and enrolment serial not all equal
  "mda_udid", // leaf UDID differs from the answered ProvisioningUDID
  // Challenge-response
  "challenge_format",
  "challenge_nonce", // not the outstanding nonce (replayed, stale or unknown)
  "challenge_late", // answered after the deadline
  "challenge_missing", // no answer by the deadline
  "challenge_posture", // posture differs from the accepted posture
] as const;

export type AttestationCheck = (typeof ATTESTATION_CHECKS)[number];

export class AttestationError extends Error {
  override readonly name = "AttestationError";

  constructor(
    readonly check: AttestationCheck,
    message: string,
  ) {
    super(`${check}: ${message}`);
  }
}

/** Throws AttestationError(check, message) unless `condition` holds. */
export function ensure(condition: boolean, check: AttestationCheck, message: string): asserts condition {
  if (!condition) throw new AttestationError(check, message);
}
