/**
 * Price resolution and the public price list. A model's rate is, in order: the row stored for the id
 * asked for, the row stored for the build an alias points to, or the configured fallback. A missing
 * cache-read rate is the input rate less the configured discount.
 */
import type { PriceRow, PriceStore } from "../store/types.ts";
import { discountedCacheRead, usdPerMillion, usdPerToken } from "./money.ts";

export interface Rates {
  readonly input: number;
  readonly output: number;
  readonly cacheRead: number;
  readonly source: "model" | "build" | "fallback";
}

export interface PriceEntry {
  model: string;
  input_price: number;
  input_usd: string;
  output_price: number;
  output_usd: string;
  cache_read_price: number;
  cache_read_usd: string;
}

export interface PricingResponse {
  prices: PriceEntry[];
  fallback_input_price: number;
  fallback_input_usd: string;
  fallback_output_price: number;
  fallback_output_usd: string;
  fallback_cache_read_price: number;
  fallback_cache_read_usd: string;
}

/** Per-token prices inside a Model (USD strings). */
export interface ModelPricing {
  prompt: string;
  completion: string;
  image: string;
  request: string;
  input_cache_read: string;
}

export interface PricingSettings {
  readonly fallbackInputPrice: number;
  readonly fallbackOutputPrice: number;
  readonly cacheReadDiscountPercent: number;
}

export class PricingService {
  constructor(
    private readonly prices: PriceStore,
    private readonly settings: PricingSettings,
  ) {}

  private cacheRead(input: number, stored: number | null): number {
    return stored ?? discountedCacheRead(input, this.settings.cacheReadDiscountPercent);
  }

  get fallback(): Rates {
    const { fallbackInputPrice: input, fallbackOutputPrice: output } = this.settings;
    return { input, output, cacheRead: this.cacheRead(input, null), source: "fallback" };
  }

  /**
   * Rates for a requested id; `buildId` is the build an alias resolves to (same as id for a build).
   * Synchronous when the price store answers from memory (every chat request asks: no promise then).
   */
  ratesFor(id: string, buildId: string): Rates | Promise<Rates> {
    const own = this.prices.get(id);
    if (own instanceof Promise) return own.then((row) => this.ratesOf(row, id, buildId));
    return this.ratesOf(own, id, buildId);
  }

  /** The model's own row's rates, else the build's (its row read here), else the fallback. */
  private ratesOf(own: PriceRow | undefined, id: string, buildId: string): Rates | Promise<Rates> {
    if (own) return this.rates(own, "model");
    if (buildId === id) return this.fallback;
    const build = this.prices.get(buildId);
    if (build instanceof Promise) return build.then((row) => (row ? this.rates(row, "build") : this.fallback));
    return build ? this.rates(build, "build") : this.fallback;
  }

  private rates(row: PriceRow, source: "model" | "build"): Rates {
    return { input: row.inputPrice, output: row.outputPrice, cacheRead: this.cacheRead(row.inputPrice, row.cacheReadPrice), source };
  }

  async publicPrices(): Promise<PricingResponse> {
    const rows = await this.prices.list();
    const fb = this.fallback;
    return {
      prices: rows.map((r) => {
        const cacheRead = this.cacheRead(r.inputPrice, r.cacheReadPrice);
        return {
          model: r.model,
          input_price: r.inputPrice,
          input_usd: usdPerMillion(r.inputPrice),
          output_price: r.outputPrice,
          output_usd: usdPerMillion(r.outputPrice),
          cache_read_price: cacheRead,
          cache_read_usd: usdPerMillion(cacheRead),
        };
      }),
      fallback_input_price: fb.input,
      fallback_input_usd: usdPerMillion(fb.input),
      fallback_output_price: fb.output,
      fallback_output_usd: usdPerMillion(fb.output),
      fallback_cache_read_price: fb.cacheRead,
      fallback_cache_read_usd: usdPerMillion(fb.cacheRead),
    };
  }
}

export function modelPricing(rates: Rates): ModelPricing {
  return {
    prompt: usdPerToken(rates.input),
    completion: usdPerToken(rates.output),
    image: "0",
    request: "0",
    input_cache_read: usdPerToken(rates.cacheRead),
  };
}
