/**
 * Security posture of a provider Mac: the four facts both the Secure Enclave evidence (self-reported,
 * signed by the identity key) and the Apple MDA leaf (vouched for by Apple) carry.
 *
 * JSON form (inside signed payloads; exactly these fields):
 *   { "sip_enabled": true, "secure_boot": "Full Security", "third_party_kexts": false, "os_version": "15.1.1" }
 *
 * - sip_enabled: System Integrity Protection on.
 * - secure_boot: one of Apple's three strings, "Full Security", "Reduced Security", "Permissive Security".
 * - third_party_kexts: whether third-party kernel extensions may load.
 * - os_version: macOS version, one to three dot-separated decimal components ("15", "15.1", "15.1.1").
 *
 * Policy (fixed, fails closed): SIP on, Full Security, no third-party kernel extensions, and an
 * optional minimum OS version.
 */

import { objectOf, onlyFields } from "./encoding.ts";
import { type AttestationCheck, AttestationError } from "./errors.ts";

export const FULL_SECURITY = "Full Security";
export const SECURE_BOOT_LEVELS = [FULL_SECURITY, "Reduced Security", "Permissive Security"] as const;
export type SecureBootLevel = (typeof SECURE_BOOT_LEVELS)[number];

const OS_VERSION = /^(?:0|[1-9]\d{0,3})(?:\.(?:0|[1-9]\d{0,3})){0,2}$/;

export interface Posture {
  readonly sipEnabled: boolean;
  readonly secureBoot: SecureBootLevel;
  readonly thirdPartyKexts: boolean;
  readonly osVersion: string;
}

export interface PosturePolicy {
  /** Lowest acceptable macOS version ("14.2"), compared component by component. */
  readonly minOsVersion?: string;
}

const FIELDS = ["sip_enabled", "secure_boot", "third_party_kexts", "os_version"] as const;

/** Reads the JSON posture object. Throws AttestationError(check) on a missing, extra or mistyped field. */
export function parsePosture(value: unknown, check: AttestationCheck): Posture {
  const o = objectOf(value, check, "posture");
  onlyFields(o, FIELDS, check, "posture");
  const { sip_enabled, secure_boot, third_party_kexts, os_version } = o;
  if (typeof sip_enabled !== "boolean") throw new AttestationError(check, "posture.sip_enabled must be a boolean");
  if (!isSecureBootLevel(secure_boot)) throw new AttestationError(check, "posture.secure_boot is not an Apple secure boot level");
  if (typeof third_party_kexts !== "boolean") throw new AttestationError(check, "posture.third_party_kexts must be a boolean");
  if (!isOsVersion(os_version)) throw new AttestationError(check, "posture.os_version is not a version number");
  return { sipEnabled: sip_enabled, secureBoot: secure_boot, thirdPartyKexts: third_party_kexts, osVersion: os_version };
}

/** The JSON form of a posture (for builders of evidence; verification never re-serializes). */
export function postureJson(p: Posture): Record<string, unknown> {
  return { sip_enabled: p.sipEnabled, secure_boot: p.secureBoot, third_party_kexts: p.thirdPartyKexts, os_version: p.osVersion };
}

/** Throws AttestationError(check) unless the posture meets policy. */
export function checkPosture(p: Posture, policy: PosturePolicy, check: AttestationCheck): void {
  if (!p.sipEnabled) throw new AttestationError(check, "System Integrity Protection is disabled");
  if (p.secureBoot !== FULL_SECURITY) throw new AttestationError(check, `secure boot is "${p.secureBoot}", not "${FULL_SECURITY}"`);
  if (p.thirdPartyKexts) throw new AttestationError(check, "third-party kernel extensions are allowed");
  if (policy.minOsVersion !== undefined && compareOsVersions(p.osVersion, policy.minOsVersion) < 0) {
    throw new AttestationError(check, `macOS ${p.osVersion} is older than the minimum ${policy.minOsVersion}`);
  }
}

export function samePosture(a: Posture, b: Posture): boolean {
  return (
    a.sipEnabled === b.sipEnabled && a.secureBoot === b.secureBoot && a.thirdPartyKexts === b.thirdPartyKexts && a.osVersion === b.osVersion
  );
}

export function isSecureBootLevel(value: unknown): value is SecureBootLevel {
  return typeof value === "string" && (SECURE_BOOT_LEVELS as readonly string[]).includes(value);
}

export function isOsVersion(value: unknown): value is string {
  return typeof value === "string" && OS_VERSION.test(value);
}

/** Compares dotted versions numerically; a missing component counts as 0 ("15" == "15.0"). */
export function compareOsVersions(a: string, b: string): number {
  const x = a.split(".").map(Number);
  const y = b.split(".").map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}
