import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BasicConstraintsExtension, KeyUsageFlags, KeyUsagesExtension, X509Certificate } from "@peculiar/x509";
import {
  APPLE_ROOT_SHA256,
  AttestationError,
  assertAnchorAllowed,
  DEV_ROOT_NAME,
  DevelopmentRoot,
  derToPem,
  TrustAnchor,
} from "../../../attestation/provider/index.ts";

const PEM_FILE = join(import.meta.dir, "../../../attestation/roots/apple-enterprise-attestation-root-ca.pem");
const PINNED = "ccf59ef8fcb3017d97f8b5fa6fa90e7a3f9283f76b55ac6cf6eda8b8b949f05b";

function failedCheck(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    if (e instanceof AttestationError) return e.check;
    throw e;
  }
  return "no error";
}

describe("the shipped Apple Enterprise Attestation Root CA", () => {
  const pem = readFileSync(PEM_FILE, "utf8");
  const der = Buffer.from(pem.replace(/-----(BEGIN|END) CERTIFICATE-----|\s/g, ""), "base64");

  test("has the pinned SHA-256 fingerprint", () => {
    expect(createHash("sha256").update(der).digest("hex")).toBe(PINNED);
    expect(APPLE_ROOT_SHA256).toBe(PINNED);
    expect(TrustAnchor.apple().sha256).toBe(PINNED);
  });

  test("is a self-signed P-384 CA for certificate signing, valid 2022-02-16 to 2047-02-20", async () => {
    const cert = new X509Certificate(der);
    const bc = cert.getExtension(BasicConstraintsExtension);
    const ku = cert.getExtension(KeyUsagesExtension);
    expect({
      subject: cert.subject,
      issuer: cert.issuer,
      curve: (cert.publicKey.algorithm as { namedCurve?: string }).namedCurve,
      notBefore: cert.notBefore.toISOString(),
      notAfter: cert.notAfter.toISOString(),
      ca: bc?.ca,
      caCritical: bc?.critical,
      keyCertSign: Boolean((ku?.usages ?? 0) & KeyUsageFlags.keyCertSign),
      selfSigned: await cert.verify({ publicKey: cert.publicKey, signatureOnly: true }, crypto),
    }).toEqual({
      subject: "CN=Apple Enterprise Attestation Root CA, O=Apple Inc., C=US",
      issuer: "CN=Apple Enterprise Attestation Root CA, O=Apple Inc., C=US",
      curve: "P-384",
      notBefore: "2022-02-16T19:01:24.000Z",
      notAfter: "2047-02-20T00:00:00.000Z",
      ca: true,
      caCritical: true,
      keyCertSign: true,
      selfSigned: true,
    });
  });

  test("the embedded copy is the file on disk", () => {
    expect(TrustAnchor.apple().der).toEqual(new Uint8Array(der));
  });

  test.each([
    ["absent (empty)", ""],
    ["not a certificate", "hello"],
    ["two certificates", `${readFileSync(PEM_FILE, "utf8")}\n${readFileSync(PEM_FILE, "utf8")}`],
  ])("loading fails clearly when the file is %s", (_, text) => {
    expect(failedCheck(() => TrustAnchor.apple(text))).toBe("root");
  });

  test("another certificate in its place fails the pin", async () => {
    const dev = await DevelopmentRoot.generate(() => Date.now());
    let message = "";
    try {
      TrustAnchor.apple(derToPem(dev.anchor.der));
    } catch (e) {
      message = (e as AttestationError).message;
    }
    expect(message).toContain(`expected ${PINNED}`);
  });
});

describe("development root", () => {
  test("is a generated self-signed CA that production refuses", async () => {
    const dev = await DevelopmentRoot.generate(() => Date.now());
    expect([dev.anchor.kind, dev.anchor.certificate.subject]).toEqual(["development", DEV_ROOT_NAME]);
    expect(failedCheck(() => assertAnchorAllowed(dev.anchor, "production"))).toBe("development_root");
    expect(failedCheck(() => assertAnchorAllowed(dev.anchor, "development"))).toBe("no error");
    expect(failedCheck(() => assertAnchorAllowed(TrustAnchor.apple(), "production"))).toBe("no error");
  });

  test("two generated roots differ", async () => {
    const [a, b] = await Promise.all([DevelopmentRoot.generate(() => Date.now()), DevelopmentRoot.generate(() => Date.now())]);
    expect(a.anchor.spki).not.toEqual(b.anchor.spki);
  });
});
