/**
 * The provider's modules: `umbra-provider` imports the attestation modules it uses (evidence, challenges,
 * posture, the software identity), not attestation/provider/index.ts, whose verification side brings
 * @peculiar/x509 and its ASN.1 schemas (about 200 modules, 2 MB of heap that every garbage collection of
 * the provider would walk). Checked in a fresh process of the CLI, whose modules a preload lists at exit;
 * the same run with the barrel imported finds @peculiar/x509 (the check can fail). The coordinator pin's
 * verification (--coordinator-image) still loads it, on use.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "../../..");

/** The node_modules packages `umbra-provider --version` loaded, with `extra` preloaded before it. */
async function packagesLoaded(extra: string | undefined): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), "umbra-provider-modules-"));
  try {
    const list = join(dir, "list.ts");
    writeFileSync(
      list,
      `process.on("exit", () => {
        const packages = new Set(Object.keys(require.cache).map((k) => k.match(/node_modules\\/((@[^/]+\\/)?[^/]+)/)?.[1]).filter(Boolean));
        console.error("PACKAGES " + JSON.stringify([...packages].sort()));
      });\n`,
    );
    const preloads = ["--preload", list, ...(extra ? ["--preload", extra] : [])];
    const proc = Bun.spawn([process.execPath, ...preloads, join(ROOT, "src/provider/main.ts"), "--version"], {
      cwd: tmpdir(),
      stdout: "pipe",
      stderr: "pipe",
    });
    const err = await new Response(proc.stderr).text();
    expect(await proc.exited, err).toBe(0);
    const line = err.split("\n").find((l) => l.startsWith("PACKAGES ")) ?? "PACKAGES null";
    return JSON.parse(line.slice("PACKAGES ".length)) as string[];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("umbra-provider's modules", () => {
  test("no @peculiar/x509 (nor its ASN.1 schemas) in the CLI's static graph", async () => {
    const packages = await packagesLoaded(undefined);
    expect(packages).toContain("@hpke/core"); // the list is real
    expect(packages.filter((p) => p.startsWith("@peculiar/") || p === "tsyringe")).toEqual([]);
  });

  test("the same check finds @peculiar/x509 once the attestation barrel is imported", async () => {
    const packages = await packagesLoaded(join(ROOT, "attestation/provider/index.ts"));
    expect(packages).toContain("@peculiar/x509");
  });
});
