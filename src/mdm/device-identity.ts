/**
 * The MDM device identity an enrolment profile carries (issue 23 point 2): per enrolment, a fresh RSA
 * 2048 key and a certificate for it issued by the coordinator's MDM CA (the CA NanoMDM is started with,
 * `-ca`, so NanoMDM accepts the device's check-ins signed with it), packed as PKCS#12 in the legacy
 * encoding macOS accepts: key bag pkcs8ShroudedKeyBag under pbeWithSHAAnd3-KeyTripleDES-CBC
 * (1.2.840.113549.1.12.1.3), certificate bag in plain `data`, MAC HMAC-SHA-1 (1.3.14.3.2.26), 2048
 * iterations; the password is random (24 bytes, base64url) and travels in the payload beside it.
 *
 * Certificate: serial 16 random bytes (positive), subject CN "Umbra MDM device <enrolment id>", issuer the
 * CA's subject, valid from one hour before `now` for DEVICE_CERT_DAYS (never past the CA's notAfter),
 * basicConstraints CA:false, keyUsage digitalSignature + keyEncipherment, extKeyUsage clientAuth,
 * sha256WithRSAEncryption. The CA key must be RSA (node-forge signs with RSA only): config refuses another.
 * Nothing here is stored: the key leaves in the profile only.
 */
import { generateKeyPair, randomBytes } from "node:crypto";
import forge from "node-forge";

export const DEVICE_CERT_DAYS = 5 * 365;
const DAY_MS = 86_400_000;

/** The MDM CA, parsed once: its certificate and RSA key (PEM texts from the configuration). */
export interface MdmCa {
  readonly certificate: forge.pki.Certificate;
  readonly key: forge.pki.rsa.PrivateKey;
}

export class MdmCaError extends Error {
  override readonly name = "MdmCaError";
}

/** Parses the CA; throws MdmCaError when the certificate or key cannot be read or do not match. */
export function loadMdmCa(certificatePem: string, keyPem: string): MdmCa {
  let certificate: forge.pki.Certificate;
  let key: forge.pki.rsa.PrivateKey;
  try {
    certificate = forge.pki.certificateFromPem(certificatePem);
  } catch {
    throw new MdmCaError("the MDM CA certificate is not a PEM certificate with an RSA key");
  }
  try {
    key = forge.pki.privateKeyFromPem(keyPem) as forge.pki.rsa.PrivateKey;
  } catch {
    throw new MdmCaError("the MDM CA key is not an RSA private key in PEM");
  }
  const publicKey = certificate.publicKey as forge.pki.rsa.PublicKey;
  if (publicKey.n.compareTo(key.n) !== 0 || publicKey.e.compareTo(key.e) !== 0) {
    throw new MdmCaError("the MDM CA key does not match the CA certificate");
  }
  return { certificate, key };
}

export interface DeviceIdentity {
  /** The PKCS#12 file (DER). */
  readonly p12: Uint8Array;
  readonly password: string;
  /** The device certificate (DER). */
  readonly certificate: Uint8Array;
}

const generateRsa = () =>
  new Promise<string>((resolve, reject) =>
    generateKeyPair(
      "rsa",
      { modulusLength: 2048, publicKeyEncoding: { type: "spki", format: "pem" }, privateKeyEncoding: { type: "pkcs8", format: "pem" } },
      (error, _publicKey, privateKey) => (error ? reject(error) : resolve(privateKey)),
    ),
  );

/** Issues a device identity for one enrolment under `ca`. */
export async function issueDeviceIdentity(ca: MdmCa, enrolmentId: string, now: number): Promise<DeviceIdentity> {
  const key = forge.pki.privateKeyFromPem(await generateRsa()) as forge.pki.rsa.PrivateKey;
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.setRsaPublicKey(key.n, key.e);
  const serial = randomBytes(16);
  serial[0] = (serial[0] ?? 0) & 0x7f;
  cert.serialNumber = serial.toString("hex");
  cert.validity.notBefore = new Date(now - 3_600_000);
  cert.validity.notAfter = new Date(Math.min(now + DEVICE_CERT_DAYS * DAY_MS, ca.certificate.validity.notAfter.getTime()));
  cert.setSubject([{ name: "commonName", value: `Umbra MDM device ${enrolmentId}` }]);
  cert.setIssuer(ca.certificate.subject.attributes);
  cert.setExtensions([
    { name: "basicConstraints", cA: false, critical: true },
    { name: "keyUsage", digitalSignature: true, keyEncipherment: true, critical: true },
    { name: "extKeyUsage", clientAuth: true },
    { name: "subjectKeyIdentifier" },
  ]);
  cert.sign(ca.key, forge.md.sha256.create());
  const password = randomBytes(24).toString("base64url");
  const p12 = forge.pkcs12.toPkcs12Asn1(key, [cert], password, {
    algorithm: "3des",
    friendlyName: "Umbra MDM device",
    generateLocalKeyId: true,
  });
  return {
    p12: bytesOf(forge.asn1.toDer(p12).getBytes()),
    password,
    certificate: bytesOf(forge.asn1.toDer(forge.pki.certificateToAsn1(cert)).getBytes()),
  };
}

/** A forge binary string as bytes. */
export const bytesOf = (binary: string): Uint8Array => new Uint8Array(Buffer.from(binary, "binary"));
