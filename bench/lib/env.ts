/**
 * The benchmarks' settings: BENCH_* environment variables with their defaults (bench/README.md lists
 * them per script). A value that is not a number is refused, naming the variable, rather than run as NaN.
 */

/** BENCH_<name> as a number, or `fallback` when unset. */
export function benchNumber(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n)) throw new Error(`${name} must be a number, got ${JSON.stringify(raw)}`);
  return n;
}

/** BENCH_<name> as a comma-separated list of strings, or `fallback` when unset. */
export function benchList(name: string, fallback: readonly string[]): string[] {
  const raw = process.env[name];
  return raw === undefined || raw === "" ? [...fallback] : raw.split(",");
}

/** BENCH_<name> as a comma-separated list of numbers, or `fallback` when unset. */
export function benchNumbers(name: string, fallback: readonly number[]): number[] {
  const list = benchList(name, fallback.map(String)).map(Number);
  if (list.some((n) => !Number.isFinite(n))) throw new Error(`${name} must be numbers separated by commas`);
  return list;
}
