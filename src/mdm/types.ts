/**
 * The MDM domain's shared types (issue 23; MDM-CONTRACT.md part B): its configuration, and the shapes of
 * the attestation checks it is given (part A's `verifyMdaAnswer` and epoch nonces, attestation/provider/),
 * injected as functions so that this folder holds no chain rules of its own.
 */
import type { MdaAnswerInput } from "../../attestation/provider/mda-answer.ts";

/** MDM mode (`UMBRA_MDM_URL` set); config/mdm-settings.ts reads it. */
export interface MdmConfig {
  /** NanoMDM's API base, e.g. http://127.0.0.1:9000 (no trailing slash). */
  readonly url: string;
  /** NanoMDM's `-api` key (HTTP Basic `nanomdm:<key>`). A secret. */
  readonly apiKey: string;
  /** NanoMDM's `-webhook-hmac-key`: the webhook's HMAC-SHA256 key (UTF-8). A secret. */
  readonly webhookKey: string;
  /** At most this many NanoMDM calls (enqueue, push) in flight at once. */
  readonly maxInFlight: number;
}

/** What the device answered to DeviceInformation, with the enrolment it answered for (part A's input). */
export type { MdaAnswerInput };

/** Part A's verdict on an answer (attestation/provider/mda-answer.ts `VerifiedMdaAnswer`), the fields used here. */
export interface VerifiedMdaAnswer {
  readonly claims: { readonly osVersion?: string };
  /** The leaf's notBefore, Unix ms (a Date is read as its time). */
  readonly leafNotBefore: number | Date;
  /** The epoch whose nonce the leaf's freshness code equals. */
  readonly freshnessEpoch: number;
  /** Hex SHA-256 over the chain. */
  readonly chainSha256: string;
  /** The last millisecond a re-check of this answer still passes (its epoch window, leaf age, notAfter). */
  readonly acceptedUntil: number;
}

/** Checks an answer (every rule of part A); throws (an error with a `check` name) when it fails. */
export type MdaAnswerVerifier = (input: MdaAnswerInput) => VerifiedMdaAnswer | Promise<VerifiedMdaAnswer>;

/** Epochs and nonces (part A's mda-nonce.ts, bound to the coordinator's seed). */
export interface MdaNonces {
  /** The epoch of a time (Unix ms): floor(ms / 7 days). */
  epoch(nowMs: number): number;
  /** The 32-byte nonce of an epoch for an identity key (65-byte point). */
  nonce(epoch: number, identityKey: Uint8Array): Uint8Array;
}

/** The check name of a verification failure (AttestationError's `check`), or `error` for anything else. */
export function failedCheck(e: unknown): string {
  if (typeof e === "object" && e !== null && "check" in e && typeof (e as { check: unknown }).check === "string") {
    return (e as { check: string }).check;
  }
  return "error";
}
