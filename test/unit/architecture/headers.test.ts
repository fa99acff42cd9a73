/**
 * File headers stay short (STYLE.md: what the file is for and its invariants in about a dozen lines). A .ts
 * file under src/ that opens with a `/**` comment closes it within MAX_HEADER_LINES lines, counting the
 * line that closes it. src/crypto/ and src/attestation/ are exempt: their headers carry wire formats and
 * numbered checks. And no source file under src/ or attestation/ grows past MAX_FILE_LINES lines.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..", "..", "..");
/** The cap of about 12 lines, with a little slack. */
const MAX_HEADER_LINES = 14;
const EXEMPT = ["src/crypto/", "src/attestation/"];
/** Split a file before it grows past this (issue 20: the stateful giants were split at it). */
const MAX_FILE_LINES = 400;

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = `${dir}/${name}`;
    if (statSync(join(ROOT, path)).isDirectory()) return sources(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** The header's length in lines (the number of the line that closes it), or 0 when the file opens otherwise. */
function headerLines(text: string): number {
  if (!text.startsWith("/**")) return 0;
  const end = text.indexOf("*/");
  return end < 0 ? text.split("\n").length : text.slice(0, end).split("\n").length;
}

describe("architecture: file headers and sizes", () => {
  test("headers outside src/crypto/ and src/attestation/ are short", () => {
    const long = sources("src")
      .sort()
      .filter((file) => !EXEMPT.some((prefix) => file.startsWith(prefix)))
      .map((file) => ({ file, lines: headerLines(readFileSync(join(ROOT, file), "utf8")) }))
      .filter(({ lines }) => lines > MAX_HEADER_LINES)
      .map(({ file, lines }) => `${file}: ${lines} lines`);
    expect(long).toEqual([]);
  });

  test(`no source file under src/ or attestation/ has more than ${MAX_FILE_LINES} lines`, () => {
    const large = [...sources("src"), ...sources("attestation")]
      .sort()
      .map((file) => ({ file, lines: readFileSync(join(ROOT, file), "utf8").split("\n").length - 1 }))
      .filter(({ lines }) => lines > MAX_FILE_LINES)
      .map(({ file, lines }) => `${file}: ${lines} lines`);
    expect(large).toEqual([]);
  });

  test("headerLines counts up to the closing line", () => {
    expect([headerLines("/** one */\nx"), headerLines("/**\n * a\n */\n/** b */"), headerLines("// x\n/**\n */")]).toEqual([1, 3, 0]);
  });
});
