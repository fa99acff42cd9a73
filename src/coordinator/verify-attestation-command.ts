/**
 * `umbra-coordinator verify-attestation URL --image measurements.json [--shape NAME] [--json]
 *  [--tls-public-key FILE] [--development]`: the auditor's check of a live coordinator
 * (attestation/cvm/verify-coordinator.ts). Prints one line per check, `pass|fail|skip  <check>  <detail>`,
 * then a verdict line; `--json` prints the whole result as one JSON object instead.
 * `--tls-public-key FILE` pins a PEM certificate or public key (for a plain-http URL); `--development`
 * accepts development evidence (it proves nothing about hardware, and says so).
 * Exit codes: 0 every check passed (or was skipped); 1 a check failed or the URL cannot be reached;
 * 2 bad usage (unknown shape, unreadable or malformed measurements.json).
 */

import { createPublicKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { type ExpectedImage, ExpectedImageError, loadExpectedImage } from "../../attestation/cvm/measurements.ts";
import { verifyCoordinatorAttestation } from "../../attestation/cvm/verify-coordinator.ts";
import { UsageError } from "../admin/admin-cli.ts";
import type { CommandIo } from "./measure-command.ts";

const VERIFY_USAGE =
  "usage: umbra-coordinator verify-attestation URL --image measurements.json [--shape NAME] [--json] [--tls-public-key FILE] [--development]";

const OPTIONS = {
  image: { type: "string" },
  shape: { type: "string" },
  json: { type: "boolean" },
  "tls-public-key": { type: "string" },
  development: { type: "boolean" },
} as const;

function readText(path: string, flag: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    throw new UsageError(`--${flag}: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? "error"})`);
  }
}

/** The expectations of `--image measurements.json [--shape NAME]`. Throws UsageError for a bad file or an unknown shape. */
export function readExpectedImage(image: string, shape: string | undefined): ExpectedImage {
  try {
    return loadExpectedImage(image, shape);
  } catch (e) {
    if (e instanceof ExpectedImageError) throw new UsageError(`--${e.input} ${e.message}`);
    throw e;
  }
}

/** DER SubjectPublicKeyInfo of `--tls-public-key FILE` (a PEM certificate or public key). Throws UsageError. */
export function readTlsPublicKey(path: string): Uint8Array {
  const pem = readText(path, "tls-public-key");
  try {
    return new Uint8Array(createPublicKey(pem).export({ type: "spki", format: "der" }));
  } catch {
    throw new UsageError(`--tls-public-key: ${path} holds no PEM certificate or public key`);
  }
}

export async function runVerifyAttestation(argv: readonly string[], io: CommandIo): Promise<number> {
  const { values: v, positionals } = (() => {
    try {
      return parseArgs({ args: [...argv], options: OPTIONS, strict: true, allowPositionals: true });
    } catch (e) {
      throw new UsageError(`${(e as Error).message}\n${VERIFY_USAGE}`);
    }
  })();
  if (positionals.length !== 1 || v.image === undefined) throw new UsageError(VERIFY_USAGE);
  const base = positionals[0] as string;
  if (!/^https?:\/\//.test(base)) throw new UsageError(`URL must start with https:// (or http:// for development): ${base}`);
  const expected = readExpectedImage(v.image, v.shape);
  const tlsPublicKeySpki = v["tls-public-key"] === undefined ? undefined : readTlsPublicKey(v["tls-public-key"]);

  let result: Awaited<ReturnType<typeof verifyCoordinatorAttestation>>;
  try {
    result = await verifyCoordinatorAttestation(base, {
      expected,
      allowDevelopment: v.development === true,
      ...(tlsPublicKeySpki ? { tlsPublicKeySpki } : {}),
    });
  } catch (e) {
    io.printErr(`umbra-coordinator verify-attestation: cannot fetch ${base}: ${(e as Error).message}`);
    return 1;
  }
  if (v.json === true) {
    io.print(JSON.stringify(result));
  } else {
    if (result.development) io.print("DEVELOPMENT EVIDENCE: signed by a root the coordinator generated; it proves nothing about hardware.");
    for (const c of result.checks) io.print(`${c.status.padEnd(4)}  ${c.check.padEnd(15)}  ${c.detail}`);
    const failed = result.checks.filter((c) => c.status === "fail").map((c) => c.check);
    io.print(failed.length === 0 ? `verified: ${result.url} runs shape ${result.shape}` : `FAILED: ${failed.join(", ")}`);
  }
  return result.ok ? 0 : 1;
}
