/**
 * AMD SEV-SNP attestation report: parsing and encoding (AMD SEV-SNP ABI specification, publication 56860,
 * ATTESTATION_REPORT structure, report versions 2 and 3).
 *
 * Wire format: exactly 0x4A0 (1184) bytes. Integers are little-endian. The firmware signs bytes
 * 0x000..0x29F (672 bytes) with ECDSA P-384 / SHA-384 (the VCEK, or a VLEK); the signature follows.
 *
 *   off    size  field                 notes
 *   0x000  4     VERSION               2 or 3 accepted; anything else is refused
 *   0x004  4     GUEST_SVN
 *   0x008  8     POLICY                guest policy, bits below
 *   0x010  16    FAMILY_ID
 *   0x020  16    IMAGE_ID
 *   0x030  4     VMPL                  privilege level that requested the report
 *   0x034  4     SIGNATURE_ALGO        1 = ECDSA P-384 with SHA-384 (the only value accepted)
 *   0x038  8     CURRENT_TCB           TCB_VERSION, layout below
 *   0x040  8     PLATFORM_INFO         bit 0 SMT enabled, bit 1 TSME enabled, ...
 *   0x048  4     flags                 bit 0 AUTHOR_KEY_EN, bit 1 MASK_CHIP_ID, bits 4:2 SIGNING_KEY
 *                                      (0 = VCEK, 1 = VLEK, 7 = none)
 *   0x04C  4     reserved
 *   0x050  64    REPORT_DATA           chosen by the guest (report-data.ts)
 *   0x090  48    MEASUREMENT           launch digest
 *   0x0C0  32    HOST_DATA
 *   0x0E0  48    ID_KEY_DIGEST
 *   0x110  48    AUTHOR_KEY_DIGEST
 *   0x140  32    REPORT_ID
 *   0x160  32    REPORT_ID_MA
 *   0x180  8     REPORTED_TCB          the TCB the VCEK was derived from
 *   0x188  1+1+1 CPUID_FAM_ID, CPUID_MOD_ID, CPUID_STEP (version 3; reserved in version 2)
 *   0x18B  21    reserved
 *   0x1A0  64    CHIP_ID               zero when MASK_CHIP_ID is set
 *   0x1E0  8     COMMITTED_TCB
 *   0x1E8  1+1+1 CURRENT_BUILD, CURRENT_MINOR, CURRENT_MAJOR (+1 reserved)
 *   0x1EC  1+1+1 COMMITTED_BUILD, COMMITTED_MINOR, COMMITTED_MAJOR (+1 reserved)
 *   0x1F0  8     LAUNCH_TCB
 *   0x1F8  168   reserved
 *   0x2A0  72    SIGNATURE R           little-endian, zero-extended: bytes 48..71 must be zero
 *   0x2E8  72    SIGNATURE S           little-endian, zero-extended: bytes 48..71 must be zero
 *   0x330  368   reserved (not signed, ignored)
 *
 * TCB_VERSION (Milan, Genoa), one byte each: [0] BOOT_LOADER, [1] TEE, [2..5] reserved, [6] SNP,
 * [7] MICROCODE. POLICY: bits 7:0 ABI_MINOR, 15:8 ABI_MAJOR, 16 SMT allowed, 17 reserved (must be 1),
 * 18 MIGRATE_MA, 19 DEBUG, 20 SINGLE_SOCKET.
 *
 * Invariants: parseSnpReport never reads outside the buffer it checked; encodeSnpReport(parse(x)) gives
 * back the signed bytes of x (reserved bytes are written as zero).
 */

import { CvmAttestationError, ensure } from "./errors.ts";

export const SNP_REPORT_SIZE = 0x4a0;
/** Length of the signed prefix: bytes 0x000..0x29F. */
export const SNP_SIGNED_LENGTH = 0x2a0;
export const SNP_SIGNATURE_ALGO_ECDSA_P384_SHA384 = 1;
const SNP_SUPPORTED_VERSIONS: readonly number[] = [2, 3];

export const SNP_POLICY_SMT = 1n << 16n;
export const SNP_POLICY_MIGRATE_MA = 1n << 18n;
export const SNP_POLICY_DEBUG = 1n << 19n;
const SNP_POLICY_SINGLE_SOCKET = 1n << 20n;
export const SNP_PLATFORM_INFO_SMT_EN = 1n << 0n;

export const SNP_SIGNING_KEY_VCEK = 0;

const OFF = {
  version: 0x000,
  guestSvn: 0x004,
  policy: 0x008,
  familyId: 0x010,
  imageId: 0x020,
  vmpl: 0x030,
  signatureAlgo: 0x034,
  currentTcb: 0x038,
  platformInfo: 0x040,
  flags: 0x048,
  reportData: 0x050,
  measurement: 0x090,
  hostData: 0x0c0,
  idKeyDigest: 0x0e0,
  authorKeyDigest: 0x110,
  reportId: 0x140,
  reportIdMa: 0x160,
  reportedTcb: 0x180,
  cpuid: 0x188,
  chipId: 0x1a0,
  committedTcb: 0x1e0,
  currentVersion: 0x1e8,
  committedVersion: 0x1ec,
  launchTcb: 0x1f0,
  signatureR: 0x2a0,
  signatureS: 0x2e8,
} as const;

const SIGNATURE_COMPONENT_FIELD = 72;
const P384_SCALAR = 48;

const FIXED_LENGTHS = {
  familyId: 16,
  imageId: 16,
  reportData: 64,
  measurement: 48,
  hostData: 32,
  idKeyDigest: 48,
  authorKeyDigest: 48,
  reportId: 32,
  reportIdMa: 32,
  chipId: 64,
} as const;

export interface TcbVersion {
  bootloader: number;
  tee: number;
  snp: number;
  microcode: number;
}

export interface FirmwareVersion {
  major: number;
  minor: number;
  build: number;
}

export interface CpuId {
  family: number;
  model: number;
  stepping: number;
}

/** Every field of the signed part of a report. */
export interface SnpReportBody {
  version: number;
  guestSvn: number;
  policy: bigint;
  familyId: Uint8Array;
  imageId: Uint8Array;
  vmpl: number;
  signatureAlgorithm: number;
  currentTcb: TcbVersion;
  platformInfo: bigint;
  authorKeyEnabled: boolean;
  maskChipId: boolean;
  /** 0 = VCEK, 1 = VLEK, 7 = none. */
  signingKey: number;
  reportData: Uint8Array;
  measurement: Uint8Array;
  hostData: Uint8Array;
  idKeyDigest: Uint8Array;
  authorKeyDigest: Uint8Array;
  reportId: Uint8Array;
  reportIdMa: Uint8Array;
  reportedTcb: TcbVersion;
  /** Version 3 and later; null in version 2. */
  cpuid: CpuId | null;
  chipId: Uint8Array;
  committedTcb: TcbVersion;
  currentVersion: FirmwareVersion;
  committedVersion: FirmwareVersion;
  launchTcb: TcbVersion;
}

export interface SnpReport extends SnpReportBody {
  /** r and s as 48-byte big-endian integers (converted from the report's little-endian fields). */
  signature: { r: Uint8Array; s: Uint8Array };
  /** A copy of bytes 0x000..0x29F, the exact bytes the signature covers. */
  signedBytes: Uint8Array;
}

export interface SnpPolicy {
  abiMinor: number;
  abiMajor: number;
  smtAllowed: boolean;
  migrateMa: boolean;
  debug: boolean;
  singleSocket: boolean;
}

export function decodePolicy(policy: bigint): SnpPolicy {
  return {
    abiMinor: Number(policy & 0xffn),
    abiMajor: Number((policy >> 8n) & 0xffn),
    smtAllowed: (policy & SNP_POLICY_SMT) !== 0n,
    migrateMa: (policy & SNP_POLICY_MIGRATE_MA) !== 0n,
    debug: (policy & SNP_POLICY_DEBUG) !== 0n,
    singleSocket: (policy & SNP_POLICY_SINGLE_SOCKET) !== 0n,
  };
}

function decodeTcb(b: Uint8Array, at: number): TcbVersion {
  return { bootloader: b[at]!, tee: b[at + 1]!, snp: b[at + 6]!, microcode: b[at + 7]! };
}

function encodeTcb(b: Uint8Array, at: number, tcb: TcbVersion): void {
  b[at] = byte(tcb.bootloader);
  b[at + 1] = byte(tcb.tee);
  b[at + 6] = byte(tcb.snp);
  b[at + 7] = byte(tcb.microcode);
}

function byte(n: number): number {
  if (!Number.isInteger(n) || n < 0 || n > 255) throw new RangeError(`not a byte: ${n}`);
  return n;
}

/** Little-endian zero-extended 72-byte field -> 48-byte big-endian scalar; throws signature_format. */
function scalarFromField(b: Uint8Array, at: number, name: string): Uint8Array {
  for (let i = at + P384_SCALAR; i < at + SIGNATURE_COMPONENT_FIELD; i++) {
    ensure(b[i] === 0, "signature_format", `signature ${name} has non-zero bytes above 48`);
  }
  return b.slice(at, at + P384_SCALAR).reverse();
}

/**
 * Parses a report. Throws CvmAttestationError: report_size (not exactly 0x4A0 bytes), report_version (not 2
 * or 3), signature_algorithm (not ECDSA P-384/SHA-384), signature_format (r or s wider than 48 bytes).
 * Checks nothing else: use verifySnpReport for trust decisions.
 */
export function parseSnpReport(bytes: Uint8Array): SnpReport {
  ensure(bytes.length === SNP_REPORT_SIZE, "report_size", `report is ${bytes.length} bytes, expected ${SNP_REPORT_SIZE}`);
  const b = bytes.slice();
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const version = v.getUint32(OFF.version, true);
  ensure(SNP_SUPPORTED_VERSIONS.includes(version), "report_version", `report version ${version} is not supported`);
  const signatureAlgorithm = v.getUint32(OFF.signatureAlgo, true);
  ensure(
    signatureAlgorithm === SNP_SIGNATURE_ALGO_ECDSA_P384_SHA384,
    "signature_algorithm",
    `signature algorithm ${signatureAlgorithm} is not ECDSA P-384 with SHA-384`,
  );
  const flags = v.getUint32(OFF.flags, true);
  const field = (name: keyof typeof FIXED_LENGTHS) => b.slice(OFF[name], OFF[name] + FIXED_LENGTHS[name]);
  return {
    version,
    guestSvn: v.getUint32(OFF.guestSvn, true),
    policy: v.getBigUint64(OFF.policy, true),
    familyId: field("familyId"),
    imageId: field("imageId"),
    vmpl: v.getUint32(OFF.vmpl, true),
    signatureAlgorithm,
    currentTcb: decodeTcb(b, OFF.currentTcb),
    platformInfo: v.getBigUint64(OFF.platformInfo, true),
    authorKeyEnabled: (flags & 1) !== 0,
    maskChipId: (flags & 2) !== 0,
    signingKey: (flags >> 2) & 7,
    reportData: field("reportData"),
    measurement: field("measurement"),
    hostData: field("hostData"),
    idKeyDigest: field("idKeyDigest"),
    authorKeyDigest: field("authorKeyDigest"),
    reportId: field("reportId"),
    reportIdMa: field("reportIdMa"),
    reportedTcb: decodeTcb(b, OFF.reportedTcb),
    cpuid: version >= 3 ? { family: b[OFF.cpuid]!, model: b[OFF.cpuid + 1]!, stepping: b[OFF.cpuid + 2]! } : null,
    chipId: field("chipId"),
    committedTcb: decodeTcb(b, OFF.committedTcb),
    currentVersion: { build: b[OFF.currentVersion]!, minor: b[OFF.currentVersion + 1]!, major: b[OFF.currentVersion + 2]! },
    committedVersion: { build: b[OFF.committedVersion]!, minor: b[OFF.committedVersion + 1]!, major: b[OFF.committedVersion + 2]! },
    launchTcb: decodeTcb(b, OFF.launchTcb),
    signature: { r: scalarFromField(b, OFF.signatureR, "r"), s: scalarFromField(b, OFF.signatureS, "s") },
    signedBytes: b.slice(0, SNP_SIGNED_LENGTH),
  };
}

/**
 * Encodes the signed part of a report into a 0x4A0-byte buffer with a zero signature (for the development
 * source and tests). Throws RangeError on a field of the wrong length or an out-of-range integer.
 */
export function encodeSnpReport(body: SnpReportBody): Uint8Array {
  const b = new Uint8Array(SNP_REPORT_SIZE);
  const v = new DataView(b.buffer);
  v.setUint32(OFF.version, body.version, true);
  v.setUint32(OFF.guestSvn, body.guestSvn, true);
  v.setBigUint64(OFF.policy, body.policy, true);
  v.setUint32(OFF.vmpl, body.vmpl, true);
  v.setUint32(OFF.signatureAlgo, body.signatureAlgorithm, true);
  encodeTcb(b, OFF.currentTcb, body.currentTcb);
  v.setBigUint64(OFF.platformInfo, body.platformInfo, true);
  if (!Number.isInteger(body.signingKey) || body.signingKey < 0 || body.signingKey > 7) {
    throw new RangeError(`signing key ${body.signingKey} is not a 3-bit value`);
  }
  v.setUint32(OFF.flags, (body.authorKeyEnabled ? 1 : 0) | (body.maskChipId ? 2 : 0) | (body.signingKey << 2), true);
  for (const name of Object.keys(FIXED_LENGTHS) as (keyof typeof FIXED_LENGTHS)[]) {
    const value = body[name];
    if (value.length !== FIXED_LENGTHS[name]) throw new RangeError(`${name} must be ${FIXED_LENGTHS[name]} bytes, got ${value.length}`);
    b.set(value, OFF[name]);
  }
  encodeTcb(b, OFF.reportedTcb, body.reportedTcb);
  if (body.cpuid) {
    b[OFF.cpuid] = byte(body.cpuid.family);
    b[OFF.cpuid + 1] = byte(body.cpuid.model);
    b[OFF.cpuid + 2] = byte(body.cpuid.stepping);
  }
  encodeTcb(b, OFF.committedTcb, body.committedTcb);
  for (const [at, fw] of [
    [OFF.currentVersion, body.currentVersion],
    [OFF.committedVersion, body.committedVersion],
  ] as const) {
    b[at] = byte(fw.build);
    b[at + 1] = byte(fw.minor);
    b[at + 2] = byte(fw.major);
  }
  encodeTcb(b, OFF.launchTcb, body.launchTcb);
  return b;
}

/**
 * Returns a copy of `report` (0x4A0 bytes) with the signature fields set from big-endian r and s of at most
 * 48 bytes each. Throws CvmAttestationError report_size, or RangeError for a wider scalar.
 */
export function withSnpSignature(report: Uint8Array, r: Uint8Array, s: Uint8Array): Uint8Array {
  if (report.length !== SNP_REPORT_SIZE) throw new CvmAttestationError("report_size", `report is ${report.length} bytes`);
  const out = report.slice();
  for (const [at, scalar] of [
    [OFF.signatureR, r],
    [OFF.signatureS, s],
  ] as const) {
    if (scalar.length > P384_SCALAR) throw new RangeError("signature scalar wider than 48 bytes");
    out.fill(0, at, at + SIGNATURE_COMPONENT_FIELD);
    out.set(scalar.slice().reverse(), at);
  }
  return out;
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/** A JSON-ready view of a report (hex for bytes, decimal strings for 64-bit fields), for auditors and fixtures. */
export function describeSnpReport(report: SnpReport) {
  return {
    version: report.version,
    guest_svn: report.guestSvn,
    policy: `0x${report.policy.toString(16)}`,
    policy_decoded: decodePolicy(report.policy),
    family_id: hex(report.familyId),
    image_id: hex(report.imageId),
    vmpl: report.vmpl,
    signature_algorithm: report.signatureAlgorithm,
    current_tcb: report.currentTcb,
    platform_info: `0x${report.platformInfo.toString(16)}`,
    author_key_enabled: report.authorKeyEnabled,
    mask_chip_id: report.maskChipId,
    signing_key: report.signingKey,
    report_data: hex(report.reportData),
    measurement: hex(report.measurement),
    host_data: hex(report.hostData),
    id_key_digest: hex(report.idKeyDigest),
    author_key_digest: hex(report.authorKeyDigest),
    report_id: hex(report.reportId),
    report_id_ma: hex(report.reportIdMa),
    reported_tcb: report.reportedTcb,
    cpuid: report.cpuid,
    chip_id: hex(report.chipId),
    committed_tcb: report.committedTcb,
    current_version: report.currentVersion,
    committed_version: report.committedVersion,
    launch_tcb: report.launchTcb,
    signature: { r: hex(report.signature.r), s: hex(report.signature.s) },
  };
}
