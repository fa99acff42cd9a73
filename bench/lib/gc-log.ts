/**
 * What a process allocated, read from its GC log (BUN_JSC_logGC=1): the sum over its collections of the
 * heap at a collection's start less the heap after the previous one (../shared/research/perf-profile-
 * 2026-11-26.md section 5, validated there). A lower bound: what was allocated after the last collection
 * is not counted. Used by alloc.ts (per request) and alloc-ops.ts (per operation).
 */

/** KB allocated over the GC log `text` (whole collections only). */
export function allocatedKb(text: string): { kb: number; collections: number } {
  let kb = 0;
  let collections = 0;
  let lastAfter: number | undefined;
  // "START M <before>kb => EdenCollection, ..." then (same or a later line) "=> <after>kb, p=".
  const events = [...text.matchAll(/START M (\d+)kb|=> (\d+)kb, p=/g)];
  for (const e of events) {
    if (e[1] !== undefined) {
      const before = Number(e[1]);
      if (lastAfter !== undefined) {
        kb += Math.max(0, before - lastAfter);
        collections++;
      }
    } else if (e[2] !== undefined) lastAfter = Number(e[2]);
  }
  return { kb, collections };
}
