/**
 * MDM enrolment's settings (src/config/mdm-enrol-config.ts): off without --mdm-server-url; with it, the
 * topic, CA certificate and key together (each missing one named); https only (http on loopback in
 * development); a CA certificate with an RSA key matching the key; the key read from UMBRA_MDM_CA_KEY_FILE;
 * the secrets kept out of the configuration digest.
 */
import { describe, expect, test } from "bun:test";
import { generateKeyPairSync } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import forge from "node-forge";
import { ConfigError, loadConfig } from "../../../src/config/config.ts";
import { configCanonicalBytes } from "../../../src/config/config-digest.ts";
import { tempDir } from "../../support/harness.ts";
import { mdmEnv, NANOMDM_ENV, testCa, testSigningIdentity } from "../../support/mdm-ca.ts";

const ca = testCa();
/** With NanoMDM's side whenever enrolment is asked for (one MDM switch: mdm-settings.test.ts). */
const load = (env: Record<string, string>) =>
  loadConfig({}, env.UMBRA_MDM_SERVER_URL === undefined ? env : { ...NANOMDM_ENV, ...env }, "development");
const refusal = (env: Record<string, string>) => {
  try {
    load(env);
    return "accepted";
  } catch (error) {
    return error instanceof ConfigError ? error.message : `not a ConfigError: ${String(error)}`;
  }
};

describe("MDM enrolment settings", () => {
  test("off without --mdm-server-url; any of its settings alone is refused", () => {
    expect(load({}).mdmEnrolment).toBeNull();
    expect(refusal({ UMBRA_MDM_TOPIC: "t" })).toBe("--mdm-topic applies to MDM enrolment (--mdm-server-url) only");
  });

  test("on: the URL, topic, CA certificate and key; the key from its _FILE", () => {
    using dir = tempDir();
    const env = mdmEnv(dir.path, ca);
    const keyFile = join(dir.path, "ca.key");
    writeFileSync(keyFile, ca.keyPem);
    const { UMBRA_MDM_CA_KEY: _, ...withoutKey } = env;
    const config = load({ ...withoutKey, UMBRA_MDM_CA_KEY_FILE: keyFile }).mdmEnrolment;
    expect(config).toEqual({
      serverUrl: "https://mdm.umbra.example/mdm",
      topic: env.UMBRA_MDM_TOPIC ?? "",
      caCertificate: ca.certificatePem,
      caKey: ca.keyPem.trim(),
    });
  });

  test("missing parts are named; bad URLs, topics, certificates and keys are refused", () => {
    using dir = tempDir();
    const env = mdmEnv(dir.path, ca);
    const ecKey = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    const cases: Record<string, string>[] = [
      { UMBRA_MDM_SERVER_URL: "https://mdm.example/mdm" },
      { ...env, UMBRA_MDM_SERVER_URL: "http://mdm.example/mdm" },
      { ...env, UMBRA_MDM_SERVER_URL: "https://mdm.example/mdm?e=x" },
      { ...env, UMBRA_MDM_TOPIC: "topic with spaces" },
      { ...env, UMBRA_MDM_CA_CERT: join(dir.path, "missing.pem") },
      { ...env, UMBRA_MDM_CA_KEY: testCa().keyPem },
      { ...env, UMBRA_MDM_CA_KEY: ecKey },
      { ...env, UMBRA_MDM_PROFILE_SIGNING_P12_PASSWORD: "p" },
    ];
    expect(cases.map(refusal)).toEqual([
      "MDM enrolment (--mdm-server-url) needs: --mdm-topic (UMBRA_MDM_TOPIC), --mdm-ca-cert (UMBRA_MDM_CA_CERT), --mdm-ca-key (UMBRA_MDM_CA_KEY_FILE)",
      "--mdm-server-url must use https (a Mac checks in over TLS; http is for loopback development only)",
      "--mdm-server-url: 'https://mdm.example/mdm?e=x' is not an https URL without query, fragment or user",
      "--mdm-topic: letters, digits, '.', '_' and '-' only (com.apple.mgmt.External.<uuid>)",
      `--mdm-ca-cert: cannot read ${join(dir.path, "missing.pem")}`,
      "UMBRA_MDM_CA_KEY: the key does not match the --mdm-ca-cert certificate",
      "UMBRA_MDM_CA_KEY: the key does not match the --mdm-ca-cert certificate",
      "--mdm-profile-signing-p12-password needs --mdm-profile-signing-p12-file",
    ]);
    expect(refusal({ ...env, UMBRA_MDM_SERVER_URL: "http://127.0.0.1:9000/mdm" })).toBe("accepted");
  });

  test("a certificate that is not a CA is refused", () => {
    using dir = tempDir();
    const signing = testSigningIdentity();
    const env = mdmEnv(dir.path, ca);
    const leafFile = join(dir.path, "leaf.pem");
    writeFileSync(leafFile, forge.pki.certificateToPem(signing.leaf));
    expect(refusal({ ...env, UMBRA_MDM_CA_CERT: leafFile })).toBe(
      `--mdm-ca-cert: ${leafFile} is not a CA certificate (basicConstraints CA:TRUE)`,
    );
  });

  test("the CA key and the signing PKCS#12 and its password stay out of the configuration digest", () => {
    using dir = tempDir();
    const signing = testSigningIdentity();
    const config = load(mdmEnv(dir.path, ca, signing));
    expect(config.mdmEnrolment?.signingP12?.length).toBe(signing.p12.length);
    const bytes = Buffer.from(configCanonicalBytes(config));
    expect([bytes.includes("mdmEnrolment.caKey"), bytes.includes("signingP12"), bytes.includes(signing.password)]).toEqual([
      false,
      false,
      false,
    ]);
    expect([bytes.includes("mdmEnrolment.caCertificate"), bytes.includes("mdmEnrolment.serverUrl")]).toEqual([true, true]);
  });
});
