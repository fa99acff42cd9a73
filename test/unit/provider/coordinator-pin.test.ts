/**
 * pinCoordinator (src/provider/coordinator-pin.ts) against in-process coordinators that serve https with a
 * self-signed certificate and development evidence: the TLS options it returns reach the coordinator
 * whose attestation it verified, and refuse another coordinator's key (a restart, or a host answering
 * in its place) even though that one's certificate is just as self-signed; a plain-http URL is refused
 * before any request.
 */
import { describe, expect, test } from "bun:test";
import { loadExpectedImage } from "../../../attestation/cvm/measurements.ts";
import { listen } from "../../../src/coordinator/server.ts";
import { CoordinatorRefused, pinCoordinator } from "../../../src/provider/coordinator-pin.ts";
import { createCoordinatorTls } from "../../../src/tls/coordinator-tls.ts";
import { tempDir, testApp } from "../../support/harness.ts";
import { writeMeasurements } from "../../support/measurements.ts";

const MEASUREMENT = "ab".repeat(48);

async function selfSignedCoordinator() {
  const coordinatorTls = await createCoordinatorTls({ host: "127.0.0.1", tls: { mode: "self-signed", names: ["localhost"] } });
  if (coordinatorTls === undefined) throw new Error("no TLS");
  const t = await testApp({
    tlsPublicKeySpki: coordinatorTls.key.spki,
    env: { UMBRA_ATTESTATION: "dev", UMBRA_EXPECTED_MEASUREMENT: MEASUREMENT },
  });
  const server = listen(t.app, "127.0.0.1", 0, {
    tls: { keyPem: coordinatorTls.key.privateKeyPem, certPem: coordinatorTls.initial.certPem, renewable: false },
  });
  return {
    url: server.url,
    keySha256: coordinatorTls.key.spkiSha256,
    async [Symbol.asyncDispose]() {
      await server.stop();
      await t[Symbol.asyncDispose]();
    },
  };
}

function expectation(dir: string) {
  return { image: loadExpectedImage(writeMeasurements(dir, [{ name: "published", measurement: MEASUREMENT }])), development: true };
}

describe("pinCoordinator", () => {
  test("the pinned TLS options reach the attested coordinator and refuse another one's key", async () => {
    using dir = tempDir();
    await using a = await selfSignedCoordinator();
    await using b = await selfSignedCoordinator();
    const pinned = await pinCoordinator(a.url, expectation(dir.path));
    expect([pinned.shape, pinned.development, pinned.keySha256]).toEqual(["published", true, a.keySha256]);

    const toA = await fetch(`${a.url}/healthz`, { tls: pinned.tls });
    expect(toA.status).toBe(200);
    const toB = await fetch(`${b.url}/healthz`, { tls: pinned.tls }).then(
      () => "connected",
      (e: Error) => e.message,
    );
    expect(toB).not.toBe("connected");

    const ws = new WebSocket(`${b.url.replace("https", "wss")}/v1/provider/connect`, { tls: pinned.tls });
    const outcome = await new Promise<string>((resolve) => {
      ws.onopen = () => resolve("open");
      ws.onerror = (e) => resolve(e instanceof ErrorEvent ? e.message : "error");
    });
    expect(outcome).toMatch(/TLS handshake failed/);
  });

  test("a plain-http URL is refused: there is no key to pin", async () => {
    using dir = tempDir();
    const refused = await pinCoordinator("http://127.0.0.1:9", expectation(dir.path)).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(CoordinatorRefused);
    expect((refused as CoordinatorRefused).check).toBe("https");
  });
});
