/**
 * TLS terminated by the coordinator itself (--tls self-signed | acme): the key, the certificate served
 * now, and, for ACME, the certificates that replace it.
 *
 * Steps at start (before the app is built, so the attestation binds the key from its first document):
 *   1. Generate the in-memory key (tls-key.ts); its SPKI goes to the attestation's report data.
 *   2. Make a self-signed certificate over it. `self-signed` serves it for the life of the process.
 *   3. `acme`: bind the HTTP-01 responder (acme.ts); the self-signed certificate is served until the first
 *      ACME certificate arrives, then each new one (renewals) replaces it, over the same key. A client that
 *      pins the key from the attestation is served the same key throughout; a client that trusts the
 *      public CA waits for the first issuance.
 *
 * Invariant: `key.spki` never changes for the life of the process.
 */
import type { Config } from "../config/config.ts";
import type { Logger } from "../observability/logger.ts";
import type { AcmeCertificates } from "./acme.ts";
import { generateTlsKey, selfSignedCertificate, type TlsCertificate, type TlsKey } from "./tls-key.ts";

export interface CoordinatorTls {
  readonly key: TlsKey;
  /** The certificate to serve at start. */
  readonly initial: TlsCertificate;
  /** True when certificates are replaced while running (ACME): the listener must allow a handover. */
  readonly renewable: boolean;
  /** ACME: the bound HTTP-01 port; undefined otherwise. */
  readonly challengePort?: number;
  /** ACME: starts issuance and renewals in the background; a no-op for self-signed. */
  start(logger: Logger, install: (certificate: TlsCertificate) => void): void;
  stop(): Promise<void>;
}

/** Steps 1-3; undefined for --tls off. Throws AcmeError when the HTTP-01 port cannot be bound. */
export async function createCoordinatorTls(
  config: Pick<Config, "tls" | "host">,
  now: () => number = Date.now,
): Promise<CoordinatorTls | undefined> {
  const { tls } = config;
  if (tls.mode === "off") return undefined;
  const key = await generateTlsKey();
  const initial = await selfSignedCertificate(key, tls.names, now());
  let acme: AcmeCertificates | undefined;
  if (tls.mode === "acme" && tls.acme !== undefined) {
    // acme-client (axios, node-forge) is loaded only in this mode.
    const { startAcme } = await import("./acme.ts");
    acme = await startAcme({ ...tls.acme, host: config.host, names: tls.names, key, now });
  }
  return {
    key,
    initial,
    renewable: acme !== undefined,
    ...(acme !== undefined ? { challengePort: acme.challengePort } : {}),
    start: (logger, install) => acme?.start(logger, install),
    stop: async () => acme?.stop(),
  };
}
