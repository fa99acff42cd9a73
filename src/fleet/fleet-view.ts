/**
 * What the catalog may know about the fleet: per-build capacity for /v1/models metadata. Fleet
 * (fleet.ts) implements it; tests pass their own to pin the metadata.
 */
import type { SummaryAttestation, TrustLevel } from "../../attestation/provider/levels.ts";

export interface ModelCapacity {
  readonly providerCount: number;
  readonly attestedProviders: number;
  readonly routableProviders: number;
  readonly warmProviders: number;
  readonly canAccept: boolean;
  /** Highest verified trust level among the build's providers; "none" without verified evidence. */
  readonly trustLevel: TrustLevel;
  /** Posture proven by verified evidence, when any provider has some. */
  readonly attestation?: SummaryAttestation;
}

export interface FleetView {
  capacity(buildId: string): ModelCapacity;
}
