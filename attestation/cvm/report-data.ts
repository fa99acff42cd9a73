/**
 * The coordinator's 64-byte report data: what the hardware report binds.
 *
 * Format (64 bytes, fixed):
 *   bytes  0..31  SHA-256 of the TLS certificate's public key, as DER SubjectPublicKeyInfo
 *   bytes 32..63  SHA-256 of the coordinator's sealing public key (HPKE X25519), raw encoding (32 bytes)
 *
 * A client that connected over TLS hashes the server key it saw (the SPKI, not the certificate, so the
 * certificate may be renewed over the same key) and the sealing key published next to the attestation, and
 * checks both halves. Comparison is constant-time.
 */

import { sha256 } from "@noble/hashes/sha2.js";
import { CvmAttestationError, ensure } from "./errors.ts";
import { REPORT_DATA_LENGTH } from "./evidence-source.ts";

export interface ReportDataBinding {
  /** DER SubjectPublicKeyInfo of the TLS key. */
  readonly tlsPublicKeySpki: Uint8Array;
  /** The sealing public key, raw (X25519: 32 bytes). */
  readonly sealingPublicKey: Uint8Array;
}

/** Builds the 64 bytes. Throws CvmAttestationError report_data when a key is empty. */
export function buildReportData(binding: ReportDataBinding): Uint8Array {
  ensure(binding.tlsPublicKeySpki.length > 0, "report_data", "the TLS public key is empty");
  ensure(binding.sealingPublicKey.length > 0, "report_data", "the sealing public key is empty");
  const out = new Uint8Array(REPORT_DATA_LENGTH);
  out.set(sha256(binding.tlsPublicKeySpki), 0);
  out.set(sha256(binding.sealingPublicKey), 32);
  return out;
}

/**
 * Checks that `reportData` binds exactly these keys. Throws CvmAttestationError report_data naming the half
 * that differs (or report_data_length for a buffer that is not 64 bytes).
 */
export function checkReportData(reportData: Uint8Array, binding: ReportDataBinding): void {
  ensure(reportData.length === REPORT_DATA_LENGTH, "report_data_length", `report data is ${reportData.length} bytes`);
  const expected = buildReportData(binding);
  let tls = 0;
  let sealing = 0;
  for (let i = 0; i < 32; i++) {
    tls |= reportData[i]! ^ expected[i]!;
    sealing |= reportData[32 + i]! ^ expected[32 + i]!;
  }
  if (tls !== 0) throw new CvmAttestationError("report_data", "the report data does not bind this TLS public key");
  if (sealing !== 0) throw new CvmAttestationError("report_data", "the report data does not bind this sealing key");
}

/** The two halves in hex, as published next to the evidence. */
export function describeReportData(reportData: Uint8Array): { tls_public_key_sha256: string; sealing_key_sha256: string } {
  ensure(reportData.length === REPORT_DATA_LENGTH, "report_data_length", `report data is ${reportData.length} bytes`);
  return {
    tls_public_key_sha256: Buffer.from(reportData.subarray(0, 32)).toString("hex"),
    sealing_key_sha256: Buffer.from(reportData.subarray(32)).toString("hex"),
  };
}
