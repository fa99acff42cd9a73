/**
 * The SEV-SNP launch-digest calculator (attestation/cvm/snp-measure.ts) and measurements.json
 * (attestation/cvm/measurements.ts).
 *
 * Reference vectors: every case of ../shared/fixtures/sev-snp-measure/vectors.json (virtee/sev-snp-measure's
 * own test suite, with its two 4 KiB OVMF suffixes), read from `<repository>/../shared` or from
 * $UMBRA_SHARED_DIR (git worktrees live elsewhere); those tests skip, saying so, when the folder is absent.
 * The fixture files are never copied into this repository. Synthetic firmware built here covers the refusals
 * (truncated file, bad footer GUID, bad metadata) and the shapes file.
 */
import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { measureShapes, parseMeasurementsFile, parseShapesFile } from "../../../attestation/cvm/measurements.ts";
import { parseOvmf } from "../../../attestation/cvm/ovmf.ts";
import {
  measureSnpLaunch,
  SNP_CPU_SIGNATURES,
  type SnpCpuModel,
  SnpMeasureError,
  type SnpMeasureInputs,
  type SnpMeasureReason,
  type SnpVmm,
  snpFirmwareDigest,
  snpHashesTable,
} from "../../../attestation/cvm/snp-measure.ts";

const REPO = resolve(import.meta.dir, "../../..");
const SHARED = process.env.UMBRA_SHARED_DIR ?? join(REPO, "..", "shared");
const VECTORS_DIR = join(SHARED, "fixtures", "sev-snp-measure");
const HAVE_VECTORS = existsSync(join(VECTORS_DIR, "vectors.json"));
if (!HAVE_VECTORS) {
  console.log(`snp-measure: reference vectors skipped: ${VECTORS_DIR}/vectors.json is absent (set UMBRA_SHARED_DIR to the shared folder)`);
}

interface VectorCase {
  firmware: string;
  vcpus: number;
  vcpu_sig: SnpCpuModel | null;
  kernel: "empty" | null;
  initrd: "empty" | null;
  cmdline: string | null;
  guest_features: string;
  ovmf_hash_given?: boolean;
  vmm?: SnpVmm;
  expected?: string;
  error?: string;
}
interface Vectors {
  ovmf_hash: { firmware: string; expected: string };
  snp: VectorCase[];
  must_fail: VectorCase[];
}

const vectors: Vectors = HAVE_VECTORS
  ? (JSON.parse(readFileSync(join(VECTORS_DIR, "vectors.json"), "utf8")) as Vectors)
  : { ovmf_hash: { firmware: "", expected: "" }, snp: [], must_fail: [] };
const firmwareFile = (name: string) => new Uint8Array(readFileSync(join(VECTORS_DIR, name)));
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

function vectorInputs(c: VectorCase): SnpMeasureInputs {
  const empty = new Uint8Array(0);
  return {
    firmware: firmwareFile(c.firmware),
    boot: c.kernel === null ? null : { kernel: empty, initrd: c.initrd === null ? null : empty, cmdline: c.cmdline },
    vcpus: c.vcpus,
    vcpuSignature: c.vcpu_sig === null ? 0 : SNP_CPU_SIGNATURES[c.vcpu_sig],
    guestFeatures: BigInt(c.guest_features),
    vmm: c.vmm ?? "qemu",
    ...(c.ovmf_hash_given ? { firmwareDigest: new Uint8Array(Buffer.from(vectors.ovmf_hash.expected, "hex")) } : {}),
  };
}

/** Runs `fn` and returns the SnpMeasureError it throws (fails the test otherwise). */
function refusal(fn: () => unknown): { reason: SnpMeasureReason; message: string } {
  try {
    fn();
  } catch (e) {
    if (e instanceof SnpMeasureError) return { reason: e.reason, message: e.message };
    throw e;
  }
  throw new Error("expected an SnpMeasureError, nothing was thrown");
}

describe.skipIf(!HAVE_VECTORS)("virtee/sev-snp-measure reference vectors (../shared/fixtures/sev-snp-measure)", () => {
  test("the AmdSev suffix's footer table and SEV metadata", () => {
    expect(parseOvmf(firmwareFile("ovmf_AmdSev_suffix.bin"))).toEqual({
      gpa: 0xfffff000,
      hashesTableGpa: 0x810c00,
      resetVector: 0x80b004,
      sections: [
        { gpa: 0x800000, size: 0x9000, type: 1 },
        { gpa: 0x80a000, size: 0x3000, type: 1 },
        { gpa: 0x80d000, size: 0x1000, type: 2 },
        { gpa: 0x80e000, size: 0x1000, type: 3 },
        { gpa: 0x80f000, size: 0x1000, type: 4 },
        { gpa: 0x810000, size: 0x1000, type: 0x10 },
        { gpa: 0x811000, size: 0xf000, type: 1 },
      ],
    });
  });

  test("the firmware-only digest (OVMF hash)", () => {
    expect(hex(snpFirmwareDigest(firmwareFile(vectors.ovmf_hash.firmware)))).toBe(vectors.ovmf_hash.expected);
  });

  test.each(vectors.snp.map((c, i) => [i, c] as const))("case %d", (_i, c) => {
    expect(hex(measureSnpLaunch(vectorInputs(c)))).toBe(c.expected ?? "");
  });

  test.each(vectors.must_fail.map((c, i) => [i, c] as const))("refusal %d", (_i, c) => {
    expect(refusal(() => measureSnpLaunch(vectorInputs(c)))).toEqual({ reason: "no_kernel_hashes_section", message: c.error ?? "" });
  });
});

// ---- synthetic firmware -------------------------------------------------------------------------------------

function guidLe(guid: string): Uint8Array {
  const b = Buffer.from(guid.replaceAll("-", ""), "hex");
  return new Uint8Array([b[3]!, b[2]!, b[1]!, b[0]!, b[5]!, b[4]!, b[7]!, b[6]!, ...b.subarray(8)]);
}

interface Synthetic {
  footerGuid?: string;
  signature?: string;
  version?: number;
  sections?: readonly { gpa: number; size: number; type: number }[];
  metadataOffsetFromEnd?: number;
  hashesGpa?: number;
  entrySize?: number;
}

/** One 4 KiB page shaped like the end of an AmdSev OVMF: metadata at 0x100, footer table before the last 32 bytes. */
function syntheticFirmware(o: Synthetic = {}): Uint8Array {
  const fw = new Uint8Array(4096);
  const v = new DataView(fw.buffer);
  const sections = o.sections ?? [
    { gpa: 0x800000, size: 0x2000, type: 1 },
    { gpa: 0x802000, size: 0x1000, type: 2 },
    { gpa: 0x803000, size: 0x1000, type: 3 },
    { gpa: 0x804000, size: 0x1000, type: 0x10 },
  ];
  fw.set(Buffer.from(o.signature ?? "ASEV", "latin1"), 0x100);
  v.setUint32(0x104, 16 + 12 * sections.length, true);
  v.setUint32(0x108, o.version ?? 1, true);
  v.setUint32(0x10c, sections.length, true);
  sections.forEach((s, i) => {
    v.setUint32(0x110 + 12 * i, s.gpa, true);
    v.setUint32(0x114 + 12 * i, s.size, true);
    v.setUint32(0x118 + 12 * i, s.type, true);
  });
  const entries: [string, number][] = [
    ["dc886566-984a-4798-a75e-5585a7bf67cc", o.metadataOffsetFromEnd ?? 4096 - 0x100],
    ["00f771de-1a7e-4fcb-890e-68c77e2fb44e", 0x80100c],
    ["7255371f-3a3b-4b04-927b-1da6efa8d454", o.hashesGpa ?? 0x804c00],
  ];
  let end = 4096 - 32 - 18;
  v.setUint16(end, 18 + 22 * entries.length, true);
  fw.set(guidLe(o.footerGuid ?? "96b582de-1fb2-45f7-baea-a366c55a082d"), end + 2);
  for (const [guid, value] of entries) {
    v.setUint32(end - 22, value, true);
    v.setUint16(end - 18, o.entrySize ?? 22, true);
    fw.set(guidLe(guid), end - 16);
    end -= 22;
  }
  return fw;
}

const BOOT = { kernel: new Uint8Array([1, 2, 3]), initrd: new Uint8Array([4, 5]), cmdline: "console=ttyS0" };
const base = (o: Partial<SnpMeasureInputs> = {}): SnpMeasureInputs => ({
  firmware: syntheticFirmware(),
  boot: BOOT,
  vcpus: 2,
  vcpuSignature: SNP_CPU_SIGNATURES["EPYC-Milan"],
  guestFeatures: 0x21n,
  ...o,
});

describe("synthetic firmware", () => {
  test("every input changes the measurement", () => {
    const variants = [
      base(),
      base({ boot: { ...BOOT, kernel: new Uint8Array([1, 2, 4]) } }),
      base({ boot: { ...BOOT, initrd: null } }),
      base({ boot: { ...BOOT, cmdline: "console=ttyS1" } }),
      base({ boot: null }),
      base({ vcpus: 3 }),
      base({ vcpuSignature: SNP_CPU_SIGNATURES["EPYC-Genoa"] }),
      base({ guestFeatures: 0x1n }),
      base({ firmware: syntheticFirmware({ hashesGpa: 0x804d00 }) }),
    ].map((inputs) => hex(measureSnpLaunch(inputs)));
    expect(new Set(variants).size).toBe(variants.length);
    expect(hex(measureSnpLaunch(base()))).toBe(variants[0]!);
  });

  test("the hashes table: QEMU's layout, command line hashed with its NUL", () => {
    const sha = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex");
    const t = snpHashesTable(BOOT);
    expect({
      length: t.length,
      header: hex(t.subarray(0, 18)),
      cmdline: [hex(t.subarray(18, 36)), hex(t.subarray(36, 68))],
      initrd: [hex(t.subarray(68, 86)), hex(t.subarray(86, 118))],
      kernel: [hex(t.subarray(118, 136)), hex(t.subarray(136, 168))],
      padding: hex(t.subarray(168)),
    }).toEqual({
      length: 176,
      header: `${hex(guidLe("9438d606-4f22-4cc9-b479-a793d411fd21"))}a800`,
      cmdline: [`${hex(guidLe("97d02dd8-bd20-4c94-aa78-e7714d36ab2a"))}3200`, sha("console=ttyS0\0")],
      initrd: [`${hex(guidLe("44baf731-3a2f-4bd7-9af1-41e29169781d"))}3200`, sha(BOOT.initrd)],
      kernel: [`${hex(guidLe("4de79437-abd2-427f-b835-d5b172d2045b"))}3200`, sha(BOOT.kernel)],
      padding: "00".repeat(8),
    });
  });

  const truncated = syntheticFirmware().subarray(0, 4000);
  test.each([
    ["an empty file", new Uint8Array(0), "firmware_size"],
    ["a truncated file (not whole pages)", truncated, "firmware_size"],
    ["a page of zeros (no footer table)", new Uint8Array(4096), "footer_table"],
    ["a wrong footer GUID", syntheticFirmware({ footerGuid: "96b582de-1fb2-45f7-baea-a366c55a082e" }), "footer_table"],
    ["a table entry of impossible size", syntheticFirmware({ entrySize: 7 }), "footer_table"],
    ["metadata without its ASEV signature", syntheticFirmware({ signature: "ASEW" }), "metadata"],
    ["metadata version 2", syntheticFirmware({ version: 2 }), "metadata"],
    ["a metadata offset beyond the file", syntheticFirmware({ metadataOffsetFromEnd: 8192 }), "metadata"],
    ["an unknown section type", syntheticFirmware({ sections: [{ gpa: 0x800000, size: 0x1000, type: 7 }] }), "metadata"],
    ["a section that is not whole pages", syntheticFirmware({ sections: [{ gpa: 0x800000, size: 0x800, type: 1 }] }), "metadata"],
    ["a hashes GPA outside the kernel-hashes page", syntheticFirmware({ hashesGpa: 0x805c00 }), "hashes_table"],
    ["a hashes table that would cross the page", syntheticFirmware({ hashesGpa: 0x804fa0 }), "hashes_table"],
  ] as const)("refuses %s", (_what, firmware, reason) => {
    expect(refusal(() => measureSnpLaunch(base({ firmware }))).reason).toBe(reason);
  });

  test("refuses a kernel with a firmware that has no kernel-hashes section, and bad shapes of input", () => {
    const noHashes = syntheticFirmware({ sections: [{ gpa: 0x800000, size: 0x1000, type: 1 }] });
    expect(refusal(() => measureSnpLaunch(base({ firmware: noHashes })))).toEqual({
      reason: "no_kernel_hashes_section",
      message: "a kernel is given but the firmware's metadata has no SNP kernel-hashes section",
    });
    expect(hex(measureSnpLaunch(base({ firmware: noHashes, boot: null })))).toMatch(/^[0-9a-f]{96}$/);
    expect(
      [
        base({ vcpus: 0 }),
        base({ vcpuSignature: -1 }),
        base({ guestFeatures: 1n << 64n }),
        base({ firmwareDigest: new Uint8Array(47) }),
      ].map((inputs) => refusal(() => measureSnpLaunch(inputs)).reason),
    ).toEqual(["vcpus", "vcpu_signature", "guest_features", "firmware_digest"]);
  });
});

describe("measurements.json", () => {
  const milan = { name: "milan-2vcpu", vcpus: 2, cpu: "EPYC-Milan", guest_features: "0x21" } as const;
  const genoa = { name: "genoa-4vcpu", vcpus: 4, cpu: "EPYC-Genoa", guest_features: "0x1" } as const;
  const shapes = { policy: "0x30000", shapes: [milan, genoa] };
  const image = { firmware: syntheticFirmware(), ...BOOT };

  test("every shape measured as the calculator does, the image's hashes beside them; it reads back", () => {
    const sha = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex");
    const m = measureShapes(image, parseShapesFile(shapes));
    const one = (vcpus: number, sig: number, features: bigint) =>
      hex(measureSnpLaunch({ firmware: image.firmware, boot: BOOT, vcpus, vcpuSignature: sig, guestFeatures: features }));
    expect(m).toEqual({
      version: 1,
      image: {
        firmware_sha256: sha(image.firmware),
        kernel_sha256: sha(BOOT.kernel),
        initrd_sha256: sha(BOOT.initrd),
        cmdline: "console=ttyS0",
        cmdline_sha256: sha("console=ttyS0"),
      },
      policy: "0x30000",
      shapes: [
        { ...milan, measurement: one(2, 0xa00f11, 0x21n) },
        { ...genoa, measurement: one(4, 0xa10f10, 0x1n) },
      ],
    });
    expect(parseMeasurementsFile(JSON.parse(JSON.stringify(m)))).toEqual(m);
  });

  test.each([
    ["a debug policy", { ...shapes, policy: "0x80000" }],
    ["a migration-agent policy", { ...shapes, policy: "0x40000" }],
    ["an unknown CPU model", { ...shapes, shapes: [{ ...milan, cpu: "EPYC-Naples" }] }],
    ["duplicate names", { ...shapes, shapes: [milan, milan] }],
    ["no shapes", { ...shapes, shapes: [] }],
    ["zero vCPUs", { ...shapes, shapes: [{ ...milan, vcpus: 0 }] }],
  ])("a shapes file with %s is refused", (_what, file) => {
    expect(refusal(() => parseShapesFile(file)).reason).toBe("measurements_format");
  });

  test("a measurements.json with a short measurement or another version is refused", () => {
    const m = JSON.parse(JSON.stringify(measureShapes(image, parseShapesFile(shapes))));
    expect(refusal(() => parseMeasurementsFile({ ...m, version: 2 })).reason).toBe("measurements_format");
    m.shapes[1].measurement = "ab".repeat(47);
    expect(refusal(() => parseMeasurementsFile(m)).message).toBe("shapes[1].measurement: expected 96 lowercase hex digits");
  });
});
