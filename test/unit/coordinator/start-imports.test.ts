/**
 * What the coordinator loads at start. @peculiar/x509 (certificate chains) costs 15-20 ms of CPU to
 * import, a third of the compiled binary's start-up (bench/HISTORY.md "start-up"); the coordinator needs it
 * only once a provider presents evidence (or for the development attestation source), so it is imported
 * dynamically there. This walks the static import graph (type-only imports excluded, as the bundler
 * drops them) and fails with the chain that would load it at start.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../../..");
const transpiler = new Bun.Transpiler({ loader: "ts" });
/** Static and dynamic imports of one file (a shebang line, which the scanner refuses, dropped). */
const importsOf = (file: string) => transpiler.scanImports(readFileSync(file, "utf8").replace(/^#!.*/, ""));

/** The first chain of static imports from `entry` to a bare specifier accepted by `target`, if any. */
function staticChain(entry: string, target: (specifier: string) => boolean): string[] | undefined {
  const seen = new Set<string>();
  const walk = (file: string, path: string[]): string[] | undefined => {
    if (seen.has(file)) return undefined;
    seen.add(file);
    for (const { path: specifier, kind } of importsOf(file)) {
      if (kind !== "import-statement") continue;
      if (!specifier.startsWith(".")) {
        if (target(specifier)) return [...path, relative(ROOT, file), specifier];
        continue;
      }
      if (!/\.[cm]?[jt]sx?$/.test(specifier)) continue; // embedded assets (SQL, JSON, PEM)
      const found = walk(resolve(dirname(file), specifier), [...path, relative(ROOT, file)]);
      if (found) return found;
    }
    return undefined;
  };
  return walk(resolve(ROOT, entry), []);
}

const isX509 = (specifier: string) => specifier === "@peculiar/x509" || specifier.startsWith("@peculiar/x509/");

describe("coordinator start-up imports", () => {
  test("the command line module (serve, dev, migrate, admin) does not load @peculiar/x509 at start", () => {
    const chain = staticChain("src/coordinator/cli.ts", isX509);
    expect(chain === undefined ? "none" : chain.join(" -> ")).toBe("none");
  });

  test("ioredis (the other Redis client) is loaded only when --redis-client ioredis is used", () => {
    const chain = staticChain("src/coordinator/cli.ts", (s) => s === "ioredis");
    expect([
      chain === undefined ? "none" : chain.join(" -> "),
      staticChain("src/limits/ioredis-client.ts", (s) => s === "ioredis")?.at(-1),
    ]).toEqual(["none", "ioredis"]);
  });

  test("the entry point reaches the command line module only after the reflect-metadata preload", () => {
    const imports = importsOf(resolve(ROOT, "src/coordinator/main.ts"));
    expect(imports.map((i) => `${i.kind} ${i.path}`)).toEqual([
      "dynamic-import ../../attestation/provider/preload.ts",
      "dynamic-import ./cli.ts",
    ]);
  });

  test("the walk finds the library where it is imported statically (the check can fail)", () => {
    expect(staticChain("attestation/provider/index.ts", isX509)?.at(-1)).toBe("@peculiar/x509");
    expect(staticChain("attestation/cvm/dev-source.ts", isX509)).toEqual([
      "attestation/cvm/dev-source.ts",
      "attestation/cvm/dev-chain.ts",
      "@peculiar/x509",
    ]);
  });
});
