/**
 * ARCHITECTURE.md names every source file under src/, attestation/, bench/ and test/support/. A file is
 * named when one bullet of its section (`## src/`, `## attestation/`, `## bench/`, `## test/`) holds its
 * path from the section's folder (`store/sqlite/usage.ts`), or its folder and its file name
 * (`crypto/`: ... `seal.ts`).
 */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..", "..", "..");

/** Each source folder: the section naming its files, and the prefix that section leaves out. */
const SOURCES = [
  { dir: "src", section: "src/", prefix: "src/" },
  { dir: "attestation", section: "attestation/", prefix: "" },
  { dir: "bench", section: "bench/", prefix: "bench/" },
  { dir: "test/support", section: "test/", prefix: "test/" },
] as const;

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = `${dir}/${name}`;
    if (statSync(join(ROOT, path)).isDirectory()) return sources(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** The bullets (with their continuation lines) of each `## ` section. */
function bullets(markdown: string): Map<string, string[]> {
  const sections = new Map<string, string[]>();
  let current: string[] = [];
  for (const line of markdown.split("\n")) {
    const heading = /^## (.+)$/.exec(line);
    if (heading) {
      current = [];
      sections.set(heading[1] as string, current);
    } else if (line.startsWith("- ") || current.length === 0) current.push(line);
    else current[current.length - 1] += `\n${line}`;
  }
  return sections;
}

const mentions = (text: string, path: string) => new RegExp(`(^|[^\\w.-])${path.replace(/[.]/g, "\\.")}($|[^\\w-])`).test(text);

/** Whether a bullet names the file at `rel` (the path within its section's folder). */
function names(bullet: string, rel: string): boolean {
  if (mentions(bullet, rel)) return true;
  const slash = rel.lastIndexOf("/");
  return slash >= 0 && bullet.includes(`${rel.slice(0, slash + 1)}`) && mentions(bullet, rel.slice(slash + 1));
}

describe("architecture: ARCHITECTURE.md", () => {
  const sections = bullets(readFileSync(join(ROOT, "ARCHITECTURE.md"), "utf8"));

  test.each(SOURCES)("names every file under $dir/", ({ dir, section, prefix }) => {
    const list = sections.get(section) ?? [];
    const files = sources(dir);
    expect(files.length).toBeGreaterThan(0);
    const unnamed = files.filter((file) => !list.some((bullet) => names(bullet, file.slice(prefix.length))));
    expect(unnamed).toEqual([]);
  });

  test("a name counts only with its folder", () => {
    const bullet = "- `crypto/`: `seal.ts` (sealing), `errors.ts`.";
    expect([names(bullet, "crypto/seal.ts"), names(bullet, "crypto/errors.ts"), names(bullet, "api/errors.ts")]).toEqual([
      true,
      true,
      false,
    ]);
    expect([names("- `store/sqlite/usage.ts`: usage.", "store/sqlite/usage.ts"), names("- `version.ts`: x", "version.ts")]).toEqual([
      true,
      true,
    ]);
  });
});
