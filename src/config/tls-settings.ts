/**
 * The coordinator's TLS settings, read together: `--tls` and its companions (names, ACME), and
 * `--tls-public-key-file` (a TLS endpoint in front of the coordinator, exclusive with `--tls`).
 * The ACME settings apply to `acme` only; names are DNS names (IP addresses too for a self-signed
 * certificate, which no public CA is asked to vouch for). Every error is a ConfigError naming the flag.
 */
import { createPublicKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import type { AcmeConfig, TlsConfig, TlsMode } from "../tls/tls-config.ts";
import { SETTINGS, type SettingName } from "./coordinator-settings.ts";
import { ConfigError, parseSetting } from "./settings.ts";

/** A setting's text by name (flag, environment), undefined when not given. */
type Read = (name: SettingName) => string | undefined;

const DNS_NAME = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i;

/** 127.0.0.0/8, ::1 and localhost: the addresses plain HTTP may listen on in production. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** --tls and its companions; `tlsPublicKeyFile` is the text of --tls-public-key-file. */
export function parseTls(raw: Read, tlsPublicKeyFile: string | undefined): TlsConfig {
  const mode: TlsMode = parseSetting(SETTINGS.tls, raw("tls"));
  const namesText = raw("tlsNames");
  const acmeSettings = (["acmeDirectory", "acmeEmail", "acmeHttpPort", "acmeCaFile"] as const).filter((name) => raw(name) !== undefined);
  if (mode !== "acme" && acmeSettings.length > 0) {
    throw new ConfigError(`--${SETTINGS[acmeSettings[0]!].flag} applies to --tls acme only`);
  }
  if (mode === "off") {
    if (namesText !== undefined) throw new ConfigError("--tls-names applies to --tls self-signed or acme only");
    return Object.freeze({ mode, names: Object.freeze([]) });
  }
  if (tlsPublicKeyFile !== undefined) {
    throw new ConfigError(
      `--tls-public-key-file names a TLS endpoint in front of the coordinator; with --tls ${mode} the coordinator's own key is bound`,
    );
  }
  if (mode === "acme" && namesText === undefined) throw new ConfigError("--tls acme needs --tls-names: the DNS names to certify");
  const names = parseSetting(SETTINGS.tlsNames, namesText)
    .split(",")
    .map((n) => n.trim().toLowerCase())
    .filter((n) => n !== "");
  if (names.length === 0) throw new ConfigError("--tls-names: no name given");
  for (const name of names) {
    const ip = isIP(name) !== 0;
    if (ip && mode === "acme") throw new ConfigError(`--tls-names: '${name}' is an IP address; --tls acme certifies DNS names`);
    if (!ip && !DNS_NAME.test(name)) throw new ConfigError(`--tls-names: '${name}' is not a DNS name`);
  }
  if (mode === "self-signed") return Object.freeze({ mode, names: Object.freeze(names) });

  const directory = parseSetting(SETTINGS.acmeDirectory, raw("acmeDirectory"));
  let url: URL;
  try {
    url = new URL(directory);
  } catch {
    throw new ConfigError(`--acme-directory: '${directory}' is not a URL`);
  }
  if (url.protocol !== "https:") throw new ConfigError("--acme-directory must use https");
  const email = raw("acmeEmail");
  if (email !== undefined && !/^[^@\s]+@[^@\s]+$/.test(email)) throw new ConfigError(`--acme-email: '${email}' is not an address`);
  const caFile = raw("acmeCaFile");
  const acme: AcmeConfig = {
    directory,
    httpPort: parseSetting(SETTINGS.acmeHttpPort, raw("acmeHttpPort")),
    ...(email !== undefined ? { email } : {}),
    ...(caFile !== undefined ? { caPem: readCaFile(caFile) } : {}),
  };
  return Object.freeze({ mode, names: Object.freeze(names), acme: Object.freeze(acme) });
}

/** A PEM file of CA certificates, each parsed (a file that holds none is refused). */
function readCaFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    throw new ConfigError(`--acme-ca-file: cannot read ${path}`);
  }
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  try {
    for (const block of blocks) new X509Certificate(block);
  } catch {
    throw new ConfigError(`--acme-ca-file: ${path} holds a certificate that does not parse`);
  }
  if (blocks.length === 0) throw new ConfigError(`--acme-ca-file: ${path} holds no PEM certificate`);
  return blocks.join("\n");
}

/**
 * The DER SubjectPublicKeyInfo of a PEM (or DER) certificate or public key file. A private key is refused:
 * the setting names what the TLS endpoint presents, and the coordinator never needs that key.
 */
export function readTlsPublicKey(path: string): Uint8Array {
  const flag = `--${SETTINGS.tlsPublicKeyFile.flag}`;
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch {
    throw new ConfigError(`${flag}: cannot read ${path}`);
  }
  const text = bytes.toString("latin1");
  if (text.includes("PRIVATE KEY-----")) throw new ConfigError(`${flag}: ${path} holds a private key; give the certificate or public key`);
  const pem = text.includes("-----BEGIN ");
  const attempts = pem
    ? [() => createPublicKey(text)]
    : [
        () => createPublicKey({ key: bytes, format: "der", type: "spki" }),
        () => createPublicKey({ key: bytes, format: "der", type: "pkcs1" }),
      ];
  for (const attempt of attempts) {
    try {
      const key = attempt();
      if (key.type === "public") return new Uint8Array(key.export({ type: "spki", format: "der" }));
    } catch {}
  }
  throw new ConfigError(`${flag}: ${path} is not a PEM certificate or public key`);
}
