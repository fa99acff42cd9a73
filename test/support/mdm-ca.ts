/**
 * MDM enrolment test material: an RSA MDM CA (certificate and key as PEM, the files the settings name) and
 * a profile signing identity (an RSA leaf under its own CA, as PKCS#12 with a password), made with
 * node-forge; `mdmEnv` gives the coordinator's MDM enrolment settings for them (`NANOMDM_ENV` the NanoMDM side
 * that goes with them: one MDM switch); `verifyCms` checks a signed
 * profile with node-forge's ASN.1 and RSA (forge itself does not verify PKCS#7).
 */
import { createHash, generateKeyPairSync } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import forge from "node-forge";

export interface TestCa {
  readonly certificatePem: string;
  readonly keyPem: string;
  readonly certificate: forge.pki.Certificate;
  readonly key: forge.pki.rsa.PrivateKey;
}

const YEAR_MS = 365 * 86_400_000;

function rsaKey(): forge.pki.rsa.PrivateKey {
  const { privateKey } = generateKeyPairSync("rsa", {
    modulusLength: 2048,
    privateKeyEncoding: { type: "pkcs8", format: "pem" },
    publicKeyEncoding: { type: "spki", format: "pem" },
  });
  return forge.pki.privateKeyFromPem(privateKey) as forge.pki.rsa.PrivateKey;
}

function certificate(
  subject: string,
  key: forge.pki.rsa.PrivateKey,
  issuer: { name: string; key: forge.pki.rsa.PrivateKey } | undefined,
  ca: boolean,
): forge.pki.Certificate {
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.setRsaPublicKey(key.n, key.e);
  cert.serialNumber = `0${Math.floor(Math.random() * 1e12).toString(16)}`;
  cert.validity.notBefore = new Date(Date.now() - 86_400_000);
  cert.validity.notAfter = new Date(Date.now() + 10 * YEAR_MS);
  cert.setSubject([{ name: "commonName", value: subject }]);
  cert.setIssuer([{ name: "commonName", value: issuer?.name ?? subject }]);
  cert.setExtensions(
    ca
      ? [
          { name: "basicConstraints", cA: true, critical: true },
          { name: "keyUsage", keyCertSign: true, cRLSign: true, critical: true },
        ]
      : [
          { name: "basicConstraints", cA: false },
          { name: "keyUsage", digitalSignature: true, critical: true },
        ],
  );
  cert.sign(issuer?.key ?? key, forge.md.sha256.create());
  return cert;
}

/** A self-signed RSA CA (basicConstraints CA:TRUE). */
export function testCa(name = "Umbra Test MDM CA"): TestCa {
  const key = rsaKey();
  const cert = certificate(name, key, undefined, true);
  return { certificate: cert, key, certificatePem: forge.pki.certificateToPem(cert), keyPem: forge.pki.privateKeyToPem(key) };
}

/** A signing identity: an RSA leaf under its own CA, as a PKCS#12 (with the CA's certificate) and its password. */
export function testSigningIdentity(password = "signing-pass"): {
  p12: Uint8Array;
  password: string;
  leaf: forge.pki.Certificate;
  ca: TestCa;
} {
  const ca = testCa("Umbra Test Developer ID CA");
  const key = rsaKey();
  const leaf = certificate("Umbra Test Profile Signer", key, { name: "Umbra Test Developer ID CA", key: ca.key }, false);
  const p12 = forge.pkcs12.toPkcs12Asn1(key, [leaf, ca.certificate], password, { algorithm: "3des" });
  return { p12: new Uint8Array(Buffer.from(forge.asn1.toDer(p12).getBytes(), "binary")), password, leaf, ca };
}

/** NanoMDM's side of MDM mode (no server listens at the URL): together with `mdmEnv`'s enrolment settings. */
export const NANOMDM_ENV: Readonly<Record<string, string>> = Object.freeze({
  UMBRA_MDM_URL: "http://127.0.0.1:9",
  UMBRA_MDM_API_KEY: "nanomdm-api-key",
  UMBRA_MDM_WEBHOOK_KEY: "test-webhook-hmac-key-0123456789",
});

/** The MDM enrolment settings for `ca` (its certificate written into `dir`), and a signing identity when given. */
export function mdmEnv(dir: string, ca: TestCa, signing?: { p12: Uint8Array; password: string }): Record<string, string> {
  const certFile = join(dir, "mdm-ca.pem");
  writeFileSync(certFile, ca.certificatePem);
  const env: Record<string, string> = {
    UMBRA_MDM_SERVER_URL: "https://mdm.umbra.example/mdm",
    UMBRA_MDM_TOPIC: "com.apple.mgmt.External.5d3a0b3e-5f5e-4c1b-9a9e-2f1a6c1d0e42",
    UMBRA_MDM_CA_CERT: certFile,
    UMBRA_MDM_CA_KEY: ca.keyPem,
  };
  if (signing) {
    const p12File = join(dir, "signing.p12");
    writeFileSync(p12File, signing.p12);
    env.UMBRA_MDM_PROFILE_SIGNING_P12_FILE = p12File;
    env.UMBRA_MDM_PROFILE_SIGNING_P12_PASSWORD = signing.password;
  }
  return env;
}

/** CMS SignedData checked with node-forge's ASN.1 and RSA: returns the content and the signer's name. */
export function verifyCms(der: Uint8Array): { content: string; signer: string; chain: number } {
  const message = forge.pkcs7.messageFromAsn1(forge.asn1.fromDer(Buffer.from(der).toString("binary"))) as forge.pkcs7.PkcsSignedData & {
    rawCapture: { signerInfos: forge.asn1.Asn1[]; content: forge.asn1.Asn1 };
  };
  const content = contentOf(message.rawCapture.content);
  const signerInfo = message.rawCapture.signerInfos[0] as forge.asn1.Asn1;
  const parts = signerInfo.value as forge.asn1.Asn1[];
  const signedAttrs = parts.find((p) => p.tagClass === forge.asn1.Class.CONTEXT_SPECIFIC && p.type === 0) as forge.asn1.Asn1;
  const signature = String(parts.at(-1)?.value);
  // The signature covers the attributes DER-encoded as a SET (RFC 5652 section 5.4).
  const asSet = forge.asn1.create(forge.asn1.Class.UNIVERSAL, forge.asn1.Type.SET, true, signedAttrs.value as forge.asn1.Asn1[]);
  const digestAttr = (signedAttrs.value as forge.asn1.Asn1[]).find(
    (a) => forge.asn1.derToOid(String((a.value as forge.asn1.Asn1[])[0]?.value)) === "1.2.840.113549.1.9.4",
  ) as forge.asn1.Asn1;
  const values = (digestAttr.value as forge.asn1.Asn1[])[1];
  const claimed = String(Array.isArray(values?.value) ? values.value[0]?.value : undefined);
  if (claimed !== createHash("sha256").update(content, "binary").digest("binary")) throw new Error("message digest differs");
  const md = forge.md.sha256.create();
  md.update(forge.asn1.toDer(asSet).getBytes());
  const signer = message.certificates.find((c) => (c.publicKey as forge.pki.rsa.PublicKey).verify(md.digest().getBytes(), signature));
  if (!signer) throw new Error("signature does not verify");
  return {
    content: Buffer.from(content, "binary").toString("utf8"),
    signer: String(signer.subject.getField("CN").value),
    chain: message.certificates.length,
  };
}

/** The encapsulated content's bytes (an OCTET STRING, possibly in constructed pieces). */
function contentOf(node: forge.asn1.Asn1): string {
  if (typeof node.value === "string") return node.value;
  return (node.value as forge.asn1.Asn1[]).map(contentOf).join("");
}
