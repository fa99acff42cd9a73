/**
 * Sealed provisioning messages: the operator's secrets (admin token ...) sealed with HPKE to the
 * coordinator's attested sealing key, bound to the report the operator verified and to a nonce the
 * coordinator issued, so a message opens only in the boot it was made for, and only once.
 *
 * Steps (operator, sealProvisioning; `umbra-coordinator provision`):
 *   1. verify GET /v1/attestation against the expected measurement (report signature, chain, policy,
 *      report data binding the published sealing key); take MEASUREMENT and REPORT_DATA from that report
 *   2. nonce = GET /v1/provision's `nonce` (32 bytes, single use, issued by this coordinator)
 *   3. info = provisionInfo({measurement, reportData, nonce})                        (below)
 *   4. enc, ciphertext = hpkeSeal(sealing key, UTF-8 JSON of the secrets, info)      (seal.ts: base mode,
 *      DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, empty AAD)
 *   5. POST /v1/provision with the envelope below
 * Steps (coordinator): read the envelope (400 on any shape error); the nonce must be one it issued and
 * not yet used; open with the sealing private key under the info rebuilt from ITS OWN report and that
 * nonce: a message for another boot (other sealing key, other report data), another nonce or with any
 * byte changed does not open (RequestOpenError, one error for all: the AEAD cannot tell them apart).
 *
 * Wire format (integers unsigned big-endian; lp(x) = u32(len(x)) || x; base64url unpadded):
 *   info      lp("umbra-provision-v1") || lp(measurement, 48 bytes) || lp(report_data, 64 bytes) || lp(nonce, 32 bytes)
 *   envelope  { "version": 1, "nonce": <32 bytes>, "enc": <32 bytes>, "ciphertext": <sealed secrets> }
 *   secrets   the plaintext: a JSON object, e.g. {"admin_token": "..."} (src/attestation/provisioning.ts)
 *
 * Invariants: the plaintext is never logged or written; the measurement and report data come from the
 * verified report on the operator's side and from the coordinator's own evidence on its side.
 */
import { CanonicalBytes } from "./canonical.ts";
import { fromBase64url, toBase64url } from "./encoding.ts";
import { AEAD_TAG_BYTES, type HpkeOptions, hpkeOpen, hpkeSeal, X25519_KEY_BYTES } from "./seal.ts";

export const PROVISION_INFO_TAG = "umbra-provision-v1";
const PROVISION_VERSION = 1;
export const PROVISION_NONCE_BYTES = 32;
const MEASUREMENT_BYTES = 48;
const REPORT_DATA_BYTES = 64;

/** What a provisioning message's `info` binds: both sides must use the same three values. */
export interface ProvisionBinding {
  /** The report's MEASUREMENT (48 bytes). */
  readonly measurement: Uint8Array;
  /** The report's REPORT_DATA (64 bytes): binds this boot's TLS and sealing keys. */
  readonly reportData: Uint8Array;
  /** The nonce the coordinator issued (32 bytes). */
  readonly nonce: Uint8Array;
}

export interface ProvisionEnvelope {
  readonly version: number;
  readonly nonce: string;
  readonly enc: string;
  readonly ciphertext: string;
}

export type ProvisionEnvelopeRead =
  | { readonly ok: true; readonly nonce: Uint8Array; readonly nonceText: string; readonly enc: Uint8Array; readonly ciphertext: Uint8Array }
  | { readonly ok: false; readonly param: string; readonly message: string };

/**
 * The `info` bytes (layout in the file header).
 * @throws InvalidInputError when a field is not of its exact length.
 */
export function provisionInfo(binding: ProvisionBinding): Uint8Array<ArrayBuffer> {
  return CanonicalBytes.tagged(PROVISION_INFO_TAG)
    .bytes("measurement", binding.measurement, MEASUREMENT_BYTES, true)
    .bytes("reportData", binding.reportData, REPORT_DATA_BYTES, true)
    .bytes("nonce", binding.nonce, PROVISION_NONCE_BYTES, true)
    .finish();
}

/**
 * Operator side: seals the secrets (bytes of their JSON) to the coordinator's sealing key.
 * @throws InvalidKeyError for a key that is not 32 bytes or a low-order point.
 * @throws InvalidInputError for a binding out of range.
 */
export async function sealProvisioning(
  sealingPublicKey: Uint8Array,
  secrets: Uint8Array,
  binding: ProvisionBinding,
  options: HpkeOptions = {},
): Promise<ProvisionEnvelope> {
  const sealed = await hpkeSeal(sealingPublicKey, secrets, provisionInfo(binding), options);
  return {
    version: PROVISION_VERSION,
    nonce: toBase64url(binding.nonce),
    enc: toBase64url(sealed.enc),
    ciphertext: toBase64url(sealed.ciphertext),
  };
}

/** Coordinator side, before opening: the envelope's shape, without throwing. */
export function readProvisionEnvelope(value: unknown): ProvisionEnvelopeRead {
  const fail = (param: string, message: string) => ({ ok: false as const, param, message });
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return fail("body", "a provisioning message is a JSON object with version, nonce, enc and ciphertext");
  }
  const e = value as Record<string, unknown>;
  if (e.version !== PROVISION_VERSION) return fail("version", `'version' must be ${PROVISION_VERSION}`);
  const decoded: Record<string, Uint8Array> = {};
  for (const field of ["nonce", "enc", "ciphertext"] as const) {
    const text = e[field];
    if (typeof text !== "string") return fail(field, `'${field}' must be a base64url string`);
    try {
      decoded[field] = fromBase64url(text, field);
    } catch {
      return fail(field, `'${field}' is not base64url`);
    }
  }
  const { nonce, enc, ciphertext } = decoded as { nonce: Uint8Array; enc: Uint8Array; ciphertext: Uint8Array };
  if (nonce.byteLength !== PROVISION_NONCE_BYTES) return fail("nonce", `'nonce' must be ${PROVISION_NONCE_BYTES} bytes`);
  if (enc.byteLength !== X25519_KEY_BYTES) return fail("enc", `'enc' must be ${X25519_KEY_BYTES} bytes`);
  if (ciphertext.byteLength < AEAD_TAG_BYTES) return fail("ciphertext", "'ciphertext' is shorter than its authentication tag");
  return { ok: true, nonce, nonceText: toBase64url(nonce), enc, ciphertext };
}

/**
 * Coordinator side: opens a provisioning message; returns the secrets' bytes.
 * @throws RequestOpenError when it does not open (another boot, another nonce, tampering).
 * @throws InvalidInputError / InvalidKeyError for inputs out of range.
 */
export async function openProvisioning(
  sealingPrivateKey: Uint8Array,
  enc: Uint8Array,
  ciphertext: Uint8Array,
  binding: ProvisionBinding,
  options: HpkeOptions = {},
): Promise<Uint8Array> {
  return (await hpkeOpen(sealingPrivateKey, enc, ciphertext, provisionInfo(binding), options)).plaintext;
}
