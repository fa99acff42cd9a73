/**
 * The console's build (console/build.ts) names its files by their bytes only: two copies of console/ in
 * two folders give the same assets.js (the table the compiled binary embeds), so the coordinator binary
 * stays reproducible across checkouts (image/check/reproducible.sh). Bun's own [hash] also depended on the
 * folder. Copies live under the repository's .tmp/ so that the build still finds node_modules.
 */
import { afterAll, expect, test } from "bun:test";
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { BUN, ROOT } from "../support/processes.ts";

const base = join(ROOT, ".tmp", `console-build-${process.pid}`);
afterAll(() => rmSync(base, { recursive: true, force: true }));

function buildIn(folder: string): { table: string; files: string[] } {
  const dir = join(base, folder, "console");
  mkdirSync(dir, { recursive: true });
  cpSync(join(ROOT, "console", "src"), join(dir, "src"), { recursive: true });
  cpSync(join(ROOT, "console", "build.ts"), join(dir, "build.ts"));
  cpSync(join(ROOT, "console", "tsconfig.json"), join(dir, "tsconfig.json"));
  const run = Bun.spawnSync([BUN, join(dir, "build.ts")], { stdout: "pipe", stderr: "pipe" });
  if (run.exitCode !== 0) throw new Error(`console build failed: ${run.stderr.toString()}`);
  return { table: readFileSync(join(dir, "dist", "assets.js"), "utf8"), files: readdirSync(join(dir, "dist")).sort() };
}

test("two folders build the same file names and table, each name the SHA-256 of its bytes", () => {
  const a = buildIn("a");
  const b = buildIn(join("elsewhere", "deeper"));
  expect(b).toEqual(a);
  for (const name of a.files.filter((n) => n !== "assets.js")) {
    const bytes = readFileSync(join(base, "a", "console", "dist", name));
    const hash = new Bun.CryptoHasher("sha256").update(bytes).digest("hex").slice(0, 8);
    expect(name).toMatch(new RegExp(`^main\\.${hash}\\.(js|css)$`));
  }
}, 60_000);
