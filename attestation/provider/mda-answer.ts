/**
 * An MDM DeviceInformation answer carrying an Apple Managed Device Attestation chain
 * (QueryResponses.DevicePropertiesAttestation, DER, leaf first), judged for one enrolment and one
 * identity key. The same function re-checks a stored chain at a reconnect: every input is stored
 * (the chain, the answered SerialNumber and ProvisioningUDID, the enrolment's serial, the key), so
 * only the clock differs. Pure: no I/O; the clock is injected.
 *
 * Checks, in order (each failure is an AttestationError naming the check):
 *  0. identity_key          the key is a P-256 point (64 or 65 bytes; the 65-byte form is canonical)
 *  1. development_root, chain_*  verifyMdaPath (mda-chain.ts) steps 1-12, without its chain_age
 *                           (the age bound here is mda_age)
 *  2. mda_freshness         OID .11.1 present and equal (constant time) to an accepted nonce of
 *                           mda-nonce.ts for THIS identity key: current epoch or the two before it
 *  3. mda_age               the leaf's notBefore at most 21 days before now
 *  4. mda_posture_missing   OIDs .13.1 (SIP), .13.2 (Secure Boot), .13.3 (kexts) and .10.1 (OS version)
 *                           all present (Apple adds them from macOS 14.2); .10.1 a version number
 *  5. mda_sip               .13.1 one minimal DER INTEGER, 0 (enabled)
 *  6. mda_secure_boot       .13.2 a string (bare or one DER string element), exactly "Full Security"
 *  7. mda_kexts             .13.3 one minimal DER INTEGER, 0 (no third-party kernel extensions)
 *  8. mda_serial            .9.1 (raw string) = the answered SerialNumber = the enrolment's serial (exact)
 *  9. mda_udid              .9.2 (raw string) = the answered ProvisioningUDID (exact)
 *
 * chainSha256 is the hex SHA-256 of the certificates' DER as received, concatenated leaf first (DER is
 * self-delimiting and chain_format admits one element per entry). acceptedUntil is the last millisecond
 * a re-check still passes: the earliest of the nonce's epoch window, the 21-day age bound and the
 * certificates' notAfter.
 *
 * The development-root hello path does not come here: it keeps the old constant rule (freshness code =
 * SHA-256 of the identity key) in oids.ts checkAppleDeviceClaims, called by trust.ts, for
 * `--dev-attestation` without MDM mode only; in MDM mode hardware comes from a stored chain re-checked
 * here (src/mdm/device-trust.ts) and a hello's own chain earns nothing above self_signed.
 */
import "./preload.ts";
import { sha256 } from "@noble/hashes/sha2.js";
import { X509Certificate } from "@peculiar/x509";
import { decodeInteger, readWhole } from "./der.ts";
import { bytesEqual, toHex } from "./encoding.ts";
import { type AttestationCheck, AttestationError } from "./errors.ts";
import { parseIdentityKey } from "./identity-key.ts";
import { verifyMdaPath } from "./mda-chain.ts";
import { acceptedMdaNonces, mdaEpochAcceptedUntil } from "./mda-nonce.ts";
import { APPLE_OID, decodeAppleString } from "./oids.ts";
import { FULL_SECURITY, isOsVersion, type Posture } from "./posture.ts";
import type { TrustAnchor, TrustMode } from "./roots.ts";

/** The oldest leaf accepted: 21 days since its notBefore. */
export const MDA_MAX_LEAF_AGE_MS = 21 * 86_400_000;

export interface MdaAnswerInput {
  /** DevicePropertiesAttestation: DER certificates, leaf first. */
  readonly chain: readonly Uint8Array[];
  /** The answer's QueryResponses.SerialNumber. */
  readonly serialNumber: string | undefined;
  /** The answer's QueryResponses.ProvisioningUDID. */
  readonly provisioningUdid: string | undefined;
  /** The serial the enrolment was bound to (the check-in's SerialNumber). */
  readonly enrolmentSerial: string;
  /** The enrolment's identity key: the 65-byte uncompressed P-256 point. */
  readonly identityKey: Uint8Array;
}

export interface MdaAnswerOptions {
  /** UMBRA_MDA_SEED, at least 32 bytes. */
  readonly seed: Uint8Array;
  readonly anchor: TrustAnchor;
  readonly mode: TrustMode;
  readonly now: () => number;
}

/** What a chain that passed every check proves about the Mac. */
export interface MdaClaims {
  readonly serialNumber: string;
  readonly udid: string;
  readonly osVersion: string;
  /** Always SIP on, Full Security, no kexts (anything else was refused), with the proven OS version. */
  readonly posture: Posture;
  /** The leaf's .11.1: the nonce of `freshnessEpoch`. */
  readonly freshnessCode: Uint8Array;
}

export interface VerifiedMdaAnswer {
  readonly claims: MdaClaims;
  /** The leaf's notBefore, Unix milliseconds. */
  readonly leafNotBefore: number;
  /** The epoch whose nonce the leaf carries. */
  readonly freshnessEpoch: number;
  /** Hex SHA-256 of the certificates as received (file header). */
  readonly chainSha256: string;
  /** The last millisecond at which re-checking this answer still passes (file header). */
  readonly acceptedUntil: number;
}

/**
 * Verifies an answer (or re-checks a stored one). Throws AttestationError: identity_key,
 * development_root, chain_*, then mda_* in the order of the file header; RangeError for a seed under 32
 * bytes (a configuration error, refused at start by src/config/mda-seed.ts).
 */
export async function verifyMdaAnswer(input: MdaAnswerInput, options: MdaAnswerOptions): Promise<VerifiedMdaAnswer> {
  const key = parseIdentityKey(input.identityKey);
  const { path, leafExtensions } = await verifyMdaPath(input.chain, {
    anchor: options.anchor,
    mode: options.mode,
    now: options.now,
    maxCertificateAgeMs: null,
  });
  const leafNotBefore = path[0]!.notBefore.getTime();
  const judged = checkMdaLeaf(leafExtensions, leafNotBefore, input, key.point, options);
  const notAfter = Math.min(...path.map((cert) => cert.notAfter.getTime()));
  return {
    ...judged,
    leafNotBefore,
    chainSha256: toHex(sha256(concat(input.chain))),
    acceptedUntil: Math.min(mdaEpochAcceptedUntil(judged.freshnessEpoch), leafNotBefore + MDA_MAX_LEAF_AGE_MS, notAfter),
  };
}

/**
 * Checks 2-9 on a leaf's extensions (OID -> extnValue contents), for a chain already verified to its
 * anchor. Exported for vectors whose issuer is not at hand. `identityPoint` is the 65-byte point.
 * Throws AttestationError(mda_*); RangeError for a seed under 32 bytes or a point of another length.
 */
export function checkMdaLeaf(
  extensions: ReadonlyMap<string, Uint8Array>,
  leafNotBefore: number,
  answer: Pick<MdaAnswerInput, "serialNumber" | "provisioningUdid" | "enrolmentSerial">,
  identityPoint: Uint8Array,
  options: Pick<MdaAnswerOptions, "seed" | "now">,
): { claims: MdaClaims; freshnessEpoch: number } {
  const now = options.now();
  const freshnessCode = extensions.get(APPLE_OID.freshnessCode);
  if (freshnessCode === undefined) throw new AttestationError("mda_freshness", "the leaf has no freshness code (.11.1)");
  const match = acceptedMdaNonces(options.seed, now, identityPoint).find((n) => bytesEqual(n.nonce, freshnessCode));
  if (match === undefined) {
    throw new AttestationError(
      "mda_freshness",
      "the freshness code is not this identity key's nonce of the current or the two previous epochs",
    );
  }
  if (now - leafNotBefore > MDA_MAX_LEAF_AGE_MS) {
    throw new AttestationError("mda_age", `the leaf was issued ${Math.floor((now - leafNotBefore) / 3_600_000)} h ago, beyond 21 days`);
  }

  const postureOids = [APPLE_OID.sipStatus, APPLE_OID.secureBoot, APPLE_OID.kernelExtensions, APPLE_OID.osVersion];
  const absent = postureOids.filter((oid) => !extensions.has(oid));
  if (absent.length > 0) {
    throw new AttestationError("mda_posture_missing", `the leaf has no ${absent.join(", ")} (posture needs macOS 14.2 or later)`);
  }
  const field = <K extends keyof MdaLeafFields>(name: K) => decodeField(extensions, name);
  const osVersion = field("osVersion")!;
  const sipStatus = field("sipStatus");
  if (sipStatus !== 0n) throw new AttestationError("mda_sip", `SIP status is ${sipStatus} (0 = enabled)`);
  const secureBoot = field("secureBoot");
  if (secureBoot !== FULL_SECURITY) throw new AttestationError("mda_secure_boot", `Secure Boot is "${secureBoot}"`);
  if (field("kernelExtensions") !== 0n) throw new AttestationError("mda_kexts", "third-party kernel extensions are allowed");

  const serial = field("serialNumber");
  if (serial === undefined) throw new AttestationError("mda_serial", "the leaf has no serial number (.9.1)");
  if (answer.serialNumber !== serial) {
    throw new AttestationError("mda_serial", "the leaf's serial number differs from the answered SerialNumber");
  }
  if (answer.enrolmentSerial !== serial) throw new AttestationError("mda_serial", "the leaf's serial number differs from the enrolment's");
  const udid = field("udid");
  if (udid === undefined) throw new AttestationError("mda_udid", "the leaf has no UDID (.9.2)");
  if (answer.provisioningUdid !== udid) {
    throw new AttestationError("mda_udid", "the leaf's UDID differs from the answered ProvisioningUDID");
  }

  return {
    claims: {
      serialNumber: serial,
      udid,
      osVersion,
      posture: { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion },
      freshnessCode: Uint8Array.from(freshnessCode),
    },
    freshnessEpoch: match.epoch,
  };
}

/** A leaf's Apple device properties, decoded but not judged; a field is absent when its OID is. */
export interface MdaLeafFields {
  readonly freshnessCode?: Uint8Array;
  readonly sipStatus?: bigint;
  readonly secureBoot?: string;
  readonly kernelExtensions?: bigint;
  readonly osVersion?: string;
  readonly serialNumber?: string;
  readonly udid?: string;
}

type Decoders = { readonly [K in keyof MdaLeafFields]-?: readonly [oid: string, decode: (value: Uint8Array) => MdaLeafFields[K]] };

const appleText = (check: AttestationCheck, what: string) => (value: Uint8Array) => decodeAppleString(value, check, what);

/** Each field's OID and decoder; a decoder throws the check of its property. */
const DECODERS: Decoders = {
  freshnessCode: [APPLE_OID.freshnessCode, (value) => Uint8Array.from(value)],
  sipStatus: [APPLE_OID.sipStatus, (value) => decodeInteger(value, "mda_sip", "SIP status")],
  secureBoot: [APPLE_OID.secureBoot, appleText("mda_secure_boot", "Secure Boot level")],
  kernelExtensions: [APPLE_OID.kernelExtensions, (value) => decodeInteger(value, "mda_kexts", "kernel extension policy")],
  osVersion: [
    APPLE_OID.osVersion,
    (value) => {
      const text = appleText("mda_posture_missing", "OS version")(value);
      if (!isOsVersion(text)) throw new AttestationError("mda_posture_missing", "the leaf's OS version is not a version number");
      return text;
    },
  ],
  serialNumber: [APPLE_OID.serialNumber, appleText("mda_serial", "serial number")],
  udid: [APPLE_OID.udid, appleText("mda_udid", "UDID")],
};

function decodeField<K extends keyof MdaLeafFields>(extensions: ReadonlyMap<string, Uint8Array>, name: K): MdaLeafFields[K] {
  const [oid, decode]: Decoders[K] = DECODERS[name];
  const value = extensions.get(oid);
  return value === undefined ? undefined : (decode as (value: Uint8Array) => MdaLeafFields[K])(value);
}

/**
 * Decodes the properties of checks 2-9 from a leaf's extensions, without judging them. A malformed value
 * throws the check of its property: mda_sip, mda_secure_boot, mda_kexts, mda_posture_missing (OS
 * version), mda_serial, mda_udid.
 */
export function decodeMdaLeaf(extensions: ReadonlyMap<string, Uint8Array>): MdaLeafFields {
  const out: { -readonly [K in keyof MdaLeafFields]: MdaLeafFields[K] } = {};
  for (const name of Object.keys(DECODERS) as (keyof MdaLeafFields)[]) {
    const value = decodeField(extensions, name);
    if (value !== undefined) Object.assign(out, { [name]: value });
  }
  return out;
}

/**
 * The extensions (OID -> extnValue contents) of one DER certificate, for reading a leaf on its own
 * (a stored chain's facts, vectors). Throws AttestationError(chain_format | chain_critical_extension).
 */
export function leafExtensions(der: Uint8Array): Map<string, Uint8Array> {
  let cert: X509Certificate;
  try {
    readWhole(der, "chain_format", "leaf");
    cert = new X509Certificate(der);
  } catch (e) {
    if (e instanceof AttestationError) throw e;
    throw new AttestationError("chain_format", "the leaf does not parse");
  }
  const out = new Map<string, Uint8Array>();
  for (const ext of cert.extensions) {
    if (out.has(ext.type)) throw new AttestationError("chain_critical_extension", `the leaf repeats extension ${ext.type}`);
    out.set(ext.type, new Uint8Array(ext.value));
  }
  return out;
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
