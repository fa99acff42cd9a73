/**
 * `umbra-coordinator measure`, run as a real process from source: hex and JSON output for the reference
 * vectors of ../shared/fixtures/sev-snp-measure (skipped, saying so, when absent; $UMBRA_SHARED_DIR points
 * elsewhere), `--cmdline @file`, `--shapes` into measurements.json, the refusal of a kernel with a firmware
 * that has no kernel-hashes section (exit 1, named reason), and bad usage (exit 2).
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { tempDir } from "../support/harness.ts";

const ROOT = resolve(import.meta.dir, "../..");
const BUN = join(ROOT, "node_modules/.bin/bun");
const VECTORS = join(process.env.UMBRA_SHARED_DIR ?? join(ROOT, "..", "shared"), "fixtures", "sev-snp-measure");
const HAVE_VECTORS = existsSync(join(VECTORS, "vectors.json"));
if (!HAVE_VECTORS) console.log(`measure CLI: reference vectors skipped: ${VECTORS} is absent (set UMBRA_SHARED_DIR)`);

async function measure(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn([BUN, "src/coordinator/main.ts", "measure", ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

describe.skipIf(!HAVE_VECTORS)("measure with the reference vectors", () => {
  const amdSev = join(VECTORS, "ovmf_AmdSev_suffix.bin");

  test("prints the measurement; --json; --cmdline @file drops the trailing newline", async () => {
    using dir = tempDir();
    const empty = join(dir.path, "empty");
    const cmdlineFile = join(dir.path, "cmdline.txt");
    writeFileSync(empty, "");
    writeFileSync(cmdlineFile, "console=ttyS0 loglevel=7\n");
    const common = [
      "--firmware",
      amdSev,
      "--kernel",
      empty,
      "--initrd",
      empty,
      "--vcpus",
      "1",
      "--cpu",
      "EPYC-v4",
      "--guest-features",
      "0x21",
    ];
    const expected = "803f691094946e42068aaa3a8f9e26a5c89f36f7b73ecfb28c653360fe4b3aba7e534442e7e1e17895dfe778d0228977";
    const runs = await Promise.all([
      measure([...common, "--cmdline", "console=ttyS0 loglevel=7"]),
      measure([...common, "--cmdline", `@${cmdlineFile}`, "--json"]),
    ]);
    expect(runs).toEqual([
      { code: 0, stdout: `${expected}\n`, stderr: "" },
      {
        code: 0,
        stdout: `${JSON.stringify({ measurement: expected, vcpus: 1, cpu: "EPYC-v4", guest_features: "0x21", direct_boot: true })}\n`,
        stderr: "",
      },
    ]);
  });

  test("without --kernel: no direct boot", async () => {
    expect(await measure(["--firmware", amdSev, "--vcpus", "1", "--cpu", "EPYC-v4", "--guest-features", "0x1"])).toEqual({
      code: 0,
      stdout: "19358ba9a7615534a9a1e2f0dfc29384dcd4dcb7062ff9c6013b26869a5fc6ecabe033c48dd6f6db5d6d76e7c5df632d\n",
      stderr: "",
    });
  });

  test("a kernel with a firmware without a kernel-hashes section is refused", async () => {
    using dir = tempDir();
    const empty = join(dir.path, "empty");
    writeFileSync(empty, "");
    const args = ["--firmware", join(VECTORS, "ovmf_OvmfX64_suffix.bin"), "--kernel", empty, "--vcpus", "1", "--cpu", "EPYC-v4"];
    expect(await measure([...args, "--guest-features", "0x21"])).toEqual({
      code: 1,
      stdout: "",
      stderr:
        "umbra-coordinator measure: no_kernel_hashes_section: a kernel is given but the firmware's metadata has no SNP kernel-hashes section\n",
    });
  });

  test("--shapes writes measurements.json, one measurement per shape", async () => {
    using dir = tempDir();
    const empty = join(dir.path, "empty");
    const shapes = join(dir.path, "shapes.json");
    const out = join(dir.path, "measurements.json");
    writeFileSync(empty, "");
    writeFileSync(
      shapes,
      JSON.stringify({
        policy: "0x30000",
        shapes: [
          { name: "v4-1vcpu", vcpus: 1, cpu: "EPYC-v4", guest_features: "0x21" },
          { name: "v4-4vcpu", vcpus: 4, cpu: "EPYC-v4", guest_features: "0x1" },
        ],
      }),
    );
    const run = await measure([
      "--firmware",
      amdSev,
      "--kernel",
      empty,
      "--initrd",
      empty,
      "--cmdline",
      "",
      "--shapes",
      shapes,
      "--out",
      out,
    ]);
    expect(run).toEqual({ code: 0, stdout: "", stderr: "" });
    const written = JSON.parse(readFileSync(out, "utf8")) as { shapes: { name: string; measurement: string }[] };
    expect(written.shapes.map((s) => [s.name, s.measurement])).toEqual([
      ["v4-1vcpu", "329c8ce0972ae52343b64d34a434a86f245dfd74f5ed7aae15d22efc78fb9683632b9b50e4e1d7fa41179ef98a7ef198"],
      ["v4-4vcpu", "5061fffb019493a903613d56d54b94912a1a2f9e4502385f5c194616753720a92441310ba6c4933de877c36e23046ad5"],
    ]);
  });
});

test("bad usage exits 2 and says what is wrong", async () => {
  const runs = await Promise.all([
    measure([]),
    measure(["--firmware", "/nonexistent/OVMF.fd"]),
    measure(["--firmware", "x", "--cpu", "EPYC-Naples", "--bogus"]),
  ]);
  expect(runs.map((r) => [r.code, r.stdout, r.stderr.split("\n")[0]])).toEqual([
    [2, "", "umbra-coordinator: --firmware is required"],
    [2, "", "umbra-coordinator: --firmware: cannot read /nonexistent/OVMF.fd (ENOENT)"],
    [2, "", expect.stringContaining("umbra-coordinator: Unknown option '--bogus'") as unknown as string],
  ]);
});
