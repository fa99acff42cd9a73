/**
 * Verifies a coordinator's attestation against one measurement (docs/security.md, "Verifying the
 * coordinator"). A thin wrapper over attestation/cvm/verify-coordinator.ts, the code of
 * `umbra-coordinator verify-attestation` (which checks against a published measurements.json instead).
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
import { createPublicKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { CvmAttestationError } from "../../attestation/cvm/index.ts";
import {
  type CoordinatorVerification,
  type FetchedDocument,
  fetchOverTls,
  verifyCoordinatorAttestation,
} from "../../attestation/cvm/verify-coordinator.ts";

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
  readonly checks: CoordinatorVerification["checks"];
}

/** SubjectPublicKeyInfo DER of a PEM certificate or public key file. */
export function spkiOfFile(path: string): Uint8Array {
  return new Uint8Array(createPublicKey(readFileSync(path, "utf8")).export({ type: "spki", format: "der" }));
}

/**
 * Fetches and verifies with attestation/cvm/verify-coordinator.ts (the code of `umbra-coordinator
 * verify-attestation`). Throws CvmAttestationError naming the first failed check, or Error when the
 * coordinator answers no document or an input is missing.
 */
export async function verifyCoordinator(baseUrl: string, options: VerifyOptions = {}): Promise<VerifyResult> {
  const url = new URL("/v1/attestation", baseUrl);
  let fetched: FetchedDocument;
  if (options.fetch) {
    const r = await options.fetch(url.toString());
    fetched = { status: r.status, body: await r.text(), tlsPublicKeySpki: null };
  } else if (url.protocol === "https:") {
    fetched = await fetchOverTls(url);
  } else {
    const r = await fetch(url);
    fetched = { status: r.status, body: await r.text(), tlsPublicKeySpki: null };
  }
  if (fetched.status !== 200) throw new Error(`${url} answered ${fetched.status}: ${fetched.body}`);
  const doc = JSON.parse(fetched.body) as { platform?: string; expected_measurement?: string | null; sealing_public_key?: string };
  let measurement = options.measurement ? Buffer.from(options.measurement).toString("hex") : undefined;
  if (measurement === undefined) {
    if (doc.platform !== "dev") throw new Error("pass --measurement HEX: the launch measurement you computed from the published image");
    measurement = doc.expected_measurement ?? "00".repeat(48);
  }
  const result = await verifyCoordinatorAttestation(baseUrl, {
    expected: { shapes: [{ name: "given", measurement }], policy: null, allowSmt: options.allowSmt ?? true },
    allowDevelopment: true,
    ...(options.tlsPublicKeySpki ? { tlsPublicKeySpki: options.tlsPublicKeySpki } : {}),
    fetchDocument: async () => fetched,
    ...(options.now ? { now: options.now } : {}),
  });
  const failed = result.checks.find((c) => c.status === "fail");
  if (failed?.check === "tls_key" && failed.cause === undefined) {
    throw new Error("the answer binds a TLS key: pass --tls-public-key FILE (or use an https URL) to check it");
  }
  if (failed) throw new CvmAttestationError(failed.cause ?? (failed.check === "measurement" ? "measurement" : "report_data"), failed.detail);
  return {
    platform: result.platform ?? "",
    development: result.development,
    measurement: result.measurement ?? "",
    reportData: result.reportData ?? "",
    tlsPublicKeyBound: result.checks.some((c) => c.check === "tls_key" && c.status === "pass"),
    sealingPublicKey: doc.sealing_public_key ?? "",
    checks: result.checks,
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
    for (const c of result.checks) console.log(`${c.check.padEnd(15)} ${c.status}  ${c.detail}`);
    console.log(result.development ? "verified (development)" : "verified");
    return 0;
  } catch (e) {
    console.error(e instanceof CvmAttestationError ? `FAILED ${e.check}: ${e.message}` : `FAILED: ${(e as Error).message}`);
    return 1;
  }
}

if (import.meta.main) process.exit(await main(process.argv.slice(2)));
