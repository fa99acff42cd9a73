/**
 * `umbra-coordinator verify-attestation`, run as a real process against a coordinator app served over TLS
 * by Bun.serve on port 0 with a self-signed certificate made here. The app's development evidence binds
 * the key of a certificate file (UMBRA_TLS_PUBLIC_KEY_FILE); the command reads the key the server presents
 * on the connection that carried the document. Passes when both are the same key; fails tls_key when the
 * server presents another; refuses development evidence without --development; exits 2 on bad usage.
 */
import "reflect-metadata";
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { X509CertificateGenerator } from "@peculiar/x509";
import { type TestApp, tempDir, testApp } from "../support/harness.ts";

const ROOT = resolve(import.meta.dir, "../..");
const BUN = join(ROOT, "node_modules/.bin/bun");

interface SelfSigned {
  readonly certPem: string;
  readonly keyPem: string;
}

async function selfSigned(): Promise<SelfSigned> {
  const alg = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" };
  const keys = await crypto.subtle.generateKey(alg, true, ["sign", "verify"]);
  const cert = await X509CertificateGenerator.createSelfSigned({
    serialNumber: "01",
    name: "CN=localhost",
    notBefore: new Date(Date.now() - 3_600_000),
    notAfter: new Date(Date.now() + 86_400_000),
    keys,
    signingAlgorithm: alg,
  });
  const pkcs8 = Buffer.from(await crypto.subtle.exportKey("pkcs8", keys.privateKey)).toString("base64");
  return {
    certPem: cert.toString("pem"),
    keyPem: `-----BEGIN PRIVATE KEY-----\n${pkcs8.match(/.{1,64}/g)?.join("\n")}\n-----END PRIVATE KEY-----\n`,
  };
}

async function cli(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn([BUN, "src/coordinator/main.ts", "verify-attestation", ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

/** The app served over TLS with `served`; its report data binds the key of `bound`. */
async function tlsCoordinator(dir: string, bound: SelfSigned, served: SelfSigned) {
  const certFile = join(dir, "bound.pem");
  writeFileSync(certFile, bound.certPem);
  const t: TestApp = await testApp({ env: { UMBRA_TLS_PUBLIC_KEY_FILE: certFile } });
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    tls: { cert: served.certPem, key: served.keyPem },
    // The app answers 404 to every https:// request URL today (engineer T's TLS work owns serving over TLS);
    // the request is handed to it as the plain-http URL it routes.
    fetch: (request) => t.app.http.handle(new Request(request.url.replace(/^https:/, "http:"), request)),
  });
  return {
    url: `https://127.0.0.1:${server.port}`,
    async [Symbol.asyncDispose]() {
      await server.stop(true);
      await t[Symbol.asyncDispose]();
    },
  };
}

function measurementsFile(dir: string, measurement = "00".repeat(48)): string {
  const path = join(dir, "measurements.json");
  const sha = "11".repeat(32);
  writeFileSync(
    path,
    JSON.stringify({
      version: 1,
      image: { firmware_sha256: sha, kernel_sha256: sha, initrd_sha256: sha, cmdline: "console=ttyS0", cmdline_sha256: sha },
      policy: "0x30000",
      shapes: [
        { name: "milan-2vcpu", vcpus: 2, cpu: "EPYC-Milan", guest_features: "0x21", measurement: "ab".repeat(48) },
        { name: "dev-1vcpu", vcpus: 1, cpu: "EPYC-v4", guest_features: "0x21", measurement },
      ],
    }),
  );
  return path;
}

describe("verify-attestation over TLS", () => {
  test("the key of the very connection is bound: every check passes, the matching shape is named", async () => {
    using dir = tempDir();
    const cert = await selfSigned();
    await using coordinator = await tlsCoordinator(dir.path, cert, cert);
    const image = measurementsFile(dir.path);
    const [text, json] = await Promise.all([
      cli([coordinator.url, "--image", image, "--development"]),
      cli([coordinator.url, "--image", image, "--development", "--shape", "dev-1vcpu", "--json"]),
    ]);
    expect([
      text.code,
      text.stderr,
      text.stdout.split("\n").map((l) =>
        l
          .split(/\s{2,}/)
          .slice(0, 2)
          .join(" "),
      ),
    ]).toEqual([
      0,
      "",
      [
        "DEVELOPMENT EVIDENCE: signed by a root the coordinator generated; it proves nothing about hardware.",
        "pass document",
        "pass signature_chain",
        "pass policy",
        "pass measurement",
        "pass tls_key",
        "pass sealing_key",
        `verified: ${coordinator.url}/v1/attestation runs shape dev-1vcpu`,
        "",
      ],
    ]);
    const result = JSON.parse(json.stdout) as { ok: boolean; shape: string; checks: { check: string; status: string; detail: string }[] };
    expect([json.code, result.ok, result.shape, result.checks.find((c) => c.check === "tls_key")]).toEqual([
      0,
      true,
      "dev-1vcpu",
      { check: "tls_key", status: "pass", detail: "report data binds the key of this TLS connection" },
    ]);
  });

  test("a server presenting another key than the one bound fails tls_key; development evidence needs --development", async () => {
    using dir = tempDir();
    const [bound, other] = await Promise.all([selfSigned(), selfSigned()]);
    await using coordinator = await tlsCoordinator(dir.path, bound, other);
    const image = measurementsFile(dir.path);
    const [swapped, production] = await Promise.all([
      cli([coordinator.url, "--image", image, "--development"]),
      cli([coordinator.url, "--image", image]),
    ]);
    const failed = (stdout: string) => stdout.split("\n").filter((l) => l.startsWith("fail"));
    expect([swapped.code, failed(swapped.stdout), swapped.stdout.trimEnd().split("\n").at(-1)]).toEqual([
      1,
      ["fail  tls_key          report data does not bind the key of this TLS connection"],
      "FAILED: tls_key",
    ]);
    expect([production.code, failed(production.stdout)]).toEqual([
      1,
      ["fail  signature_chain  development evidence, signed by a root the coordinator generated itself"],
    ]);
  });

  test("a wrong measurement fails; an unknown shape and a malformed measurements.json are usage errors", async () => {
    using dir = tempDir();
    const cert = await selfSigned();
    await using coordinator = await tlsCoordinator(dir.path, cert, cert);
    const image = measurementsFile(dir.path, "cd".repeat(48));
    const broken = join(dir.path, "broken.json");
    writeFileSync(broken, JSON.stringify({ version: 1 }));
    const [wrong, unknown, malformed] = await Promise.all([
      cli([coordinator.url, "--image", image, "--development", "--shape", "dev-1vcpu"]),
      cli([coordinator.url, "--image", image, "--shape", "genoa-8vcpu"]),
      cli([coordinator.url, "--image", broken]),
    ]);
    expect([wrong.code, wrong.stdout.trimEnd().split("\n").at(-1)]).toEqual([1, "FAILED: measurement"]);
    expect([unknown.code, unknown.stderr, malformed.code, malformed.stderr]).toEqual([
      2,
      `umbra-coordinator: --shape genoa-8vcpu: not in ${image} (milan-2vcpu, dev-1vcpu)\n`,
      2,
      `umbra-coordinator: --image ${broken}: image: expected an object\n`,
    ]);
  });
});
