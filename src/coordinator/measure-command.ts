/**
 * `umbra-coordinator measure`: the SEV-SNP launch measurement of an image (attestation/cvm/snp-measure.ts).
 *
 *   measure --firmware F --kernel K [--initrd I] [--cmdline TEXT|@FILE] --vcpus N --cpu MODEL --guest-features X [--json]
 *     prints the 96-hex-digit measurement (or one JSON object with --json)
 *   measure --firmware F --kernel K [--initrd I] [--cmdline TEXT|@FILE] --shapes FILE [--out FILE]
 *     computes every shape of a shapes file into measurements.json (attestation/cvm/measurements.ts), on
 *     stdout or into --out
 * `--cmdline @FILE` reads the file and drops its trailing newlines (as `-append "$(cat FILE)"` does).
 * Without --kernel the firmware is measured as booted without direct boot (no --initrd, no --cmdline).
 * Exit codes: 0 ok; 1 the inputs cannot be measured (SnpMeasureError: its reason and message); 2 bad usage.
 */

import { readFileSync, writeFileSync } from "node:fs";
import { type ParseArgsConfig, parseArgs } from "node:util";
import { type ImageInputs, measureShapes, parseShapesFile } from "../../attestation/cvm/measurements.ts";
import { isSnpCpuModel, measureSnpLaunch, SNP_CPU_SIGNATURES, SnpMeasureError } from "../../attestation/cvm/snp-measure.ts";
import { UsageError } from "../admin/admin-cli.ts";

const MEASURE_USAGE = `usage:
  umbra-coordinator measure --firmware F --kernel K [--initrd I] [--cmdline TEXT|@FILE]
                            --vcpus N --cpu MODEL --guest-features HEX [--json]
  umbra-coordinator measure --firmware F --kernel K [--initrd I] [--cmdline TEXT|@FILE] --shapes FILE [--out FILE]
CPU models: ${Object.keys(SNP_CPU_SIGNATURES).join(", ")}`;

export interface CommandIo {
  readonly print: (text: string) => void;
  readonly printErr: (text: string) => void;
}

const OPTIONS = {
  firmware: { type: "string" },
  kernel: { type: "string" },
  initrd: { type: "string" },
  cmdline: { type: "string" },
  vcpus: { type: "string" },
  cpu: { type: "string" },
  "guest-features": { type: "string" },
  shapes: { type: "string" },
  out: { type: "string" },
  json: { type: "boolean" },
} as const;

function readFile(path: string, what: string): Uint8Array {
  try {
    return new Uint8Array(readFileSync(path));
  } catch (e) {
    throw new UsageError(`--${what}: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? "error"})`);
  }
}

/** The -append text: TEXT, or @FILE's content without trailing newlines. */
function readCmdline(value: string | undefined): string {
  if (value === undefined) return "";
  if (!value.startsWith("@")) return value;
  return Buffer.from(readFile(value.slice(1), "cmdline"))
    .toString("utf8")
    .replace(/\n+$/, "");
}

function parseHex(value: string | undefined, flag: string): bigint {
  if (value === undefined || !/^0x[0-9a-fA-F]{1,16}$/.test(value)) throw new UsageError(`--${flag}: expected hex such as 0x21`);
  return BigInt(value);
}

/** Strict flag parsing without positionals; a bad flag is a UsageError carrying `usage`. */
function parseCommandFlags<O extends NonNullable<ParseArgsConfig["options"]>>(argv: readonly string[], options: O, usage: string) {
  try {
    return parseArgs({ args: [...argv], options, strict: true, allowPositionals: false }).values;
  } catch (e) {
    throw new UsageError(`${(e as Error).message}\n${usage}`);
  }
}

export async function runMeasure(argv: readonly string[], io: CommandIo): Promise<number> {
  const v = parseCommandFlags(argv, OPTIONS, MEASURE_USAGE);
  if (v.firmware === undefined) throw new UsageError(`--firmware is required\n${MEASURE_USAGE}`);
  if (v.kernel === undefined && (v.initrd !== undefined || v.cmdline !== undefined)) {
    throw new UsageError("--initrd and --cmdline need --kernel (direct boot)");
  }
  const firmware = readFile(v.firmware, "firmware");
  const initrd = v.initrd === undefined ? null : readFile(v.initrd, "initrd");
  const kernel = v.kernel === undefined ? null : readFile(v.kernel, "kernel");
  const cmdline = readCmdline(v.cmdline);
  try {
    if (v.shapes !== undefined) {
      for (const flag of ["vcpus", "cpu", "guest-features", "json"] as const) {
        if (v[flag] !== undefined) throw new UsageError(`--${flag} does not apply with --shapes (the shapes file names them)`);
      }
      if (kernel === null) throw new UsageError("--shapes needs --kernel: measurements.json describes a direct-boot image");
      let shapesJson: unknown;
      try {
        shapesJson = JSON.parse(Buffer.from(readFile(v.shapes, "shapes")).toString("utf8"));
      } catch (e) {
        if (e instanceof UsageError) throw e;
        throw new SnpMeasureError("measurements_format", `${v.shapes} is not JSON`);
      }
      const image: ImageInputs = { firmware, kernel, initrd, cmdline };
      const text = `${JSON.stringify(measureShapes(image, parseShapesFile(shapesJson)), null, 2)}\n`;
      if (v.out === undefined) io.print(text.trimEnd());
      else writeFileSync(v.out, text);
      return 0;
    }
    if (v.out !== undefined) throw new UsageError("--out applies with --shapes only");
    const vcpus = Number(v.vcpus);
    if (v.vcpus === undefined || !/^[0-9]+$/.test(v.vcpus)) throw new UsageError("--vcpus: expected a number of vCPUs");
    if (v.cpu === undefined || !isSnpCpuModel(v.cpu)) {
      throw new UsageError(`--cpu: expected one of ${Object.keys(SNP_CPU_SIGNATURES).join(", ")}`);
    }
    const guestFeatures = parseHex(v["guest-features"], "guest-features");
    const measurement = Buffer.from(
      measureSnpLaunch({
        firmware,
        boot: kernel === null ? null : { kernel, initrd, cmdline },
        vcpus,
        vcpuSignature: SNP_CPU_SIGNATURES[v.cpu],
        guestFeatures,
      }),
    ).toString("hex");
    if (v.json === true) {
      io.print(
        JSON.stringify({ measurement, vcpus, cpu: v.cpu, guest_features: `0x${guestFeatures.toString(16)}`, direct_boot: kernel !== null }),
      );
    } else {
      io.print(measurement);
    }
    return 0;
  } catch (e) {
    if (e instanceof SnpMeasureError) {
      io.printErr(`umbra-coordinator measure: ${e.reason}: ${e.message}`);
      return 1;
    }
    throw e;
  }
}
