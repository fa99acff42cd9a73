/**
 * Coordinator (confidential VM) attestation: evidence sources, the 64-byte report data, SEV-SNP report
 * parsing and verification against AMD's pinned roots, and the GET /v1/attestation document.
 * See README.md in this folder for formats, offsets, checks and the auditor's procedure.
 */

export {
  AMD_ARK_SPKI_SHA256,
  AMD_ROOT_PINS,
  isPinnedAmdArk,
  loadAmdRoots,
  loadPinnedRoots,
  type RootPin,
  type SnpRoot,
  spkiSha256,
} from "./amd-roots.ts";
export {
  type AttestationDocument,
  buildAttestationDocument,
  decodeAttestationDocument,
  REPORT_DATA_LAYOUT,
  verifyAttestationDocument,
} from "./attestation-document.ts";
export { CERT_GUID, type CertRole, encodeCertTable, endorsementsFromCertTable, parseCertTable } from "./cert-table.ts";
export {
  CONFIGFS_TSM_ROOT,
  type ConfigfsTsmOptions,
  type ConfigfsTsmSource,
  createConfigfsTsmSource,
  nodeTsmFileSystem,
  type TsmFileSystem,
} from "./configfs-tsm.ts";
export { createDevChain, DEV_TCB, type DevChain, type DevChainOptions, signSnpReport, type Validity } from "./dev-chain.ts";
export { createDevSource, type DevSource, type DevSourceOptions, devReportBody } from "./dev-source.ts";
export { CvmAttestationError, type CvmCheck } from "./errors.ts";
export {
  type CoordinatorEvidence,
  type CvmPlatform,
  checkReportDataLength,
  type EvidenceSource,
  REPORT_DATA_LENGTH,
} from "./evidence-source.ts";
export { buildReportData, checkReportData, describeReportData, type ReportDataBinding } from "./report-data.ts";
export { readVcekExtensions, type VerifiedSnpChain, verifySnpChain } from "./snp-chain.ts";
export {
  decodePolicy,
  describeSnpReport,
  encodeSnpReport,
  parseSnpReport,
  SNP_REPORT_SIZE,
  SNP_SIGNED_LENGTH,
  type SnpPolicy,
  type SnpReport,
  type SnpReportBody,
  type TcbVersion,
  withSnpSignature,
} from "./snp-report.ts";
export {
  createSnpVerifier,
  type SnpExpectations,
  type SnpVerification,
  type SnpVerifier,
  type SnpVerifierOptions,
  type VerifierMode,
} from "./snp-verify.ts";
