/**
 * The operator's side of provisioning and of the configuration binding (docs/operations.md,
 * "Provisioning" and "Configuration binding"): `umbra-coordinator provision URL ...` (PROVISION_USAGE),
 * and `umbra-coordinator config-digest [the serve flags]`, which prints the configuration's digest (hex).
 *
 * provision verifies the coordinator's attestation, then sends it the secrets sealed to the verified
 * sealing key (`provisionCoordinator`). Nothing secret is sent before the last step, and nothing at all
 * after a failed check. Development evidence is refused unless --allow-development-evidence: its root
 * comes from the answer itself, so anyone can make it.
 * Exit status: 0 provisioned; 1 refused (the failed check or the coordinator's answer is named); 2 usage.
 */
// reflect-metadata in this module's static graph: in place before the @peculiar/x509 graph it imports
// lazily, whatever the entry point (STACK.md item 1; a script running the app in-process has no preload).
import "../../attestation/provider/preload.ts";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { ExpectedImage } from "../../attestation/cvm/measurements.ts";
import type { FetchedDocument } from "../../attestation/cvm/verify-coordinator.ts";
import type { ProvisionEnvelope } from "../crypto/provision-seal.ts";
import { sealProvisioning } from "../crypto/provision-seal.ts";

class ProvisionRefused extends Error {
  override readonly name = "ProvisionRefused";
}

export interface VerifiedTarget {
  readonly development: boolean;
  readonly measurement: Uint8Array;
  readonly reportData: Uint8Array;
  readonly sealingPublicKey: Uint8Array;
}

export interface ProvisionOptions {
  /** What the operator expects: the measurement computed from the published image, or its measurements.json shapes. */
  readonly expected: ExpectedImage;
  readonly adminToken: string;
  /** Passwords of Postgres, Redis and NATS for a coordinator on Postgres (cluster mode) that opens its connections after provisioning. */
  readonly passwords?: { readonly db?: string; readonly redis?: string; readonly nats?: string };
  /** The TLS key the operator expects, DER SubjectPublicKeyInfo (else the https connection's, or none bound). */
  readonly tlsPublicKeySpki?: Uint8Array;
  readonly allowDevelopmentEvidence?: boolean;
  readonly fetch?: (url: string, init?: RequestInit) => Promise<Response>;
}

/** The expectation of one measurement computed by the operator (no published policy: debug and migration are still checked). */
export function expectMeasurement(measurement: Uint8Array): ExpectedImage {
  return { shapes: [{ name: "given", measurement: Buffer.from(measurement).toString("hex") }], policy: null };
}

/**
 * Step 1: the one place the coordinator's attestation is verified for provisioning, with the auditor's
 * checks (attestation/cvm/verify-coordinator.ts, the code of `verify-attestation`). Development evidence
 * passes the chain only with `allowDevelopmentEvidence`. Throws ProvisionRefused naming the failed check.
 */
async function verifyTarget(
  baseUrl: string,
  options: Pick<ProvisionOptions, "expected" | "tlsPublicKeySpki" | "allowDevelopmentEvidence" | "fetch">,
): Promise<VerifiedTarget> {
  const { fetchOverTls, verifyCoordinatorAttestation } = await import("../../attestation/cvm/verify-coordinator.ts");
  let body = "";
  const fetchDocument = async (url: URL): Promise<FetchedDocument> => {
    let fetched: FetchedDocument;
    if (options.fetch === undefined && url.protocol === "https:") fetched = await fetchOverTls(url);
    else {
      const r = await (options.fetch ?? fetch)(url.toString());
      fetched = { status: r.status, body: await r.text(), tlsPublicKeySpki: null };
    }
    body = fetched.body;
    return fetched;
  };
  let result: Awaited<ReturnType<typeof verifyCoordinatorAttestation>>;
  try {
    result = await verifyCoordinatorAttestation(baseUrl, {
      expected: options.expected,
      allowDevelopment: options.allowDevelopmentEvidence === true,
      ...(options.tlsPublicKeySpki ? { tlsPublicKeySpki: options.tlsPublicKeySpki } : {}),
      fetchDocument,
    });
  } catch (e) {
    throw new ProvisionRefused(`attestation not verified: ${e instanceof Error ? e.message : String(e)}`);
  }
  const failed = result.checks.find((c) => c.status === "fail");
  if (failed !== undefined) {
    const hint =
      failed.cause === "dev_root_in_production"
        ? " (development evidence: its root comes from the answer itself; --allow-development-evidence is for local tests only)"
        : "";
    throw new ProvisionRefused(`attestation check failed: ${failed.check}: ${failed.detail}${hint}`);
  }
  const sealing = (JSON.parse(body) as { sealing_public_key?: unknown }).sealing_public_key;
  if (typeof sealing !== "string" || result.measurement === null || result.reportData === null) {
    throw new ProvisionRefused("attestation not verified: the document names no sealing key or report");
  }
  return {
    development: result.development,
    measurement: new Uint8Array(Buffer.from(result.measurement, "hex")),
    reportData: new Uint8Array(Buffer.from(result.reportData, "hex")),
    sealingPublicKey: new Uint8Array(Buffer.from(sealing, "base64url")),
  };
}

async function answer(response: Response): Promise<Record<string, unknown>> {
  const text = await response.text();
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "object" && value !== null ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

const errorText = (body: Record<string, unknown>) => {
  const error = body.error as { code?: unknown; message?: unknown } | undefined;
  return error ? `${String(error.code)}: ${String(error.message)}` : "no error envelope";
};

/**
 * Provisions in three steps:
 *   1. GET URL/v1/attestation and verify it (verifyTarget: report signature, chain to AMD's roots, policy,
 *      measurement of a published shape or --expected-measurement, report data binding the TLS key seen
 *      and the published sealing key).
 *   2. GET URL/v1/provision: the coordinator's fresh nonce.
 *   3. Seal {"admin_token": ..., and any of "db_password", "redis_password", "nats_password"} to the verified sealing key, bound to the verified report's measurement and
 *      report data and to the nonce (src/crypto/provision-seal.ts), and POST it to URL/v1/provision.
 * Throws ProvisionRefused (a failed check, or the coordinator's refusal).
 */
export async function provisionCoordinator(
  baseUrl: string,
  options: ProvisionOptions,
): Promise<{ development: boolean; measurement: string; secrets: string[] }> {
  const doFetch = options.fetch ?? fetch;
  const target = await verifyTarget(baseUrl, options);
  const url = new URL("/v1/provision", baseUrl).toString();
  const issued = await doFetch(url);
  const nonceBody = await answer(issued);
  if (issued.status !== 200 || typeof nonceBody.nonce !== "string") {
    throw new ProvisionRefused(`GET /v1/provision answered ${issued.status} (${errorText(nonceBody)})`);
  }
  let envelope: ProvisionEnvelope;
  try {
    envelope = await sealProvisioning(
      target.sealingPublicKey,
      new TextEncoder().encode(
        JSON.stringify({
          admin_token: options.adminToken,
          db_password: options.passwords?.db,
          redis_password: options.passwords?.redis,
          nats_password: options.passwords?.nats,
        }),
      ),
      {
        measurement: target.measurement,
        reportData: target.reportData,
        nonce: new Uint8Array(Buffer.from(nonceBody.nonce, "base64url")),
      },
    );
  } catch (e) {
    throw new ProvisionRefused(`cannot seal to the coordinator's key: ${e instanceof Error ? e.message : String(e)}`);
  }
  const posted = await doFetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(envelope) });
  const result = await answer(posted);
  if (posted.status !== 200) throw new ProvisionRefused(`POST /v1/provision answered ${posted.status} (${errorText(result)})`);
  return {
    development: target.development,
    measurement: Buffer.from(target.measurement).toString("hex"),
    secrets: Array.isArray(result.secrets) ? result.secrets.map(String) : [],
  };
}

const PROVISION_USAGE =
  "usage: umbra-coordinator provision URL (--image measurements.json [--shape NAME] | --expected-measurement HEX) --admin-token-file FILE [--db-password-file F] [--redis-password-file F] [--nats-password-file F] [--tls-public-key FILE] [--allow-development-evidence]";

/** The `provision` verb. Returns the exit status. */
export async function provisionCommand(
  argv: readonly string[],
  print: (s: string) => void,
  printErr: (s: string) => void,
): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: [...argv],
      options: {
        image: { type: "string" },
        shape: { type: "string" },
        "expected-measurement": { type: "string" },
        "admin-token-file": { type: "string" },
        "db-password-file": { type: "string" },
        "redis-password-file": { type: "string" },
        "nats-password-file": { type: "string" },
        "tls-public-key": { type: "string" },
        "allow-development-evidence": { type: "boolean" },
      },
      allowPositionals: true,
      strict: true,
    }));
  } catch (e) {
    printErr(`umbra-coordinator: ${e instanceof Error ? e.message : String(e)}\n${PROVISION_USAGE}`);
    return 2;
  }
  const measurement = values["expected-measurement"];
  const image = values.image;
  const shape = values.shape;
  const tokenFile = values["admin-token-file"];
  const oneExpectation = (typeof measurement === "string") !== (typeof image === "string");
  if (positionals.length !== 1 || !oneExpectation || typeof tokenFile !== "string" || (shape !== undefined && image === undefined)) {
    printErr(PROVISION_USAGE);
    return 2;
  }
  if (typeof measurement === "string" && !/^[0-9a-fA-F]{96}$/.test(measurement)) {
    printErr("umbra-coordinator: --expected-measurement: expected 96 hex digits (48 bytes)");
    return 2;
  }
  let expected: ExpectedImage;
  let tlsPublicKeySpki: Uint8Array | undefined;
  let adminToken: string;
  try {
    const { readExpectedImage, readTlsPublicKey } = await import("./verify-attestation-command.ts");
    expected =
      typeof image === "string"
        ? readExpectedImage(image, typeof shape === "string" ? shape : undefined)
        : expectMeasurement(new Uint8Array(Buffer.from(measurement as string, "hex")));
    const tls = values["tls-public-key"];
    if (typeof tls === "string") tlsPublicKeySpki = readTlsPublicKey(tls);
    adminToken = readFileSync(tokenFile, "utf8").trim();
  } catch (e) {
    printErr(`umbra-coordinator: ${e instanceof Error && e.name === "UsageError" ? e.message : "cannot read --admin-token-file"}`);
    return 2;
  }
  const passwords: { db?: string; redis?: string; nats?: string } = {};
  for (const name of ["db", "redis", "nats"] as const) {
    const file = values[`${name}-password-file`];
    if (typeof file !== "string") continue;
    try {
      passwords[name] = readFileSync(file, "utf8").trim();
    } catch {
      printErr(`umbra-coordinator: cannot read --${name}-password-file`);
      return 2;
    }
    if (passwords[name] === "") {
      printErr(`umbra-coordinator: --${name}-password-file is empty`);
      return 2;
    }
  }
  try {
    const result = await provisionCoordinator(positionals[0] as string, {
      expected,
      adminToken,
      passwords,
      ...(tlsPublicKeySpki ? { tlsPublicKeySpki } : {}),
      allowDevelopmentEvidence: values["allow-development-evidence"] === true,
    });
    if (result.development)
      print("DEVELOPMENT EVIDENCE: accepted because of --allow-development-evidence; it proves nothing about hardware.");
    print(`measurement   ${result.measurement}`);
    print(`provisioned   ${result.secrets.join(", ")}`);
    return 0;
  } catch (e) {
    printErr(`umbra-coordinator: provisioning refused: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}
