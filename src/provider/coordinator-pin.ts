/**
 * Pinning the coordinator from its attestation (`--coordinator-image measurements.json`).
 *
 * A coordinator in a confidential VM terminates TLS with a key made in its memory at start, bound in its
 * SEV-SNP report (docs/security.md, "Pinning the coordinator's TLS key"). With an expected image, every
 * connection the provider tool makes is preceded by a verification of that attestation (`pinCoordinator`)
 * and uses TLS options that accept only the attested key. Any failure refuses the coordinator before the
 * device token or anything else is sent. The key changes when the coordinator restarts; the next
 * connection verifies the new attestation. Development evidence (a coordinator's self-made root) is
 * refused unless `development` (tests only).
 */
// reflect-metadata in this module's static graph: in place before the @peculiar/x509 graph it imports
// lazily, whatever the entry point (STACK.md item 1; a script running the app in-process has no preload).
import "../../attestation/provider/preload.ts";
import { createHash, X509Certificate } from "node:crypto";
import { checkServerIdentity, type PeerCertificate } from "node:tls";
import type { ExpectedImage } from "../../attestation/cvm/measurements.ts";
import type { FetchedDocument } from "../../attestation/cvm/verify-coordinator.ts";

export interface CoordinatorExpectation {
  /** The published shapes and policy (measurements.json, optionally one shape). */
  readonly image: ExpectedImage;
  /** Accept development evidence (tests; it proves nothing about hardware). */
  readonly development: boolean;
}

/** TLS options for Bun's WebSocket and fetch (`tls`), pinned to the attested key. */
export interface PinnedTls {
  readonly ca?: string;
  readonly checkServerIdentity: (host: string, cert: PeerCertificate) => Error | undefined;
}

export interface PinnedCoordinator {
  readonly tls: PinnedTls;
  /** The published shape the report's measurement matches. */
  readonly shape: string | null;
  readonly measurement: string | null;
  readonly development: boolean;
  /** SHA-256 of the attested TLS key's SubjectPublicKeyInfo, hex. */
  readonly keySha256: string;
}

/** The coordinator failed a check of its attestation: nothing is sent to it. */
export class CoordinatorRefused extends Error {
  override readonly name = "CoordinatorRefused";
  constructor(
    /** The failed check (verify-coordinator.ts COORDINATOR_CHECKS), or "https" when the URL is not https. */
    readonly check: string,
    message: string,
  ) {
    super(message);
  }
}

const sha256Hex = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

function pem(der: Uint8Array): string {
  const lines =
    Buffer.from(der)
      .toString("base64")
      .match(/.{1,64}/g) ?? [];
  return `-----BEGIN CERTIFICATE-----\n${lines.join("\n")}\n-----END CERTIFICATE-----\n`;
}

/** SHA-256 of the SubjectPublicKeyInfo of a presented certificate, or null when it cannot be read. */
function presentedKeySha256(cert: PeerCertificate): string | null {
  try {
    return sha256Hex(new X509Certificate(cert.raw).publicKey.export({ type: "spki", format: "der" }));
  } catch {
    return null;
  }
}

/**
 * Verifies the coordinator and returns the TLS options pinned to its key:
 *   1. GET {base}/v1/attestation over TLS, keeping the certificate of that very connection;
 *   2. the auditor's checks (attestation/cvm/verify-coordinator.ts): signature chain to AMD's roots, policy,
 *      measurement equal to a published shape's, report data binding that connection's key and the sealing
 *      key. Any failure refuses the coordinator (CoordinatorRefused, naming the check);
 *   3. the TLS options for the real connection (WebSocket or fetch): the server's key must be the attested
 *      one (checkServerIdentity compares the SHA-256 of the certificate's SubjectPublicKeyInfo). A
 *      certificate that chains to a CA this machine trusts (ACME) must also name the host, as usual; one that
 *      does not (self-signed) is accepted as its own anchor, because the attestation, not a CA, vouches for
 *      its key.
 * Rejects with CoordinatorRefused for a failed check, with Error when unreachable.
 */
export async function pinCoordinator(
  base: string,
  expectation: CoordinatorExpectation,
  fetchDocument?: (url: URL) => Promise<FetchedDocument>,
): Promise<PinnedCoordinator> {
  if (new URL(base).protocol !== "https:") {
    throw new CoordinatorRefused(
      "https",
      `${base} is not https: there is no TLS key to pin (--coordinator-image needs an https coordinator)`,
    );
  }
  // Loaded on use: @peculiar/x509 and AMD's roots cost tens of milliseconds that a provider without an
  // expected image never pays.
  const { fetchOverTls, verifyCoordinatorAttestation } = await import("../../attestation/cvm/verify-coordinator.ts");
  let seen: FetchedDocument | undefined;
  const fetchAndKeep = async (url: URL) => {
    seen = await (fetchDocument ?? fetchOverTls)(url);
    return seen;
  };
  const result = await verifyCoordinatorAttestation(base, {
    expected: expectation.image,
    allowDevelopment: expectation.development,
    fetchDocument: fetchAndKeep,
  });
  const failed = result.checks.find((c) => c.status === "fail");
  if (failed !== undefined) throw new CoordinatorRefused(failed.check, `attestation check ${failed.check} failed: ${failed.detail}`);
  const key = seen?.tlsPublicKeySpki;
  const certificate = seen?.tlsCertificate;
  if (!key || !certificate || result.checks.find((c) => c.check === "tls_key")?.status !== "pass") {
    throw new CoordinatorRefused("tls_key", "attestation check tls_key failed: no TLS key was bound to check");
  }
  const keySha256 = sha256Hex(key);
  const publicCa = seen?.tlsAuthorized === true;
  const tls: PinnedTls = {
    ...(publicCa ? {} : { ca: pem(certificate) }),
    checkServerIdentity: (host, cert) => {
      // A CA-issued certificate must name the host as usual; a self-signed one is vouched for by the report.
      const named = publicCa ? checkServerIdentity(host, cert) : undefined;
      if (named) return named;
      if (presentedKeySha256(cert) !== keySha256) {
        return new Error(
          "the coordinator presented a TLS key other than the one its attestation binds (restarted? retrying verifies again)",
        );
      }
      return undefined;
    },
  };
  return { tls, shape: result.shape, measurement: result.measurement, development: result.development, keySha256 };
}

/** fetch's options with Bun's `tls` (which RequestInit does not name). */
export type PinnableInit = RequestInit & { readonly tls?: PinnedTls };

/** fetch with the pinned TLS options (login, status, doctor). */
export function pinnedFetch(tls: PinnedTls): (url: string, init: RequestInit) => Promise<Response> {
  return (url, init) => fetch(url, { ...init, tls });
}
