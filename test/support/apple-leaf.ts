/**
 * The simulated Mac's Managed Device Attestation leaves: issued by a development root's intermediate
 * and shaped like Apple's (the real leaf in test/fixtures/attestation/nanoca-apple-leaf.pem): a P-384
 * key signed with ecdsa-with-SHA384, no AKI, SKI or EKU, critical basic constraints (not a CA) and key
 * usage, then Apple's OIDs in Apple's order and encodings: raw strings (.10.2, .10.3, .10.1, .9.4,
 * .13.2, .9.1, .9.2), DER INTEGER posture (.13.1, .13.3) and `.11.1` = the raw nonce asked for.
 * Options: SIP off, Reduced Security, kexts allowed, no posture OIDs (a macOS 14.0 leaf), another
 * serial or UDID, a given notBefore, and raw edits of the values before they are written.
 */
import { randomBytes } from "node:crypto";
import { BasicConstraintsExtension, Extension, KeyUsageFlags, KeyUsagesExtension } from "@peculiar/x509";
import { encodeInteger } from "../../attestation/provider/der.ts";
import {
  APPLE_OID,
  type DevelopmentRoot,
  encodeBase64,
  generateSigningKeys,
  type SecureBootLevel,
} from "../../attestation/provider/index.ts";

export const SIMULATED_SERIAL = "UMBRAMAC01";
export const SIMULATED_UDID = "00008112-000A1B2C3D4E5F60";
const HARDWARE_MODEL_OID = "1.2.840.113635.100.8.9.4";
const DAY = 86_400_000;
/** Apple's leaves are valid for 91 days (2025-07-13 to 2025-10-12 in the real one). */
const VALIDITY_MS = 91 * DAY;

export interface AppleLeafOptions {
  /** The DeviceAttestationNonce echoed in `.11.1`; null: no `.11.1`. */
  readonly nonce: Uint8Array | null;
  readonly serialNumber?: string;
  readonly udid?: string;
  /** Default "15.5"; "14.0" when `posture` is false. */
  readonly osVersion?: string;
  readonly hardwareModel?: string;
  readonly sipEnabled?: boolean;
  readonly secureBoot?: SecureBootLevel;
  readonly kexts?: boolean;
  /** false: a macOS 14.0/14.1 leaf, without .13.x, .10.1, .10.3 and .9.4. */
  readonly posture?: boolean;
  /** Default: the root's clock now. */
  readonly notBefore?: number;
  readonly validityMs?: number;
  /** Changes the OID -> value map before it is written (delete an OID to omit it). */
  readonly edit?: (values: Map<string, Uint8Array>) => void;
}

const ascii = (s: string) => new TextEncoder().encode(s);

/** The Apple OID values of a leaf, in Apple's order (OID -> extnValue contents). */
export function appleLeafValues(options: AppleLeafOptions): Map<string, Uint8Array> {
  const posture = options.posture ?? true;
  const os = ascii(options.osVersion ?? (posture ? "15.5" : "14.0"));
  const values = new Map<string, Uint8Array>();
  values.set(APPLE_OID.sepOsVersion, os);
  if (posture) {
    values.set(APPLE_OID.llbVersion, os);
    values.set(APPLE_OID.osVersion, os);
    values.set(HARDWARE_MODEL_OID, ascii(options.hardwareModel ?? "J514sAP"));
    values.set(APPLE_OID.secureBoot, ascii(options.secureBoot ?? "Full Security"));
    values.set(APPLE_OID.sipStatus, encodeInteger((options.sipEnabled ?? true) ? 0n : 1n));
    values.set(APPLE_OID.kernelExtensions, encodeInteger(options.kexts ? 1n : 0n));
  }
  values.set(APPLE_OID.serialNumber, ascii(options.serialNumber ?? SIMULATED_SERIAL));
  values.set(APPLE_OID.udid, ascii(options.udid ?? SIMULATED_UDID));
  if (options.nonce !== null) values.set(APPLE_OID.freshnessCode, Uint8Array.from(options.nonce));
  options.edit?.(values);
  return values;
}

/** Every extension of the leaf: basic constraints and key usage (critical), then Apple's (not critical). */
export function appleLeafExtensions(options: AppleLeafOptions): Extension[] {
  const usage =
    KeyUsageFlags.digitalSignature | KeyUsageFlags.nonRepudiation | KeyUsageFlags.keyEncipherment | KeyUsageFlags.dataEncipherment;
  return [
    new BasicConstraintsExtension(false, undefined, true),
    new KeyUsagesExtension(usage, true),
    ...[...appleLeafValues(options)].map(([oid, value]) => new Extension(oid, false, value)),
  ];
}

/** Issues an Apple-shaped leaf from the root's intermediate: [leaf, intermediate], as DevicePropertiesAttestation carries them. */
export async function issueAppleLeaf(root: DevelopmentRoot, options: AppleLeafOptions): Promise<Uint8Array[]> {
  const keys = await generateSigningKeys("P-384");
  const notBefore = options.notBefore ?? root.now();
  const name = randomBytes(32).toString("hex");
  return root.issueLeaf({
    subject: `CN=${name}, OU=AAA Certification, O=Umbra (development), ST=California`,
    publicKey: keys.keys.publicKey,
    notBefore: new Date(notBefore),
    notAfter: new Date(notBefore + (options.validityMs ?? VALIDITY_MS)),
    extensions: appleLeafExtensions(options),
  });
}

/** The chain as the MDM answer's plist carries it: base64 DER, leaf first. */
export const chainBase64 = (chain: readonly Uint8Array[]): string[] => chain.map((der) => encodeBase64(der));
