/**
 * Certificates from an ACME CA (RFC 8555) for the coordinator's in-memory TLS key, through acme-client,
 * with the HTTP-01 challenges answered here (docs/operations.md "TLS").
 *
 * Invariants: the TLS private key and the account key (ECDSA P-256, made at each start, so each start
 * registers a new account) live in memory only; every certificate is over that one TLS key, the one the
 * attestation binds; the challenge responder serves nothing else in plain HTTP; the directory's HTTPS is
 * verified against the system roots, or the configured CA (--acme-ca-file) alone.
 */
import { X509Certificate } from "node:crypto";
import { Agent } from "node:https";
import acme from "acme-client";
import type { Logger } from "../observability/logger.ts";
import { AcmeError } from "./acme-error.ts";
import type { AcmeConfig } from "./tls-config.ts";
import type { TlsCertificate, TlsKey } from "./tls-key.ts";

const CHALLENGE_PREFIX = "/.well-known/acme-challenge/";
/** Renew once this share of a certificate's lifetime has passed. */
export const RENEW_AT = 2 / 3;
const RETRY_FIRST_MS = 5 * 60_000;
const RETRY_MAX_MS = 2 * 3_600_000;
/** setTimeout's largest delay is 2^31-1 ms (24.8 days); longer waits are taken in steps of this. */
const MAX_TIMER_MS = 20 * 86_400_000;

export interface AcmeOptions extends AcmeConfig {
  /** Address the HTTP-01 responder listens on (the coordinator's --listen host). */
  readonly host: string;
  readonly names: readonly string[];
  readonly key: TlsKey;
  /** Unix milliseconds. */
  readonly now: () => number;
}

export interface AcmeCertificates {
  /** The port the HTTP-01 responder is bound to (the configured one, or the one port 0 picked). */
  readonly challengePort: number;
  /**
   * Orders one certificate for every name: a CSR signed by the TLS key, HTTP-01 answered by the responder,
   * then the chain (leaf first). The library's pre-check of the challenge URL is skipped: inside the VM the
   * public name may not loop back. Rejects with AcmeError naming the failure.
   */
  issue(): Promise<TlsCertificate>;
  /**
   * In the background: issues now, hands each certificate (the first and every renewal) to `install`, and
   * issues again RENEW_AT of the way through its lifetime, always over the same key. A failure is retried
   * after RETRY_FIRST_MS, doubling up to RETRY_MAX_MS (below the CA's failed-validation limits).
   */
  start(logger: Logger, install: (certificate: TlsCertificate) => void): void;
  /** Stops renewals and the responder. */
  stop(): Promise<void>;
}

/** The chain's leaf validity in Unix milliseconds. Throws AcmeError for a chain that does not parse. */
function certificateValidity(certPem: string): { notBefore: number; notAfter: number } {
  try {
    const leaf = new X509Certificate(certPem);
    return { notBefore: Date.parse(leaf.validFrom), notAfter: Date.parse(leaf.validTo) };
  } catch {
    throw new AcmeError("the CA returned a certificate chain that does not parse");
  }
}

/** When to renew: RENEW_AT of the way from notBefore to notAfter. */
export function renewalTime(certificate: Pick<TlsCertificate, "notBefore" | "notAfter">): number {
  return certificate.notBefore + Math.floor((certificate.notAfter - certificate.notBefore) * RENEW_AT);
}

/**
 * Binds the HTTP-01 responder (plain HTTP on host:httpPort, answering only `GET
 * /.well-known/acme-challenge/<token>` of a challenge in progress, 404 otherwise), makes the account key,
 * and returns the issuer. Throws AcmeError when the challenge port cannot be bound.
 */
export async function startAcme(options: AcmeOptions): Promise<AcmeCertificates> {
  const { now, key } = options;
  const pending = new Map<string, string>();
  let responder: Bun.Server<undefined>;
  try {
    responder = Bun.serve({
      hostname: options.host,
      port: options.httpPort,
      fetch: (request) => {
        const path = new URL(request.url).pathname;
        const token = path.startsWith(CHALLENGE_PREFIX) ? path.slice(CHALLENGE_PREFIX.length) : undefined;
        const answer = request.method === "GET" && token !== undefined ? pending.get(token) : undefined;
        if (answer === undefined) return new Response("not found\n", { status: 404, headers: { "content-type": "text/plain" } });
        return new Response(answer, { headers: { "content-type": "application/octet-stream" } });
      },
    });
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    throw new AcmeError(
      `cannot listen for HTTP-01 challenges on ${options.host}:${options.httpPort} (--acme-http-port): ${typeof code === "string" ? code : "bind failed"}`,
    );
  }

  // The library's one HTTP client: a private ACME CA replaces the system roots for the directory.
  if (options.caPem !== undefined) acme.axios.defaults.httpsAgent = new Agent({ ca: options.caPem });
  const accountKey = await acme.crypto.createPrivateEcdsaKey("P-256");
  const client = new acme.Client({ directoryUrl: options.directory, accountKey });

  async function issue(): Promise<TlsCertificate> {
    const [, csr] = await acme.crypto.createCsr({ commonName: options.names[0], altNames: [...options.names] }, key.privateKeyPem);
    let certPem: string;
    try {
      certPem = await client.auto({
        csr,
        termsOfServiceAgreed: true,
        ...(options.email !== undefined ? { email: options.email } : {}),
        challengePriority: ["http-01"],
        skipChallengeVerification: true,
        challengeCreateFn: async (_authz, challenge, keyAuthorization) => {
          pending.set(challenge.token, keyAuthorization);
        },
        challengeRemoveFn: async (_authz, challenge) => {
          pending.delete(challenge.token);
        },
      });
    } catch (e) {
      throw new AcmeError(`ACME order failed: ${e instanceof Error ? e.message.slice(0, 300) : String(e)}`);
    }
    const certificate: TlsCertificate = Object.freeze({ certPem, ...certificateValidity(certPem) });
    const leaf = new X509Certificate(certPem);
    const leafSpki = new Uint8Array(leaf.publicKey.export({ type: "spki", format: "der" }));
    if (Buffer.compare(leafSpki, key.spki) !== 0) throw new AcmeError("the CA certified a key other than the coordinator's");
    return certificate;
  }

  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  const wait = (at: number, then: () => void) => {
    if (stopped) return;
    const delay = at - now();
    timer = setTimeout(() => (delay > MAX_TIMER_MS ? wait(at, then) : then()), Math.max(0, Math.min(delay, MAX_TIMER_MS)));
    timer.unref?.();
  };
  const run = (logger: Logger, install: (certificate: TlsCertificate) => void, retryMs: number) => {
    issue().then(
      (certificate) => {
        if (stopped) return;
        install(certificate);
        const renewAt = renewalTime(certificate);
        logger.info("acme certificate installed", { url: options.directory, duration_ms: Math.max(0, renewAt - now()) });
        wait(renewAt, () => run(logger, install, RETRY_FIRST_MS));
      },
      (e: unknown) => {
        if (stopped) return;
        logger.warn("acme certificate not issued; retrying", {
          reason: e instanceof Error ? e.message : "unknown",
          duration_ms: retryMs,
        });
        wait(now() + retryMs, () => run(logger, install, Math.min(retryMs * 2, RETRY_MAX_MS)));
      },
    );
  };

  return {
    challengePort: responder.port ?? options.httpPort,
    issue,
    start: (logger, install) => run(logger, install, RETRY_FIRST_MS),
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await responder.stop(true);
    },
  };
}
