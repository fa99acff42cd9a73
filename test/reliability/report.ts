/**
 * The reliability suite's one convention (issue 7 point 2): every case says what it tried and what held.
 *
 *   reliabilityCase("provider faults", "killed before first content", async (c) => {
 *     c.tried("the provider process is killed after accepting, before any content");
 *     ...assertions...
 *     c.held("502 provider_unavailable in the spec's envelope; no charge; the next request is served");
 *   });
 *
 * A case is a bun:test `test`: it passes or fails like any other and counts in bun's own summary. On top
 * of that each finished case prints one line, `reliability: <group> / <name>: tried ...; held ...` (or
 * `FAILED ...`), and when the test process exits after running any case, one summary line:
 * `reliability summary: N cases, N held, N failed`. The tally lives on globalThis because bun test runs
 * every file in one process and the summary covers all of them.
 */
import { test } from "bun:test";

export interface CaseLog {
  /** What the case did to the system (the fault, the input, the load). */
  tried(what: string): void;
  /** What was checked and held; call once per property, after its assertion passed. */
  held(what: string): void;
}

interface Tally {
  cases: number;
  held: number;
  failed: string[];
}

const TALLY_KEY = Symbol.for("umbra.reliability.tally");

function tally(): Tally {
  const g = globalThis as { [TALLY_KEY]?: Tally };
  g[TALLY_KEY] ??= { cases: 0, held: 0, failed: [] };
  return g[TALLY_KEY];
}

/** The summary lines, or nothing when no case ran; printed once after all tests (test/preload.ts). */
export function reliabilitySummary(): string[] {
  const t = (globalThis as { [TALLY_KEY]?: Tally })[TALLY_KEY];
  if (!t || t.cases === 0) return [];
  return [
    `reliability summary: ${t.cases} cases, ${t.held} held, ${t.failed.length} failed`,
    ...t.failed.map((name) => `reliability failed: ${name}`),
  ];
}

/** Declares one reliability case (a bun:test test) in `group`. `timeoutMs` defaults to 30 s. */
export function reliabilityCase(group: string, name: string, run: (c: CaseLog) => Promise<void>, timeoutMs = 30_000): void {
  test(name, () => logged(group, name, run), timeoutMs);
}

/**
 * A case that runs at the same time as the concurrent cases declared next to it (test.concurrent): for
 * cases that share nothing (their own coordinator, or nothing a neighbour measures) and mostly wait.
 */
reliabilityCase.concurrent = (group: string, name: string, run: (c: CaseLog) => Promise<void>, timeoutMs = 30_000): void => {
  test.concurrent(name, () => logged(group, name, run), timeoutMs);
};

async function logged(group: string, name: string, run: (c: CaseLog) => Promise<void>): Promise<void> {
  const t = tally();
  const tried: string[] = [];
  const held: string[] = [];
  t.cases++;
  try {
    await run({ tried: (what) => void tried.push(what), held: (what) => void held.push(what) });
  } catch (e) {
    t.failed.push(`${group} / ${name}`);
    console.log(`reliability: ${group} / ${name}: tried ${tried.join("; ") || "(nothing recorded)"}; FAILED after ${held.length} held`);
    throw e;
  }
  t.held++;
  console.log(
    `reliability: ${group} / ${name}: tried ${tried.join("; ") || "(nothing recorded)"}; held ${held.join("; ") || "(nothing recorded)"}`,
  );
}
