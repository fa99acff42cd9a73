/** The statistics the benchmarks report: medians over rounds, percentiles of latency samples, rounding. */

/** The median (the mean of the middle two for an even count); NaN for no values. */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

/** The p-th percentile (0-100) of samples sorted ascending, nearest rank below; NaN for none. */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

/** `n` rounded to `digits` decimals, as a number (for results files). */
export const round = (n: number, digits = 3) => Number(n.toFixed(digits));
