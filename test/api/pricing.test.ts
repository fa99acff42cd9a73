/**
 * GET /v1/pricing (spec: PriceEntry, PricingResponse, listPricing) and the per-token ModelPricing that
 * /v1/models derives from the same rates.
 */
import { describe, expect, test } from "bun:test";
import { seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";

/** The response for seedCatalog under the config defaults. */
const SEEDED_PRICING = {
  prices: [
    {
      model: "org/model",
      input_price: 65_000,
      input_usd: "$0.065",
      output_price: 130_000,
      output_usd: "$0.13",
      cache_read_price: 32_500,
      cache_read_usd: "$0.0325",
    },
  ],
  fallback_input_price: 500_000,
  fallback_input_usd: "$0.50",
  fallback_output_price: 1_500_000,
  fallback_output_usd: "$1.50",
  fallback_cache_read_price: 250_000,
  fallback_cache_read_usd: "$0.25",
};

async function pricing(t: TestApp, headers: Record<string, string> = {}) {
  const r = await t.call("GET", "/v1/pricing", { headers });
  expect(r.status).toBe(200);
  return r.body;
}

async function modelPricing(t: TestApp, apiKey: string, id: string): Promise<unknown> {
  const r = await t.call("GET", `/v1/models/${id}`, { token: apiKey });
  expect(r.status).toBe(200);
  return (r.body as { pricing: unknown }).pricing;
}

function perToken(prompt: string, completion: string, cacheRead: string) {
  return { prompt, completion, image: "0", request: "0", input_cache_read: cacheRead };
}

describe("GET /v1/pricing", () => {
  test.each([
    ["no credential", {}],
    ["a garbage bearer credential", { authorization: "Bearer garbage" }],
    ["an unknown API key", { authorization: "Bearer sk-umbra-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" }],
    ["a non-Bearer scheme", { authorization: "Basic dXNlcjpwYXNz" }],
  ])("needs no authentication: %s gives the same 200 answer", async (_, headers) => {
    await using t = await testApp();
    await seedCatalog(t);
    const r = await t.call("GET", "/v1/pricing", { headers });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toStartWith("application/json");
    expect(r.body).toEqual(SEEDED_PRICING);
  });

  test("the seeded catalog, whole response", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    expect(await pricing(t)).toEqual(SEEDED_PRICING);
  });

  test("an empty catalog lists no prices but the fallbacks", async () => {
    await using t = await testApp();
    expect(await pricing(t)).toEqual({ ...SEEDED_PRICING, prices: [] });
  });

  test("a stored cache-read rate is used as is; a missing one is the input rate less 50%, rounded up", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    await t.app.admin.setPrice("other/plain", { input_price: 200_000, output_price: 400_000, cache_read_price: 10_000 });
    await t.app.admin.setPrice("org/base-build-4bit", { input_price: 3, output_price: 7 });
    expect(await pricing(t)).toEqual({
      ...SEEDED_PRICING,
      prices: [
        {
          model: "org/base-build-4bit",
          input_price: 3,
          input_usd: "$0.000003",
          output_price: 7,
          output_usd: "$0.000007",
          cache_read_price: 2,
          cache_read_usd: "$0.000002",
        },
        SEEDED_PRICING.prices[0],
        {
          model: "other/plain",
          input_price: 200_000,
          input_usd: "$0.20",
          output_price: 400_000,
          output_usd: "$0.40",
          cache_read_price: 10_000,
          cache_read_usd: "$0.01",
        },
      ],
    });
  });

  test("an explicit zero cache-read rate stays zero (not replaced by the discount)", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    await t.app.admin.setPrice("org/model", { input_price: 65_000, output_price: 130_000, cache_read_price: 0 });
    const body = (await pricing(t)) as typeof SEEDED_PRICING;
    expect(body.prices).toEqual([{ ...SEEDED_PRICING.prices[0]!, cache_read_price: 0, cache_read_usd: "$0.00" }]);
  });

  test("prices follow admin changes at once (no cached answer)", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    expect(await pricing(t)).toEqual(SEEDED_PRICING);
    await t.app.admin.clearPrice("org/model");
    expect(await pricing(t)).toEqual({ ...SEEDED_PRICING, prices: [] });
  });

  test("config sets the fallback rates and the cache-read discount", async () => {
    await using t = await testApp({
      env: { UMBRA_FALLBACK_INPUT_PRICE: "1000000", UMBRA_FALLBACK_OUTPUT_PRICE: "3000001", UMBRA_CACHE_READ_DISCOUNT: "20" },
    });
    await seedCatalog(t);
    expect(await pricing(t)).toEqual({
      prices: [
        {
          model: "org/model",
          input_price: 65_000,
          input_usd: "$0.065",
          output_price: 130_000,
          output_usd: "$0.13",
          cache_read_price: 52_000,
          cache_read_usd: "$0.052",
        },
      ],
      fallback_input_price: 1_000_000,
      fallback_input_usd: "$1.00",
      fallback_output_price: 3_000_001,
      fallback_output_usd: "$3.000001",
      fallback_cache_read_price: 800_000,
      fallback_cache_read_usd: "$0.80",
    });
  });

  test.each([
    ["0", 500_000, "$0.50", 65_000, "$0.065"],
    ["100", 0, "$0.00", 0, "$0.00"],
    ["33", 335_000, "$0.335", 43_550, "$0.04355"],
  ])("UMBRA_CACHE_READ_DISCOUNT=%s", async (discount, fallback, fallbackUsd, row, rowUsd) => {
    await using t = await testApp({ env: { UMBRA_CACHE_READ_DISCOUNT: discount } });
    await seedCatalog(t);
    const body = (await pricing(t)) as typeof SEEDED_PRICING;
    expect([body.fallback_cache_read_price, body.fallback_cache_read_usd]).toEqual([fallback, fallbackUsd]);
    expect([body.prices[0]?.cache_read_price, body.prices[0]?.cache_read_usd]).toEqual([row, rowUsd]);
  });

  test("a zero fallback is allowed and formatted", async () => {
    await using t = await testApp({ env: { UMBRA_FALLBACK_INPUT_PRICE: "0", UMBRA_FALLBACK_OUTPUT_PRICE: "0" } });
    const body = await pricing(t);
    expect(body).toEqual({
      prices: [],
      fallback_input_price: 0,
      fallback_input_usd: "$0.00",
      fallback_output_price: 0,
      fallback_output_usd: "$0.00",
      fallback_cache_read_price: 0,
      fallback_cache_read_usd: "$0.00",
    });
  });
});

describe("per-token pricing in /v1/models", () => {
  test("an alias with its own price uses it; its build without one uses the fallback", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    expect(await modelPricing(t, apiKey, "org/model")).toEqual(perToken("0.000000065", "0.00000013", "0.0000000325"));
    expect(await modelPricing(t, apiKey, "org/base-build-4bit")).toEqual(perToken("0.0000005", "0.0000015", "0.00000025"));
    expect(await modelPricing(t, apiKey, "other/plain")).toEqual(perToken("0.0000005", "0.0000015", "0.00000025"));
  });

  test("an alias without its own price uses its build's price, including the build's stored cache-read rate", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    await t.app.admin.clearPrice("org/model");
    await t.app.admin.setPrice("org/base-build-4bit", { input_price: 100_000, output_price: 300_000, cache_read_price: 7 });
    const buildPrice = perToken("0.0000001", "0.0000003", "0.000000000007");
    expect(await modelPricing(t, apiKey, "org/model")).toEqual(buildPrice);
    expect(await modelPricing(t, apiKey, "org/base-build-4bit")).toEqual(buildPrice);
  });

  test("an alias's own price wins over its build's", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    await t.app.admin.setPrice("org/base-build-4bit", { input_price: 100_000, output_price: 300_000 });
    expect(await modelPricing(t, apiKey, "org/model")).toEqual(perToken("0.000000065", "0.00000013", "0.0000000325"));
    expect(await modelPricing(t, apiKey, "org/base-build-4bit")).toEqual(perToken("0.0000001", "0.0000003", "0.00000005"));
  });

  test("fallback and discount from config reach the per-token prices", async () => {
    await using t = await testApp({
      env: { UMBRA_FALLBACK_INPUT_PRICE: "2000000", UMBRA_FALLBACK_OUTPUT_PRICE: "4000000", UMBRA_CACHE_READ_DISCOUNT: "90" },
    });
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    expect(await modelPricing(t, apiKey, "other/plain")).toEqual(perToken("0.000002", "0.000004", "0.0000002"));
    expect(await modelPricing(t, apiKey, "org/model")).toEqual(perToken("0.000000065", "0.00000013", "0.0000000065"));
  });

  test("the list and /v1/pricing agree on the same rates (per token x 10^6 = per million)", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    await t.app.admin.setPrice("other/plain", { input_price: 123_456, output_price: 654_321, cache_read_price: 1_000 });
    const list = (await t.call("GET", "/v1/models", { token: apiKey })).body as {
      data: { id: string; pricing: { prompt: string; completion: string; input_cache_read: string } }[];
    };
    const table = (await pricing(t)) as typeof SEEDED_PRICING;
    for (const row of table.prices) {
      const model = list.data.find((m) => m.id === row.model);
      expect(model).toBeDefined();
      const perMillion = (s: string) => Math.round(Number(s) * 1e12);
      expect([model?.pricing.prompt, model?.pricing.completion, model?.pricing.input_cache_read].map((s) => perMillion(s ?? ""))).toEqual([
        row.input_price,
        row.output_price,
        row.cache_read_price,
      ]);
    }
    expect(table.prices.map((p) => p.model)).toEqual(["org/model", "other/plain"]);
  });
});
