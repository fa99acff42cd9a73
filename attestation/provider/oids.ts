/**
 * Apple's device-property extensions on a Managed Device Attestation leaf, and their decoding.
 * Every property this library relies on is required: a missing, repeated or malformed extension fails
 * closed with the check named after the property. Encodings (Apple DevicePropertiesAttestation; macOS
 * 14.2 and later for the 13.x statuses):
 *
 *   1.2.840.113635.100.8.13.1  SIP status          DER INTEGER, 0 = enabled (anything else: disabled)
 *   1.2.840.113635.100.8.13.2  Secure Boot level   string: "Full Security" | "Reduced Security" | "Permissive Security"
 *   1.2.840.113635.100.8.13.3  third-party kexts   DER INTEGER, 0 = none allowed
 *   1.2.840.113635.100.8.10.1  OS version          string, e.g. "15.1.1"
 *   1.2.840.113635.100.8.11.1  freshness code      32 raw bytes: the nonce asked for. MDM answers
 *                                                  (mda-answer.ts) need an epoch nonce of mda-nonce.ts; the
 *                                                  development-root hello path still needs SHA-256 of the
 *                                                  identity key's 65-byte point (the old constant rule)
 *   1.2.840.113635.100.8.9.1 / .9.2  serial number / UDID, raw strings (read by mda-answer.ts)
 *
 * "string": Apple stores version and status strings as bare UTF-8 in the extension value. A value that
 * starts with a DER string tag (UTF8String, PrintableString, IA5String) must be exactly one such element
 * and is read through it; either way the text must be non-empty printable ASCII of at most 64 bytes.
 */

import { decodeInteger, readWhole, TAG_IA5_STRING, TAG_PRINTABLE_STRING, TAG_UTF8_STRING } from "./der.ts";
import { bytesEqual } from "./encoding.ts";
import { type AttestationCheck, AttestationError } from "./errors.ts";
import { freshnessCodeFor, type IdentityKey } from "./identity-key.ts";
import { compareOsVersions, isOsVersion, isSecureBootLevel, type Posture, type SecureBootLevel } from "./posture.ts";

export const APPLE_OID = {
  serialNumber: "1.2.840.113635.100.8.9.1",
  udid: "1.2.840.113635.100.8.9.2",
  osVersion: "1.2.840.113635.100.8.10.1",
  sepOsVersion: "1.2.840.113635.100.8.10.2",
  llbVersion: "1.2.840.113635.100.8.10.3",
  freshnessCode: "1.2.840.113635.100.8.11.1",
  sipStatus: "1.2.840.113635.100.8.13.1",
  secureBoot: "1.2.840.113635.100.8.13.2",
  kernelExtensions: "1.2.840.113635.100.8.13.3",
} as const;

/** Every Apple device-property OID this library knows (a critical one of these is "processed"). */
export const KNOWN_APPLE_OIDS: ReadonlySet<string> = new Set(Object.values(APPLE_OID));

export const FRESHNESS_CODE_BYTES = 32;
const MAX_STRING_BYTES = 64;

/** What an Apple MDA leaf says about the device, decoded but not yet judged against policy. */
export interface AppleDeviceClaims {
  /** Raw SIP status (0 = enabled). */
  readonly sipStatus: bigint;
  readonly secureBoot: SecureBootLevel;
  /** Raw third-party kernel extension policy (0 = none allowed). */
  readonly kernelExtensions: bigint;
  readonly osVersion: string;
  readonly freshnessCode: Uint8Array;
  /** The same facts in the shape the Secure Enclave evidence reports them. */
  readonly posture: Posture;
}

export interface ApplePolicy {
  readonly minOsVersion?: string;
}

/**
 * Decodes the device properties from a leaf's extensions (OID -> extnValue contents; the caller has
 * already refused repeated extensions). Throws AttestationError(sip | secure_boot | kernel_extensions |
 * os_version | freshness_code).
 */
export function decodeAppleDeviceClaims(extensions: ReadonlyMap<string, Uint8Array>): AppleDeviceClaims {
  const need = (oid: string, check: AttestationCheck): Uint8Array => {
    const value = extensions.get(oid);
    if (value === undefined) throw new AttestationError(check, `leaf has no ${oid} extension`);
    return value;
  };
  const sipStatus = decodeInteger(need(APPLE_OID.sipStatus, "sip"), "sip", "SIP status");
  const secureBoot = decodeAppleString(need(APPLE_OID.secureBoot, "secure_boot"), "secure_boot", "Secure Boot level");
  if (!isSecureBootLevel(secureBoot)) throw new AttestationError("secure_boot", `unknown Secure Boot level ${JSON.stringify(secureBoot)}`);
  const kernelExtensions = decodeInteger(
    need(APPLE_OID.kernelExtensions, "kernel_extensions"),
    "kernel_extensions",
    "kernel extension policy",
  );
  const osVersion = decodeAppleString(need(APPLE_OID.osVersion, "os_version"), "os_version", "OS version");
  if (!isOsVersion(osVersion)) throw new AttestationError("os_version", `OS version ${JSON.stringify(osVersion)} is not a version number`);
  const freshnessCode = need(APPLE_OID.freshnessCode, "freshness_code");
  if (freshnessCode.length !== FRESHNESS_CODE_BYTES) {
    throw new AttestationError("freshness_code", `freshness code is ${freshnessCode.length} bytes, not ${FRESHNESS_CODE_BYTES}`);
  }
  return {
    sipStatus,
    secureBoot,
    kernelExtensions,
    osVersion,
    freshnessCode: Uint8Array.from(freshnessCode),
    posture: { sipEnabled: sipStatus === 0n, secureBoot, thirdPartyKexts: kernelExtensions !== 0n, osVersion },
  };
}

/**
 * Judges decoded claims: SIP enabled, Full Security, no third-party kernel extensions, minimum OS
 * version, and the freshness code bound to `identityKey` by the old constant rule (SHA-256 of the
 * point). Only the development-root hello path (trust.ts) uses it, until MDM answers (mda-answer.ts,
 * rotating epoch nonces) replace that path too. Throws AttestationError(sip | secure_boot |
 * kernel_extensions | os_version | freshness_code).
 */
export function checkAppleDeviceClaims(claims: AppleDeviceClaims, identityKey: IdentityKey, policy: ApplePolicy = {}): void {
  if (claims.sipStatus !== 0n) throw new AttestationError("sip", `SIP status is ${claims.sipStatus} (0 = enabled)`);
  if (claims.secureBoot !== "Full Security") throw new AttestationError("secure_boot", `Secure Boot is "${claims.secureBoot}"`);
  if (claims.kernelExtensions !== 0n) throw new AttestationError("kernel_extensions", "third-party kernel extensions are allowed");
  if (policy.minOsVersion !== undefined && compareOsVersions(claims.osVersion, policy.minOsVersion) < 0) {
    throw new AttestationError("os_version", `macOS ${claims.osVersion} is older than the minimum ${policy.minOsVersion}`);
  }
  if (!bytesEqual(claims.freshnessCode, freshnessCodeFor(identityKey))) {
    throw new AttestationError("freshness_code", "freshness code is not SHA-256 of the identity key");
  }
}

const STRING_TAGS: ReadonlySet<number> = new Set([TAG_UTF8_STRING, TAG_PRINTABLE_STRING, TAG_IA5_STRING]);

/** Reads a bare or DER-wrapped printable ASCII string extension value. Throws AttestationError(check). */
export function decodeAppleString(value: Uint8Array, check: AttestationCheck, what: string): string {
  let text = value;
  if (value.length > 0 && STRING_TAGS.has(value[0]!)) text = readWhole(value, check, what).value;
  if (text.length === 0 || text.length > MAX_STRING_BYTES) throw new AttestationError(check, `${what} is empty or too long`);
  for (const b of text) {
    if (b < 0x20 || b > 0x7e) throw new AttestationError(check, `${what} is not printable ASCII`);
  }
  return String.fromCharCode(...text);
}
