/**
 * Trust levels and what the rest of the coordinator reads from verified attestations: the routing
 * floor comparison, the /v1/models summary and a withdrawn trust. Nothing here parses certificates, so
 * the coordinator loads this at start and the chain checks (trust.ts, mda-chain.ts, @peculiar/x509)
 * only when the first provider presents evidence. Levels and the summary's rules: trust.ts's header.
 */
import type { AttestationCheck, AttestationError } from "./errors.ts";
import type { IdentityKey } from "./identity-key.ts";
import { FULL_SECURITY, type Posture } from "./posture.ts";

export const TRUST_LEVELS = ["none", "self_signed", "hardware"] as const;
export type TrustLevel = (typeof TRUST_LEVELS)[number];

export function trustRank(level: TrustLevel): number {
  return TRUST_LEVELS.indexOf(level);
}

export function meetsTrustFloor(level: TrustLevel, floor: TrustLevel): boolean {
  return trustRank(level) >= trustRank(floor);
}

export function isTrustLevel(value: unknown): value is TrustLevel {
  return typeof value === "string" && (TRUST_LEVELS as readonly string[]).includes(value);
}

/** Where a provider's device chain came from: its MDM answer, stored and re-checked (issue 23), or the hello's own. */
export type DeviceChainSource = "mdm" | "evidence";

/**
 * A stored MDM attestation chain that passes now for the connection's identity key (src/mdm/device-trust.ts):
 * it raises a self_signed connection to hardware until `acceptedUntil`.
 */
export interface DeviceChainVouch {
  readonly source: "mdm";
  /** The last millisecond the chain still passes (Unix ms). */
  readonly acceptedUntil: number;
  /** What the chain proves: SIP on, Full Security, no kexts, its OS version. */
  readonly posture: Posture;
  readonly chainSha256: string;
}

/** The verified facts about one provider connection. */
export interface ProviderAttestation {
  readonly level: TrustLevel;
  /** Secure Enclave evidence verified. */
  readonly secureEnclave: boolean;
  /** An MDA chain verified to the anchor and bound to the identity key. */
  readonly mdaVerified: boolean;
  readonly identityKey?: IdentityKey;
  readonly encryptionKey?: Uint8Array;
  /** The accepted posture (self-reported, and for hardware also proven by the chain). */
  readonly posture?: Posture;
  /** Why the level is none, when evidence was presented and refused (or trust was withdrawn). */
  readonly failure?: { readonly check: AttestationCheck; readonly message: string };
  /** The stored MDM chain that raised this connection to hardware (absent for the hello's own chain). */
  readonly deviceChain?: DeviceChainVouch;
}

/** The device chain's source of a hardware attestation, else null. */
export function deviceChainSource(a: ProviderAttestation | undefined): DeviceChainSource | null {
  if (a === undefined || a.level !== "hardware" || !a.mdaVerified) return null;
  return a.deviceChain ? a.deviceChain.source : "evidence";
}

/**
 * A self_signed connection raised by a stored chain: hardware, the chain recorded. Unchanged unless the
 * attestation is self_signed with Secure Enclave evidence whose reported SIP, Secure Boot and kexts are the
 * ones the chain proves (a contradiction fails closed: no raise).
 */
export function vouchedAttestation(a: ProviderAttestation, vouch: DeviceChainVouch): ProviderAttestation {
  const base = unvouchedAttestation(a);
  const p = base.posture;
  if (base.level !== "self_signed" || !base.secureEnclave || p === undefined) return a;
  const same =
    p.sipEnabled === vouch.posture.sipEnabled &&
    p.secureBoot === vouch.posture.secureBoot &&
    p.thirdPartyKexts === vouch.posture.thirdPartyKexts;
  return same ? { ...base, level: "hardware", mdaVerified: true, deviceChain: vouch } : base;
}

/** A connection raised by a stored chain, back at self_signed (the chain lapsed or is gone); others unchanged. */
export function unvouchedAttestation(a: ProviderAttestation): ProviderAttestation {
  if (a.deviceChain === undefined) return a;
  const { deviceChain: _, ...rest } = a;
  return rest.level === "hardware" ? { ...rest, level: "self_signed", mdaVerified: false } : rest;
}

/** What a provider without (accepted) evidence earns. */
export const NO_EVIDENCE: ProviderAttestation = Object.freeze({ level: "none", secureEnclave: false, mdaVerified: false });

/** The same provider after a failed challenge: level none, nothing verified, the failure recorded. */
export function withdrawTrust(attestation: ProviderAttestation, error: AttestationError): ProviderAttestation {
  const { identityKey, encryptionKey } = attestation;
  return {
    ...NO_EVIDENCE,
    ...(identityKey ? { identityKey } : {}),
    ...(encryptionKey ? { encryptionKey } : {}),
    failure: { check: error.check, message: error.message },
  };
}

/** The attestation part of /v1/models metadata (field names as in the fleet's ModelCapacity). */
export interface AttestationSummary {
  readonly attestedProviders: number;
  readonly trustLevel: TrustLevel;
  readonly attestation?: SummaryAttestation;
}

export interface SummaryAttestation {
  readonly secureEnclave: boolean;
  readonly sipEnabled: boolean;
  readonly secureBoot: boolean;
  /** Every attested provider's level rests on a verified device chain. */
  readonly deviceChainVerified: boolean;
  /** The sources of those chains among the attested providers, sorted ([] without any). */
  readonly deviceChainSources: readonly DeviceChainSource[];
}

const sources = (list: Iterable<DeviceChainSource | null | undefined>): DeviceChainSource[] =>
  [...new Set([...list].filter((s): s is DeviceChainSource => s !== null && s !== undefined))].sort();

/**
 * What one provider adds to a summary, as a replica tells the others (cluster fleet digests): its level,
 * and each posture fact only as far as verified evidence proves it.
 */
export interface AttestationFacts {
  readonly level: TrustLevel;
  readonly secureEnclave: boolean;
  readonly sipEnabled: boolean;
  readonly secureBoot: boolean;
  /** Which device chain vouched for a hardware level (null or absent below it; absent from older replicas). */
  readonly deviceChain?: DeviceChainSource | null;
}

export function attestationFacts(p: ProviderAttestation): AttestationFacts {
  const proven = p.level === "hardware" && p.mdaVerified && p.posture !== undefined;
  return {
    level: p.level,
    secureEnclave: p.secureEnclave,
    sipEnabled: proven && p.posture?.sipEnabled === true,
    secureBoot: proven && p.posture?.secureBoot === FULL_SECURITY,
    deviceChain: deviceChainSource(p),
  };
}

/** Summarizes the facts of one model's providers (see the file header). */
export function summarizeFacts(providers: readonly AttestationFacts[]): AttestationSummary {
  const attested = providers.filter((p) => p.level !== "none");
  if (attested.length === 0) return { attestedProviders: 0, trustLevel: "none" };
  const trustLevel = attested.reduce<TrustLevel>((best, p) => (trustRank(p.level) > trustRank(best) ? p.level : best), "none");
  return {
    attestedProviders: attested.length,
    trustLevel,
    attestation: {
      secureEnclave: attested.every((p) => p.secureEnclave),
      sipEnabled: attested.every((p) => p.sipEnabled),
      secureBoot: attested.every((p) => p.secureBoot),
      deviceChainVerified: attested.every((p) => p.deviceChain !== null && p.deviceChain !== undefined),
      deviceChainSources: sources(attested.map((p) => p.deviceChain)),
    },
  };
}

/** Summarizes the current attestations of one model's providers (see the file header). */
export function summarizeAttestation(providers: readonly ProviderAttestation[]): AttestationSummary {
  return summarizeFacts(providers.map(attestationFacts));
}

/** The summary of two disjoint sets of providers from theirs (the same as summarizing them together). */
export function mergeSummaries(a: AttestationSummary, b: AttestationSummary): AttestationSummary {
  if (b.attestation === undefined) return a;
  if (a.attestation === undefined) return b;
  return {
    attestedProviders: a.attestedProviders + b.attestedProviders,
    trustLevel: trustRank(b.trustLevel) > trustRank(a.trustLevel) ? b.trustLevel : a.trustLevel,
    attestation: {
      secureEnclave: a.attestation.secureEnclave && b.attestation.secureEnclave,
      sipEnabled: a.attestation.sipEnabled && b.attestation.sipEnabled,
      secureBoot: a.attestation.secureBoot && b.attestation.secureBoot,
      deviceChainVerified: a.attestation.deviceChainVerified && b.attestation.deviceChainVerified,
      deviceChainSources: sources([...a.attestation.deviceChainSources, ...b.attestation.deviceChainSources]),
    },
  };
}
