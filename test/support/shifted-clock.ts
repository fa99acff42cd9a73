/**
 * A preload for a child process whose wall clock must read later than the machine's: Date.now() and
 * `new Date()` are shifted by UMBRA_TEST_CLOCK_OFFSET_MS (timers and performance.now() are not). Lets a
 * process test reach a minute boundary (a provider schedule window's end) in seconds:
 *
 *   Bun.spawn([BUN, MAIN, ...], { env: { ...shiftedClockEnv(offsetMs) } })
 *
 * Passed through BUN_OPTIONS, so a process the child spawns (start --detach) is shifted too.
 */
import { join } from "node:path";

const offset = Number(process.env.UMBRA_TEST_CLOCK_OFFSET_MS ?? 0);

if (offset !== 0) {
  const RealDate = Date;
  const now = () => RealDate.now() + offset;
  globalThis.Date = new Proxy(RealDate, {
    construct: (target, args, newTarget) => Reflect.construct(target, args.length === 0 ? [now()] : args, newTarget),
    apply: () => new RealDate(now()).toString(),
    get: (target, key, receiver) => (key === "now" ? now : Reflect.get(target, key, receiver)),
  });
}

/** The environment that runs a Bun child with its clock `offsetMs` ahead. */
export function shiftedClockEnv(offsetMs: number): Record<string, string> {
  return { BUN_OPTIONS: `--preload ${join(import.meta.dir, "shifted-clock.ts")}`, UMBRA_TEST_CLOCK_OFFSET_MS: String(offsetMs) };
}
