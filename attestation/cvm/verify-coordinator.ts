/**
 * The auditor's check of a live coordinator: fetch GET /v1/attestation and verify it against a published
 * measurements.json (measurements.ts). Used by `umbra-coordinator verify-attestation` and by
 * docs/examples/verify-attestation.ts.
 *
 * Checks, each reported pass / fail / skip with one line of detail (never a secret):
 *   document         GET URL/v1/attestation answered 200 with a well-formed document.
 *   signature_chain  the SEV-SNP report: layout, VCEK signature, VCEK -> ASK -> ARK to AMD's pinned roots,
 *                    VCEK issued for this chip and TCB (snp-verify.ts, production mode). Development evidence
 *                    (platform dev) fails here unless allowDevelopment: it is then checked against the
 *                    development root the document carries, which proves nothing about hardware.
 *   policy           debug off, no migration agent, VMPL 0, SMT only if the published policy allows it
 *                    (snp-verify.ts), and POLICY equal to the published policy.
 *   measurement      MEASUREMENT equals the named shape's, or any published shape's (the match is named).
 *   tls_key          report data bytes 0..31 = SHA-256 of the SubjectPublicKeyInfo DER of the certificate
 *                    presented on the very TLS connection that carried the document (https), or of a key the
 *                    caller pins. Over plain http with no pinned key: skip when the document says no TLS key
 *                    is bound and those bytes are zero (development), fail otherwise.
 *   sealing_key      report data bytes 32..63 = SHA-256 of the advertised sealing_public_key (base64url).
 * Report data is read from the signed report itself, never from the document's hex. The TLS connection does
 * not check the certificate against CAs: the report binding is what authenticates the key (a self-signed
 * certificate is fine). Checks after a failed document or signature_chain are skipped (an unauthenticated
 * report says nothing). The result is ok when no check failed.
 */

import { createHash } from "node:crypto";
import { connect, type TLSSocket } from "node:tls";
import { X509Certificate } from "@peculiar/x509";
import { loadAmdRoots, type SnpRoot } from "./amd-roots.ts";
import { decodeAttestationDocument } from "./attestation-document.ts";
import { CvmAttestationError, type CvmCheck } from "./errors.ts";
import type { ExpectedImage } from "./measurements.ts";
import { parseSnpReport, SNP_POLICY_SMT, type SnpReport } from "./snp-report.ts";
import { createSnpVerifier } from "./snp-verify.ts";

const COORDINATOR_CHECKS = ["document", "signature_chain", "policy", "measurement", "tls_key", "sealing_key"] as const;
export type CoordinatorCheck = (typeof COORDINATOR_CHECKS)[number];

export interface CheckOutcome {
  readonly check: CoordinatorCheck;
  readonly status: "pass" | "fail" | "skip";
  readonly detail: string;
  /** The verifier's own check name, when the verifier refused. */
  readonly cause?: CvmCheck;
}

export interface CoordinatorVerification {
  readonly url: string;
  readonly ok: boolean;
  readonly platform: string | null;
  readonly development: boolean;
  /** The published shape whose measurement the report carries, or null. */
  readonly shape: string | null;
  readonly measurement: string | null;
  /** The signed report's REPORT_DATA, hex, or null when there is no report. */
  readonly reportData: string | null;
  readonly checks: readonly CheckOutcome[];
}

/** An answer and, for https, the peer's SPKI on the connection that carried it. */
export interface FetchedDocument {
  readonly status: number;
  readonly body: string;
  readonly tlsPublicKeySpki: Uint8Array | null;
  /** https: the DER certificate presented on that connection (a client pinning the key reuses it). */
  readonly tlsCertificate?: Uint8Array;
  /** https: whether that certificate chained to a CA this process trusts (the host name is not checked). */
  readonly tlsAuthorized?: boolean;
}

export interface VerifyCoordinatorOptions {
  readonly expected: ExpectedImage;
  /** Accept development evidence (tests, `make dev`); default false. */
  readonly allowDevelopment?: boolean;
  /** A TLS key pinned by the caller (DER SPKI), used instead of the connection's. */
  readonly tlsPublicKeySpki?: Uint8Array;
  /** Replaces the network (in-process tests). */
  readonly fetchDocument?: (url: URL) => Promise<FetchedDocument>;
  /** Roots for production mode; default AMD's pinned roots. */
  readonly roots?: readonly SnpRoot[];
  /** Unix milliseconds, for certificate validity. */
  readonly now?: () => number;
}

const sha256 = (bytes: Uint8Array) => new Uint8Array(createHash("sha256").update(bytes).digest());
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
const POLICY_CHECKS: ReadonlySet<CvmCheck> = new Set(["policy_debug", "policy_migration", "policy_smt", "vmpl", "minimum_tcb"]);

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

function readHttpResponse(raw: Buffer): { status: number; body: string } {
  const split = raw.indexOf("\r\n\r\n");
  if (split < 0) throw new Error("the server's answer has no HTTP header");
  const [statusLine = "", ...headerLines] = raw.subarray(0, split).toString("latin1").split("\r\n");
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? Number.NaN);
  if (!Number.isInteger(status)) throw new Error("the server's answer has no HTTP status line");
  const headers = new Map(headerLines.map((l) => [l.slice(0, l.indexOf(":")).trim().toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
  let body = raw.subarray(split + 4);
  if (headers.get("transfer-encoding")?.toLowerCase() === "chunked") {
    const parts: Buffer[] = [];
    let at = 0;
    for (;;) {
      const eol = body.indexOf("\r\n", at);
      const size = Number.parseInt(body.subarray(at, eol).toString("latin1"), 16);
      if (eol < 0 || !Number.isInteger(size)) throw new Error("the server's chunked answer is malformed");
      if (size === 0) break;
      parts.push(body.subarray(eol + 2, eol + 2 + size));
      at = eol + 2 + size + 2;
    }
    body = Buffer.concat(parts);
  } else if (headers.has("content-length")) {
    body = body.subarray(0, Number(headers.get("content-length")));
  }
  return { status, body: body.toString("utf8") };
}

/**
 * GET url over one TLS connection (HTTP/1.1, Connection: close), returning the answer and the SPKI of the
 * certificate presented on that connection. The certificate is not checked against CAs (see header).
 */
export function fetchOverTls(url: URL): Promise<FetchedDocument> {
  return new Promise((resolve, reject) => {
    const host = url.hostname.replace(/^\[|\]$/g, "");
    const socket: TLSSocket = connect({
      host,
      port: Number(url.port || 443),
      ...(/^[\d.:]+$/.test(host) ? {} : { servername: host }),
      rejectUnauthorized: false,
      ALPNProtocols: ["http/1.1"],
    });
    const chunks: Buffer[] = [];
    let spki: Uint8Array | null = null;
    let certificate: Uint8Array | undefined;
    let authorized = false;
    socket.once("secureConnect", () => {
      const cert = socket.getPeerX509Certificate();
      if (cert) {
        spki = new Uint8Array(cert.publicKey.export({ type: "spki", format: "der" }));
        certificate = new Uint8Array(cert.raw);
      }
      authorized = socket.authorized;
      socket.write(
        `GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n`,
      );
    });
    socket.on("data", (d: Buffer) => chunks.push(d));
    socket.once("error", reject);
    socket.once("end", () => {
      try {
        const tls = certificate === undefined ? {} : { tlsCertificate: certificate, tlsAuthorized: authorized };
        resolve({ ...readHttpResponse(Buffer.concat(chunks)), tlsPublicKeySpki: spki, ...tls });
      } catch (e) {
        reject(e);
      }
    });
  });
}

async function fetchPlain(url: URL): Promise<FetchedDocument> {
  const response = await fetch(url, { headers: { accept: "application/json" } });
  return { status: response.status, body: await response.text(), tlsPublicKeySpki: null };
}

/** Fetches and runs every check (see header). Rejects only when the URL cannot be reached at all. */
export async function verifyCoordinatorAttestation(baseUrl: string, options: VerifyCoordinatorOptions): Promise<CoordinatorVerification> {
  const url = new URL("/v1/attestation", baseUrl);
  const https = url.protocol === "https:";
  const fetched = await (options.fetchDocument ?? (https ? fetchOverTls : fetchPlain))(url);
  const checks = new Map<CoordinatorCheck, CheckOutcome>();
  const put = (check: CoordinatorCheck, status: CheckOutcome["status"], detail: string, cause?: CvmCheck) =>
    checks.set(check, { check, status, detail, ...(cause ? { cause } : {}) });
  let reportData: string | null = null;
  const finish = (platform: string | null, development: boolean, shape: string | null, measurement: string | null) => {
    for (const c of COORDINATOR_CHECKS) if (!checks.has(c)) put(c, "skip", "not checked: no report to check");
    const list = COORDINATOR_CHECKS.map((c) => checks.get(c) as CheckOutcome);
    return {
      url: url.toString(),
      ok: list.every((c) => c.status !== "fail"),
      platform,
      development,
      shape,
      measurement,
      reportData,
      checks: list,
    };
  };

  // document
  let doc: Record<string, unknown>;
  let decoded: ReturnType<typeof decodeAttestationDocument>;
  let report: SnpReport;
  try {
    if (fetched.status !== 200) throw new Error(`${url} answered ${fetched.status}`);
    const body = JSON.parse(fetched.body) as unknown;
    decoded = decodeAttestationDocument(body);
    doc = body as Record<string, unknown>;
    report = parseSnpReport(decoded.evidence);
  } catch (e) {
    const cause = e instanceof CvmAttestationError ? e.check : undefined;
    const detail = e instanceof SyntaxError ? "the answer is not JSON" : (e as Error).message;
    if (cause && cause !== "document_format" && cause !== "platform_unsupported") {
      put("document", "pass", "well-formed attestation document");
      put("signature_chain", "fail", detail, cause);
    } else {
      put("document", "fail", detail, cause);
    }
    return finish(null, false, null, null);
  }
  put("document", "pass", `${decoded.platform} attestation document`);
  reportData = hex(report.reportData);
  const development = decoded.platform === "dev";

  // signature_chain, policy
  const published = options.expected.policy;
  let roots: readonly SnpRoot[] | null = null;
  if (development && options.allowDevelopment !== true) {
    put("signature_chain", "fail", "development evidence, signed by a root the coordinator generated itself", "dev_root_in_production");
  } else if (development) {
    const root = doc.development_root as { name: string; ark: string; ask: string } | undefined;
    if (root === undefined) put("signature_chain", "fail", "development evidence without its development root", "document_format");
    else {
      const cert = (b64: string) => new X509Certificate(Buffer.from(b64, "base64"));
      roots = [{ name: root.name, ark: cert(root.ark), ask: cert(root.ask), development: true }];
    }
  } else {
    roots = options.roots ?? (await loadAmdRoots());
  }
  if (roots !== null) {
    const verifier = createSnpVerifier({
      roots: [...roots],
      mode: development ? "development" : "production",
      ...(options.now ? { clock: { now: options.now } } : {}),
    });
    const allowSmt = options.expected.allowSmt ?? (published === null || (published & SNP_POLICY_SMT) !== 0n);
    try {
      const v = await verifier.verifyEvidence(decoded, { measurement: report.measurement, reportData: report.reportData, allowSmt });
      put("signature_chain", "pass", `VCEK -> ASK -> ARK (${v.chain.root.name})${development ? ", DEVELOPMENT root" : ""}`);
    } catch (e) {
      if (!(e instanceof CvmAttestationError)) throw e;
      if (POLICY_CHECKS.has(e.check)) {
        put("signature_chain", "pass", `VCEK -> ASK -> ARK${development ? ", DEVELOPMENT root" : ""}`);
        put("policy", "fail", e.message, e.check);
      } else {
        put("signature_chain", "fail", e.message, e.check);
      }
    }
  }
  const policyHex = `0x${report.policy.toString(16)}`;
  if (checks.get("signature_chain")?.status !== "pass") {
    for (const c of COORDINATOR_CHECKS) if (!checks.has(c)) put(c, "skip", "not checked: the report is not authenticated");
    return finish(decoded.platform, development, null, hex(report.measurement));
  }
  if (!checks.has("policy")) {
    if (published !== null && report.policy !== published) {
      put("policy", "fail", `policy ${policyHex} differs from the published 0x${published.toString(16)}`);
    } else put("policy", "pass", `${policyHex}: no debug, no migration agent, VMPL 0`);
  }

  // measurement
  const measured = hex(report.measurement);
  const match = options.expected.shapes.find((s) => s.measurement === measured);
  if (options.expected.shapes.length === 0) put("measurement", "fail", "no published shape to compare with");
  else if (match) put("measurement", "pass", `matches shape ${match.name}`);
  else {
    const names = options.expected.shapes.map((s) => s.name).join(", ");
    put("measurement", "fail", `${measured} matches no published shape (${names})`);
  }

  // tls_key
  const tlsHalf = report.reportData.subarray(0, 32);
  const seen = options.tlsPublicKeySpki ?? fetched.tlsPublicKeySpki;
  const from = options.tlsPublicKeySpki ? "the pinned key" : "the key of this TLS connection";
  if (seen !== null) {
    if (sameBytes(tlsHalf, sha256(seen))) put("tls_key", "pass", `report data binds ${from}`);
    else put("tls_key", "fail", `report data does not bind ${from}`, "report_data");
  } else if (doc.tls_public_key_bound === false && tlsHalf.every((b) => b === 0)) {
    put("tls_key", "skip", "plain http and the coordinator binds no TLS key (development only)");
  } else {
    put("tls_key", "fail", "plain http: no TLS connection to check the bound key against; use the https URL");
  }

  // sealing_key
  const sealing = doc.sealing_public_key;
  if (typeof sealing !== "string" || !/^[A-Za-z0-9_-]{43}$/.test(sealing)) {
    put("sealing_key", "fail", "the document advertises no 32-byte sealing_public_key", "document_format");
  } else if (sameBytes(report.reportData.subarray(32), sha256(new Uint8Array(Buffer.from(sealing, "base64url"))))) {
    put("sealing_key", "pass", `report data binds the advertised sealing key ${sealing}`);
  } else put("sealing_key", "fail", "report data does not bind the advertised sealing key", "report_data");

  return finish(decoded.platform, development, match?.name ?? null, measured);
}
