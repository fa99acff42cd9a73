/**
 * Rotating nonces for Apple Managed Device Attestation answers (MDM DeviceInformation with
 * DeviceAttestationNonce). Apple returns its cached attestation for a repeated nonce and mints at most
 * one new one per 7 days, so the nonce changes once per 7-day epoch and is bound to one identity key.
 *
 * Construction (version 1; docs/security.md "MDA nonces" states it for auditors):
 *   epoch   = floor(unix_ms / 604_800_000)                 (7-day epochs from the Unix epoch, UTC)
 *   message = UTF-8("umbra-mda-v1")                        (12 bytes, no terminator)
 *             || u64 big-endian(epoch)                     (8 bytes)
 *             || identity key                              (65 bytes: 0x04 || x || y, SEC 1 uncompressed P-256)
 *   nonce   = HMAC-SHA256(key = seed, message)             (32 bytes; RFC 2104 with SHA-256)
 * The seed is the coordinator's secret setting UMBRA_MDA_SEED (at least 32 bytes), the same on every
 * replica and across restarts: a new seed refuses every chain minted under the old one (up to 3 epochs).
 *
 * Accepted: the nonces of the current epoch and the two before it (a Mac may answer from its cache for
 * up to 7 days, and the coordinator re-asks once per epoch), for the one identity key being checked.
 * Pure: no I/O, no clock (callers pass the time). Throws RangeError on a malformed argument.
 */
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";

/** Length of one epoch: 7 days in milliseconds. */
export const MDA_EPOCH_MS = 7 * 86_400_000;
/** Epochs accepted besides the current one. */
export const MDA_PREVIOUS_EPOCHS = 2;
/** Smallest seed, in bytes. */
export const MDA_SEED_MIN_BYTES = 32;
/** The domain tag that opens the HMAC message. */
export const MDA_NONCE_TAG = "umbra-mda-v1";
export const MDA_NONCE_BYTES = 32;

const TAG_BYTES = new TextEncoder().encode(MDA_NONCE_TAG);
const POINT_BYTES = 65;

/** One accepted nonce and the epoch it belongs to. */
export interface MdaNonce {
  readonly epoch: number;
  readonly nonce: Uint8Array;
}

/** The epoch of an instant (Unix milliseconds). Throws RangeError for a negative or non-integer time. */
export function mdaEpoch(nowMs: number): number {
  if (!Number.isSafeInteger(nowMs) || nowMs < 0) throw new RangeError(`mdaEpoch: ${nowMs} is not a Unix time in milliseconds`);
  return Math.floor(nowMs / MDA_EPOCH_MS);
}

/** The first millisecond of an epoch. */
export function mdaEpochStart(epoch: number): number {
  return epoch * MDA_EPOCH_MS;
}

/** The HMAC message of the file header: tag || u64be(epoch) || point (85 bytes). */
export function mdaNonceMessage(epoch: number, identityKey: Uint8Array): Uint8Array {
  if (!Number.isSafeInteger(epoch) || epoch < 0) throw new RangeError(`mdaNonce: epoch ${epoch} is not a whole number >= 0`);
  if (identityKey.length !== POINT_BYTES || identityKey[0] !== 0x04) {
    throw new RangeError(`mdaNonce: the identity key must be the 65-byte uncompressed point, got ${identityKey.length} bytes`);
  }
  const message = new Uint8Array(TAG_BYTES.length + 8 + POINT_BYTES);
  message.set(TAG_BYTES, 0);
  new DataView(message.buffer).setBigUint64(TAG_BYTES.length, BigInt(epoch), false);
  message.set(identityKey, TAG_BYTES.length + 8);
  return message;
}

/** HMAC-SHA256(seed, "umbra-mda-v1" || u64be(epoch) || point): the DeviceAttestationNonce of one epoch and key. */
export function mdaNonce(seed: Uint8Array, epoch: number, identityKey: Uint8Array): Uint8Array {
  if (seed.length < MDA_SEED_MIN_BYTES) {
    throw new RangeError(`mdaNonce: the seed has ${seed.length} bytes, at least ${MDA_SEED_MIN_BYTES} needed`);
  }
  return hmac(sha256, seed, mdaNonceMessage(epoch, identityKey));
}

/** The nonces accepted at `nowMs` for one identity key: the current epoch's first, then the previous two (none before epoch 0). */
export function acceptedMdaNonces(seed: Uint8Array, nowMs: number, identityKey: Uint8Array): MdaNonce[] {
  const current = mdaEpoch(nowMs);
  const out: MdaNonce[] = [];
  for (let epoch = current; epoch >= Math.max(0, current - MDA_PREVIOUS_EPOCHS); epoch--) {
    out.push({ epoch, nonce: mdaNonce(seed, epoch, identityKey) });
  }
  return out;
}

/** The last millisecond at which a chain carrying `epoch`'s nonce is still accepted. */
export function mdaEpochAcceptedUntil(epoch: number): number {
  return mdaEpochStart(epoch + MDA_PREVIOUS_EPOCHS + 1) - 1;
}
