/**
 * TLS inside the coordinator (src/tls/): the self-signed listener serves the in-memory key the attestation
 * binds (read from the TLS connection itself), a client pins it as docs/security.md says, the key is never
 * written to the data folder, and production refuses plain HTTP off loopback.
 */
import { describe, expect, test } from "bun:test";
import { createHash, X509Certificate } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import * as tls from "node:tls";
import { listen } from "../../src/coordinator/server.ts";
import { createCoordinatorTls } from "../../src/tls/coordinator-tls.ts";
import { testApp } from "../support/harness.ts";
import { runCoordinator } from "../support/processes.ts";

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

/** The served certificate of host:port, read from a TLS handshake that trusts nothing yet. */
function peerCertificate(port: number): Promise<X509Certificate> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: "127.0.0.1", port, servername: "localhost", rejectUnauthorized: false }, () => {
      const raw = socket.getPeerCertificate(true).raw;
      socket.end();
      resolve(new X509Certificate(raw));
    });
    socket.on("error", reject);
  });
}

const spkiOf = (cert: X509Certificate) => new Uint8Array(cert.publicKey.export({ type: "spki", format: "der" }));

/** Every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

async function selfSignedCoordinator() {
  const coordinatorTls = await createCoordinatorTls({ host: "127.0.0.1", tls: { mode: "self-signed", names: ["localhost", "127.0.0.1"] } });
  if (coordinatorTls === undefined) throw new Error("no TLS");
  const t = await testApp({ tlsPublicKeySpki: coordinatorTls.key.spki });
  const server = listen(t.app, "127.0.0.1", 0, {
    tls: { keyPem: coordinatorTls.key.privateKeyPem, certPem: coordinatorTls.initial.certPem, renewable: false },
  });
  return {
    t,
    server,
    key: coordinatorTls.key,
    async [Symbol.asyncDispose]() {
      await server.stop();
      await t[Symbol.asyncDispose]();
    },
  };
}

describe("--tls self-signed", () => {
  test("answers over https with the key the attestation binds, read from the TLS connection", async () => {
    await using c = await selfSignedCoordinator();
    expect(c.server.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const served = await peerCertificate(c.server.port);
    const doc = (await (await fetch(`${c.server.url}/v1/attestation`, { tls: { rejectUnauthorized: false } })).json()) as {
      report_data: { tls_public_key_sha256: string };
      tls_public_key_bound: boolean;
    };
    expect({
      bound: doc.tls_public_key_bound,
      pin: doc.report_data.tls_public_key_sha256,
      keyType: served.publicKey.asymmetricKeyType,
      curve: served.publicKey.asymmetricKeyDetails?.namedCurve,
      san: served.subjectAltName,
    }).toEqual({
      bound: true,
      pin: sha256(spkiOf(served)),
      keyType: "ec",
      curve: "prime256v1",
      san: "DNS:localhost, IP Address:127.0.0.1",
    });
  });

  test("a client pins the attested key (docs/security.md) and refuses any other", async () => {
    await using c = await selfSignedCoordinator();
    const pin = c.key.spkiSha256;
    // The docs' recipe: read the certificate once, check its key against the pin, then trust exactly it.
    const served = await peerCertificate(c.server.port);
    expect(sha256(spkiOf(served))).toBe(pin);
    const pinned = (expected: string) => ({
      ca: served.toString(),
      checkServerIdentity: (_host: string, cert: { raw: Buffer }) =>
        sha256(spkiOf(new X509Certificate(cert.raw))) === expected ? undefined : new Error("TLS key does not match the attested pin"),
    });
    const ok = await fetch(`${c.server.url}/healthz`, { tls: pinned(pin) });
    const refused = await fetch(`${c.server.url}/healthz`, { tls: pinned("00".repeat(32)) }).then(
      () => "connected",
      (e: unknown) => (e instanceof Error ? e.message : String(e)),
    );
    expect({ status: ok.status, body: await ok.json(), refused }).toEqual({
      status: 200,
      body: { status: "ok" },
      refused: "TLS key does not match the attested pin",
    });
  });

  test("the private key is never written: no file in the data folder holds it", async () => {
    await using c = await selfSignedCoordinator();
    // Something durable happens, so the database, its journal and lock are all there.
    expect((await c.t.admin("POST", "/accounts", { name: "tls" })).status).toBe(200);
    await c.t.app.flush();
    const pkcs8 = Buffer.from(c.key.privateKeyPem.replace(/-----[^-]+-----|\s/g, ""), "base64");
    const body = c.key.privateKeyPem.split("\n")[1] ?? "";
    const files = filesUnder(c.t.dir);
    const holding = files.filter((f) => {
      const bytes = readFileSync(f);
      return (
        bytes.includes(pkcs8) ||
        bytes.includes(pkcs8.subarray(-32)) ||
        bytes.toString("latin1").includes(body) ||
        bytes.toString("latin1").includes("PRIVATE KEY")
      );
    });
    expect({ files: files.length > 0, holding }).toEqual({ files: true, holding: [] });
  });
});

describe("plain HTTP", () => {
  test("production refuses it on a non-loopback address, with the reason", async () => {
    const r = await runCoordinator(["serve", "--listen", "0.0.0.0:0", "--db", ":memory:", "--attestation", "none"], {
      env: { UMBRA_ADMIN_TOKEN: "a".repeat(40) },
    });
    expect({ code: r.code, stderr: r.stderr.trim() }).toEqual({
      code: 2,
      stderr:
        "umbra-coordinator: production mode refuses plain HTTP on 0.0.0.0, which is not a loopback address: use --tls self-signed or --tls acme (plain HTTP is for 127.0.0.1 and ::1 only)",
    });
  });
});
