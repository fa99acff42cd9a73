/**
 * The development evidence source (platform `dev`): builds a SEV-SNP-shaped report (version 3) with the
 * requested report data and the configured measurement, signed by a locally generated development VCEK
 * (dev-chain.ts), and hands out that chain as endorsements.
 *
 * The same verifier checks it, given the source's roots explicitly and mode "development". Production refuses
 * it twice: a production verifier refuses roots that are not AMD's pinned keys, and refuses `dev` evidence.
 * `development` is true on the source and on its root so that wiring code can refuse it at start-up.
 *
 * Report defaults: policy 0x30000 (ABI 0.0, SMT allowed, reserved bit 17 set; no debug, no migration agent),
 * platform info 0x1 (SMT enabled), VMPL 0, signing key VCEK, all TCBs = the chain's TCB, random report id.
 */

import type { SnpRoot } from "./amd-roots.ts";
import { createDevChain, type DevChain, signSnpReport } from "./dev-chain.ts";
import { type CoordinatorEvidence, checkReportDataLength, type EvidenceSource } from "./evidence-source.ts";
import { encodeSnpReport, SNP_SIGNATURE_ALGO_ECDSA_P384_SHA384, type SnpReportBody } from "./snp-report.ts";

const DEV_DEFAULT_POLICY = 0x30000n;
const DEV_DEFAULT_PLATFORM_INFO = 0x1n;

export interface DevSource extends EvidenceSource {
  readonly platform: "dev";
  readonly development: true;
  /** The roots a development verifier is given. */
  readonly roots: readonly SnpRoot[];
  readonly chain: DevChain;
}

export interface DevSourceOptions {
  /** The launch measurement to report (48 bytes): the build's expected measurement in development. */
  readonly measurement: Uint8Array;
  /** A chain to sign with; generated when absent. */
  readonly chain?: DevChain;
  /** Fields to override in every report (tests). */
  readonly overrides?: Partial<SnpReportBody>;
}

/** The body of a development report for `chain`; `overrides` replace any field. */
export function devReportBody(
  chain: DevChain,
  measurement: Uint8Array,
  reportData: Uint8Array,
  overrides: Partial<SnpReportBody> = {},
): SnpReportBody {
  const zeros = (n: number) => new Uint8Array(n);
  return {
    version: 3,
    guestSvn: 0,
    policy: DEV_DEFAULT_POLICY,
    familyId: zeros(16),
    imageId: zeros(16),
    vmpl: 0,
    signatureAlgorithm: SNP_SIGNATURE_ALGO_ECDSA_P384_SHA384,
    currentTcb: chain.tcb,
    platformInfo: DEV_DEFAULT_PLATFORM_INFO,
    authorKeyEnabled: false,
    maskChipId: false,
    signingKey: 0,
    reportData,
    measurement,
    hostData: zeros(32),
    idKeyDigest: zeros(48),
    authorKeyDigest: zeros(48),
    reportId: crypto.getRandomValues(new Uint8Array(32)),
    reportIdMa: new Uint8Array(32).fill(0xff),
    reportedTcb: chain.tcb,
    cpuid: { family: 0x19, model: 0x01, stepping: 0x01 },
    chipId: chain.chipId,
    committedTcb: chain.tcb,
    currentVersion: { major: 1, minor: 55, build: 0 },
    committedVersion: { major: 1, minor: 55, build: 0 },
    launchTcb: chain.tcb,
    ...overrides,
  };
}

/** Creates a development source. Throws RangeError when the measurement is not 48 bytes. */
export async function createDevSource(options: DevSourceOptions): Promise<DevSource> {
  if (options.measurement.length !== 48) throw new RangeError(`measurement must be 48 bytes, got ${options.measurement.length}`);
  const measurement = options.measurement.slice();
  const chain = options.chain ?? (await createDevChain());
  return {
    platform: "dev",
    development: true,
    roots: [chain.root],
    chain,
    async get(reportData: Uint8Array): Promise<CoordinatorEvidence> {
      checkReportDataLength(reportData);
      const body = devReportBody(chain, measurement, reportData.slice(), options.overrides);
      const evidence = await signSnpReport(encodeSnpReport(body), chain.vcekKeys.privateKey);
      return { platform: "dev", evidence, endorsements: chain.endorsements.map((c) => c.slice()) };
    },
  };
}
