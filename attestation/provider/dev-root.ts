/**
 * Development trust: a generated root that issues MDA-shaped chains, so development and tests go
 * through exactly the verification code production uses (mda-chain.ts, oids.ts, trust.ts); only the
 * anchor differs, and production mode refuses it (roots.ts assertAnchorAllowed).
 *
 * What DevelopmentRoot.generate creates (WebCrypto keys, certificates by @peculiar/x509):
 *   root          "Umbra Development Attestation Root CA", P-384, self-signed, cA, pathLen 1, keyCertSign+cRLSign
 *   intermediate  "Umbra Development Attestation Sub CA", P-384, cA, pathLen 0, keyCertSign+cRLSign
 *   leaf          per device (issueDeviceChain): fresh P-256 key, digitalSignature, the Apple device
 *                 property extensions of oids.ts with their Apple encodings, freshness code =
 *                 SHA-256 of the identity key (the old constant rule, which only the development-root
 *                 hello path still checks: oids.ts checkAppleDeviceClaims)
 *   other leaves  issueLeaf signs any leaf the caller builds (test/support/apple-leaf.ts: Apple-shaped
 *                 leaves carrying an epoch nonce of mda-nonce.ts, for MDM answers)
 *
 * The lower-level builders (issueCertificate, caExtensions, appleExtensionValues, toExtensions) are the
 * one generator path: tests use them to build valid and deliberately broken chains.
 * Private keys stay in memory; nothing is written to disk.
 */
import "./preload.ts";
import { BasicConstraintsExtension, Extension, KeyUsageFlags, KeyUsagesExtension, X509CertificateGenerator } from "@peculiar/x509";
import { encodeInteger } from "./der.ts";
import { freshnessCodeFor, parseIdentityKey } from "./identity-key.ts";
import { APPLE_OID } from "./oids.ts";
import type { Posture } from "./posture.ts";
import { TrustAnchor } from "./roots.ts";

export type CurveName = "P-256" | "P-384";

export const DEV_ROOT_NAME = "CN=Umbra Development Attestation Root CA, O=Umbra (development)";
export const DEV_INTERMEDIATE_NAME = "CN=Umbra Development Attestation Sub CA, O=Umbra (development)";

const HOUR = 60 * 60 * 1000;
const DAY = 24 * HOUR;
/** Backdating of notBefore, for clocks slightly behind the issuer's. */
const BACKDATE_MS = 5 * 60 * 1000;

export interface SigningKeys {
  readonly keys: CryptoKeyPair;
  readonly curve: CurveName;
}

export async function generateSigningKeys(curve: CurveName = "P-384"): Promise<SigningKeys> {
  const keys = (await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: curve }, true, ["sign", "verify"])) as CryptoKeyPair;
  return { keys, curve };
}

export interface Issuer {
  /** Distinguished name written as the issuer ("CN=..., O=..."). */
  readonly name: string;
  readonly signing: SigningKeys;
}

export interface CertificateSpec {
  readonly subject: string;
  readonly publicKey: CryptoKey;
  /** Absent: self-signed with `self`. */
  readonly issuer?: Issuer;
  readonly self?: SigningKeys;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly extensions: readonly Extension[];
}

/** Issues one certificate and returns its DER. */
export async function issueCertificate(spec: CertificateSpec): Promise<Uint8Array> {
  const signing = spec.issuer?.signing ?? spec.self;
  if (!signing) throw new Error("issueCertificate needs an issuer or self keys");
  const cert = await X509CertificateGenerator.create(
    {
      subject: spec.subject,
      issuer: spec.issuer?.name ?? spec.subject,
      publicKey: spec.publicKey,
      signingKey: signing.keys.privateKey,
      notBefore: spec.notBefore,
      notAfter: spec.notAfter,
      extensions: [...spec.extensions],
      signingAlgorithm: { name: "ECDSA", hash: signing.curve === "P-384" ? "SHA-384" : "SHA-256" },
    },
    crypto,
  );
  return new Uint8Array(cert.rawData);
}

/** Basic constraints (cA, critical) and key usage keyCertSign + cRLSign (critical). */
export function caExtensions(pathLength?: number): Extension[] {
  return [
    new BasicConstraintsExtension(true, pathLength, true),
    new KeyUsagesExtension(KeyUsageFlags.keyCertSign | KeyUsageFlags.cRLSign, true),
  ];
}

/** Key usage digitalSignature (critical), as on a device leaf. */
export function leafKeyUsage(): Extension {
  return new KeyUsagesExtension(KeyUsageFlags.digitalSignature, true);
}

/** Apple's device property extension values (OID -> extnValue contents) for a posture and freshness code. */
export function appleExtensionValues(posture: Posture, freshnessCode: Uint8Array): Map<string, Uint8Array> {
  const ascii = (s: string) => new TextEncoder().encode(s);
  return new Map<string, Uint8Array>([
    [APPLE_OID.sipStatus, encodeInteger(posture.sipEnabled ? 0n : 1n)],
    [APPLE_OID.secureBoot, ascii(posture.secureBoot)],
    [APPLE_OID.kernelExtensions, encodeInteger(posture.thirdPartyKexts ? 1n : 0n)],
    [APPLE_OID.osVersion, ascii(posture.osVersion)],
    [APPLE_OID.freshnessCode, Uint8Array.from(freshnessCode)],
  ]);
}

/** Extensions from OID -> value pairs (non-critical unless listed in `critical`). */
export function toExtensions(values: ReadonlyMap<string, Uint8Array>, critical: ReadonlySet<string> = new Set()): Extension[] {
  return [...values].map(([oid, value]) => new Extension(oid, critical.has(oid), value));
}

export interface DeviceChainRequest {
  /** The provider's identity key, 64 or 65 bytes. */
  readonly identityKey: Uint8Array;
  readonly posture: Posture;
}

/** A generated development root with its intermediate; issues MDA-shaped device chains. */
export class DevelopmentRoot {
  private constructor(
    readonly anchor: TrustAnchor,
    readonly intermediateDer: Uint8Array,
    private readonly intermediate: Issuer,
    /** The clock the root was generated with. */
    readonly now: () => number,
  ) {}

  /** Generates a root valid for `validityMs` (default 1 year) from now, and its intermediate. */
  static async generate(now: () => number, validityMs = 365 * DAY): Promise<DevelopmentRoot> {
    const t = now();
    const notBefore = new Date(t - BACKDATE_MS);
    const notAfter = new Date(t + validityMs);
    const rootKeys = await generateSigningKeys("P-384");
    const rootDer = await issueCertificate({
      subject: DEV_ROOT_NAME,
      publicKey: rootKeys.keys.publicKey,
      self: rootKeys,
      notBefore,
      notAfter,
      extensions: caExtensions(1),
    });
    const subKeys = await generateSigningKeys("P-384");
    const intermediateDer = await issueCertificate({
      subject: DEV_INTERMEDIATE_NAME,
      publicKey: subKeys.keys.publicKey,
      issuer: { name: DEV_ROOT_NAME, signing: rootKeys },
      notBefore,
      notAfter,
      extensions: caExtensions(0),
    });
    return new DevelopmentRoot(TrustAnchor.development(rootDer), intermediateDer, { name: DEV_INTERMEDIATE_NAME, signing: subKeys }, now);
  }

  /** Signs a leaf the caller describes with the intermediate; returns [leaf, intermediate]. */
  async issueLeaf(spec: Omit<CertificateSpec, "issuer" | "self">): Promise<Uint8Array[]> {
    return [await issueCertificate({ ...spec, issuer: this.intermediate }), this.intermediateDer];
  }

  /** Issues [leaf, intermediate] for a device: the leaf is valid for 7 days from now. */
  async issueDeviceChain(request: DeviceChainRequest): Promise<Uint8Array[]> {
    const key = parseIdentityKey(request.identityKey);
    const t = this.now();
    const leafKeys = await generateSigningKeys("P-256");
    const leaf = await issueCertificate({
      subject: `CN=Umbra development device ${key.id.slice(0, 16)}`,
      publicKey: leafKeys.keys.publicKey,
      issuer: this.intermediate,
      notBefore: new Date(t - BACKDATE_MS),
      notAfter: new Date(t + 7 * DAY),
      extensions: [leafKeyUsage(), ...toExtensions(appleExtensionValues(request.posture, freshnessCodeFor(key)))],
    });
    return [leaf, this.intermediateDer];
  }
}
