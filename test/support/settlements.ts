/** Settlements for tests of the money path (stores, wallets, journal), from the few fields that vary. */
import type { Settlement } from "../../src/store/types.ts";

export const SETTLEMENT_T0 = 1_790_000_000_000;

export interface SettlementDraft {
  readonly requestId: string;
  readonly accountId: string;
  readonly charge: number;
  readonly keyId?: string | null;
  /** Null or absent: nobody earns and the whole charge is the fee. */
  readonly providerAccountId?: string | null;
  /** Defaults to 10% of the charge, rounded up (the whole charge without a provider). */
  readonly fee?: number;
  /** Defaults to SETTLEMENT_T0. */
  readonly at?: number;
}

export function settlementOf(d: SettlementDraft): Settlement {
  const providerAccountId = d.providerAccountId ?? null;
  const keyId = d.keyId ?? null;
  const fee = d.fee ?? (providerAccountId === null ? d.charge : Math.ceil(d.charge / 10));
  const at = d.at ?? SETTLEMENT_T0;
  return {
    requestId: d.requestId,
    accountId: d.accountId,
    keyId,
    charge: d.charge,
    providerAccountId,
    earning: d.charge - fee,
    fee,
    at,
    usage: {
      requestId: d.requestId,
      accountId: d.accountId,
      keyId,
      model: "org/model",
      buildId: "org/build-4bit",
      providerId: providerAccountId === null ? null : `provider-of-${providerAccountId}`,
      promptTokens: 100 + d.charge,
      cachedTokens: 10,
      completionTokens: 20,
      cost: d.charge,
      startedAt: at - 900,
      firstContentMs: 35,
      durationMs: 900,
      outcome: "completed",
    },
  };
}
