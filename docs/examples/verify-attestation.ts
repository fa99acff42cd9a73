/**
 * Verifies a coordinator's attestation (docs/security.md, "Verifying the coordinator").
 *
 *   node_modules/.bin/bun docs/examples/verify-attestation.ts URL [--measurement HEX] [--tls-public-key FILE] [--no-smt]
 *
 * Steps:
 *   1. GET URL/v1/attestation (no credential). A 503 means the host cannot attest: nothing to verify.
 *   2. Expected report data (64 bytes), computed here from keys, never taken from the answer:
 *        bytes  0..31  SHA-256 of the TLS key's SubjectPublicKeyInfo DER: from --tls-public-key FILE (PEM
 *                      certificate or public key), else from the TLS connection to URL when it is https;
 *                      32 zero bytes only when the answer says no TLS key is bound (tls_public_key_bound false)
 *        bytes 32..63  SHA-256 of the raw X25519 sealing key the answer publishes (sealing_public_key)
 *   3. The launch measurement: --measurement (what you computed from the published image). Required for
 *      real hardware; the answer's expected_measurement is a hint and is used only for development evidence.
 *   4. Roots: AMD's pinned ARK/ASK (attestation/cvm/roots) with a production verifier. Development evidence
 *      (platform dev) is checked against the development root the answer itself carries, with a development
 *      verifier, and is reported as DEVELOPMENT: it proves only that the code paths work, nothing about hardware.
 *   5. attestation/cvm's verifier: report signature by the VCEK, chain to the root, VCEK chip id and TCB,
 *      guest policy (no debug, no migration agent, SMT unless --no-smt), VMPL 0, measurement, report data.
 * Exit status 0 when every check passes; 1 with the failed check's name otherwise.
 */
import "reflect-metadata";
import { createHash, createPublicKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { connect } from "node:tls";
import { parseArgs } from "node:util";
import { X509Certificate } from "@peculiar/x509";
import {
  CvmAttestationError,
  createSnpVerifier,
  decodeAttestationDocument,
  loadAmdRoots,
  type SnpRoot,
  type SnpVerification,
} from "../../attestation/cvm/index.ts";

/** The fields of the answer this script reads (docs/api.md, GET /v1/attestation). */
interface Answer {
  platform: string;
  report_data: { hex: string };
  expected_measurement: string | null;
  sealing_public_key: string;
  tls_public_key_bound: boolean;
  development: boolean;
  development_root?: { name: string; ark: string; ask: string };
}

export interface VerifyOptions {
  /** The launch measurement you expect (48 bytes). */
  readonly measurement?: Uint8Array;
  /** The TLS key you saw, as DER SubjectPublicKeyInfo. */
  readonly tlsPublicKeySpki?: Uint8Array;
  readonly allowSmt?: boolean;
  readonly fetch?: (url: string) => Promise<Response>;
  /** Unix milliseconds, for certificate validity. */
  readonly now?: () => number;
}

export interface VerifyResult {
  readonly platform: string;
  readonly development: boolean;
  readonly measurement: string;
  readonly reportData: string;
  readonly tlsPublicKeyBound: boolean;
  readonly sealingPublicKey: string;
  readonly verification: SnpVerification;
}

const sha256 = (bytes: Uint8Array) => new Uint8Array(createHash("sha256").update(bytes).digest());
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

/** SubjectPublicKeyInfo DER of a PEM certificate or public key file. */
export function spkiOfFile(path: string): Uint8Array {
  return new Uint8Array(createPublicKey(readFileSync(path, "utf8")).export({ type: "spki", format: "der" }));
}

/** The SubjectPublicKeyInfo DER of the certificate an https server presents (the system's CAs apply). */
function spkiOfServer(url: URL): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: url.hostname, port: Number(url.port || 443), servername: url.hostname }, () => {
      const cert = socket.getPeerX509Certificate();
      socket.end();
      if (cert) resolve(new Uint8Array(cert.publicKey.export({ type: "spki", format: "der" })));
      else reject(new Error("the server presented no certificate"));
    });
    socket.once("error", reject);
  });
}

/**
 * Fetches and verifies. Throws CvmAttestationError naming the failed check, or Error when the coordinator
 * answers no document or an input is missing.
 */
export async function verifyCoordinator(baseUrl: string, options: VerifyOptions = {}): Promise<VerifyResult> {
  const url = new URL("/v1/attestation", baseUrl);
  const response = await (options.fetch ?? fetch)(url.toString());
  const body = (await response.json()) as unknown;
  if (response.status !== 200) throw new Error(`${url} answered ${response.status}: ${JSON.stringify(body)}`);
  const doc = body as Answer;
  const decoded = decodeAttestationDocument(doc);

  const sealingPublicKey = new Uint8Array(Buffer.from(String(doc.sealing_public_key), "base64url"));
  let tls: Uint8Array | null = options.tlsPublicKeySpki ?? null;
  if (tls === null && url.protocol === "https:") tls = await spkiOfServer(url);
  if (tls === null && doc.tls_public_key_bound !== false) {
    throw new Error("the answer binds a TLS key: pass --tls-public-key FILE (or use an https URL) to check it");
  }
  const reportData = new Uint8Array(64);
  if (tls !== null) reportData.set(sha256(tls), 0);
  reportData.set(sha256(sealingPublicKey), 32);
  if (hex(decoded.reportData) !== hex(reportData)) {
    throw new CvmAttestationError("report_data", "the published report data does not bind these keys");
  }

  const development = decoded.platform === "dev";
  let measurement = options.measurement;
  if (measurement === undefined) {
    if (!development) throw new Error("pass --measurement HEX: the launch measurement you computed from the published image");
    measurement = new Uint8Array(Buffer.from(doc.expected_measurement ?? "00".repeat(48), "hex"));
  }

  let roots: SnpRoot[];
  if (development) {
    const root = doc.development_root;
    if (!root) throw new CvmAttestationError("document_format", "development evidence without its development root");
    const cert = (b64: string) => new X509Certificate(Buffer.from(b64, "base64"));
    roots = [{ name: root.name, ark: cert(root.ark), ask: cert(root.ask), development: true }];
  } else {
    roots = await loadAmdRoots();
  }
  const verifier = createSnpVerifier({
    roots,
    mode: development ? "development" : "production",
    ...(options.now ? { clock: { now: options.now } } : {}),
  });
  const verification = await verifier.verifyEvidence(decoded, { measurement, reportData, allowSmt: options.allowSmt ?? true });
  return {
    platform: decoded.platform,
    development,
    measurement: hex(verification.report.measurement),
    reportData: hex(reportData),
    tlsPublicKeyBound: tls !== null,
    sealingPublicKey: doc.sealing_public_key,
    verification,
  };
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { measurement: { type: "string" }, "tls-public-key": { type: "string" }, "no-smt": { type: "boolean" } },
    allowPositionals: true,
  });
  const base = positionals[0];
  if (!base) {
    console.error("usage: verify-attestation.ts URL [--measurement HEX] [--tls-public-key FILE] [--no-smt]");
    return 2;
  }
  if (values.measurement !== undefined && !/^[0-9a-fA-F]{96}$/.test(values.measurement)) {
    console.error("--measurement: expected 96 hex digits (48 bytes)");
    return 2;
  }
  try {
    const result = await verifyCoordinator(base, {
      ...(values.measurement ? { measurement: new Uint8Array(Buffer.from(values.measurement, "hex")) } : {}),
      ...(values["tls-public-key"] ? { tlsPublicKeySpki: spkiOfFile(values["tls-public-key"]) } : {}),
      allowSmt: values["no-smt"] !== true,
    });
    if (result.development) {
      console.log("DEVELOPMENT EVIDENCE: signed by a development root the coordinator generated itself.");
      console.log("It shows the checks work end to end; it proves nothing about hardware or the image.");
    }
    console.log(`platform      ${result.platform}`);
    console.log(`measurement   ${result.measurement}`);
    console.log(`report data   ${result.reportData}`);
    console.log(
      `tls key       ${result.tlsPublicKeyBound ? "bound (bytes 0..31)" : "NOT bound: the coordinator has no TLS key configured"}`,
    );
    console.log(`sealing key   ${result.sealingPublicKey} (bytes 32..63)`);
    console.log(`chain         VCEK -> ASK -> ARK (${result.verification.chain.root.name})`);
    console.log(result.development ? "verified (development)" : "verified");
    return 0;
  } catch (e) {
    console.error(e instanceof CvmAttestationError ? `FAILED ${e.check}: ${e.message}` : `FAILED: ${(e as Error).message}`);
    return 1;
  }
}

if (import.meta.main) process.exit(await main(process.argv.slice(2)));
