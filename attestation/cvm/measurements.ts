/**
 * measurements.json: the expected SEV-SNP launch measurement of a published image, one per VM shape, and the
 * shapes file it is computed from. The one home of both formats (docs/security.md, image/README.md).
 *
 * Shapes file (input, committed next to the image build):
 *   { "policy": "0x30000",
 *     "shapes": [{ "name": "milan-2vcpu", "vcpus": 2, "cpu": "EPYC-Milan", "guest_features": "0x21" }, ...] }
 * measurements.json (output, published with the release):
 *   { "version": 1,
 *     "image": { "firmware_sha256", "kernel_sha256", "initrd_sha256", "cmdline", "cmdline_sha256" },
 *     "policy": "0x30000",
 *     "shapes": [{ "name", "vcpus", "cpu", "guest_features", "measurement": "<96 hex>" }, ...] }
 * Invariants: hashes are lowercase hex SHA-256 of the exact files given to QEMU (-bios, -kernel, -initrd);
 * `cmdline` is the -append text (UTF-8, no trailing newline) and `cmdline_sha256` the SHA-256 of those bytes;
 * `initrd_sha256` is null when there is no initrd. `policy` is the guest policy (hex, u64) the operator
 * launches with; it is not part of the measurement, so a verifier compares it with the report's POLICY, and
 * it must not allow debugging (bit 19) or a migration agent (bit 18). Shape names are unique, lowercase
 * [a-z0-9-]; `cpu` is a QEMU model name from SNP_CPU_SIGNATURES; `guest_features` is hex. Shapes keep the
 * order of the shapes file. Malformed files throw SnpMeasureError measurements_format.
 */

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import {
  type DirectBoot,
  isSnpCpuModel,
  measureSnpLaunch,
  SNP_CPU_SIGNATURES,
  type SnpCpuModel,
  SnpMeasureError,
  snpFirmwareDigest,
} from "./snp-measure.ts";
import { SNP_POLICY_DEBUG, SNP_POLICY_MIGRATE_MA } from "./snp-report.ts";

export interface VmShape {
  readonly name: string;
  readonly vcpus: number;
  readonly cpu: SnpCpuModel;
  /** Hex, e.g. "0x21". */
  readonly guest_features: string;
}

export interface ShapesFile {
  /** Hex guest policy, e.g. "0x30000". */
  readonly policy: string;
  readonly shapes: readonly VmShape[];
}

export interface MeasuredShape extends VmShape {
  /** 96 lowercase hex digits. */
  readonly measurement: string;
}

export interface MeasurementsFile {
  readonly version: 1;
  readonly image: {
    readonly firmware_sha256: string;
    readonly kernel_sha256: string;
    readonly initrd_sha256: string | null;
    readonly cmdline: string;
    readonly cmdline_sha256: string;
  };
  readonly policy: string;
  readonly shapes: readonly MeasuredShape[];
}

/** The image as launched: -bios, -kernel, -initrd (null: none), -append. */
export interface ImageInputs {
  readonly firmware: Uint8Array;
  readonly kernel: Uint8Array;
  readonly initrd: Uint8Array | null;
  readonly cmdline: string;
}

const HEX_U64 = /^0x[0-9a-f]{1,16}$/;
const SHAPE_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
const SHA256_HEX = /^[0-9a-f]{64}$/;
const MEASUREMENT_HEX = /^[0-9a-f]{96}$/;

const sha256Hex = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

function fail(message: string): never {
  throw new SnpMeasureError("measurements_format", message);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function readPolicy(v: unknown): string {
  if (typeof v !== "string" || !HEX_U64.test(v)) fail("policy: expected lowercase hex such as 0x30000");
  const policy = BigInt(v);
  if ((policy & SNP_POLICY_DEBUG) !== 0n) fail("policy allows debugging (bit 19)");
  if ((policy & SNP_POLICY_MIGRATE_MA) !== 0n) fail("policy allows a migration agent (bit 18)");
  return v;
}

function readShape(v: unknown, i: number): VmShape {
  if (!isObject(v)) fail(`shapes[${i}]: expected an object`);
  const { name, vcpus, cpu, guest_features } = v;
  if (typeof name !== "string" || !SHAPE_NAME.test(name)) fail(`shapes[${i}].name: expected lowercase letters, digits and '-'`);
  if (typeof vcpus !== "number" || !Number.isInteger(vcpus) || vcpus < 1 || vcpus > 512) fail(`shapes[${i}].vcpus: expected 1 to 512`);
  if (typeof cpu !== "string" || !isSnpCpuModel(cpu))
    fail(`shapes[${i}].cpu: expected one of ${Object.keys(SNP_CPU_SIGNATURES).join(", ")}`);
  if (typeof guest_features !== "string" || !HEX_U64.test(guest_features)) fail(`shapes[${i}].guest_features: expected hex such as 0x21`);
  return { name, vcpus, cpu, guest_features };
}

function readShapes(v: unknown): VmShape[] {
  if (!Array.isArray(v) || v.length === 0) fail("shapes: expected a non-empty array");
  const shapes = v.map(readShape);
  const names = new Set(shapes.map((s) => s.name));
  if (names.size !== shapes.length) fail("shapes: names must be unique");
  return shapes;
}

/** Validates a shapes file (parsed JSON). Throws SnpMeasureError measurements_format. */
export function parseShapesFile(json: unknown): ShapesFile {
  if (!isObject(json)) fail("expected a JSON object with policy and shapes");
  return { policy: readPolicy(json.policy), shapes: readShapes(json.shapes) };
}

/** Validates a measurements.json (parsed JSON). Throws SnpMeasureError measurements_format. */
export function parseMeasurementsFile(json: unknown): MeasurementsFile {
  if (!isObject(json)) fail("expected a JSON object");
  if (json.version !== 1) fail(`version: expected 1, got ${JSON.stringify(json.version)}`);
  const image = json.image;
  if (!isObject(image)) fail("image: expected an object");
  const hash = (key: string, nullable = false): string | null => {
    const h = image[key];
    if (nullable && h === null) return null;
    if (typeof h !== "string" || !SHA256_HEX.test(h)) fail(`image.${key}: expected 64 lowercase hex digits`);
    return h;
  };
  if (typeof image.cmdline !== "string") fail("image.cmdline: expected a string");
  const shapes = readShapes(json.shapes);
  const raw = json.shapes as unknown[];
  const measured = shapes.map((shape, i) => {
    const m = (raw[i] as Record<string, unknown>).measurement;
    if (typeof m !== "string" || !MEASUREMENT_HEX.test(m)) fail(`shapes[${i}].measurement: expected 96 lowercase hex digits`);
    return { ...shape, measurement: m };
  });
  return {
    version: 1,
    image: {
      firmware_sha256: hash("firmware_sha256") as string,
      kernel_sha256: hash("kernel_sha256") as string,
      initrd_sha256: hash("initrd_sha256", true),
      cmdline: image.cmdline,
      cmdline_sha256: hash("cmdline_sha256") as string,
    },
    policy: readPolicy(json.policy),
    shapes: measured,
  };
}

/** The launch measurement of one shape, 48 bytes. Throws SnpMeasureError (snp-measure.ts). */
function measureShape(image: ImageInputs, shape: VmShape, firmwareDigest?: Uint8Array): Uint8Array {
  const boot: DirectBoot = { kernel: image.kernel, initrd: image.initrd, cmdline: image.cmdline };
  return measureSnpLaunch({
    firmware: image.firmware,
    boot,
    vcpus: shape.vcpus,
    vcpuSignature: SNP_CPU_SIGNATURES[shape.cpu],
    guestFeatures: BigInt(shape.guest_features),
    ...(firmwareDigest ? { firmwareDigest } : {}),
  });
}

/** Computes measurements.json for every shape. Throws SnpMeasureError (snp-measure.ts, measurements_format). */
export function measureShapes(image: ImageInputs, shapesFile: ShapesFile): MeasurementsFile {
  const { policy, shapes } = parseShapesFile(shapesFile);
  const firmwareDigest = snpFirmwareDigest(image.firmware);
  return {
    version: 1,
    image: {
      firmware_sha256: sha256Hex(image.firmware),
      kernel_sha256: sha256Hex(image.kernel),
      initrd_sha256: image.initrd === null ? null : sha256Hex(image.initrd),
      cmdline: image.cmdline,
      cmdline_sha256: sha256Hex(Buffer.from(image.cmdline, "utf8")),
    },
    policy,
    shapes: shapes.map((shape) => ({
      ...shape,
      measurement: Buffer.from(measureShape(image, shape, firmwareDigest)).toString("hex"),
    })),
  };
}

// ---- what a verifier expects (verify-coordinator.ts, the provider tool's pin) -----------------------

export interface ExpectedImage {
  /** Published shapes and their measurements (96 hex digits each). */
  readonly shapes: readonly { readonly name: string; readonly measurement: string }[];
  /** The published policy, or null to check only debug / migration agent / VMPL. */
  readonly policy: bigint | null;
  /** Whether SMT may be on; default: what the published policy allows (bit 16), true without one. */
  readonly allowSmt?: boolean;
}

/** A measurements.json that cannot be read or used: `input` says which (the file or the shape), the message starts with it. */
export class ExpectedImageError extends Error {
  override readonly name = "ExpectedImageError";
  constructor(
    readonly input: "image" | "shape",
    message: string,
  ) {
    super(message);
  }
}

/** The expectations of the measurements.json at `path`, narrowed to `shape` if given. Throws ExpectedImageError. */
export function loadExpectedImage(path: string, shape?: string): ExpectedImage {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new ExpectedImageError("image", `${path}: cannot read it (${(e as NodeJS.ErrnoException).code ?? "error"})`);
  }
  let file: MeasurementsFile;
  try {
    file = parseMeasurementsFile(JSON.parse(text));
  } catch (e) {
    if (e instanceof SyntaxError) throw new ExpectedImageError("image", `${path}: not JSON`);
    throw new ExpectedImageError("image", `${path}: ${(e as Error).message}`);
  }
  if (shape !== undefined && !file.shapes.some((s) => s.name === shape)) {
    throw new ExpectedImageError("shape", `${shape}: not in ${path} (${file.shapes.map((s) => s.name).join(", ")})`);
  }
  return expectedFromMeasurements(file, shape);
}

/** The expectations of a measurements.json, optionally narrowed to one shape (the caller checks the name exists). */
function expectedFromMeasurements(file: MeasurementsFile, shape?: string): ExpectedImage {
  const shapes = file.shapes.filter((s) => shape === undefined || s.name === shape);
  return { shapes: shapes.map((s) => ({ name: s.name, measurement: s.measurement })), policy: BigInt(file.policy) };
}
