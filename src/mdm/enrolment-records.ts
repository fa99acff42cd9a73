/**
 * What enrolment (part C of issue 23) needs of the MDM enrolment records, which the store owns
 * (`MdmStore.enrolments`, src/store/): create an enrolment when a profile is issued, and read an
 * account's enrolments (and whether one holds a chain that passes now) for the status route.
 *
 * A record's shape is the store's (MDM-CONTRACT.md part B): the enrolment token is kept only as its
 * SHA-256 (hex of its UTF-8 text, as every secret: src/auth/secrets.ts `sha256Hex`; the webhook looks up
 * `url_params.e` the same way), single use is the store's binding (`bind` by token hash on the first
 * mdm.Authenticate / TokenUpdate). One live enrolment per identity key: creating one for a key that has
 * one checks the old out in the same transaction (its token binds no more). `storeEnrolmentRecords` is
 * the store's; `attested` is the stored chain re-checked now (device-trust.ts).
 */
import type { MdmEnrolment, MdmStore, NewMdmEnrolment } from "../store/mdm-types.ts";

export type EnrolmentRecord = MdmEnrolment;
export type NewEnrolment = NewMdmEnrolment;

export interface EnrolmentRecords {
  /** Records a new enrolment in state `issued` (superseding a live one of the same identity key). */
  create(enrolment: NewEnrolment): Promise<EnrolmentRecord>;
  /** The account's enrolments. */
  forAccount(accountId: string): Promise<readonly EnrolmentRecord[]>;
  /** When the enrolment's stored chain was verified (Unix ms), while it still passes; null otherwise. */
  attestedAt(enrolment: EnrolmentRecord): Promise<number | null>;
}

/** The store's records; `attestedAt` from the stored chain as re-checked now. */
export function storeEnrolmentRecords(
  store: MdmStore,
  attestedAt: (enrolment: EnrolmentRecord) => Promise<number | null>,
): EnrolmentRecords {
  return {
    async create(enrolment) {
      const record = await store.enrolments.create(enrolment);
      // The device token was just authenticated: its account and token rows exist unless deleted meanwhile.
      if (record === undefined) throw new Error("the enrolment's account or device token no longer exists");
      return record;
    },
    forAccount: (accountId) => store.enrolments.forAccount(accountId),
    attestedAt,
  };
}
