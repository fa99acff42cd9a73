/**
 * The coordinator's TLS key and its self-signed certificate.
 *
 * The key is ECDSA P-256, made with WebCrypto at start. The private key exists only in this process's
 * memory (a CryptoKey, and the PKCS#8 PEM Bun.serve's `tls.key` takes): never written to disk, logged or
 * answered; a restart makes a new key. Its DER SubjectPublicKeyInfo is what the attestation binds
 * (SHA-256(SPKI) is bytes 0..31 of the report data, attestation/cvm/report-data.ts), and every
 * certificate served, self-signed or ACME, renewed or not, is over it, so the binding holds across renewals.
 *
 * Invariants: one key per process; the SPKI never changes while the process runs.
 */
// reflect-metadata in this module's static graph: in place before the @peculiar/x509 graph it imports
// lazily, whatever the entry point (STACK.md item 1; a script running the app in-process has no preload).
import "../../attestation/provider/preload.ts";
import { createHash, randomBytes } from "node:crypto";
import { isIP } from "node:net";

/** A served certificate: PEM chain (leaf first) over the process's key. */
export interface TlsCertificate {
  readonly certPem: string;
  /** Unix milliseconds. */
  readonly notBefore: number;
  readonly notAfter: number;
}

export interface TlsKey {
  /** PKCS#8 PEM of the private key, for Bun.serve's `tls.key` and the ACME CSR; memory only. */
  readonly privateKeyPem: string;
  readonly keys: CryptoKeyPair;
  /** DER SubjectPublicKeyInfo of the public key. */
  readonly spki: Uint8Array;
  /** SHA-256(spki), lower-case hex: what clients pin. */
  readonly spkiSha256: string;
}

const ALGORITHM = { name: "ECDSA", namedCurve: "P-256" } as const;
/** Lifetime of the self-signed certificate; a restart makes a new key and certificate anyway. */
const SELF_SIGNED_DAYS = 397;
const DAY_MS = 86_400_000;

function pem(label: string, der: ArrayBuffer | Uint8Array): string {
  const b64 = Buffer.from(der instanceof Uint8Array ? der : new Uint8Array(der)).toString("base64");
  return `-----BEGIN ${label}-----\n${b64.replace(/.{1,64}/g, "$&\n")}-----END ${label}-----\n`;
}

/** Makes the process's key (memory only). Rejects only if the runtime cannot make P-256 keys. */
export async function generateTlsKey(): Promise<TlsKey> {
  // Extractable: Bun.serve takes the key as PEM text. The export stays in memory.
  const keys = (await crypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"])) as CryptoKeyPair;
  const spki = new Uint8Array(await crypto.subtle.exportKey("spki", keys.publicKey));
  const pkcs8 = await crypto.subtle.exportKey("pkcs8", keys.privateKey);
  return Object.freeze({
    privateKeyPem: pem("PRIVATE KEY", pkcs8),
    keys,
    spki,
    spkiSha256: createHash("sha256").update(spki).digest("hex"),
  });
}

/**
 * `--tls self-signed`: one certificate over the key, subject CN = the first name, SubjectAltName = every
 * name (DNS or IP), serverAuth, valid from an hour before `now` for SELF_SIGNED_DAYS. Clients do not trust
 * it by chain: they pin SHA-256(SPKI) from a verified attestation (docs/security.md). `names` are validated
 * by the configuration (DNS names or IP addresses, at least one).
 */
export async function selfSignedCertificate(key: TlsKey, names: readonly string[], now: number): Promise<TlsCertificate> {
  // @peculiar/x509 is slow to load (bench/HISTORY.md, start-up): only a coordinator that terminates TLS pays it.
  const x509 = await import("@peculiar/x509");
  const notBefore = now - 3_600_000;
  const notAfter = now + SELF_SIGNED_DAYS * DAY_MS;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    // Positive 16-byte serial (top bit clear).
    serialNumber: `01${randomBytes(15).toString("hex")}`,
    name: [{ CN: [names[0] ?? "localhost"] }],
    notBefore: new Date(notBefore),
    notAfter: new Date(notAfter),
    keys: key.keys,
    signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names.map((value) => ({ type: isIP(value) !== 0 ? "ip" : "dns", value }))),
    ],
  });
  return Object.freeze({ certPem: pem("CERTIFICATE", new Uint8Array(cert.rawData)), notBefore, notAfter });
}
