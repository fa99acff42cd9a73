/**
 * Exact money arithmetic and formatting. Inputs are integer micro-USD (µUSD) or integer µUSD per one
 * million tokens; every product and quotient is exact: in floating point only while it is a safe integer
 * (ceilMillionths, ceilHundredths), else in bigint.
 *
 * Formats (pinned by test/unit/billing/money.test.ts):
 * - usdPerMillion(65000) = "$0.065": USD per million tokens, at least two decimals, trailing zeros trimmed.
 * - usdPerToken(65000) = "0.000000065": USD per single token, trailing zeros trimmed, "0" for zero.
 */

const MICRO = 1_000_000n;

/** `value / 10^scale` as a decimal string, trailing zeros trimmed to at least `minFraction` digits. */
function decimal(value: bigint, scale: number, minFraction: number): string {
  const negative = value < 0n;
  const abs = negative ? -value : value;
  const unit = 10n ** BigInt(scale);
  const whole = abs / unit;
  let fraction = (abs % unit).toString().padStart(scale, "0").replace(/0+$/, "");
  if (fraction.length < minFraction) fraction = fraction.padEnd(minFraction, "0");
  return `${negative ? "-" : ""}${whole}${fraction.length > 0 ? `.${fraction}` : ""}`;
}

/** µUSD per million tokens -> "$X.XX" USD per million tokens. */
export function usdPerMillion(microPerMillion: number): string {
  return `$${decimal(BigInt(microPerMillion), 6, 2)}`;
}

/** µUSD per million tokens -> USD per single token (scale 10^-12). */
export function usdPerToken(microPerMillion: number): string {
  return decimal(BigInt(microPerMillion), 12, 0);
}

/** µUSD amount -> "$X.XX". */
export function usd(micro: number): string {
  return `$${decimal(BigInt(micro), 6, 2)}`;
}

/** The cache-read rate when none is stored: the input rate less `discountPercent`, rounded up. */
export function discountedCacheRead(inputPerMillion: number, discountPercent: number): number {
  return ceilHundredths(inputPerMillion, 100 - discountPercent);
}

/**
 * ceil(a × b / 100) for non-negative integers a and b: while a × b + 99 is a safe integer, the product,
 * `x % 100` and the division of the multiple of 100 below x are all exact in floating point (no bigint
 * allocated per call); beyond, in bigint.
 */
export function ceilHundredths(a: number, b: number): number {
  const x = a * b + 99;
  if (Number.isSafeInteger(x)) return (x - (x % 100)) / 100;
  return Number((BigInt(a) * BigInt(b) + 99n) / 100n);
}

/**
 * ceil(numerator / 10^6) for a non-negative integer numerator given as a Number: exact in floating
 * point while the numerator is a safe integer (every such integer and its quotient's floor are exact);
 * undefined beyond, for the caller's bigint path.
 */
export function ceilMillionths(numerator: number): number | undefined {
  if (!Number.isSafeInteger(numerator)) return undefined;
  const whole = Math.floor(numerator / 1_000_000);
  return whole * 1_000_000 === numerator ? whole : whole + 1;
}

/** ceil(tokens × rate / 10^6) in µUSD, for a rate in µUSD per million tokens. */
export function costOf(tokens: number, microPerMillion: number): bigint {
  const product = BigInt(tokens) * BigInt(microPerMillion);
  return (product + MICRO - 1n) / MICRO;
}
