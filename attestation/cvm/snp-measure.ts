/**
 * SEV-SNP launch digest (the report's MEASUREMENT) for QEMU direct boot with kernel hashes, computed from
 * the bytes an operator launches: firmware, kernel, initrd, command line, vCPU count, CPU model, guest
 * features. Pure: bytes in, 48 bytes out. Algorithm from the AMD SEV-SNP ABI spec (SNP_LAUNCH_UPDATE,
 * PAGE_INFO) and QEMU's launch sequence; cross-checked against virtee/sev-snp-measure's published vectors.
 *
 * The digest chain: LD starts as 48 zero bytes; every launch update sets LD = SHA-384(PAGE_INFO), where
 * PAGE_INFO (0x70 bytes, little-endian) is
 *   0x00 48 B  LD so far          0x30 48 B  contents: SHA-384 of the page (NORMAL, VMSA), else zeros
 *   0x60 u16   0x0070             0x62 u8    page type: 1 NORMAL, 2 VMSA, 3 ZERO, 4 UNMEASURED, 5 SECRETS, 6 CPUID
 *   0x63 u8    is_imi = 0         0x64 4 B   VMPL permissions, 0      0x68 u64  GPA (VMSA: 0xFFFFFFFFF000)
 * Updates, in order:
 *   1. Firmware: mapped to end at 4 GiB (gpa0 = 2^32 - length); one NORMAL update per 4 KiB page. The
 *      whole file is measured (a stateless `-bios` image). `firmwareDigest` may give this LD precomputed.
 *   2. Firmware metadata sections, in the order the firmware lists them (not sorted):
 *      SNP_SEC_MEM (1) ZERO pages, SECRETS (2) one SECRETS page, CPUID (3) one CPUID page, SVSM_CAA (4)
 *      ZERO pages, SNP_KERNEL_HASHES (0x10) one NORMAL page: zeros with the hashes table at
 *      (hashes GPA & 0xfff); without direct boot, ZERO pages instead.
 *   3. One VMSA page per vCPU: vCPU 0 starts at EIP 0xfffffff0, the others at the firmware's SEV-ES reset
 *      vector; RDX holds the vCPU signature (CPUID(1).EAX of -cpu), SEV_FEATURES the guest features.
 * Firmware layout (OVMF footer table, "ASEV" metadata sections): read by ovmf.ts.
 * Hashes table (QEMU's PaddedSevHashTable): GUID 9438d606-..., u16 168, then {GUID, u16 50, SHA-256} for
 * the command line (bytes + NUL), the initrd (empty when none) and the kernel; zero-padded to 176 bytes.
 * Other VMMs (`ec2`, `gce`) differ in initial registers and section handling; kept for the reference
 * vectors only. Every malformed input throws SnpMeasureError with its `reason`; nothing is guessed.
 */

import { createHash } from "node:crypto";
import { ensure, guidBytes, type OvmfLayout, PAGE, parseOvmf, SNP_SECTION_TYPES, type SnpMetadataSection } from "./ovmf.ts";

// The measurement's error: thrown here and by the firmware parsing alike.
export { SnpMeasureError, type SnpMeasureReason } from "./ovmf.ts";

/** CPUID(1).EAX of QEMU's CPU models: what QEMU puts in RDX of every VMSA. */
export const SNP_CPU_SIGNATURES = Object.freeze({
  "EPYC-v4": 0x800f12,
  "EPYC-Milan": 0xa00f11,
  "EPYC-Genoa": 0xa10f10,
  "EPYC-Turin": 0xb00f00,
} as const);
export type SnpCpuModel = keyof typeof SNP_CPU_SIGNATURES;

export function isSnpCpuModel(name: string): name is SnpCpuModel {
  return Object.hasOwn(SNP_CPU_SIGNATURES, name);
}

/** The VMM whose launch sequence is reproduced. Only `qemu` is ours; the others match reference vectors. */
export type SnpVmm = "qemu" | "ec2" | "gce";

/** What QEMU hashes with kernel-hashes=on. */
export interface DirectBoot {
  /** The file given to -kernel, as is. */
  readonly kernel: Uint8Array;
  /** The file given to -initrd; null when none. */
  readonly initrd: Uint8Array | null;
  /** The -append text; null or "" when none. */
  readonly cmdline: string | null;
}

export interface SnpMeasureInputs {
  readonly firmware: Uint8Array;
  /** Null: no direct boot (the kernel-hashes section is measured as zero pages). */
  readonly boot: DirectBoot | null;
  readonly vcpus: number;
  /** CPUID(1).EAX, e.g. SNP_CPU_SIGNATURES["EPYC-Milan"]. */
  readonly vcpuSignature: number;
  /** SEV_FEATURES of the VMSA: 0x1 (SNPActive) or 0x21 (+DebugSwap, the default of Linux >= 6.6). */
  readonly guestFeatures: bigint;
  readonly vmm?: SnpVmm;
  /** The firmware pages' digest precomputed (snpFirmwareDigest); the firmware is then read for metadata only. */
  readonly firmwareDigest?: Uint8Array;
}

const VMSA_GPA = 0xfffffffff000n;
const BSP_EIP = 0xfffffff0;
const HASHES_TABLE_SIZE = 168;
const HASHES_TABLE_PADDED = 176;

const PageType = { Normal: 1, Vmsa: 2, Zero: 3, Unmeasured: 4, Secrets: 5, Cpuid: 6 } as const;
type PageType = (typeof PageType)[keyof typeof PageType];

/** The GUIDs of QEMU's hashes table and its entries. */
const GUID = {
  hashesTable: "9438d606-4f22-4cc9-b479-a793d411fd21",
  cmdline: "97d02dd8-bd20-4c94-aa78-e7714d36ab2a",
  initrd: "44baf731-3a2f-4bd7-9af1-41e29169781d",
  kernel: "4de79437-abd2-427f-b835-d5b172d2045b",
} as const;

const sha384 = (bytes: Uint8Array) => new Uint8Array(createHash("sha384").update(bytes).digest());
const sha256 = (bytes: Uint8Array) => new Uint8Array(createHash("sha256").update(bytes).digest());

/** The launch-digest chain (LD), one PAGE_INFO at a time. */
class LaunchDigest {
  private ld: Uint8Array;
  private readonly info = new Uint8Array(0x70);
  private readonly view = new DataView(this.info.buffer);

  constructor(seed: Uint8Array = new Uint8Array(48)) {
    this.ld = seed;
  }

  get digest(): Uint8Array {
    return this.ld;
  }

  update(type: PageType, gpa: bigint, contents: Uint8Array | null): void {
    this.info.fill(0);
    this.info.set(this.ld, 0);
    if (contents) this.info.set(contents, 0x30);
    this.view.setUint16(0x60, 0x70, true);
    this.view.setUint8(0x62, type);
    this.view.setBigUint64(0x68, gpa, true);
    this.ld = sha384(this.info);
  }

  normalPages(gpa: number, data: Uint8Array): void {
    for (let off = 0; off < data.length; off += PAGE) {
      this.update(PageType.Normal, BigInt(gpa + off), sha384(data.subarray(off, off + PAGE)));
    }
  }

  emptyPages(type: typeof PageType.Zero | typeof PageType.Unmeasured, gpa: number, size: number): void {
    for (let off = 0; off < size; off += PAGE) this.update(type, BigInt(gpa + off), null);
  }
}

/** The SHA-384 launch digest after the firmware pages alone (step 1): the "OVMF hash". */
export function snpFirmwareDigest(firmware: Uint8Array): Uint8Array {
  const layout = parseOvmf(firmware);
  const ld = new LaunchDigest();
  ld.normalPages(layout.gpa, firmware);
  return ld.digest;
}

/** QEMU's padded SEV hashes table (176 bytes). */
export function snpHashesTable(boot: DirectBoot): Uint8Array {
  const table = new Uint8Array(HASHES_TABLE_PADDED);
  const view = new DataView(table.buffer);
  table.set(guidBytes(GUID.hashesTable), 0);
  view.setUint16(16, HASHES_TABLE_SIZE, true);
  const cmdline = Buffer.concat([Buffer.from(boot.cmdline ?? "", "utf8"), Buffer.from([0])]);
  const entries: [string, Uint8Array][] = [
    [GUID.cmdline, sha256(cmdline)],
    [GUID.initrd, sha256(boot.initrd ?? new Uint8Array(0))],
    [GUID.kernel, sha256(boot.kernel)],
  ];
  let at = 18;
  for (const [guid, hash] of entries) {
    table.set(guidBytes(guid), at);
    view.setUint16(at + 16, 50, true);
    table.set(hash, at + 18);
    at += 50;
  }
  return table;
}

function vmsaPage(eip: number, vcpuSignature: number, guestFeatures: bigint, vmm: SnpVmm): Uint8Array {
  const page = new Uint8Array(PAGE);
  const v = new DataView(page.buffer);
  const segment = (at: number, selector: number, attrib: number, limit: number, base: bigint) => {
    v.setUint16(at, selector, true);
    v.setUint16(at + 2, attrib, true);
    v.setUint32(at + 4, limit, true);
    v.setBigUint64(at + 8, base, true);
  };
  const bsp = eip === BSP_EIP;
  const qemu = vmm === "qemu";
  // es, cs, ss, ds, fs, gs, gdtr, ldtr, idtr, tr
  segment(0x00, 0, 0x93, 0xffff, 0n);
  segment(0x10, 0xf000, vmm === "ec2" && bsp ? 0x9a : 0x9b, 0xffff, BigInt((eip & 0xffff0000) >>> 0));
  segment(0x20, 0, vmm === "ec2" ? 0x92 : 0x93, 0xffff, 0n);
  segment(0x30, 0, 0x93, 0xffff, 0n);
  segment(0x40, 0, 0x93, 0xffff, 0n);
  segment(0x50, 0, 0x93, 0xffff, 0n);
  segment(0x60, 0, 0, 0xffff, 0n);
  segment(0x70, 0, 0x82, 0xffff, 0n);
  segment(0x80, 0, 0, 0xffff, 0n);
  segment(0x90, 0, vmm === "ec2" ? 0x83 : 0x8b, 0xffff, 0n);
  v.setBigUint64(0xd0, 0x1000n, true); // EFER.SVME
  v.setBigUint64(0x148, 0x40n, true); // CR4.MCE
  v.setBigUint64(0x158, 0x10n, true); // CR0.ET
  v.setBigUint64(0x160, 0x400n, true); // DR7
  v.setBigUint64(0x168, 0xffff0ff0n, true); // DR6
  v.setBigUint64(0x170, 0x2n, true); // RFLAGS
  v.setBigUint64(0x178, BigInt(eip & 0xffff), true); // RIP
  v.setBigUint64(0x268, vmm === "gce" ? 0x00070106n : 0x0007040600070406n, true); // G_PAT
  v.setBigUint64(0x310, BigInt(qemu ? vcpuSignature : 0x600), true); // RDX
  v.setBigUint64(0x3b0, guestFeatures, true); // SEV_FEATURES
  v.setBigUint64(0x3e8, 1n, true); // XCR0
  if (qemu) {
    v.setUint32(0x408, 0x1f80, true); // MXCSR
    v.setUint16(0x410, 0x37f, true); // x87 FCW
  }
  return page;
}

function hashesPage(layout: OvmfLayout, section: SnpMetadataSection, boot: DirectBoot): Uint8Array {
  const gpa = layout.hashesTableGpa;
  ensure(gpa !== null, "hashes_table", "the firmware has a kernel-hashes section but no hashes-table GPA");
  const offset = gpa % PAGE;
  ensure(
    section.size === PAGE && gpa - offset === section.gpa && offset + HASHES_TABLE_PADDED <= PAGE,
    "hashes_table",
    "the hashes-table GPA does not lie in the firmware's one-page kernel-hashes section",
  );
  const page = new Uint8Array(PAGE);
  page.set(snpHashesTable(boot), offset);
  return page;
}

/**
 * The launch digest (48 bytes) the hardware reports as MEASUREMENT for these inputs. Throws SnpMeasureError:
 * the parseOvmf reasons; no_kernel_hashes_section (direct boot with a firmware that cannot measure it);
 * vcpus (not 1..512); vcpu_signature; guest_features (not a u64); reset_vector (several vCPUs, none given);
 * firmware_digest (not 48 bytes).
 */
export function measureSnpLaunch(inputs: SnpMeasureInputs): Uint8Array {
  const vmm = inputs.vmm ?? "qemu";
  ensure(
    Number.isInteger(inputs.vcpus) && inputs.vcpus >= 1 && inputs.vcpus <= 512,
    "vcpus",
    `vCPU count ${inputs.vcpus}; expected 1 to 512`,
  );
  ensure(
    Number.isInteger(inputs.vcpuSignature) && inputs.vcpuSignature >= 0 && inputs.vcpuSignature <= 0xffffffff,
    "vcpu_signature",
    "the vCPU signature must be a 32-bit value",
  );
  ensure(inputs.guestFeatures >= 0n && inputs.guestFeatures < 1n << 64n, "guest_features", "guest features must be a 64-bit value");
  const layout = parseOvmf(inputs.firmware);
  const sections = layout.sections;
  if (inputs.boot !== null) {
    ensure(
      sections.some((s) => s.type === SNP_SECTION_TYPES.SNP_KERNEL_HASHES),
      "no_kernel_hashes_section",
      "a kernel is given but the firmware's metadata has no SNP kernel-hashes section",
    );
  }
  ensure(inputs.vcpus === 1 || layout.resetVector !== null, "reset_vector", "several vCPUs but the firmware has no SEV-ES reset vector");

  let ld: LaunchDigest;
  if (inputs.firmwareDigest) {
    ensure(inputs.firmwareDigest.length === 48, "firmware_digest", "the firmware digest must be 48 bytes (SHA-384)");
    ld = new LaunchDigest(inputs.firmwareDigest);
  } else {
    ld = new LaunchDigest();
    ld.normalPages(layout.gpa, inputs.firmware);
  }

  for (const section of sections) {
    switch (section.type) {
      case SNP_SECTION_TYPES.SNP_SEC_MEM:
        ld.emptyPages(vmm === "gce" ? PageType.Unmeasured : PageType.Zero, section.gpa, section.size);
        break;
      case SNP_SECTION_TYPES.SNP_SECRETS:
        ld.update(PageType.Secrets, BigInt(section.gpa), null);
        break;
      case SNP_SECTION_TYPES.CPUID:
        if (vmm !== "ec2") ld.update(PageType.Cpuid, BigInt(section.gpa), null);
        break;
      case SNP_SECTION_TYPES.SVSM_CAA:
        ld.emptyPages(PageType.Zero, section.gpa, section.size);
        break;
      case SNP_SECTION_TYPES.SNP_KERNEL_HASHES:
        if (inputs.boot === null) ld.emptyPages(PageType.Zero, section.gpa, section.size);
        else ld.normalPages(section.gpa, hashesPage(layout, section, inputs.boot));
        break;
    }
  }
  if (vmm === "ec2") {
    // EC2 measures the CPUID pages after every other section.
    for (const section of sections) {
      if (section.type === SNP_SECTION_TYPES.CPUID) ld.update(PageType.Cpuid, BigInt(section.gpa), null);
    }
  }

  const bsp = sha384(vmsaPage(BSP_EIP, inputs.vcpuSignature, inputs.guestFeatures, vmm));
  const ap = layout.resetVector === null ? bsp : sha384(vmsaPage(layout.resetVector, inputs.vcpuSignature, inputs.guestFeatures, vmm));
  for (let i = 0; i < inputs.vcpus; i++) ld.update(PageType.Vmsa, VMSA_GPA, i === 0 ? bsp : ap);
  return ld.digest;
}
