/**
 * The coordinator's own attestation: the sealing key, the 64-byte report data, the evidence source and the
 * cached document that GET /v1/attestation returns (attestation/cvm/README.md has the formats and checks).
 *
 * Steps:
 *   1. At start: generate the coordinator's X25519 sealing key pair (src/crypto/seal.ts); it also serves
 *      the optional sealed consumer transport later. With configfs-tsm, ask the platform for evidence at
 *      once, so that an operator sees at boot whether attestation works (a failure is logged, never fatal).
 *      The development source is created on first use: its chain costs about 0.1 s of RSA key generation.
 *   2. Report data (64 bytes): SHA-256(TLS SubjectPublicKeyInfo DER) || SHA-256(raw sealing public key).
 *      Without a configured TLS key, bytes 0..31 are zero and the document says `tls_public_key_bound: false`.
 *   3. The evidence is asked once and cached; a request finding it older than MAX_AGE_MS asks again (a failed
 *      refresh keeps serving the previous document, which binds the same keys). A failure without any
 *      document is remembered for RETRY_MS, and answered 503 service_unavailable meanwhile.
 *
 * Document: the library's AttestationDocument (attestation/cvm/attestation-document.ts) plus
 *   sealing_public_key     raw X25519 public key, unpadded base64url (its SHA-256 is bytes 32..63)
 *   tls_public_key_bound   false when no TLS key is configured (bytes 0..31 are then zero)
 *   development            true for development evidence: it proves nothing about hardware
 *   development_root       development only: {name, ark, ask} (base64 DER) to verify the dev chain against
 *   config                 {sha256, bound_by}: the digest of the non-secret configuration (src/config/config-digest.ts)
 *                          and where it is bound: "cmdline" (the measured kernel command line's umbra.config=),
 *                          "host-data" (the report's HOST_DATA) or "none" (unbound: the host chose it)
 *
 * Invariants: the sealing private key never leaves this module's caller graph (never logged, never
 * answered); development evidence is never produced in production mode (config refuses it, and so does
 * createCoordinatorAttestation).
 */
// reflect-metadata in this module's static graph: in place before the @peculiar/x509 graph it imports
// lazily, whatever the entry point (STACK.md item 1; a script running the app in-process has no preload).
import "../../attestation/provider/preload.ts";
import { sha256 } from "@noble/hashes/sha2.js";
// Leaf modules, not attestation/cvm/index.ts: the development source (dev-source.ts) and chain checks need
// @peculiar/x509, a large share of start-up (bench/HISTORY.md); it is loaded only when the dev source is opened.
import type { SnpRoot } from "../../attestation/cvm/amd-roots.ts";
import { type AttestationDocument, REPORT_DATA_LAYOUT } from "../../attestation/cvm/attestation-document.ts";
import { createConfigfsTsmSource } from "../../attestation/cvm/configfs-tsm.ts";
import { CvmAttestationError } from "../../attestation/cvm/errors.ts";
import { type CvmPlatform, type EvidenceSource, REPORT_DATA_LENGTH } from "../../attestation/cvm/evidence-source.ts";
import { buildReportData, describeReportData } from "../../attestation/cvm/report-data.ts";
import { parseSnpReport } from "../../attestation/cvm/snp-report.ts";
import { ConfigError } from "../config/settings.ts";
import { toBase64url } from "../crypto/encoding.ts";
import { generateX25519KeyPair, type X25519KeyPair } from "../crypto/seal.ts";
import { Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";

/** The deployment mode (--mode): development allows dev evidence and development trust roots. */
export type Mode = "production" | "development";
/** Where the coordinator's own attestation evidence comes from (GET /v1/attestation). */
export type AttestationSource = "dev" | "configfs-tsm" | "none";
export type AttestationPlatform = Exclude<CvmPlatform, "dev">;
/** Where the digest of the non-secret configuration is bound (src/config/config-digest.ts); `none`: unbound. */
export type ConfigBinding = "none" | "cmdline" | "host-data";

/** The body of GET /v1/attestation. */
export interface CoordinatorAttestationDocument extends AttestationDocument {
  readonly sealing_public_key: string;
  readonly tls_public_key_bound: boolean;
  readonly development: boolean;
  readonly development_root?: { readonly name: string; readonly ark: string; readonly ask: string };
  readonly config?: { readonly sha256: string; readonly bound_by: ConfigBinding };
}

/** What the coordinator's own current report says (SEV-SNP and dev evidence). */
export interface OwnReport {
  readonly measurement: Uint8Array;
  readonly reportData: Uint8Array;
  readonly hostData: Uint8Array;
}

export interface CoordinatorAttestation {
  /** The sealing key pair (raw X25519), generated at start. Rejects only if the runtime cannot make keys. */
  sealingKey(): Promise<X25519KeyPair>;
  /** The current document. Throws ApiError 503 service_unavailable when this host cannot attest. */
  document(): Promise<CoordinatorAttestationDocument>;
  /**
   * The current report's MEASUREMENT, REPORT_DATA and HOST_DATA. Throws as document(), and ApiError 503
   * for a platform whose report is not parsed here (tdx).
   */
  ownReport(): Promise<OwnReport>;
}

export interface CoordinatorAttestationOptions {
  readonly mode: Mode;
  readonly source: AttestationSource;
  readonly platform: AttestationPlatform;
  readonly tlsPublicKeySpki: Uint8Array | null;
  readonly expectedMeasurement: Uint8Array | null;
  /** The configuration's digest and where it is bound, published as `config`. */
  readonly config?: { readonly sha256: string; readonly boundBy: ConfigBinding };
  /** HOST_DATA of development reports (tests of the host-data binding); zeros when absent. */
  readonly devHostData?: Uint8Array;
  readonly logger: Logger;
  /** Unix milliseconds. */
  readonly now: () => number;
}

/** Evidence older than this is asked again on the next request. */
export const MAX_AGE_MS = 60 * 60_000;
/** After a failure with no document to fall back on, the platform is asked again after this long. */
const RETRY_MS = 60_000;

const NOT_AVAILABLE = "coordinator attestation is not available on this host";

/**
 * The 64 bytes: SHA-256 of the TLS SubjectPublicKeyInfo (or 32 zero bytes without one) || SHA-256 of the
 * raw sealing public key. Throws CvmAttestationError report_data for an empty key.
 */
function coordinatorReportData(tlsPublicKeySpki: Uint8Array | null, sealingPublicKey: Uint8Array): Uint8Array {
  if (tlsPublicKeySpki !== null) return buildReportData({ tlsPublicKeySpki, sealingPublicKey });
  if (sealingPublicKey.length === 0) throw new CvmAttestationError("report_data", "the sealing public key is empty");
  const out = new Uint8Array(REPORT_DATA_LENGTH);
  out.set(sha256(sealingPublicKey), 32);
  return out;
}

interface Source {
  readonly source: EvidenceSource;
  readonly developmentRoot: SnpRoot | null;
}

const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

/** Wires the service and starts step 1. Throws ConfigError for development evidence in production mode. */
export function createCoordinatorAttestation(options: CoordinatorAttestationOptions): CoordinatorAttestation {
  const { logger, now, expectedMeasurement, tlsPublicKeySpki } = options;
  if (options.mode === "production" && options.source === "dev") {
    throw new ConfigError("production mode refuses development attestation evidence (--attestation dev)");
  }
  const sealing = generateX25519KeyPair();
  // Awaited by every caller; this handler only keeps a failure from going unhandled before the first one.
  sealing.catch(() => logger.error("sealing key generation failed", { reason: "x25519" }));

  let source: Promise<Source> | undefined;
  const openSource = (): Promise<Source> => {
    source ??= (async (): Promise<Source> => {
      if (options.source === "dev") {
        const { createDevSource } = await import("../../attestation/cvm/dev-source.ts");
        const dev = await createDevSource({
          measurement: expectedMeasurement ?? new Uint8Array(48),
          ...(options.devHostData ? { overrides: { hostData: options.devHostData } } : {}),
        });
        return { source: dev, developmentRoot: dev.roots[0] ?? null };
      }
      return { source: createConfigfsTsmSource({ platform: options.platform }), developmentRoot: null };
    })().catch((e: unknown) => {
      source = undefined; // asked again after RETRY_MS, like any other failure
      throw e;
    });
    return source;
  };

  async function build(): Promise<CoordinatorAttestationDocument> {
    const key = await sealing;
    const { source: evidenceSource, developmentRoot } = await openSource();
    const reportData = coordinatorReportData(tlsPublicKeySpki, key.publicKey);
    const evidence = await evidenceSource.get(reportData);
    const doc: CoordinatorAttestationDocument = {
      platform: evidence.platform,
      evidence: b64(evidence.evidence),
      endorsements: evidence.endorsements.map(b64),
      report_data: { hex: hex(reportData), layout: REPORT_DATA_LAYOUT, ...describeReportData(reportData) },
      expected_measurement: expectedMeasurement ? hex(expectedMeasurement) : null,
      sealing_public_key: toBase64url(key.publicKey),
      tls_public_key_bound: tlsPublicKeySpki !== null,
      development: evidence.platform === "dev",
      ...(developmentRoot
        ? {
            development_root: {
              name: developmentRoot.name,
              ark: b64(new Uint8Array(developmentRoot.ark.rawData)),
              ask: b64(new Uint8Array(developmentRoot.ask.rawData)),
            },
          }
        : {}),
      ...(options.config ? { config: { sha256: options.config.sha256, bound_by: options.config.boundBy } } : {}),
    };
    return Object.freeze(doc);
  }

  let current: { doc: CoordinatorAttestationDocument; at: number } | undefined;
  let failure: { reason: string; at: number } | undefined;
  let inFlight: Promise<void> | undefined;

  const refresh = (): Promise<void> => {
    inFlight ??= build()
      .then(
        (doc) => {
          current = { doc, at: now() };
          failure = undefined;
        },
        (e: unknown) => {
          const reason = e instanceof CvmAttestationError ? e.check : e instanceof Error ? e.name : "unknown";
          failure = { reason, at: now() };
          logger.warn(current ? "coordinator attestation refresh failed" : "coordinator attestation unavailable", { reason });
        },
      )
      .finally(() => {
        inFlight = undefined;
      });
    return inFlight;
  };

  if (options.source === "configfs-tsm") void refresh();

  async function document(): Promise<CoordinatorAttestationDocument> {
    if (options.source === "none") throw Errors.serviceUnavailable(`${NOT_AVAILABLE} (--attestation none)`);
    const t = now();
    const stale = current === undefined || t - current.at >= MAX_AGE_MS;
    const waiting = failure !== undefined && t - failure.at < RETRY_MS;
    if (stale && (!waiting || inFlight)) await refresh();
    if (current) return current.doc;
    throw Errors.serviceUnavailable(`${NOT_AVAILABLE} (${failure?.reason ?? "no evidence"})`);
  }

  return {
    sealingKey: () => sealing,
    document,
    async ownReport() {
      const doc = await document();
      if (doc.platform !== "sev-snp" && doc.platform !== "dev") {
        throw Errors.serviceUnavailable(`the ${doc.platform} report is not read by this coordinator`);
      }
      const report = parseSnpReport(new Uint8Array(Buffer.from(doc.evidence, "base64")));
      return { measurement: report.measurement, reportData: report.reportData, hostData: report.hostData };
    },
  };
}
