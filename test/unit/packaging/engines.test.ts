/**
 * The Node version package.json declares (`engines.node`, exactly ">=X.Y.Z") is the real minimum for installing
 * the locked dependencies: every package in package-lock.json admits it (so `npm ci` on that Node prints
 * no EBADENGINE warning), and at least one rejects the version just below it (so the figure is not lower
 * than it needs to be, nor higher). Node only runs npm here; Bun runs everything else. .ci/run checks the
 * lockfile itself with `npm ci --dry-run`.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dir, "..", "..", "..");
type Manifest = { engines?: { node?: string } };
type Lockfile = { packages: Record<string, Manifest & { version?: string }> };
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as Manifest;
const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")) as Lockfile;

/** The version just below `version` (20.19.0 -> 20.18.999999). */
function below(version: string): string {
  const [major, minor, patch] = version.split(".").map(Number) as [number, number, number];
  if (patch > 0) return `${major}.${minor}.${patch - 1}`;
  if (minor > 0) return `${major}.${minor - 1}.999999`;
  return `${major - 1}.999999.999999`;
}

function rejecting(version: string): string[] {
  const out: string[] = [];
  for (const [path, entry] of Object.entries(lock.packages)) {
    const range = entry.engines?.node;
    if (path === "" || typeof range !== "string") continue;
    if (!Bun.semver.satisfies(version, range)) out.push(`${path.replace(/^.*node_modules\//, "")}@${entry.version} (node ${range})`);
  }
  return out;
}

describe("engines.node", () => {
  test("is the highest Node minimum among the locked packages", () => {
    const declared = pkg.engines?.node ?? "";
    const parts = /^>=(\d+)(?:\.(\d+))?(?:\.(\d+))?$/.exec(declared) ?? [];
    const minimum = `${parts[1] ?? "0"}.${parts[2] ?? "0"}.${parts[3] ?? "0"}`;
    expect({
      declared,
      exact: declared === `>=${minimum}`,
      lockfileAgrees: lock.packages[""]?.engines?.node === declared,
      rejectingMinimum: rejecting(minimum),
      someRejectBelow: rejecting(below(minimum)).length > 0,
    }).toEqual({ declared, exact: true, lockfileAgrees: true, rejectingMinimum: [], someRejectBelow: true });
  });
});
