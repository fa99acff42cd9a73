/**
 * Trust roots for SEV-SNP: AMD's ARK (AMD Root Key, self-signed, RSA-4096, RSASSA-PSS/SHA-384) and ASK
 * (AMD SEV Key, signed by the ARK) per processor family, pinned in this repository.
 *
 * Steps of loadAmdRoots() (loadPinnedRoots over the pins below):
 *   1. Read the PEM files in roots/ (embedded in the binary through text imports).
 *   2. Check SHA-256 of each certificate's DER against the pins below (a changed file is refused).
 *   3. Check the ARK's self-signature and the ASK's signature by the ARK.
 *
 * Pins (SHA-256 of the DER certificate, and of the ARK's SubjectPublicKeyInfo). The certificates are those
 * AMD's Key Distribution Service serves at /vcek/v1/{Milan,Genoa}/cert_chain; an auditor re-downloads them
 * and compares (README.md in this folder).
 *
 * A root carries `development: true` when it is not one of these pinned AMD keys (dev-chain.ts makes such
 * roots); a production verifier refuses it (snp-verify.ts). The decision is made by key, not by name.
 */

import "reflect-metadata";
import { sha256 } from "@noble/hashes/sha2.js";
import { X509Certificate } from "@peculiar/x509";
import { CvmAttestationError } from "./errors.ts";
import arkGenoaPem from "./roots/ark-genoa.pem" with { type: "text" };
import arkMilanPem from "./roots/ark-milan.pem" with { type: "text" };
import askGenoaPem from "./roots/ask-genoa.pem" with { type: "text" };
import askMilanPem from "./roots/ask-milan.pem" with { type: "text" };

export interface SnpRoot {
  /** Processor family ("Milan", "Genoa") or a development name. */
  readonly name: string;
  /** The root; trusted by its key (SubjectPublicKeyInfo). */
  readonly ark: X509Certificate;
  /** The family's signing key, used when the evidence carries no ASK. */
  readonly ask: X509Certificate;
  /** True for any root whose ARK key is not one of AMD's pinned keys. */
  readonly development: boolean;
}

/** One family's pinned certificates (PEM) and their SHA-256 pins (hex). */
export interface RootPin {
  readonly name: string;
  readonly arkPem: string;
  readonly askPem: string;
  readonly arkSha256: string;
  readonly askSha256: string;
  readonly arkSpkiSha256: string;
}

const PINS: readonly RootPin[] = [
  {
    name: "Milan",
    arkPem: arkMilanPem,
    askPem: askMilanPem,
    arkSha256: "69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd",
    askSha256: "67d303bd3905fd38db8b20e0793699870e7fa612eaad5dec358293fd8c0bac1b",
    arkSpkiSha256: "9f056bee44377e29308cb5ffa895bdfb62d18881fa6bed8d6f075b0204089cb9",
  },
  {
    name: "Genoa",
    arkPem: arkGenoaPem,
    askPem: askGenoaPem,
    arkSha256: "4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1",
    askSha256: "5464738c1546aed5f2cecf1dc98c5c960a92e8913238a61711bc90ec6e828521",
    arkSpkiSha256: "429a69c9422aa258ee4d8db5fcda9c6470ef15f8cd5a9cebd6cbc7d90b863831",
  },
];

/** SHA-256 (hex) of the SubjectPublicKeyInfo of every pinned AMD ARK. */
export const AMD_ARK_SPKI_SHA256: readonly string[] = PINS.map((p) => p.arkSpkiSha256);

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/** SHA-256 (hex) of a certificate's SubjectPublicKeyInfo DER. */
export function spkiSha256(cert: X509Certificate): string {
  return hex(sha256(new Uint8Array(cert.publicKey.rawData)));
}

/** True when `cert` carries one of AMD's pinned ARK keys. */
export function isPinnedAmdArk(cert: X509Certificate): boolean {
  return AMD_ARK_SPKI_SHA256.includes(spkiSha256(cert));
}

function parsePinned(pem: string, expectedSha256: string, label: string): X509Certificate {
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new CvmAttestationError("roots_load", `${label}: no certificate in attestation/cvm/roots (see roots/README.md)`);
  }
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(pem);
  } catch (e) {
    throw new CvmAttestationError("roots_load", `${label}: not a certificate (${(e as Error).message})`);
  }
  const got = hex(sha256(new Uint8Array(cert.rawData)));
  if (got !== expectedSha256)
    throw new CvmAttestationError("roots_load", `${label}: SHA-256 ${got} differs from the pin ${expectedSha256}`);
  return cert;
}

/**
 * Loads and checks pinned roots: each certificate's SHA-256 and the ARK's key against their pins, the ARK's
 * self-signature and the ASK's signature by the ARK. Throws CvmAttestationError roots_load naming the file.
 */
export async function loadPinnedRoots(pins: readonly RootPin[]): Promise<SnpRoot[]> {
  const roots: SnpRoot[] = [];
  for (const pin of pins) {
    const ark = parsePinned(pin.arkPem, pin.arkSha256, `ARK-${pin.name}`);
    const ask = parsePinned(pin.askPem, pin.askSha256, `ASK-${pin.name}`);
    if (spkiSha256(ark) !== pin.arkSpkiSha256) throw new CvmAttestationError("roots_load", `ARK-${pin.name}: key differs from the pin`);
    if (!(await ark.verify({ publicKey: ark.publicKey, signatureOnly: true }))) {
      throw new CvmAttestationError("roots_load", `ARK-${pin.name}: self-signature does not verify`);
    }
    if (!(await ask.verify({ publicKey: ark.publicKey, signatureOnly: true }))) {
      throw new CvmAttestationError("roots_load", `ASK-${pin.name}: not signed by ARK-${pin.name}`);
    }
    roots.push({ name: pin.name, ark, ask, development: !AMD_ARK_SPKI_SHA256.includes(pin.arkSpkiSha256) });
  }
  return roots;
}

/** AMD's pinned roots, Milan and Genoa (see loadPinnedRoots). Throws CvmAttestationError roots_load. */
export function loadAmdRoots(): Promise<SnpRoot[]> {
  return loadPinnedRoots(PINS);
}

/** The pins of AMD's roots, for audit tools and tests. */
export const AMD_ROOT_PINS: readonly RootPin[] = PINS;
