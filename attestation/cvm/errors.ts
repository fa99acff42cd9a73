/**
 * The one error class of coordinator (CVM) attestation: every failed check throws a CvmAttestationError
 * whose `check` names the check, from the closed list below. Callers branch on `check`, never on the
 * message; the message says what was found, never secret material.
 *
 * Invariant: each name in CvmCheck is thrown by exactly one kind of check and has a negative test in
 * test/unit/attestation-cvm/.
 */

export type CvmCheck =
  // SEV-SNP report layout (snp-report.ts)
  | "report_size"
  | "report_version"
  | "signature_algorithm"
  | "signature_format"
  // Report signature and signing key (snp-verify.ts)
  | "report_signature"
  | "signing_key"
  // Certificates (snp-chain.ts)
  | "endorsements_format"
  | "certificate_parse"
  | "vcek_missing"
  | "root_unknown"
  | "ark_not_pinned"
  | "ark_signature"
  | "ask_signature"
  | "vcek_signature"
  | "certificate_name_chain"
  | "certificate_validity"
  | "certificate_signature_algorithm"
  | "certificate_ca_flags"
  | "certificate_key_usage"
  | "certificate_critical_extension"
  | "vcek_chip_id"
  | "vcek_tcb"
  // Guest policy and measured state (snp-verify.ts)
  | "policy_debug"
  | "policy_migration"
  | "policy_smt"
  | "vmpl"
  | "measurement"
  | "report_data"
  | "minimum_tcb"
  // Trust roots and modes (amd-roots.ts, snp-verify.ts, evidence.ts)
  | "roots_load"
  | "dev_root_in_production"
  | "platform_unsupported"
  // The GET /v1/attestation document (attestation-document.ts)
  | "document_format"
  // Evidence sources (configfs-tsm.ts, cert-table.ts, report-data.ts)
  | "report_data_length"
  | "configfs_tsm_unavailable"
  | "configfs_tsm_provider"
  | "configfs_tsm_race"
  | "configfs_tsm_io"
  | "cert_table";

export class CvmAttestationError extends Error {
  override readonly name = "CvmAttestationError";
  constructor(
    readonly check: CvmCheck,
    message: string,
  ) {
    super(`${check}: ${message}`);
  }
}

/** Throws CvmAttestationError(check, message) when `ok` is false. */
export function ensure(ok: boolean, check: CvmCheck, message: string): asserts ok {
  if (!ok) throw new CvmAttestationError(check, message);
}
