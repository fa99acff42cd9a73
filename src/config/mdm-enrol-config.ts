/**
 * MDM enrolment's settings read together (mdm-enrol-settings.ts): `--mdm-server-url` turns enrolment on and
 * then needs the topic, the CA certificate (a PEM file: a CA certificate with an RSA key) and the CA key
 * (PEM, a secret: `UMBRA_MDM_CA_KEY_FILE`), the key matching the certificate; any of them without the URL is
 * refused. The URL is https (http on loopback outside production), without query, fragment or user. The
 * signing PKCS#12 is read here and opened on the first enrolment (node-forge is not loaded at start).
 * Secrets (CA key, signing PKCS#12 and its password) stay out of the configuration digest.
 */
import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import type { MdmEnrolmentConfig } from "../mdm/enrolment.ts";
import { MDM_ENROL_DERIVED, MDM_ENROL_SETTINGS, type MdmEnrolSettingName } from "./mdm-enrol-settings.ts";
import { ConfigError } from "./settings.ts";
import { isLoopbackHost } from "./tls-settings.ts";

const TOPIC = /^[A-Za-z0-9._-]{1,200}$/;

export function parseMdmEnrolment(raw: (name: MdmEnrolSettingName) => string | undefined, production: boolean): MdmEnrolmentConfig | null {
  const serverUrl = raw("mdmServerUrl");
  if (serverUrl === undefined) {
    const given = MDM_ENROL_DERIVED.find((name) => raw(name) !== undefined);
    if (given) throw new ConfigError(`--${MDM_ENROL_SETTINGS[given].flag} applies to MDM enrolment (--mdm-server-url) only`);
    return null;
  }
  const missing = (["mdmTopic", "mdmCaCert", "mdmCaKey"] as const)
    .filter((name) => raw(name) === undefined)
    .map((name) => `--${MDM_ENROL_SETTINGS[name].flag} (${MDM_ENROL_SETTINGS[name].env}${name === "mdmCaKey" ? "_FILE" : ""})`);
  if (missing.length > 0) throw new ConfigError(`MDM enrolment (--mdm-server-url) needs: ${missing.join(", ")}`);
  const topic = raw("mdmTopic") ?? "";
  if (!TOPIC.test(topic)) throw new ConfigError("--mdm-topic: letters, digits, '.', '_' and '-' only (com.apple.mgmt.External.<uuid>)");
  const { certificate, key } = readCa(raw("mdmCaCert") ?? "", raw("mdmCaKey") ?? "");
  const p12File = raw("mdmProfileSigningP12File");
  const password = raw("mdmProfileSigningP12Password");
  if (p12File === undefined && password !== undefined)
    throw new ConfigError("--mdm-profile-signing-p12-password needs --mdm-profile-signing-p12-file");
  let signingP12: Uint8Array | undefined;
  if (p12File !== undefined) {
    try {
      signingP12 = new Uint8Array(readFileSync(p12File));
    } catch {
      throw new ConfigError(`--mdm-profile-signing-p12-file: cannot read ${p12File}`);
    }
  }
  return Object.freeze({
    serverUrl: readServerUrl(serverUrl, production),
    topic,
    caCertificate: certificate,
    caKey: key,
    ...(signingP12 !== undefined ? { signingP12, signingP12Password: password ?? "" } : {}),
  });
}

function readServerUrl(value: string, production: boolean): string {
  const url = URL.canParse(value) ? new URL(value) : undefined;
  if (!url || (url.protocol !== "https:" && url.protocol !== "http:") || url.search !== "" || url.hash !== "" || url.username !== "") {
    throw new ConfigError(`--mdm-server-url: '${value}' is not an https URL without query, fragment or user`);
  }
  if (url.protocol === "http:" && (production || !isLoopbackHost(url.hostname.replace(/^\[(.*)\]$/, "$1")))) {
    throw new ConfigError("--mdm-server-url must use https (a Mac checks in over TLS; http is for loopback development only)");
  }
  return url.href;
}

/** The CA certificate (from its file) and key, checked: a CA, RSA, the key matching. */
function readCa(file: string, keyPem: string): { certificate: string; key: string } {
  let certificate: string;
  try {
    certificate = readFileSync(file, "utf8");
  } catch {
    throw new ConfigError(`--mdm-ca-cert: cannot read ${file}`);
  }
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(certificate);
  } catch {
    throw new ConfigError(`--mdm-ca-cert: ${file} is not a PEM certificate`);
  }
  if (!x509.ca) throw new ConfigError(`--mdm-ca-cert: ${file} is not a CA certificate (basicConstraints CA:TRUE)`);
  if (x509.publicKey.asymmetricKeyType !== "rsa") throw new ConfigError("--mdm-ca-cert: the MDM CA's key must be RSA");
  let matches = false;
  try {
    matches = x509.checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    throw new ConfigError("UMBRA_MDM_CA_KEY: not a PEM private key");
  }
  if (!matches) throw new ConfigError("UMBRA_MDM_CA_KEY: the key does not match the --mdm-ca-cert certificate");
  return { certificate, key: keyPem };
}
