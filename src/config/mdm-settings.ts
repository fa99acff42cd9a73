/**
 * MDM mode's settings (issue 23; docs/operations.md "Configuration"): NanoMDM's API base, its API key, the
 * webhook's HMAC key and the cap on NanoMDM calls in flight. MDM mode is on when `UMBRA_MDM_URL` is set;
 * both keys are then required (secrets: flags, environment or `_FILE`, never in the configuration digest).
 * Production refuses plain http to NanoMDM off loopback (the API key would cross the network in clear).
 */
import type { MdmEnrolmentConfig } from "../mdm/enrolment.ts";
import type { MdmConfig } from "../mdm/types.ts";
import { ConfigError, parseSetting, type SettingTable } from "./settings.ts";

export const MDM_SETTINGS = {
  // The MDA nonces' key: production refuses MDM mode without it (config/mda-seed.ts reads it).
  mdaSeed: {
    flag: "mda-seed",
    env: "UMBRA_MDA_SEED",
    kind: "string",
    secret: true,
    help: "secret key of the MDA attestation nonces, hex or base64, at least 32 bytes (config/mda-seed.ts)",
  },
  mdmUrl: { flag: "mdm-url", env: "UMBRA_MDM_URL", kind: "string", help: "NanoMDM's API base URL: MDM mode on" },
  mdmApiKey: { flag: "mdm-api-key", env: "UMBRA_MDM_API_KEY", kind: "string", secret: true, help: "NanoMDM's API key" },
  mdmWebhookKey: {
    flag: "mdm-webhook-key",
    env: "UMBRA_MDM_WEBHOOK_KEY",
    kind: "string",
    secret: true,
    help: "NanoMDM's -webhook-hmac-key",
  },
  mdmMaxInFlight: {
    flag: "mdm-max-in-flight",
    env: "UMBRA_MDM_MAX_IN_FLIGHT",
    kind: "int",
    default: 8,
    min: 1,
    max: 256,
    help: "NanoMDM calls in flight at once",
  },
} as const satisfies SettingTable;

export const MDM_DERIVED = ["mdmUrl", "mdmApiKey", "mdmWebhookKey", "mdmMaxInFlight"] as const;

/** The webhook key's shortest length: HMAC keys below 128 bits are guessable offline from one signed body. */
const MIN_WEBHOOK_KEY_LENGTH = 16;

/**
 * MDM mode's configuration, or null when `UMBRA_MDM_URL` is not set. `isLoopbackHost` is tls-settings.ts's
 * (given, not imported: that file imports the settings table, which includes this one). Throws ConfigError.
 */
export function parseMdm(
  raw: (name: (typeof MDM_DERIVED)[number]) => string | undefined,
  production: boolean,
  isLoopbackHost: (host: string) => boolean,
): MdmConfig | null {
  const url = raw("mdmUrl");
  const apiKey = raw("mdmApiKey");
  const webhookKey = raw("mdmWebhookKey");
  if (url === undefined) {
    const stray = (["mdmApiKey", "mdmWebhookKey", "mdmMaxInFlight"] as const).find((name) => raw(name) !== undefined);
    if (stray !== undefined) throw new ConfigError(`--${MDM_SETTINGS[stray].flag} needs --mdm-url (MDM mode)`);
    return null;
  }
  const parsed = URL.canParse(url) ? new URL(url) : undefined;
  if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:") || parsed.username !== "" || parsed.search !== "") {
    throw new ConfigError(`--mdm-url: '${url}' is not an http(s) URL without user or query`);
  }
  if (production && parsed.protocol === "http:" && !isLoopbackHost(parsed.hostname.replace(/^\[(.*)\]$/, "$1"))) {
    throw new ConfigError("production mode refuses an http --mdm-url off loopback: NanoMDM's API key would cross the network in clear");
  }
  if (apiKey === undefined) throw new ConfigError("MDM mode needs NanoMDM's API key: set UMBRA_MDM_API_KEY or UMBRA_MDM_API_KEY_FILE");
  if (webhookKey === undefined || webhookKey.length < MIN_WEBHOOK_KEY_LENGTH) {
    throw new ConfigError(
      `MDM mode needs a webhook key of at least ${MIN_WEBHOOK_KEY_LENGTH} characters (NanoMDM's -webhook-hmac-key): set UMBRA_MDM_WEBHOOK_KEY or UMBRA_MDM_WEBHOOK_KEY_FILE`,
    );
  }
  return Object.freeze({
    url: `${parsed.origin}${parsed.pathname.replace(/\/+$/, "")}`,
    apiKey,
    webhookKey,
    maxInFlight: parseSetting(MDM_SETTINGS.mdmMaxInFlight, raw("mdmMaxInFlight")),
  });
}

/**
 * One MDM switch: NanoMDM's side (`--mdm-url` and its keys) and enrolment (`--mdm-server-url`, topic, CA)
 * are on together or not at all; either alone is refused, the message naming what is missing.
 */
export function requireWholeMdm(mdm: MdmConfig | null, enrolment: MdmEnrolmentConfig | null): void {
  if (mdm !== null && enrolment === null) {
    throw new ConfigError(
      "MDM mode (--mdm-url) needs MDM enrolment too: set UMBRA_MDM_SERVER_URL, UMBRA_MDM_TOPIC, UMBRA_MDM_CA_CERT and UMBRA_MDM_CA_KEY_FILE",
    );
  }
  if (mdm === null && enrolment !== null) {
    throw new ConfigError(
      "MDM enrolment (--mdm-server-url) needs MDM mode too: set UMBRA_MDM_URL, UMBRA_MDM_API_KEY(_FILE) and UMBRA_MDM_WEBHOOK_KEY(_FILE)",
    );
  }
}
