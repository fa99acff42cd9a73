/** GET /v1/pricing: public prices, no authentication. */
import { Elysia } from "elysia";
import type { PricingService } from "../billing/pricing.ts";

export function pricingRoutes(deps: { pricing: PricingService }) {
  return new Elysia({ name: "pricing" }).get("/v1/pricing", () => deps.pricing.publicPrices());
}
