/**
 * The VM image's checks (image/README.md), run by .ci/run as their own steps and here on request:
 * two builds in two folders give identical bytes (image/check/reproducible.sh, diffoscope on a
 * difference) and the TCG smoke boot (image/launch/qemu-smoke.sh: /healthz, /v1/attestation 503 with its
 * reason, nothing listening but the coordinator, no shell on the console). They download Debian packages
 * and take minutes, so `make test` skips them, saying so, unless UMBRA_IMAGE_CHECKS=1; they also skip on
 * a machine without the tools they need (apt-get for the inputs, QEMU and its firmware for the boot).
 */
import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "../..");
const WANTED = process.env.UMBRA_IMAGE_CHECKS === "1";
const onPath = (tool: string) => spawnSync("sh", ["-c", `command -v ${tool}`]).status === 0;
const HAS_APT = onPath("apt-get") && onPath("dpkg-deb");
const HAS_QEMU = onPath("qemu-system-x86_64");

function skipReason(needs: readonly [boolean, string][]): string | undefined {
  if (!WANTED) return "set UMBRA_IMAGE_CHECKS=1 to run the image checks (minutes, downloads; .ci/run runs them)";
  const missing = needs.filter(([present]) => !present).map(([, name]) => name);
  return missing.length > 0 ? `missing ${missing.join(", ")}` : undefined;
}

/** Runs one image script to its end; its output goes to the test log. */
function run(script: string, args: readonly string[] = []): { status: number | null; output: string } {
  const result = spawnSync(join(ROOT, script), args, { cwd: ROOT, encoding: "utf8", timeout: 20 * 60_000 });
  const output = `${result.stdout}${result.stderr}`;
  process.stdout.write(output);
  return { status: result.status, output };
}

describe("VM image", () => {
  const reproducible = skipReason([[HAS_APT, "apt-get/dpkg-deb (Debian)"]]);
  if (reproducible) console.log(`image reproducibility check skipped: ${reproducible}`);
  test.skipIf(reproducible !== undefined)(
    "two builds in two folders give identical bytes",
    () => {
      const { status, output } = run("image/check/reproducible.sh");
      expect({ status, identical: output.includes("two builds in two folders are identical") }).toEqual({ status: 0, identical: true });
    },
    25 * 60_000,
  );

  const built = existsSync(join(ROOT, "dist/image/initrd.cpio.zst")) && existsSync(join(ROOT, "dist/image/vmlinuz"));
  const smoke = skipReason([
    [HAS_QEMU, "qemu-system-x86_64 (make image-smoke installs it)"],
    [built, "dist/image (make image)"],
  ]);
  if (smoke) console.log(`image smoke boot skipped: ${smoke}`);
  test.skipIf(smoke !== undefined)(
    "the image boots under TCG: /healthz, /v1/attestation 503, only the coordinator listens, no shell",
    () => {
      const { status, output } = run("image/launch/qemu-smoke.sh", [join(ROOT, "dist/image")]);
      expect({ status, passed: /smoke: passed in \d+ s/.test(output) }).toEqual({ status: 0, passed: true });
    },
    10 * 60_000,
  );
});
