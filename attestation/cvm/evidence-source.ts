/**
 * Where the coordinator's attestation evidence comes from: an interface with one implementation per way of
 * asking the platform (configfs-tsm.ts for real SEV-SNP/TDX guests, dev-source.ts for development and tests).
 *
 * Contract of get(reportData):
 *   - reportData is exactly 64 bytes (report-data.ts builds it); anything else throws CvmAttestationError
 *     report_data_length before the platform is asked.
 *   - The result's platform equals the source's platform.
 *   - evidence is the platform's raw report (SEV-SNP: the 0x4A0-byte ATTESTATION_REPORT; TDX: the quote;
 *     dev: a SEV-SNP-shaped report signed by a development chain).
 *   - endorsements are what the platform handed out with it; for sev-snp and dev, DER X.509 certificates
 *     (VCEK, ASK, ARK; any may be missing, in any order). Empty when the host provides none.
 */

import { ensure } from "./errors.ts";

export type CvmPlatform = "sev-snp" | "tdx" | "dev";

export interface CoordinatorEvidence {
  readonly platform: CvmPlatform;
  readonly evidence: Uint8Array;
  readonly endorsements: readonly Uint8Array[];
}

export interface EvidenceSource {
  readonly platform: CvmPlatform;
  /** Throws CvmAttestationError (report_data_length, or the source's own checks). */
  get(reportData: Uint8Array): Promise<CoordinatorEvidence>;
}

export const REPORT_DATA_LENGTH = 64;

/** Throws CvmAttestationError report_data_length unless `reportData` is 64 bytes. */
export function checkReportDataLength(reportData: Uint8Array): void {
  ensure(
    reportData.length === REPORT_DATA_LENGTH,
    "report_data_length",
    `report data is ${reportData.length} bytes, expected ${REPORT_DATA_LENGTH}`,
  );
}
