/**
 * The modules that import @peculiar/x509 lazily (at runtime) hold reflect-metadata in their static graph,
 * so it is in place before the lazy graph loads whatever the entry point: without it, a script running the
 * coordinator in its own process (bench/alloc-objects.ts) failed its first development chain with a 500
 * in about 1 start in 6 (tsyringe's "requires a reflect polyfill"; Bun does not keep import order,
 * STACK.md item 1). Each module is imported in a fresh process without the tests' preload, and the
 * polyfill must be there once the static imports are done.
 */
import { describe, expect, test } from "bun:test";
import { tmpdir } from "node:os";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "../../..");
const LAZY_X509 = [
  "src/coordinator/provider-trust.ts",
  "src/coordinator/mdm-link.ts",
  "src/attestation/coordinator-attestation.ts",
  "src/tls/tls-key.ts",
  "src/coordinator/provision-cli.ts",
  "src/provider/coordinator-pin.ts",
];

describe("reflect-metadata before the lazy @peculiar/x509 graphs", () => {
  test.each(LAZY_X509)("%s", async (file) => {
    const script = `import ${JSON.stringify(join(ROOT, file))}; console.log(typeof Reflect.getMetadata);`;
    // Outside the repository: no bunfig.toml, so no preload.
    const proc = Bun.spawn([process.execPath, "-e", script], { cwd: tmpdir(), stdout: "pipe", stderr: "pipe" });
    const [out, err] = [await new Response(proc.stdout).text(), await new Response(proc.stderr).text()];
    expect(await proc.exited, err).toBe(0);
    expect(out.trim()).toBe("function");
  });
});
