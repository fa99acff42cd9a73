/**
 * ACME issuance (src/tls/acme.ts) against Debian's `pebble` test CA on loopback: HTTP-01 answered by the
 * coordinator's own responder, a certificate for the in-memory key (same SPKI the attestation binds),
 * installed on the running listener and verified by a client that trusts pebble's root. Skipped, with a
 * message, where pebble is not installed (`apt-get install pebble`; .ci/run installs it).
 */
import { describe, expect, test } from "bun:test";
import { createHash, X509Certificate } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import * as tls from "node:tls";
import { listen } from "../../src/coordinator/server.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { createCoordinatorTls } from "../../src/tls/coordinator-tls.ts";
import { generateTlsKey, selfSignedCertificate, type TlsCertificate } from "../../src/tls/tls-key.ts";
import { tempDir, testApp } from "../support/harness.ts";
import { waitFor } from "../support/wait.ts";

const PEBBLE = Bun.which("pebble");
if (PEBBLE === null) console.warn("acme-pebble.test.ts: skipped: pebble is not installed (apt-get install pebble)");

/** A free loopback port for pebble's own listeners (pebble cannot report a port 0 choice). */
function freePort(): number {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = probe.port;
  probe.stop(true);
  return port;
}

/** Pebble's TLS identity and ports, chosen before the coordinator (which needs the directory URL and CA). */
async function planPebble(dir: string) {
  const key = await generateTlsKey();
  const cert = await selfSignedCertificate(key, ["localhost", "127.0.0.1"], Date.now());
  writeFileSync(join(dir, "pebble-key.pem"), key.privateKeyPem);
  writeFileSync(join(dir, "pebble-cert.pem"), cert.certPem);
  const acmePort = freePort();
  return {
    dir,
    acmePort,
    managementPort: freePort(),
    tlsPort: freePort(),
    caPem: cert.certPem,
    directory: `https://127.0.0.1:${acmePort}/dir`,
  };
}

/** Pebble on loopback, validating HTTP-01 against `httpPort`; resolves once its directory answers. */
async function startPebble(plan: Awaited<ReturnType<typeof planPebble>>, httpPort: number) {
  const config = {
    pebble: {
      listenAddress: `127.0.0.1:${plan.acmePort}`,
      managementListenAddress: `127.0.0.1:${plan.managementPort}`,
      certificate: join(plan.dir, "pebble-cert.pem"),
      privateKey: join(plan.dir, "pebble-key.pem"),
      httpPort,
      tlsPort: plan.tlsPort,
      ocspResponderURL: "",
      externalAccountBindingRequired: false,
    },
  };
  writeFileSync(join(plan.dir, "pebble.json"), JSON.stringify(config));
  const proc = Bun.spawn([PEBBLE ?? "pebble", "-config", join(plan.dir, "pebble.json")], {
    env: { PATH: process.env.PATH ?? "", PEBBLE_VA_NOSLEEP: "1", PEBBLE_WFE_NONCEREJECT: "0" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const tlsOptions = { ca: plan.caPem };
  await waitFor(
    () =>
      fetch(plan.directory, { tls: tlsOptions }).then(
        (r) => r.ok,
        () => false,
      ),
    "pebble's directory",
  );
  return {
    /** Pebble's issuing root (random per run), from its management interface. */
    root: () => fetch(`https://127.0.0.1:${plan.managementPort}/roots/0`, { tls: tlsOptions }).then((r) => r.text()),
    async [Symbol.asyncDispose]() {
      proc.kill();
      await proc.exited;
    },
  };
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const spkiOf = (cert: X509Certificate) => new Uint8Array(cert.publicKey.export({ type: "spki", format: "der" }));

/** The leaf served on port, verified against `ca` for the name `localhost`. */
function verifiedPeer(port: number, ca: string): Promise<X509Certificate> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: "127.0.0.1", port, servername: "localhost", ca }, () => {
      const raw = socket.getPeerCertificate(true).raw;
      socket.end();
      resolve(new X509Certificate(raw));
    });
    socket.on("error", reject);
  });
}

describe.skipIf(PEBBLE === null)("--tls acme against pebble", () => {
  test("HTTP-01 on the coordinator's own port; the certificate certifies the attested key and is served", async () => {
    using dir = tempDir();
    const plan = await planPebble(dir.path);
    // The responder binds first (port 0 here), so pebble is told where to validate.
    const coordinatorTls = await createCoordinatorTls({
      host: "127.0.0.1",
      tls: { mode: "acme", names: ["localhost"], acme: { directory: plan.directory, httpPort: 0, caPem: plan.caPem } },
    });
    if (coordinatorTls?.challengePort === undefined) throw new Error("no ACME responder");
    await using pebble = await startPebble(plan, coordinatorTls.challengePort);
    await using t = await testApp({ tlsPublicKeySpki: coordinatorTls.key.spki });
    const server = listen(t.app, "127.0.0.1", 0, {
      tls: { keyPem: coordinatorTls.key.privateKeyPem, certPem: coordinatorTls.initial.certPem, renewable: true },
    });
    try {
      const installed: TlsCertificate[] = [];
      coordinatorTls.start(createLogger("error"), (certificate) => {
        server.useCertificate(certificate.certPem);
        installed.push(certificate);
      });
      await waitFor(() => installed.length > 0, "the first ACME certificate", 30_000);
      const root = await pebble.root();
      const served = await verifiedPeer(server.port, root);
      const doc = (await (await fetch(`${server.url}/v1/attestation`, { tls: { ca: root, servername: "localhost" } })).json()) as {
        report_data: { tls_public_key_sha256: string };
      };
      const certificate = installed[0];
      expect({
        servedIsIssued: served.fingerprint256 === new X509Certificate(certificate?.certPem ?? "").fingerprint256,
        issuer: served.issuer.startsWith("CN=Pebble Intermediate CA"),
        san: served.subjectAltName,
        spki: sha256(spkiOf(served)),
        pin: doc.report_data.tls_public_key_sha256,
        renewLater: (certificate?.notAfter ?? 0) > Date.now(),
      }).toEqual({
        servedIsIssued: true,
        issuer: true,
        san: "DNS:localhost",
        spki: coordinatorTls.key.spkiSha256,
        pin: coordinatorTls.key.spkiSha256,
        renewLater: true,
      });
    } finally {
      await coordinatorTls.stop();
      await server.stop();
    }
  });
});
