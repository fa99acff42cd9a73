/**
 * The body of GET /v1/attestation, and its verification by a client or auditor.
 *
 * JSON shape (bytes in base64 or hex as named; field names stable):
 *   {
 *     "platform": "sev-snp" | "tdx" | "dev",
 *     "evidence": base64 of the raw report (SEV-SNP: 0x4A0 bytes),
 *     "endorsements": [base64 of DER certificates: VCEK, ASK, ARK as the host gave them],
 *     "report_data": {
 *       "hex": the 64 bytes,
 *       "layout": "sha256(tls_public_key_spki_der) || sha256(sealing_public_key)",
 *       "tls_public_key_sha256": hex, "sealing_key_sha256": hex
 *     },
 *     "expected_measurement": hex of the build's expected launch measurement, or null when unknown
 *   }
 *
 * Verification (verifyAttestationDocument): decode (document_format on malformed JSON fields), check that
 * the published report data binds the keys the client saw (report_data), then run the SEV-SNP verifier with
 * the client's own expected measurement (never the one the document states: it is a hint for humans).
 */

import { CvmAttestationError, ensure } from "./errors.ts";
import type { CoordinatorEvidence, CvmPlatform, EvidenceSource } from "./evidence-source.ts";
import { buildReportData, checkReportData, describeReportData, type ReportDataBinding } from "./report-data.ts";
import type { SnpExpectations, SnpVerification, SnpVerifier } from "./snp-verify.ts";

export const REPORT_DATA_LAYOUT = "sha256(tls_public_key_spki_der) || sha256(sealing_public_key)";

export interface AttestationDocument {
  platform: CvmPlatform;
  evidence: string;
  endorsements: string[];
  report_data: { hex: string; layout: string; tls_public_key_sha256: string; sealing_key_sha256: string };
  expected_measurement: string | null;
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");

/** Asks `source` for evidence over the binding's report data. Throws what the source throws. */
export async function buildAttestationDocument(
  source: EvidenceSource,
  binding: ReportDataBinding,
  expectedMeasurement: Uint8Array | null,
): Promise<AttestationDocument> {
  const reportData = buildReportData(binding);
  const ev = await source.get(reportData);
  return {
    platform: ev.platform,
    evidence: b64(ev.evidence),
    endorsements: ev.endorsements.map(b64),
    report_data: { hex: Buffer.from(reportData).toString("hex"), layout: REPORT_DATA_LAYOUT, ...describeReportData(reportData) },
    expected_measurement: expectedMeasurement ? Buffer.from(expectedMeasurement).toString("hex") : null,
  };
}

const PLATFORMS: readonly string[] = ["sev-snp", "tdx", "dev"];

function decodeBase64(value: unknown, what: string): Uint8Array {
  ensure(typeof value === "string" && /^[A-Za-z0-9+/]*={0,2}$/.test(value), "document_format", `${what} is not base64`);
  return new Uint8Array(Buffer.from(value, "base64"));
}

/** Decodes a document received as JSON. Throws CvmAttestationError document_format or platform_unsupported. */
export function decodeAttestationDocument(doc: unknown): CoordinatorEvidence & { reportData: Uint8Array } {
  ensure(typeof doc === "object" && doc !== null, "document_format", "the document is not an object");
  const d = doc as Record<string, unknown>;
  if (typeof d.platform !== "string" || !PLATFORMS.includes(d.platform)) {
    throw new CvmAttestationError("platform_unsupported", `unknown platform ${JSON.stringify(d.platform)}`);
  }
  ensure(Array.isArray(d.endorsements), "document_format", "endorsements is not a list");
  const rd = d.report_data as Record<string, unknown> | undefined;
  ensure(typeof rd?.hex === "string" && /^[0-9a-f]{128}$/.test(rd.hex), "document_format", "report_data.hex is not 64 bytes of hex");
  return {
    platform: d.platform as CvmPlatform,
    evidence: decodeBase64(d.evidence, "evidence"),
    endorsements: d.endorsements.map((e, i) => decodeBase64(e, `endorsement ${i}`)),
    reportData: new Uint8Array(Buffer.from(rd.hex, "hex")),
  };
}

/**
 * Verifies a document against the keys the client saw and its own expectations. Throws CvmAttestationError
 * (decoding, report_data, then every check of the verifier).
 */
export async function verifyAttestationDocument(
  doc: unknown,
  binding: ReportDataBinding,
  verifier: SnpVerifier,
  expected: Omit<SnpExpectations, "reportData">,
): Promise<SnpVerification> {
  const decoded = decodeAttestationDocument(doc);
  checkReportData(decoded.reportData, binding);
  return verifier.verifyEvidence(decoded, { ...expected, reportData: buildReportData(binding) });
}
