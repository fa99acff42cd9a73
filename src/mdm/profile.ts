/**
 * The enrolment profile (`.mobileconfig`, issue 23 point 2), pure: an XML plist of type Configuration with
 * a com.apple.security.pkcs12 payload (the device identity, device-identity.ts, `Password` beside it) and
 * com.apple.mdm: IdentityCertificateUUID = that payload's UUID, Topic, ServerURL = CheckInURL = the
 * configured MDM URL + `?e=<enrolment token>` (never a request's Host), SignMessage and CheckOutWhenRemoved
 * true, AccessRights 1041 (1 inspect profiles + 16 device information + 1024 security queries),
 * ServerCapabilities [com.apple.mdm.per-user-connections].
 * Stable per identity key, so a re-enrolment replaces the profile: PayloadIdentifier `io.umbra.mdm.<first 16
 * hex of SHA-256(point)>` (+ `.identity`, `.mdm`); each PayloadUUID the first 16 bytes of
 * SHA-256("umbra-mdm-profile-v1" || label || point) as an RFC 9562 version 8 UUID (label: profile, identity, mdm).
 * Signing (optional): CMS SignedData (node-forge) over the XML, content attached, SHA-256, signed attributes
 * contentType, messageDigest, signingTime, the signer's certificate and its PKCS#12's others; RSA keys only.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import forge from "node-forge";
import { build, type PlistValue } from "plist";
import { bytesOf, type DeviceIdentity } from "./device-identity.ts";

/** Inspect profiles (1) + device information (16) + security queries (1024). */
export const ACCESS_RIGHTS = 1041;
const IDENTIFIER_PREFIX = "io.umbra.mdm";

export interface ProfileInput {
  /** The identity key's canonical 65-byte point. */
  readonly identityKey: Uint8Array;
  readonly identity: DeviceIdentity;
  /** The single-use enrolment token (base64url). */
  readonly token: string;
  /** The MDM server URL from the configuration (https, no query). */
  readonly serverUrl: string;
  readonly topic: string;
}

/** The stable identifiers of an identity key's profile and payloads. */
export function profileIdentifiers(identityKey: Uint8Array) {
  const base = `${IDENTIFIER_PREFIX}.${Buffer.from(sha256(identityKey)).toString("hex").slice(0, 16)}`;
  return {
    profile: { identifier: base, uuid: stableUuid("profile", identityKey) },
    identity: { identifier: `${base}.identity`, uuid: stableUuid("identity", identityKey) },
    mdm: { identifier: `${base}.mdm`, uuid: stableUuid("mdm", identityKey) },
  };
}

function stableUuid(label: string, point: Uint8Array): string {
  const tag = new TextEncoder().encode(`umbra-mdm-profile-v1${label}`);
  const digest = sha256(Buffer.concat([tag, point])).slice(0, 16);
  digest[6] = ((digest[6] ?? 0) & 0x0f) | 0x80; // version 8
  digest[8] = ((digest[8] ?? 0) & 0x3f) | 0x80; // RFC 9562 variant
  const hex = Buffer.from(digest).toString("hex").toUpperCase();
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The profile's XML bytes (UTF-8). */
export function buildProfile(input: ProfileInput): Uint8Array {
  const ids = profileIdentifiers(input.identityKey);
  const url = `${input.serverUrl}?e=${encodeURIComponent(input.token)}`;
  const profile: PlistValue = {
    PayloadType: "Configuration",
    PayloadVersion: 1,
    PayloadIdentifier: ids.profile.identifier,
    PayloadUUID: ids.profile.uuid,
    PayloadDisplayName: "Umbra provider attestation (MDM)",
    PayloadDescription:
      "Lets the Umbra coordinator ask this Mac for Apple's signed statement of its security settings. Access is limited to device information and security queries.",
    PayloadOrganization: "Umbra",
    PayloadScope: "System",
    PayloadRemovalDisallowed: false,
    PayloadContent: [
      {
        PayloadType: "com.apple.security.pkcs12",
        PayloadVersion: 1,
        PayloadIdentifier: ids.identity.identifier,
        PayloadUUID: ids.identity.uuid,
        PayloadDisplayName: "Umbra MDM device identity",
        PayloadContent: input.identity.p12,
        Password: input.identity.password,
      },
      {
        PayloadType: "com.apple.mdm",
        PayloadVersion: 1,
        PayloadIdentifier: ids.mdm.identifier,
        PayloadUUID: ids.mdm.uuid,
        PayloadDisplayName: "Umbra MDM",
        IdentityCertificateUUID: ids.identity.uuid,
        Topic: input.topic,
        ServerURL: url,
        CheckInURL: url,
        SignMessage: true,
        CheckOutWhenRemoved: true,
        AccessRights: ACCESS_RIGHTS,
        ServerCapabilities: ["com.apple.mdm.per-user-connections"],
      },
    ],
  };
  return new TextEncoder().encode(build(profile));
}

/** A profile signing identity: RSA key, its certificate and the chain beside it in the PKCS#12. */
export interface SigningIdentity {
  readonly key: forge.pki.rsa.PrivateKey;
  readonly certificate: forge.pki.Certificate;
  readonly chain: readonly forge.pki.Certificate[];
}

export class SigningIdentityError extends Error {
  override readonly name = "SigningIdentityError";
}

/** Opens a signing PKCS#12; throws SigningIdentityError when it cannot be opened or holds no RSA key with its certificate. */
export function openSigningIdentity(p12: Uint8Array, password: string): SigningIdentity {
  let pfx: forge.pkcs12.Pkcs12Pfx;
  try {
    pfx = forge.pkcs12.pkcs12FromAsn1(forge.asn1.fromDer(Buffer.from(p12).toString("binary")), password);
  } catch {
    throw new SigningIdentityError("the profile signing PKCS#12 cannot be opened with its password");
  }
  const bags = (type: string) => pfx.getBags({ bagType: type })[type] ?? [];
  const key = [...bags(forge.pki.oids.pkcs8ShroudedKeyBag ?? ""), ...bags(forge.pki.oids.keyBag ?? "")].find((b) => b.key)?.key as
    | forge.pki.rsa.PrivateKey
    | undefined;
  const certificates = bags(forge.pki.oids.certBag ?? "").flatMap((b) => (b.cert ? [b.cert] : []));
  if (!key || typeof key.n !== "object") throw new SigningIdentityError("the profile signing PKCS#12 holds no RSA private key");
  const matches = (c: forge.pki.Certificate) => (c.publicKey as forge.pki.rsa.PublicKey).n?.compareTo(key.n) === 0;
  const certificate = certificates.find(matches);
  if (!certificate) throw new SigningIdentityError("the profile signing PKCS#12 holds no certificate for its key");
  return { key, certificate, chain: certificates.filter((c) => c !== certificate) };
}

/** The profile as CMS SignedData (DER), content attached. */
export function signProfile(xml: Uint8Array, signer: SigningIdentity, now: number): Uint8Array {
  const p7 = forge.pkcs7.createSignedData();
  p7.content = forge.util.createBuffer(Buffer.from(xml).toString("binary"));
  p7.addCertificate(signer.certificate);
  for (const certificate of signer.chain) p7.addCertificate(certificate);
  p7.addSigner({
    key: signer.key,
    certificate: signer.certificate,
    digestAlgorithm: forge.pki.oids.sha256 ?? "2.16.840.1.101.3.4.2.1",
    authenticatedAttributes: [
      { type: forge.pki.oids.contentType ?? "1.2.840.113549.1.9.3", value: forge.pki.oids.data ?? "1.2.840.113549.1.7.1" },
      { type: forge.pki.oids.messageDigest ?? "1.2.840.113549.1.9.4" },
      // forge's types want a string; its encoder reads a Date.
      { type: forge.pki.oids.signingTime ?? "1.2.840.113549.1.9.5", value: new Date(now) as unknown as string },
    ],
  });
  p7.sign();
  return bytesOf(forge.asn1.toDer(p7.toAsn1()).getBytes());
}
