/**
 * A development SEV-SNP certificate chain, generated locally, shaped like AMD's so that the same verifier code
 * runs in development and tests:
 *   - dev ARK: RSA (RSASSA-PSS, SHA-384, salt 48), self-signed, CA, keyCertSign + cRLSign, critical flags;
 *   - dev ASK: RSA, signed by the dev ARK, CA with pathLen 0, keyCertSign;
 *   - dev VCEK: ECDSA P-384, signed by the dev ASK, with AMD's VCEK extensions (SPLs of the TCB it was issued
 *     for, hardware id = the chip id).
 * Names carry "Umbra development" so that a development certificate is never mistaken for AMD's; trust never
 * depends on names anyway: the root returned here has `development: true` and its key is not pinned, so a
 * production verifier refuses it.
 *
 * signSnpReport signs bytes 0x000..0x29F of an encoded report with the dev VCEK (WebCrypto ECDSA P-384 /
 * SHA-384; r and s are written little-endian as the firmware does).
 *
 * Options let tests build broken chains (other keys, other validity windows, other TCB or chip id).
 */

import "reflect-metadata";
import {
  BasicConstraintsExtension,
  Extension,
  KeyUsageFlags,
  KeyUsagesExtension,
  type X509Certificate,
  X509CertificateGenerator,
} from "@peculiar/x509";
import type { SnpRoot } from "./amd-roots.ts";
import { VCEK_OID } from "./snp-chain.ts";
import { SNP_REPORT_SIZE, SNP_SIGNED_LENGTH, type TcbVersion, withSnpSignature } from "./snp-report.ts";

export const DEV_ARK_NAME = "CN=ARK-Umbra-Dev, OU=Engineering, O=Umbra development";
export const DEV_ASK_NAME = "CN=SEV-Umbra-Dev, OU=Engineering, O=Umbra development";
export const DEV_VCEK_NAME = "CN=SEV-VCEK, OU=Engineering, O=Umbra development";

/** Signing parameters AMD uses for ARK, ASK and VCEK certificates. */
export const PSS_SHA384 = { name: "RSA-PSS", hash: "SHA-384", saltLength: 48 };
const RSA_KEYGEN = { name: "RSA-PSS", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-384" };
const P384 = { name: "ECDSA", namedCurve: "P-384" };

export interface Validity {
  readonly notBefore: Date;
  readonly notAfter: Date;
}

export interface DevChainOptions {
  /** TCB the VCEK is issued for (its SPL extensions). */
  readonly tcb?: TcbVersion;
  /** 64-byte chip id (the VCEK's hardware id); random by default. */
  readonly chipId?: Uint8Array;
  readonly arkValidity?: Validity;
  readonly askValidity?: Validity;
  readonly vcekValidity?: Validity;
  /** Sign the ASK with this key instead of the ARK's (tests). */
  readonly askSigner?: CryptoKeyPair;
  /** Sign the VCEK with this key instead of the ASK's (tests). */
  readonly vcekSigner?: CryptoKeyPair;
  /** Reuse this ARK key pair (tests: two chains under one root). */
  readonly arkKeys?: CryptoKeyPair;
}

export interface DevChain {
  readonly root: SnpRoot;
  readonly ark: X509Certificate;
  readonly ask: X509Certificate;
  readonly vcek: X509Certificate;
  readonly arkKeys: CryptoKeyPair;
  readonly askKeys: CryptoKeyPair;
  readonly vcekKeys: CryptoKeyPair;
  readonly chipId: Uint8Array;
  readonly tcb: TcbVersion;
  /** DER certificates in the order a host hands them out: VCEK, ASK, ARK. */
  readonly endorsements: readonly Uint8Array[];
}

export const DEV_TCB: TcbVersion = { bootloader: 3, tee: 0, snp: 8, microcode: 115 };

const WIDE_VALIDITY: Validity = { notBefore: new Date("2020-01-01T00:00:00Z"), notAfter: new Date("2045-01-01T00:00:00Z") };

/** DER INTEGER for 0..255. */
function derInteger(n: number): Uint8Array {
  return n < 0x80 ? new Uint8Array([0x02, 0x01, n]) : new Uint8Array([0x02, 0x02, 0x00, n]);
}

function derOctetString(b: Uint8Array): Uint8Array {
  if (b.length > 127) throw new RangeError("octet string too long for the short form");
  return new Uint8Array([0x04, b.length, ...b]);
}

function derIa5String(s: string): Uint8Array {
  const b = new TextEncoder().encode(s);
  return new Uint8Array([0x16, b.length, ...b]);
}

/** AMD's VCEK extensions for a TCB and chip id (structVersion, productName, SPLs, hardware id). */
export function vcekExtensions(tcb: TcbVersion, chipId: Uint8Array, productName = "Umbra-Dev"): Extension[] {
  return [
    new Extension(VCEK_OID.structVersion, false, derInteger(1)),
    new Extension(VCEK_OID.productName, false, derIa5String(productName)),
    new Extension(VCEK_OID.bootloader, false, derInteger(tcb.bootloader)),
    new Extension(VCEK_OID.tee, false, derInteger(tcb.tee)),
    new Extension(VCEK_OID.snp, false, derInteger(tcb.snp)),
    new Extension(VCEK_OID.microcode, false, derInteger(tcb.microcode)),
    new Extension(VCEK_OID.hwid, false, derOctetString(chipId)),
  ];
}

/** Generates an RSA key pair for RSASSA-PSS/SHA-384 (development ARK and ASK). */
export const generateRsa = () => crypto.subtle.generateKey(RSA_KEYGEN, true, ["sign", "verify"]) as Promise<CryptoKeyPair>;

/** Generates a development chain. Never throws on valid options. */
export async function createDevChain(options: DevChainOptions = {}): Promise<DevChain> {
  const tcb = options.tcb ?? DEV_TCB;
  const chipId = options.chipId ?? crypto.getRandomValues(new Uint8Array(64));
  const arkKeys = options.arkKeys ?? (await generateRsa());
  const askKeys = await generateRsa();
  const vcekKeys = (await crypto.subtle.generateKey(P384, true, ["sign", "verify"])) as CryptoKeyPair;
  const signingAlgorithm = PSS_SHA384;

  const arkValidity = options.arkValidity ?? WIDE_VALIDITY;
  const ark = await X509CertificateGenerator.create({
    serialNumber: "0100",
    subject: DEV_ARK_NAME,
    issuer: DEV_ARK_NAME,
    ...arkValidity,
    signingAlgorithm,
    publicKey: arkKeys.publicKey,
    signingKey: arkKeys.privateKey,
    extensions: [
      new BasicConstraintsExtension(true, undefined, true),
      new KeyUsagesExtension(KeyUsageFlags.keyCertSign | KeyUsageFlags.cRLSign, true),
    ],
  });
  const ask = await X509CertificateGenerator.create({
    serialNumber: "0101",
    subject: DEV_ASK_NAME,
    issuer: DEV_ARK_NAME,
    ...(options.askValidity ?? WIDE_VALIDITY),
    signingAlgorithm,
    publicKey: askKeys.publicKey,
    signingKey: (options.askSigner ?? arkKeys).privateKey,
    extensions: [new BasicConstraintsExtension(true, 0, true), new KeyUsagesExtension(KeyUsageFlags.keyCertSign, true)],
  });
  const vcek = await X509CertificateGenerator.create({
    serialNumber: "00",
    subject: DEV_VCEK_NAME,
    issuer: DEV_ASK_NAME,
    ...(options.vcekValidity ?? WIDE_VALIDITY),
    signingAlgorithm,
    publicKey: vcekKeys.publicKey,
    signingKey: (options.vcekSigner ?? askKeys).privateKey,
    extensions: vcekExtensions(tcb, chipId),
  });
  const der = (c: X509Certificate) => new Uint8Array(c.rawData);
  return {
    root: { name: "Umbra-Dev", ark, ask, development: true },
    ark,
    ask,
    vcek,
    arkKeys,
    askKeys,
    vcekKeys,
    chipId,
    tcb,
    endorsements: [der(vcek), der(ask), der(ark)],
  };
}

/**
 * Signs an encoded report (0x4A0 bytes, signature fields ignored) with an ECDSA P-384 private key and returns
 * the signed report. Throws RangeError for a buffer of another size.
 */
export async function signSnpReport(report: Uint8Array, privateKey: CryptoKey): Promise<Uint8Array> {
  if (report.length !== SNP_REPORT_SIZE) throw new RangeError(`report is ${report.length} bytes`);
  const sig = new Uint8Array(await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-384" }, privateKey, report.slice(0, SNP_SIGNED_LENGTH)));
  return withSnpSignature(report, sig.subarray(0, 48), sig.subarray(48, 96));
}
