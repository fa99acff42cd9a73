/**
 * Apple Managed Device Attestation (MDA) chain verification.
 *
 * Input: DER certificates, leaf first ([leaf, Apple Enterprise Attestation Sub CA 1] as Apple sends
 * them; the root may be appended). @peculiar/x509 parses and checks signatures; every path rule is
 * checked here, because X509ChainBuilder checks none of them (STACK.md item 9).
 *
 * Steps, in order (each failure is an AttestationError naming the check):
 *  1. development_root  the anchor is allowed in this mode (production: only the pinned Apple root)
 *  2. chain_format      1..4 certificates, each exactly one DER element that parses; a trailing self-issued
 *                       root is dropped when it carries the anchor's key, refused otherwise (chain_anchor)
 *  3. chain_anchor      the top certificate's signature verifies with the anchor's KEY (a root that
 *                       copies Apple's name but not its key fails here)
 *  4. chain_name        each certificate's issuer name equals its issuer's subject name (DER bytes)
 *  5. chain_algorithm   signatures are ECDSA with SHA-256/384/512 by P-256 or P-384 issuer keys
 *  6. chain_signature   each certificate verifies with the next one's public key
 *  7. chain_validity    notBefore <= now <= notAfter for every certificate and the anchor (injected clock)
 *  8. chain_age         the leaf's notBefore is at most maxCertificateAgeMs before now
 *  9. chain_critical_extension  no repeated extension; every critical extension is one processed here
 *                       (basic constraints, key usage, Apple device properties on the leaf)
 * 10. chain_ca          issuers (intermediates and anchor) carry basic constraints with cA = true; the
 *                       leaf is not a CA
 * 11. chain_path_length an issuer's pathLenConstraint >= the number of CA certificates below it
 * 12. chain_key_usage   issuers carry key usage with keyCertSign; the leaf has neither keyCertSign nor cRLSign
 * 13. per-OID decoding of the leaf (oids.ts): sip, secure_boot, kernel_extensions, os_version, freshness_code
 *
 * Steps 1-12 are verifyMdaPath (its chain_age step optional); verifyMdaChain adds step 13. Binding the
 * chain to the provider and judging the decoded posture happen elsewhere: for the development-root
 * hello path in checkAppleDeviceClaims (oids.ts, the old constant rule: freshness code = SHA-256 of the
 * identity key), called by trust.ts; for MDM answers in verifyMdaAnswer (mda-answer.ts, epoch nonces).
 */
import "./preload.ts";
import { BasicConstraintsExtension, KeyUsageFlags, KeyUsagesExtension, X509Certificate } from "@peculiar/x509";
import { readWhole } from "./der.ts";
import { bytesEqual } from "./encoding.ts";
import { AttestationError } from "./errors.ts";
import { type AppleDeviceClaims, decodeAppleDeviceClaims, KNOWN_APPLE_OIDS } from "./oids.ts";
import { assertAnchorAllowed, type TrustAnchor, type TrustMode } from "./roots.ts";
import { MAX_CHAIN_CERTIFICATES } from "./secure-enclave.ts";

/** Default maximum age of the leaf (time since its notBefore). */
export const DEFAULT_MAX_CERTIFICATE_AGE_MS = 30 * 24 * 60 * 60 * 1000;

const OID_BASIC_CONSTRAINTS = "2.5.29.19";
const OID_KEY_USAGE = "2.5.29.15";
const PROCESSED_EXTENSIONS: ReadonlySet<string> = new Set([OID_BASIC_CONSTRAINTS, OID_KEY_USAGE]);
const SIGNATURE_HASHES: ReadonlySet<string> = new Set(["SHA-256", "SHA-384", "SHA-512"]);
const ISSUER_CURVES: ReadonlySet<string> = new Set(["P-256", "P-384"]);

export interface MdaChainOptions {
  readonly anchor: TrustAnchor;
  readonly mode: TrustMode;
  readonly now: () => number;
  /** Step 8's bound (default 30 days); null skips step 8 (a caller with its own age rule). */
  readonly maxCertificateAgeMs?: number | null;
}

/** A chain that passed steps 1-12: its path to the anchor and the leaf's extensions, not yet decoded. */
export interface VerifiedMdaPath {
  /** [leaf, intermediates..., anchor]: the trailing root, when sent, replaced by the anchor itself. */
  readonly path: readonly X509Certificate[];
  /** The leaf's extensions by OID (extnValue contents); repeated ones were refused. */
  readonly leafExtensions: ReadonlyMap<string, Uint8Array>;
  /** Hex SHA-256 of the anchor the chain verified to. */
  readonly anchorSha256: string;
}

export interface VerifiedMdaChain {
  readonly leaf: X509Certificate;
  readonly claims: AppleDeviceClaims;
  /** Hex SHA-256 of the anchor the chain verified to. */
  readonly anchorSha256: string;
}

/**
 * Verifies an MDA chain to the anchor and decodes the leaf's device properties.
 * Throws AttestationError (checks listed in the file header).
 */
export async function verifyMdaChain(chainDer: readonly Uint8Array[], options: MdaChainOptions): Promise<VerifiedMdaChain> {
  const { path, leafExtensions, anchorSha256 } = await verifyMdaPath(chainDer, options);
  return { leaf: path[0]!, claims: decodeAppleDeviceClaims(leafExtensions), anchorSha256 };
}

/**
 * Steps 1-12 of the file header: the chain to the anchor and every path rule, without reading the
 * leaf's Apple device properties. Throws AttestationError (development_root, chain_*).
 */
export async function verifyMdaPath(chainDer: readonly Uint8Array[], options: MdaChainOptions): Promise<VerifiedMdaPath> {
  const { anchor } = options;
  assertAnchorAllowed(anchor, options.mode);

  if (chainDer.length === 0 || chainDer.length > MAX_CHAIN_CERTIFICATES) {
    throw new AttestationError("chain_format", `a chain has 1 to ${MAX_CHAIN_CERTIFICATES} certificates, got ${chainDer.length}`);
  }
  const certs = chainDer.map((der, i) => parseCertificate(der, i));
  const top = certs[certs.length - 1]!;
  if (bytesEqual(nameDer(top, "subject"), nameDer(top, "issuer"))) {
    if (!bytesEqual(spkiOf(top), anchor.spki)) {
      throw new AttestationError("chain_anchor", "the chain's root is not the pinned anchor (its key differs)");
    }
    certs.pop();
    if (certs.length === 0) throw new AttestationError("chain_format", "the chain holds only the root");
  }
  const path = [...certs, anchor.certificate];

  // Signatures, top-down: the first one checked is the anchor's, matched by key.
  for (let i = certs.length - 1; i >= 0; i--) {
    const subject = path[i]!;
    const issuer = path[i + 1]!;
    const isTop = i === certs.length - 1;
    if (!bytesEqual(nameDer(subject, "issuer"), nameDer(issuer, "subject"))) {
      throw new AttestationError(isTop ? "chain_anchor" : "chain_name", `${label(i)} names an issuer other than ${label(i + 1, isTop)}`);
    }
    checkAlgorithms(subject, issuer, i);
    if (!(await signatureVerifies(subject, issuer))) {
      throw new AttestationError(
        isTop ? "chain_anchor" : "chain_signature",
        `${label(i)} is not signed by the key of ${label(i + 1, isTop)}`,
      );
    }
  }

  const now = options.now();
  path.forEach((cert, i) => {
    const who = label(i, i === path.length - 1);
    if (now < cert.notBefore.getTime()) throw new AttestationError("chain_validity", `${who} is not valid yet`);
    if (now > cert.notAfter.getTime()) throw new AttestationError("chain_validity", `${who} has expired`);
  });
  const maxAge = options.maxCertificateAgeMs === undefined ? DEFAULT_MAX_CERTIFICATE_AGE_MS : options.maxCertificateAgeMs;
  const leaf = path[0]!;
  if (maxAge !== null && now - leaf.notBefore.getTime() > maxAge) {
    throw new AttestationError(
      "chain_age",
      `the leaf was issued ${Math.floor((now - leaf.notBefore.getTime()) / 3_600_000)} h ago, beyond the maximum age`,
    );
  }

  const extensions = path.map((cert, i) => extensionsOf(cert, i === 0, label(i, i === path.length - 1)));

  path.forEach((cert, i) => {
    const who = label(i, i === path.length - 1);
    const bc = cert.getExtension(BasicConstraintsExtension);
    const ku = cert.getExtension(KeyUsagesExtension);
    if (i === 0) {
      if (bc?.ca) throw new AttestationError("chain_ca", "the leaf is a CA certificate");
      if (ku && ku.usages & (KeyUsageFlags.keyCertSign | KeyUsageFlags.cRLSign)) {
        throw new AttestationError("chain_key_usage", "the leaf may sign certificates or CRLs");
      }
      return;
    }
    if (!bc?.ca) throw new AttestationError("chain_ca", `${who} is not a CA (basic constraints cA missing)`);
    const below = i - 1; // CA certificates between this issuer and the leaf
    if (bc.pathLength !== undefined && below > bc.pathLength) {
      throw new AttestationError("chain_path_length", `${who} allows ${bc.pathLength} intermediate(s) below it, the chain has ${below}`);
    }
    if (!ku || !(ku.usages & KeyUsageFlags.keyCertSign)) {
      throw new AttestationError("chain_key_usage", `${who} lacks the keyCertSign key usage`);
    }
  });

  return { path, leafExtensions: extensions[0]!, anchorSha256: anchor.sha256 };
}

function parseCertificate(der: Uint8Array, index: number): X509Certificate {
  try {
    readWhole(der, "chain_format", `certificate ${index}`);
    return new X509Certificate(der);
  } catch (e) {
    if (e instanceof AttestationError) throw e;
    throw new AttestationError("chain_format", `certificate ${index} does not parse`);
  }
}

function label(index: number, isAnchor = false): string {
  if (isAnchor) return "the anchor";
  return index === 0 ? "the leaf" : `intermediate ${index}`;
}

function nameDer(cert: X509Certificate, which: "subject" | "issuer"): Uint8Array {
  return new Uint8Array((which === "subject" ? cert.subjectName : cert.issuerName).toArrayBuffer());
}

function spkiOf(cert: X509Certificate): Uint8Array {
  return new Uint8Array(cert.publicKey.rawData);
}

function checkAlgorithms(subject: X509Certificate, issuer: X509Certificate, index: number): void {
  const sig = subject.signatureAlgorithm as { name?: string; hash?: { name?: string } };
  if (sig.name !== "ECDSA" || !SIGNATURE_HASHES.has(sig.hash?.name ?? "")) {
    throw new AttestationError("chain_algorithm", `${label(index)} is not signed with ECDSA and SHA-2`);
  }
  const key = issuer.publicKey.algorithm as { name?: string; namedCurve?: string };
  if (key.name !== "ECDSA" || !ISSUER_CURVES.has(key.namedCurve ?? "")) {
    throw new AttestationError("chain_algorithm", `the issuer of ${label(index)} does not hold a P-256 or P-384 key`);
  }
}

async function signatureVerifies(subject: X509Certificate, issuer: X509Certificate): Promise<boolean> {
  try {
    return await subject.verify({ publicKey: issuer.publicKey, signatureOnly: true }, crypto);
  } catch {
    return false;
  }
}

/**
 * Returns a certificate's extensions by OID (extnValue contents), refusing repeated extensions and
 * critical extensions this library does not process.
 */
function extensionsOf(cert: X509Certificate, isLeaf: boolean, who: string): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  for (const ext of cert.extensions) {
    if (out.has(ext.type)) throw new AttestationError("chain_critical_extension", `${who} repeats extension ${ext.type}`);
    out.set(ext.type, new Uint8Array(ext.value));
    const processed = PROCESSED_EXTENSIONS.has(ext.type) || (isLeaf && KNOWN_APPLE_OIDS.has(ext.type));
    if (ext.critical && !processed) {
      throw new AttestationError("chain_critical_extension", `${who} has an unknown critical extension ${ext.type}`);
    }
  }
  return out;
}
