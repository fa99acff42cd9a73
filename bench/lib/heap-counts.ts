/** Object counts by type from bun:jsc's heapStats, and their differences (alloc-objects.ts, alloc-tokens.ts). */

export type Counts = Record<string, number>;

/** Types whose counts are the engine's own bookkeeping (code compiled late, shapes), not the work's. */
export const RUNTIME_TYPES: ReadonlySet<string> = new Set([
  "Structure",
  "PropertyTable",
  "SymbolTable",
  "FunctionCodeBlock",
  "UnlinkedFunctionCodeBlock",
  "FunctionExecutable",
  "UnlinkedFunctionExecutable",
  "StructureRareData",
  "StructureChain",
  "FunctionRareData",
]);

/** (after - before) / n by type, runtime types left out, only types that grew; and their total. */
export function grownPer(before: Counts, after: Counts, n: number): { total: number; types: Counts } {
  const types: Counts = {};
  let total = 0;
  for (const [type, count] of Object.entries(after)) {
    const d = (count - (before[type] ?? 0)) / n;
    if (RUNTIME_TYPES.has(type) || d <= 0) continue;
    types[type] = d;
    total += d;
  }
  return { total, types };
}

/** a - b by type, rounded to 2 places, without the ones under 0.05; largest first. */
export function minus(a: Counts, b: Counts): Counts {
  const out: Counts = {};
  for (const type of new Set([...Object.keys(a), ...Object.keys(b)])) {
    const d = (a[type] ?? 0) - (b[type] ?? 0);
    if (Math.abs(d) >= 0.05) out[type] = Number(d.toFixed(2));
  }
  return Object.fromEntries(Object.entries(out).sort((x, y) => y[1] - x[1]));
}
