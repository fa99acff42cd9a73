/**
 * The MDM store domain (issue 23; MDM-CONTRACT.md part B): enrolments of providers' Macs in NanoMDM, the
 * outstanding DeviceInformation command per enrolment, and the last verified attestation chain per enrolment.
 *
 * Invariants every implementation keeps (test/store/mdm-conformance.ts): an enrolment token is stored only
 * as its SHA-256 (hex); at most one live (not checked out) enrolment per identity key, and at most one
 * enrolled enrolment per serial number (a second identity key on the same Mac is refused); at most one
 * outstanding command per enrolment, consumed at most once. Chains are public data (DER, base64).
 * Times in Unix ms.
 */

export const MDM_ENROLMENT_STATES = ["issued", "enrolled", "checked_out"] as const;
export type MdmEnrolmentState = (typeof MDM_ENROLMENT_STATES)[number];

export interface MdmEnrolment {
  readonly id: string;
  readonly accountId: string;
  /** The device token the enrolling provider authenticated with. */
  readonly providerTokenId: string;
  /** The provider's identity key: base64 of the 65-byte uncompressed P-256 point. */
  readonly identityKey: string;
  /** SHA-256 (hex) of the single-use enrolment token carried in the profile's URLs. */
  readonly tokenHash: string;
  readonly createdAt: number;
  /** The token binds no device from this time on. */
  readonly tokenExpiresAt: number;
  /** NanoMDM's enrolment id (the Mac's hardware UUID), once bound. */
  readonly nanomdmId: string | null;
  /** The check-in's SerialNumber, once bound. */
  readonly serial: string | null;
  readonly state: MdmEnrolmentState;
  readonly updatedAt: number;
}

export type NewMdmEnrolment = Pick<
  MdmEnrolment,
  "id" | "accountId" | "providerTokenId" | "identityKey" | "tokenHash" | "createdAt" | "tokenExpiresAt"
>;

/** Why `bind` refused; `ok` with the (now) enrolled record otherwise. */
export type MdmBindResult =
  | { readonly ok: true; readonly enrolment: MdmEnrolment }
  | { readonly ok: false; readonly reason: "unknown_token" | "token_expired" | "checked_out" | "other_device" | "serial_taken" };

export interface MdmEnrolmentStore {
  /**
   * Records an issued enrolment; a live enrolment of the same identity key is checked out in the same
   * transaction (a re-enrolment replaces it). Undefined when the account or the device token does not exist.
   */
  create(input: NewMdmEnrolment): Promise<MdmEnrolment | undefined>;
  get(id: string): Promise<MdmEnrolment | undefined>;
  findByTokenHash(tokenHash: string): Promise<MdmEnrolment | undefined>;
  /** The account's enrolments, newest first (creation time, then id, descending). */
  forAccount(accountId: string): Promise<MdmEnrolment[]>;
  /** The live (issued or enrolled) enrolment of an identity key. */
  byIdentityKey(identityKey: string): Promise<MdmEnrolment | undefined>;
  /** The enrolled enrolment NanoMDM knows by this id. */
  byNanomdmId(nanomdmId: string): Promise<MdmEnrolment | undefined>;
  /**
   * Binds the token's enrolment to NanoMDM's id and the serial, atomically. Idempotent for the same id and
   * serial. Refused: an unknown or expired token (while still issued), a checked-out enrolment, a token
   * already bound to another device, a serial enrolled under another identity key (unless that enrolment is
   * the same NanoMDM device re-enrolling: it is then checked out).
   */
  bind(input: { tokenHash: string; nanomdmId: string; serial: string; at: number }): Promise<MdmBindResult>;
  /** Marks the enrolment checked out (idempotent); its outstanding command is dropped. */
  checkOut(id: string, at: number): Promise<MdmEnrolment | undefined>;
}

/** An outstanding DeviceInformation command (our own CommandUUID). */
export interface MdmCommand {
  readonly commandUuid: string;
  readonly enrolmentId: string;
  /** The nonce epoch the command asked for. */
  readonly epoch: number;
  readonly issuedAt: number;
  /** Not accepted from this time on (issuedAt + 30 min). */
  readonly expiresAt: number;
}

export interface MdmCommandStore {
  /**
   * Records `command` unless its enrolment has one outstanding at `at` (expiresAt > at): then that one is
   * returned with `created: false`. An expired one is replaced. Undefined for an unknown enrolment.
   */
  issue(command: MdmCommand, at: number): Promise<{ command: MdmCommand; created: boolean } | undefined>;
  /** The enrolment's command outstanding at `at`. */
  outstanding(enrolmentId: string, at: number): Promise<MdmCommand | undefined>;
  /** Removes and returns the command when it is this enrolment's and outstanding at `at`; once only. */
  consume(commandUuid: string, enrolmentId: string, at: number): Promise<MdmCommand | undefined>;
  /** Removes the command (an enqueue that failed); false when it was not there. */
  withdraw(commandUuid: string): Promise<boolean>;
}

/** The last verified attestation chain of an enrolment (public data). */
export interface MdmChain {
  readonly enrolmentId: string;
  /** DER certificates, leaf first, base64. */
  readonly certificates: readonly string[];
  readonly chainSha256: string;
  readonly serial: string;
  readonly udid: string;
  readonly osVersion: string;
  readonly leafNotBefore: number;
  /** The nonce epoch the leaf's freshness code matched. */
  readonly epoch: number;
  readonly verifiedAt: number;
}

export interface MdmChainStore {
  /** Replaces the enrolment's chain; false for an unknown enrolment. */
  put(chain: MdmChain): Promise<boolean>;
  get(enrolmentId: string): Promise<MdmChain | undefined>;
}

export interface MdmStore {
  readonly enrolments: MdmEnrolmentStore;
  readonly commands: MdmCommandStore;
  readonly chains: MdmChainStore;
}
