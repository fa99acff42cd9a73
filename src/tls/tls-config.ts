/** The TLS settings (--tls, --tls-name, --acme-*) as src/config parses them and src/tls uses them. */

/** Who terminates TLS: nobody (plain HTTP, loopback only in production), the coordinator with a self-signed or an ACME certificate. */
export type TlsMode = "off" | "self-signed" | "acme";

/** TLS inside the coordinator (src/tls/): the key is generated in memory at start, never configured. */
export interface TlsConfig {
  readonly mode: TlsMode;
  /** Names the certificate covers: DNS names (and, self-signed only, IP addresses). */
  readonly names: readonly string[];
  readonly acme?: AcmeConfig;
}

export interface AcmeConfig {
  /** The ACME directory URL (https). */
  readonly directory: string;
  /** Contact address registered with the account; none when not given. */
  readonly email?: string;
  /** Plain-HTTP port the coordinator answers HTTP-01 challenges on (80 for a public CA). */
  readonly httpPort: number;
  /** PEM certificates trusted for the directory's own HTTPS (a private ACME CA); none: the system roots. */
  readonly caPem?: string;
}
