/**
 * `--mda-seed` (UMBRA_MDA_SEED, UMBRA_MDA_SEED_FILE): the secret key of the rotating MDM attestation
 * nonces (attestation/provider/mda-nonce.ts). At least 32 bytes, written as hex (a value of hex digits
 * only, even in number, is read as hex: `openssl rand -hex 32`) or else as canonical padded base64
 * (`openssl rand -base64 32`). The same on every replica and across restarts: a new seed refuses every
 * chain minted under the old one until the Macs answer again (up to three weeks for a stored chain).
 * A secret: kept out of the configuration digest (config-digest.ts) and never quoted in an error.
 * Production refuses MDM mode (`--mdm-url`) without it.
 */
import { MDA_SEED_MIN_BYTES } from "../../attestation/provider/mda-nonce.ts";
import { ConfigError } from "./settings.ts";

const HEX = /^(?:[0-9a-fA-F]{2})+$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The seed's bytes from its text. Throws ConfigError naming the flag, never the value. */
export function parseMdaSeed(text: string): Uint8Array {
  let bytes: Uint8Array;
  if (HEX.test(text)) bytes = new Uint8Array(Buffer.from(text, "hex"));
  else if (BASE64.test(text)) bytes = new Uint8Array(Buffer.from(text, "base64"));
  else throw new ConfigError("--mda-seed: not hex or padded base64");
  if (bytes.length < MDA_SEED_MIN_BYTES) {
    throw new ConfigError(`--mda-seed: ${bytes.length} bytes, at least ${MDA_SEED_MIN_BYTES} needed (openssl rand -hex 32)`);
  }
  return bytes;
}

/** The seed when given; production refuses `--mdm-url` without one. */
export function readMdaSeed(text: string | undefined, mdmUrl: string | undefined, production: boolean): Uint8Array | undefined {
  if (text === undefined) {
    if (production && mdmUrl !== undefined) {
      throw new ConfigError(
        "production mode refuses MDM mode (--mdm-url) without an MDA seed: set UMBRA_MDA_SEED_FILE (openssl rand -hex 32)",
      );
    }
    return undefined;
  }
  return parseMdaSeed(text);
}
