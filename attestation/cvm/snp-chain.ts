/**
 * The SEV-SNP certificate chain: VCEK -> ASK -> ARK, with the ARK trusted by key (amd-roots.ts).
 *
 * Input: the evidence's endorsements, DER X.509 certificates in any order: the VCEK (the one whose key is
 * an uncompressed EC P-384 point in a 120-byte SubjectPublicKeyInfo), optionally the ASK, optionally the ARK
 * (the self-issued one). Missing ASK/ARK are taken from the trusted root whose names match.
 *
 * Steps (each failure throws CvmAttestationError naming the check):
 *   1. Parse and classify the endorsements (certificate_parse, endorsements_format, vcek_missing).
 *   2. Choose the root: a presented ARK must carry a trusted root's key (ark_not_pinned); otherwise the root
 *      is the one whose ARK names the ASK's issuer, or whose ASK names the VCEK's issuer (root_unknown).
 *   3. For ARK, ASK and VCEK in that order: issuer name equals the parent's subject (certificate_name_chain),
 *      signature algorithm is RSASSA-PSS with SHA-384, MGF1-SHA-384, salt 48 as AMD uses
 *      (certificate_signature_algorithm), signature by the parent's key (ark_signature, ask_signature,
 *      vcek_signature), validity at the injected time (certificate_validity), CA flags (ARK and ASK must be
 *      CAs, the VCEK must not: certificate_ca_flags), key usage (keyCertSign for ARK and ASK; if present on
 *      the VCEK, digitalSignature and no keyCertSign: certificate_key_usage), no critical extension other
 *      than basicConstraints and keyUsage (certificate_critical_extension).
 *
 * X509ChainBuilder is not used: it checks none of the above (STACK.md item 9).
 *
 * VCEK extensions (AMD VCEK certificate specification): 1.3.6.1.4.1.3704.1.3.{1,2,3,8} are the boot loader,
 * TEE, SNP and microcode SPLs of the TCB the key was derived for (DER INTEGER); 1.3.6.1.4.1.3704.1.4 is the
 * hardware id (64 bytes, DER OCTET STRING or raw). readVcekExtensions returns them for snp-verify.ts.
 */

import "reflect-metadata";
import { BasicConstraintsExtension, KeyUsageFlags, KeyUsagesExtension, X509Certificate } from "@peculiar/x509";
import type { SnpRoot } from "./amd-roots.ts";
import { CvmAttestationError, type CvmCheck, ensure } from "./errors.ts";
import type { TcbVersion } from "./snp-report.ts";

export interface VerifiedSnpChain {
  readonly root: SnpRoot;
  readonly ark: X509Certificate;
  readonly ask: X509Certificate;
  readonly vcek: X509Certificate;
  /** The VCEK public key as an uncompressed SEC1 point (97 bytes). */
  readonly vcekPublicKey: Uint8Array;
}

/** DER prefix of a SubjectPublicKeyInfo for id-ecPublicKey / secp384r1 with an uncompressed point. */
const P384_SPKI_PREFIX = Buffer.from("3076301006072a8648ce3d020106052b81040022036200", "hex");
const P384_SPKI_LENGTH = 120;

const EXT_BASIC_CONSTRAINTS = "2.5.29.19";
const EXT_KEY_USAGE = "2.5.29.15";
const KNOWN_CRITICAL = new Set([EXT_BASIC_CONSTRAINTS, EXT_KEY_USAGE]);

export const VCEK_OID = {
  bootloader: "1.3.6.1.4.1.3704.1.3.1",
  tee: "1.3.6.1.4.1.3704.1.3.2",
  snp: "1.3.6.1.4.1.3704.1.3.3",
  microcode: "1.3.6.1.4.1.3704.1.3.8",
  hwid: "1.3.6.1.4.1.3704.1.4",
  productName: "1.3.6.1.4.1.3704.1.2",
  structVersion: "1.3.6.1.4.1.3704.1.1",
} as const;

const bytes = (b: ArrayBuffer) => new Uint8Array(b);

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

const nameEq = (a: X509Certificate["subjectName"], b: X509Certificate["subjectName"]) =>
  sameBytes(bytes(a.toArrayBuffer()), bytes(b.toArrayBuffer()));
const sameKey = (a: X509Certificate, b: X509Certificate) => sameBytes(bytes(a.publicKey.rawData), bytes(b.publicKey.rawData));
const isSelfIssued = (c: X509Certificate) => nameEq(c.subjectName, c.issuerName);

function isP384Key(cert: X509Certificate): boolean {
  const spki = bytes(cert.publicKey.rawData);
  return spki.length === P384_SPKI_LENGTH && sameBytes(spki.subarray(0, P384_SPKI_PREFIX.length), P384_SPKI_PREFIX);
}

function parseCertificate(der: Uint8Array, index: number): X509Certificate {
  try {
    return new X509Certificate(der);
  } catch (e) {
    throw new CvmAttestationError("certificate_parse", `endorsement ${index} is not an X.509 certificate (${(e as Error).message})`);
  }
}

interface Classified {
  vcek: X509Certificate;
  ask: X509Certificate | null;
  ark: X509Certificate | null;
}

function classify(endorsements: readonly Uint8Array[]): Classified {
  ensure(endorsements.length <= 3, "endorsements_format", `${endorsements.length} certificates; expected VCEK, ASK and ARK at most`);
  const out: { vcek: X509Certificate[]; ask: X509Certificate[]; ark: X509Certificate[] } = { vcek: [], ask: [], ark: [] };
  endorsements.forEach((der, i) => {
    const cert = parseCertificate(der, i);
    if (isSelfIssued(cert)) out.ark.push(cert);
    else if (isP384Key(cert)) out.vcek.push(cert);
    else out.ask.push(cert);
  });
  ensure(out.vcek.length <= 1 && out.ask.length <= 1 && out.ark.length <= 1, "endorsements_format", "more than one certificate of a role");
  const vcek = out.vcek[0];
  ensure(vcek !== undefined, "vcek_missing", "the evidence carries no VCEK certificate (a P-384 end-entity certificate)");
  return { vcek, ask: out.ask[0] ?? null, ark: out.ark[0] ?? null };
}

function chooseRoot(c: Classified, roots: readonly SnpRoot[]): SnpRoot {
  if (c.ark) {
    const presented = c.ark;
    const root = roots.find((r) => sameKey(r.ark, presented));
    ensure(root !== undefined, "ark_not_pinned", `the presented ARK (${presented.subject}) does not carry a trusted root key`);
    return root;
  }
  const root = c.ask
    ? roots.find((r) => nameEq(r.ark.subjectName, c.ask!.issuerName))
    : roots.find((r) => nameEq(r.ask.subjectName, c.vcek.issuerName));
  ensure(root !== undefined, "root_unknown", `no trusted root is named by ${c.ask ? c.ask.issuer : c.vcek.issuer}`);
  return root;
}

function checkSignatureAlgorithm(cert: X509Certificate, role: string): void {
  let alg: { name: string; hash?: { name?: string } | string; saltLength?: number };
  try {
    alg = cert.signatureAlgorithm as typeof alg;
  } catch {
    throw new CvmAttestationError("certificate_signature_algorithm", `${role}: unknown signature algorithm`);
  }
  const hash = typeof alg.hash === "string" ? alg.hash : alg.hash?.name;
  ensure(
    alg.name === "RSA-PSS" && hash === "SHA-384" && alg.saltLength === 48,
    "certificate_signature_algorithm",
    `${role}: signature algorithm is not RSASSA-PSS with SHA-384 and a 48-byte salt`,
  );
}

async function checkSignature(cert: X509Certificate, issuer: X509Certificate, check: CvmCheck, role: string): Promise<void> {
  let ok = false;
  try {
    ok = await cert.verify({ publicKey: issuer.publicKey, signatureOnly: true });
  } catch {
    ok = false;
  }
  ensure(ok, check, `${role}: signature does not verify under the key of ${issuer.subject}`);
}

function checkValidity(cert: X509Certificate, nowMs: number, role: string): void {
  ensure(cert.notBefore.getTime() <= nowMs, "certificate_validity", `${role}: not valid before ${cert.notBefore.toISOString()}`);
  ensure(nowMs <= cert.notAfter.getTime(), "certificate_validity", `${role}: expired at ${cert.notAfter.toISOString()}`);
}

function checkExtensions(cert: X509Certificate, isCa: boolean, role: string): void {
  for (const ext of cert.extensions) {
    ensure(
      !ext.critical || KNOWN_CRITICAL.has(ext.type),
      "certificate_critical_extension",
      `${role}: unknown critical extension ${ext.type}`,
    );
  }
  const bc = cert.getExtension(BasicConstraintsExtension);
  const ku = cert.getExtension(KeyUsagesExtension);
  if (isCa) {
    ensure(bc?.ca === true, "certificate_ca_flags", `${role}: not marked as a CA`);
    ensure(ku !== null && (ku.usages & KeyUsageFlags.keyCertSign) !== 0, "certificate_key_usage", `${role}: key usage lacks keyCertSign`);
  } else {
    ensure(bc === null || !bc.ca, "certificate_ca_flags", `${role}: an end-entity certificate is marked as a CA`);
    ensure(
      ku === null || ((ku.usages & KeyUsageFlags.digitalSignature) !== 0 && (ku.usages & KeyUsageFlags.keyCertSign) === 0),
      "certificate_key_usage",
      `${role}: key usage does not allow signing reports only`,
    );
  }
}

async function checkLink(
  cert: X509Certificate,
  issuer: X509Certificate,
  isCa: boolean,
  signatureCheck: CvmCheck,
  role: string,
  nowMs: number,
): Promise<void> {
  ensure(nameEq(cert.issuerName, issuer.subjectName), "certificate_name_chain", `${role}: issuer ${cert.issuer} is not ${issuer.subject}`);
  checkSignatureAlgorithm(cert, role);
  await checkSignature(cert, issuer, signatureCheck, role);
  checkValidity(cert, nowMs, role);
  checkExtensions(cert, isCa, role);
}

/**
 * Verifies VCEK -> ASK -> ARK against `roots` at time `nowMs` (Unix milliseconds). Throws CvmAttestationError
 * with the checks listed in the header.
 */
export async function verifySnpChain(
  endorsements: readonly Uint8Array[],
  roots: readonly SnpRoot[],
  nowMs: number,
): Promise<VerifiedSnpChain> {
  const c = classify(endorsements);
  const root = chooseRoot(c, roots);
  const ark = root.ark;
  const ask = c.ask ?? root.ask;
  await checkLink(ark, ark, true, "ark_signature", "ARK", nowMs);
  await checkLink(ask, ark, true, "ask_signature", "ASK", nowMs);
  await checkLink(c.vcek, ask, false, "vcek_signature", "VCEK", nowMs);
  const vcekPublicKey = bytes(c.vcek.publicKey.rawData).slice(P384_SPKI_PREFIX.length);
  return { root, ark, ask, vcek: c.vcek, vcekPublicKey };
}

export interface VcekExtensions {
  /** Null when an SPL extension is missing or not a small DER INTEGER. */
  readonly tcb: TcbVersion | null;
  /** Null when the hardware id extension is missing or not 64 bytes. */
  readonly hwid: Uint8Array | null;
}

/** Reads a DER INTEGER in 0..255 (AMD encodes SPLs as INTEGER, sometimes with a leading zero byte). */
function derSmallInteger(v: Uint8Array): number | null {
  if (v.length < 3 || v[0] !== 0x02 || v[1] !== v.length - 2) return null;
  const body = v.subarray(2);
  if (body.length === 1) return body[0]! < 0x80 ? body[0]! : null;
  if (body.length === 2 && body[0] === 0 && body[1]! >= 0x80) return body[1]!;
  return null;
}

/** The TCB and hardware id a VCEK certificate was issued for (see header). Never throws. */
export function readVcekExtensions(vcek: X509Certificate): VcekExtensions {
  const value = (oid: string): Uint8Array | null => {
    const ext = vcek.getExtension(oid);
    return ext ? bytes(ext.value) : null;
  };
  const spl = (oid: string) => {
    const v = value(oid);
    return v ? derSmallInteger(v) : null;
  };
  const bootloader = spl(VCEK_OID.bootloader);
  const tee = spl(VCEK_OID.tee);
  const snp = spl(VCEK_OID.snp);
  const microcode = spl(VCEK_OID.microcode);
  const tcb = bootloader !== null && tee !== null && snp !== null && microcode !== null ? { bootloader, tee, snp, microcode } : null;
  const raw = value(VCEK_OID.hwid);
  let hwid: Uint8Array | null = null;
  if (raw?.length === 64) hwid = raw;
  else if (raw?.length === 66 && raw[0] === 0x04 && raw[1] === 0x40) hwid = raw.slice(2);
  return { tcb, hwid };
}
