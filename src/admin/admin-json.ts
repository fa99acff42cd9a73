/**
 * The admin answers: JSON-ready snake_case objects for accounts, API keys, provider tokens, model builds,
 * ledger entries, prices and usage sums. Money in micro-USD, prices in micro-USD per million tokens,
 * times in Unix seconds. Shared by AdminService, CatalogAdmin and the HTTP API.
 */
import { API_KEY_PREFIX, PROVIDER_TOKEN_PREFIX } from "../auth/secrets.ts";
import type { Account, ApiKeyRecord, LedgerEntry, ModelBuild, PriceRow, ProviderTokenRecord, UsageTotalsRow } from "../store/types.ts";

/** Unix ms -> Unix seconds. */
export const seconds = (ms: number) => Math.floor(ms / 1000);

export function accountJson(a: Account) {
  return {
    id: a.id,
    object: "account" as const,
    name: a.name,
    jwt_subject: a.jwtSubject,
    created: seconds(a.createdAt),
    balance_micro_usd: a.balance,
    reserved_micro_usd: a.reserved,
  };
}

/** A key's limits and switches, as the admin API and the console both show them. */
export function keySettingsJson(k: ApiKeyRecord) {
  return {
    allowed_models: k.allowedModels === null ? null : [...k.allowedModels],
    spend_cap_micro_usd: k.spendCap,
    spent_micro_usd: k.spent,
    rpm: k.rpm,
    tpm: k.tpm,
    self_route_only: k.selfRouteOnly,
    link_machines: k.linkMachines,
  };
}

export function keyJson(k: ApiKeyRecord) {
  return {
    id: k.id,
    object: "api_key" as const,
    account_id: k.accountId,
    name: k.name,
    hint: `${API_KEY_PREFIX}...${k.hint}`,
    ...keySettingsJson(k),
    created: seconds(k.createdAt),
    revoked_at: k.revokedAt === null ? null : seconds(k.revokedAt),
  };
}

export function providerTokenJson(t: ProviderTokenRecord) {
  return {
    id: t.id,
    object: "provider_token" as const,
    account_id: t.accountId,
    hint: `${PROVIDER_TOKEN_PREFIX}...${t.hint}`,
    name: t.name,
    created: seconds(t.createdAt),
    expires_at: t.expiresAt === null ? null : seconds(t.expiresAt),
    revoked_at: t.revokedAt === null ? null : seconds(t.revokedAt),
  };
}

export function buildJson(b: ModelBuild) {
  return {
    id: b.id,
    object: "model_build" as const,
    created: b.created,
    owned_by: b.ownedBy,
    model_type: b.modelType,
    name: b.name,
    display_name: b.displayName,
    hugging_face_id: b.huggingFaceId,
    description: b.description,
    quantization: b.quantization,
    deprecation_date: b.deprecationDate,
    input_modalities: b.inputModalities,
    output_modalities: b.outputModalities,
    supported_sampling_parameters: b.supportedSamplingParameters,
    supported_features: b.supportedFeatures,
    context_length: b.contextLength,
    max_output_length: b.maxOutputLength,
  };
}

export function ledgerEntryJson(e: LedgerEntry) {
  return {
    id: e.id,
    /** A string, not a closed set: kinds are added as the money path grows. */
    kind: e.kind as string,
    amount_micro_usd: e.amount,
    balance_after_micro_usd: e.balanceAfter,
    request_id: e.requestId,
    created: seconds(e.createdAt),
  };
}

export function usageSumsJson(r: Omit<UsageTotalsRow, "key">) {
  return {
    requests: r.requests,
    prompt_tokens: r.promptTokens,
    cached_tokens: r.cachedTokens,
    completion_tokens: r.completionTokens,
    cost_micro_usd: r.cost,
  };
}

export function usageTotal(rows: readonly UsageTotalsRow[]): Omit<UsageTotalsRow, "key"> {
  const total = { requests: 0, promptTokens: 0, cachedTokens: 0, completionTokens: 0, cost: 0 };
  for (const r of rows) {
    total.requests += r.requests;
    total.promptTokens += r.promptTokens;
    total.cachedTokens += r.cachedTokens;
    total.completionTokens += r.completionTokens;
    total.cost += r.cost;
  }
  return total;
}

export function priceJson(p: PriceRow) {
  return {
    model: p.model,
    object: "price" as const,
    input_price: p.inputPrice,
    output_price: p.outputPrice,
    cache_read_price: p.cacheReadPrice,
  };
}
