/**
 * What the catalog may know about the fleet: per-build capacity for /v1/models metadata. The provider
 * fleet (issue 3) implements this; until a provider connects every figure is zero and nothing can accept.
 */
import type { TrustLevel } from "../config/config.ts";

export interface ModelCapacity {
  readonly providerCount: number;
  readonly attestedProviders: number;
  readonly routableProviders: number;
  readonly warmProviders: number;
  readonly canAccept: boolean;
  /** Highest verified trust level among the build's providers; "none" without verified evidence. */
  readonly trustLevel: TrustLevel;
  /** Posture proven by verified evidence, when any provider has some. */
  readonly attestation?: { readonly secureEnclave: boolean; readonly sipEnabled: boolean; readonly secureBoot: boolean };
}

export interface FleetView {
  capacity(buildId: string): ModelCapacity;
}

const NONE: ModelCapacity = Object.freeze({
  providerCount: 0,
  attestedProviders: 0,
  routableProviders: 0,
  warmProviders: 0,
  canAccept: false,
  trustLevel: "none",
});

/** A fleet with no providers. */
export const emptyFleet: FleetView = { capacity: () => NONE };
