/**
 * A model's weight size, estimated from its id (for `doctor`'s memory and disk checks). An estimate,
 * not a measurement: weights = parameters x bits per weight / 8; unknown when the id names no size.
 *
 * Parameters: `parameterCount`; bits per weight: `bitsPerWeight`.
 */

export interface ModelSize {
  readonly parameters: number;
  readonly bitsPerWeight: number;
  /** Estimated size of the weights in bytes. */
  readonly bytes: number;
}

const SEP_BEFORE = "(?<![a-z0-9.])";
const SEP_AFTER = "(?![a-z0-9])";
const MIXTURE = new RegExp(`${SEP_BEFORE}(\\d+)x(\\d+(?:\\.\\d+)?)([bm])${SEP_AFTER}`);
const PARAMETERS = new RegExp(`${SEP_BEFORE}(\\d+(?:\\.\\d+)?)([bm])${SEP_AFTER}`);
const SCALE = { b: 1e9, m: 1e6 } as const;

const QUANTIZATIONS: readonly { readonly pattern: RegExp; readonly bits: (n: number) => number }[] = [
  { pattern: /(?<![a-z0-9])(?:fp|bf|f)(8|16|32)(?![a-z0-9])/, bits: (n) => n },
  { pattern: /(?<![a-z0-9])mxfp4(?![a-z0-9])/, bits: () => 4.25 },
  { pattern: /(?<![a-z0-9])(\d{1,2})[-_]?bits?(?![a-z0-9])/, bits: (n) => (n < 16 ? n + 0.5 : n) },
  { pattern: /(?<![a-z0-9])int(\d{1,2})(?![a-z0-9])/, bits: (n) => (n < 16 ? n + 0.5 : n) },
  { pattern: /(?<![a-z0-9])i?q(\d)(?:_[a-z0-9]+)*(?![a-z0-9])/, bits: (n) => n + 0.5 },
  { pattern: /(?<![a-z0-9])(?:awq|gptq)(?![a-z0-9])/, bits: () => 4.5 },
];
const DEFAULT_BITS = 16;

/**
 * Parameters: the first size token standing alone between separators (start or end of the id, or any
 * character that is not a letter, digit or '.'): `8b`, `70B`, `0.5b`, `135m`, and mixtures `8x7b`
 * (8 x 7 billion: an upper bound, experts share some layers). A token glued to a letter does not count,
 * so the active-parameter part of `30b-a3b` and a `4bit` are not read as sizes.
 */
function parameterCount(id: string): number | undefined {
  const mixture = MIXTURE.exec(id);
  if (mixture) return Number(mixture[1]) * Number(mixture[2]) * SCALE[mixture[3] as "b" | "m"];
  const single = PARAMETERS.exec(id);
  if (single) return Number(single[1]) * SCALE[single[2] as "b" | "m"];
  return undefined;
}

/**
 * Bits per weight, first match in this order, else 16 (unquantized half precision):
 *   `fp16` `bf16` `f16` `fp32` `f32` `fp8`  -> the number as written (float formats)
 *   `mxfp4`                                -> 4.25 (one shared 8-bit scale per 32 weights)
 *   `4bit` `8-bit` `3_bit`, `int4` `int8`, GGUF `q4` `q4_0` `q4_k_m` `q8_0` `iq4_xs`
 *                                          -> the number + 0.5 (block-wise scales cost about half a bit)
 *   `awq` `gptq`                           -> 4.5 (4-bit by default)
 */
function bitsPerWeight(id: string): number {
  for (const { pattern, bits } of QUANTIZATIONS) {
    const match = pattern.exec(id);
    if (match) return bits(Number(match[1] ?? 0));
  }
  return DEFAULT_BITS;
}

/** The estimate for one model id (a build id or an engine's model name); undefined when no size is named. */
export function estimateModelSize(id: string): ModelSize | undefined {
  const lower = id.toLowerCase();
  const parameters = parameterCount(lower);
  if (parameters === undefined || parameters <= 0) return undefined;
  const bits = bitsPerWeight(lower);
  return { parameters, bitsPerWeight: bits, bytes: Math.round((parameters * bits) / 8) };
}

const GIB = 2 ** 30;

/** Bytes as GiB with one decimal ("4.5 GiB"). */
export function formatGiB(bytes: number): string {
  return `${(bytes / GIB).toFixed(1)} GiB`;
}
