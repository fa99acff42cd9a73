/**
 * A benchmark's results file: bench/results/<name>-<date>.json (the date with ':' and '.' as '-'), pretty
 * JSON. Only each benchmark's latest file is committed; bench/HISTORY.md keeps the figures over time.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const RESULTS = join(import.meta.dir, "..", "results");

/** Writes `result` (which carries its ISO `date`) and returns the file's path. */
export function writeResult(name: string, result: { readonly date: string }): string {
  mkdirSync(RESULTS, { recursive: true });
  const file = join(RESULTS, `${name}-${result.date.replace(/[:.]/g, "-")}.json`);
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  return file;
}
