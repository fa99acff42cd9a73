/**
 * Verifier for SEV-SNP evidence (and for `dev` evidence, which has the same shape under a development root).
 *
 * Steps of verify(evidence, endorsements, expected), in this order; the first failure throws
 * CvmAttestationError naming the check:
 *   1. Parse the report (snp-report.ts): report_size, report_version, signature_algorithm, signature_format.
 *   2. The report is signed by a VCEK (SIGNING_KEY = 0); VLEK-signed reports are not supported: signing_key.
 *   3. Certificate chain VCEK -> ASK -> ARK against the verifier's roots at the injected clock (snp-chain.ts).
 *   4. The VCEK was issued for this chip and TCB: hardware id = CHIP_ID (vcek_chip_id), SPLs = REPORTED_TCB
 *      (vcek_tcb).
 *   5. ECDSA P-384 / SHA-384 signature over bytes 0x000..0x29F by the VCEK key; r and s are stored
 *      little-endian in the report and converted; high-S signatures are accepted (firmware does not
 *      normalise): report_signature.
 *   6. Guest policy: DEBUG (bit 19) clear: policy_debug; MIGRATE_MA (bit 18) clear: policy_migration; when
 *      SMT is not allowed, policy bit 16 and PLATFORM_INFO.SMT_EN clear: policy_smt.
 *   7. VMPL equals the expected level (default 0): vmpl.
 *   8. REPORTED_TCB at least the optional minimum, component by component: minimum_tcb.
 *   9. MEASUREMENT equals the expected 48 bytes: measurement.
 *  10. REPORT_DATA equals the expected 64 bytes: report_data.
 * Byte comparisons are constant-time.
 *
 * Modes: a production verifier accepts only AMD's pinned ARK keys as roots and refuses `dev` evidence
 * (dev_root_in_production); `tdx` evidence is not verified yet (platform_unsupported).
 */

import { p384 } from "@noble/curves/nist.js";
import { isPinnedAmdArk, type SnpRoot } from "./amd-roots.ts";
import { CvmAttestationError, ensure } from "./errors.ts";
import type { CoordinatorEvidence } from "./evidence-source.ts";
import { readVcekExtensions, type VerifiedSnpChain, verifySnpChain } from "./snp-chain.ts";
import {
  parseSnpReport,
  SNP_PLATFORM_INFO_SMT_EN,
  SNP_POLICY_DEBUG,
  SNP_POLICY_MIGRATE_MA,
  SNP_POLICY_SMT,
  SNP_SIGNING_KEY_VCEK,
  type SnpReport,
  type TcbVersion,
} from "./snp-report.ts";

export type VerifierMode = "production" | "development";

export interface SnpVerifierOptions {
  /** Trusted roots: loadAmdRoots() in production; a development chain's roots in development. */
  readonly roots: readonly SnpRoot[];
  readonly mode: VerifierMode;
  /** Time for certificate validity, Unix milliseconds. */
  readonly clock?: { now(): number };
}

export interface SnpExpectations {
  /** The build's expected launch measurement, 48 bytes. */
  readonly measurement: Uint8Array;
  /** The expected report data, 64 bytes (report-data.ts). */
  readonly reportData: Uint8Array;
  /** Whether the guest may run with simultaneous multithreading. */
  readonly allowSmt: boolean;
  /** The VMPL the report must come from; default 0. */
  readonly vmpl?: number;
  /** Lowest acceptable REPORTED_TCB, per component. */
  readonly minimumTcb?: TcbVersion;
}

export interface SnpVerification {
  readonly report: SnpReport;
  readonly chain: VerifiedSnpChain;
}

export interface SnpVerifier {
  readonly mode: VerifierMode;
  /** Verifies a raw report and its endorsements; throws CvmAttestationError (see header). */
  verify(evidence: Uint8Array, endorsements: readonly Uint8Array[], expected: SnpExpectations): Promise<SnpVerification>;
  /** Dispatches on the platform: sev-snp, dev (development mode only); tdx throws platform_unsupported. */
  verifyEvidence(evidence: CoordinatorEvidence, expected: SnpExpectations): Promise<SnpVerification>;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

const sameTcb = (a: TcbVersion, b: TcbVersion) =>
  a.bootloader === b.bootloader && a.tee === b.tee && a.snp === b.snp && a.microcode === b.microcode;
const tcbText = (t: TcbVersion) => `bl=${t.bootloader} tee=${t.tee} snp=${t.snp} ucode=${t.microcode}`;

function verifyReportSignature(report: SnpReport, vcekPublicKey: Uint8Array): void {
  const signature = new Uint8Array(96);
  signature.set(report.signature.r, 0);
  signature.set(report.signature.s, 48);
  let ok = false;
  try {
    ok = p384.verify(signature, report.signedBytes, vcekPublicKey, { lowS: false, prehash: true });
  } catch {
    ok = false;
  }
  ensure(ok, "report_signature", "the report signature does not verify under the VCEK key");
}

function checkPolicy(report: SnpReport, expected: SnpExpectations): void {
  ensure((report.policy & SNP_POLICY_DEBUG) === 0n, "policy_debug", "guest policy allows debugging (bit 19)");
  ensure((report.policy & SNP_POLICY_MIGRATE_MA) === 0n, "policy_migration", "guest policy allows a migration agent (bit 18)");
  if (!expected.allowSmt) {
    ensure((report.policy & SNP_POLICY_SMT) === 0n, "policy_smt", "guest policy allows SMT (bit 16) but SMT is not allowed");
    ensure((report.platformInfo & SNP_PLATFORM_INFO_SMT_EN) === 0n, "policy_smt", "the platform runs with SMT enabled");
  }
  const vmpl = expected.vmpl ?? 0;
  ensure(report.vmpl === vmpl, "vmpl", `report requested from VMPL ${report.vmpl}, expected ${vmpl}`);
  const min = expected.minimumTcb;
  if (min) {
    const t = report.reportedTcb;
    ensure(
      t.bootloader >= min.bootloader && t.tee >= min.tee && t.snp >= min.snp && t.microcode >= min.microcode,
      "minimum_tcb",
      `reported TCB ${tcbText(t)} is below the minimum ${tcbText(min)}`,
    );
  }
  ensure(expected.measurement.length === 48, "measurement", "the expected measurement must be 48 bytes");
  ensure(sameBytes(report.measurement, expected.measurement), "measurement", "the launch measurement differs from the expected build");
  ensure(expected.reportData.length === 64, "report_data", "the expected report data must be 64 bytes");
  ensure(sameBytes(report.reportData, expected.reportData), "report_data", "the report data differs from the expected keys");
}

/**
 * Creates a verifier. Throws CvmAttestationError roots_load (no roots) or dev_root_in_production (a root whose
 * ARK key is not AMD's, or flagged development, in production mode).
 */
export function createSnpVerifier(options: SnpVerifierOptions): SnpVerifier {
  const { roots, mode } = options;
  const clock = options.clock ?? { now: () => Date.now() };
  ensure(roots.length > 0, "roots_load", "no trusted roots");
  if (mode === "production") {
    for (const root of roots) {
      ensure(
        !root.development && isPinnedAmdArk(root.ark),
        "dev_root_in_production",
        `root ${root.name} is not one of AMD's pinned ARK keys; production mode refuses it`,
      );
    }
  }
  const frozenRoots = Object.freeze([...roots]);

  async function verify(evidence: Uint8Array, endorsements: readonly Uint8Array[], expected: SnpExpectations): Promise<SnpVerification> {
    const report = parseSnpReport(evidence);
    ensure(
      report.signingKey === SNP_SIGNING_KEY_VCEK,
      "signing_key",
      `report signed by key kind ${report.signingKey}; only VCEK (0) is supported`,
    );
    const chain = await verifySnpChain(endorsements, frozenRoots, clock.now());
    const ext = readVcekExtensions(chain.vcek);
    ensure(ext.hwid !== null && sameBytes(ext.hwid, report.chipId), "vcek_chip_id", "the VCEK was not issued for this chip id");
    ensure(ext.tcb !== null && sameTcb(ext.tcb, report.reportedTcb), "vcek_tcb", "the VCEK was not issued for the reported TCB");
    verifyReportSignature(report, chain.vcekPublicKey);
    checkPolicy(report, expected);
    return { report, chain };
  }

  return {
    mode,
    verify,
    async verifyEvidence(evidence, expected) {
      switch (evidence.platform) {
        case "sev-snp":
          return verify(evidence.evidence, evidence.endorsements, expected);
        case "dev":
          if (mode === "production") throw new CvmAttestationError("dev_root_in_production", "development evidence in production mode");
          return verify(evidence.evidence, evidence.endorsements, expected);
        case "tdx":
          throw new CvmAttestationError("platform_unsupported", "TDX quotes are not verified yet");
        default:
          throw new CvmAttestationError("platform_unsupported", "unknown platform");
      }
    },
  };
}
