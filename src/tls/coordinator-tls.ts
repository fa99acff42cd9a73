/**
 * TLS terminated by the coordinator itself (--tls self-signed | acme): the key, the certificate served
 * now, and, for ACME, the certificates that replace it.
 *
 * At start, before the app is built (so the attestation binds the key from its first document): the
 * in-memory key (tls-key.ts), whose SPKI goes to the report data, and a self-signed certificate over it,
 * served for the life of the process with `self-signed`. With `acme` it is served until the first ACME
 * certificate arrives (acme.ts), then each new one replaces it, over the same key: a client that pins the
 * key from the attestation is served it throughout; one that trusts the public CA waits for the first.
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

/**
 * The key, the self-signed certificate and (acme) the bound HTTP-01 responder; undefined for --tls off.
 * Throws AcmeError when the HTTP-01 port cannot be bound.
 */
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
