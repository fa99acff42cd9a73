/**
 * The OVMF firmware layout the SEV-SNP launch measurement needs (snp-measure.ts), read from the
 * firmware file: no I/O, bytes in, an OvmfLayout out.
 *
 * Firmware layout (OVMF): a GUIDed table ends 32 bytes before the end of the file; its last entry (the
 * footer, GUID 96b582de-...) gives the table's size; entries are `data || u16 size || GUID (mixed-endian)`
 * read backwards. Needed: the hashes-table GPA (7255371f-...), the reset vector (00f771de-...), and the
 * offset from the end of the file of the "ASEV" metadata: {u32 size, u32 version 1, u32 count} then
 * `count` x {u32 gpa, u32 size, u32 type}. The firmware is mapped to end at 4 GiB (gpa = 2^32 - length).
 * Every malformed input throws SnpMeasureError with its `reason` (shared with snp-measure.ts); nothing is
 * guessed.
 */

export type SnpMeasureReason =
  | "firmware_size"
  | "footer_table"
  | "metadata"
  | "reset_vector"
  | "hashes_table"
  | "no_kernel_hashes_section"
  | "vcpus"
  | "vcpu_signature"
  | "guest_features"
  | "firmware_digest"
  | "measurements_format";

export class SnpMeasureError extends Error {
  override readonly name = "SnpMeasureError";
  constructor(
    readonly reason: SnpMeasureReason,
    message: string,
  ) {
    super(message);
  }
}

export function ensure(ok: boolean, reason: SnpMeasureReason, message: string): asserts ok {
  if (!ok) throw new SnpMeasureError(reason, message);
}

export const PAGE = 4096;
const FOUR_GIB = 2 ** 32;

export const SNP_SECTION_TYPES = Object.freeze({
  SNP_SEC_MEM: 1,
  SNP_SECRETS: 2,
  CPUID: 3,
  SVSM_CAA: 4,
  SNP_KERNEL_HASHES: 0x10,
} as const);

/** The firmware's footer-table GUIDs. */
const GUID = {
  footer: "96b582de-1fb2-45f7-baea-a366c55a082d",
  hashesTableGpa: "7255371f-3a3b-4b04-927b-1da6efa8d454",
  resetVector: "00f771de-1a7e-4fcb-890e-68c77e2fb44e",
  metadata: "dc886566-984a-4798-a75e-5585a7bf67cc",
} as const;

/** A GUID in its mixed-endian byte form (the first three groups little-endian), as edk2 and QEMU store it. */
export function guidBytes(guid: string): Uint8Array {
  const h = guid.replaceAll("-", "");
  const be = Buffer.from(h, "hex");
  const out = new Uint8Array(16);
  out.set([be[3]!, be[2]!, be[1]!, be[0]!, be[5]!, be[4]!, be[7]!, be[6]!], 0);
  out.set(be.subarray(8), 8);
  return out;
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b));

export interface SnpMetadataSection {
  readonly gpa: number;
  readonly size: number;
  readonly type: number;
}

/** What the measurement needs from the firmware file. */
export interface OvmfLayout {
  /** GPA of the first firmware byte: 2^32 - length. */
  readonly gpa: number;
  /** GPA where QEMU writes the hashes table; null when the firmware has none. */
  readonly hashesTableGpa: number | null;
  /** EIP of the application processors; null when the firmware has none. */
  readonly resetVector: number | null;
  readonly sections: readonly SnpMetadataSection[];
}

function readFooterTable(fw: Uint8Array): Map<string, Uint8Array> {
  const view = new DataView(fw.buffer, fw.byteOffset, fw.byteLength);
  const entryHeader = 18;
  const footerAt = fw.length - 32 - entryHeader;
  ensure(footerAt >= 0, "footer_table", "the firmware is too short to hold a footer table");
  ensure(
    sameBytes(fw.subarray(footerAt + 2, footerAt + entryHeader), guidBytes(GUID.footer)),
    "footer_table",
    "the firmware has no OVMF footer table (footer GUID not found 50 bytes before the end)",
  );
  const tableSize = view.getUint16(footerAt, true) - entryHeader;
  ensure(tableSize >= 0 && footerAt - tableSize >= 0, "footer_table", "the footer table's size is out of range");
  const table = new Map<string, Uint8Array>();
  let end = footerAt;
  const start = footerAt - tableSize;
  while (end - start >= entryHeader) {
    const size = view.getUint16(end - entryHeader, true);
    ensure(size >= entryHeader && end - size >= start, "footer_table", `a footer table entry has an invalid size (${size})`);
    const guid = Buffer.from(fw.subarray(end - 16, end)).toString("hex");
    table.set(guid, fw.subarray(end - size, end - entryHeader));
    end -= size;
  }
  return table;
}

function u32Entry(table: Map<string, Uint8Array>, guid: string, reason: SnpMeasureReason, what: string): number | null {
  const data = table.get(Buffer.from(guidBytes(guid)).toString("hex"));
  if (data === undefined) return null;
  ensure(data.length >= 4, reason, `the footer table's ${what} entry is shorter than 4 bytes`);
  return new DataView(data.buffer, data.byteOffset, data.byteLength).getUint32(0, true);
}

/**
 * Reads the footer table and the SEV metadata. Throws SnpMeasureError: firmware_size (empty, not whole
 * pages, over 4 GiB), footer_table, metadata (missing, bad signature, version, bounds, unknown section
 * type, unaligned section), reset_vector, hashes_table.
 */
export function parseOvmf(firmware: Uint8Array): OvmfLayout {
  ensure(
    firmware.length > 0 && firmware.length % PAGE === 0 && firmware.length <= FOUR_GIB,
    "firmware_size",
    `the firmware is ${firmware.length} bytes; expected a non-empty whole number of 4 KiB pages`,
  );
  const table = readFooterTable(firmware);
  const offsetFromEnd = u32Entry(table, GUID.metadata, "metadata", "SEV metadata");
  ensure(offsetFromEnd !== null, "metadata", "the firmware has no SEV metadata (not an SEV-SNP firmware)");
  const start = firmware.length - offsetFromEnd;
  ensure(offsetFromEnd >= 16 && start >= 0, "metadata", "the SEV metadata offset is out of range");
  const view = new DataView(firmware.buffer, firmware.byteOffset, firmware.byteLength);
  ensure(
    Buffer.from(firmware.subarray(start, start + 4)).toString("latin1") === "ASEV",
    "metadata",
    "the SEV metadata has no ASEV signature",
  );
  const size = view.getUint32(start + 4, true);
  const version = view.getUint32(start + 8, true);
  const count = view.getUint32(start + 12, true);
  ensure(version === 1, "metadata", `SEV metadata version ${version}; expected 1`);
  ensure(size >= 16 + 12 * count && start + size <= firmware.length, "metadata", "the SEV metadata's size is out of range");
  const known = new Set<number>(Object.values(SNP_SECTION_TYPES));
  const sections: SnpMetadataSection[] = [];
  for (let i = 0; i < count; i++) {
    const at = start + 16 + 12 * i;
    const section = { gpa: view.getUint32(at, true), size: view.getUint32(at + 4, true), type: view.getUint32(at + 8, true) };
    ensure(known.has(section.type), "metadata", `SEV metadata section ${i} has unknown type ${section.type}`);
    ensure(
      section.gpa % PAGE === 0 && section.size % PAGE === 0 && section.size > 0,
      "metadata",
      `SEV metadata section ${i} is not whole 4 KiB pages`,
    );
    sections.push(section);
  }
  return {
    gpa: FOUR_GIB - firmware.length,
    hashesTableGpa: u32Entry(table, GUID.hashesTableGpa, "hashes_table", "hashes table") || null,
    resetVector: u32Entry(table, GUID.resetVector, "reset_vector", "SEV-ES reset vector") || null,
    sections,
  };
}
