/**
 * A measurements.json for tests (attestation/cvm/measurements.ts defines the format): the given shapes
 * and measurements over placeholder image digests, written to DIR/NAME; returns its path. Only the
 * shapes, their measurements and the policy matter to a verifier.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

export function writeMeasurements(
  dir: string,
  shapes: readonly { readonly name: string; readonly measurement: string }[],
  name = "measurements.json",
): string {
  const path = join(dir, name);
  const zero = "00".repeat(32);
  const image = { firmware_sha256: zero, kernel_sha256: zero, initrd_sha256: null, cmdline: "", cmdline_sha256: zero };
  const full = shapes.map((s) => ({ ...s, vcpus: 1, cpu: "EPYC-Milan", guest_features: "0x21" }));
  writeFileSync(path, JSON.stringify({ version: 1, image, policy: "0x30000", shapes: full }));
  return path;
}
