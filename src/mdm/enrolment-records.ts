/**
 * What enrolment (part C of issue 23) needs of the MDM enrolment records, which the store owns
 * (`MdmStore.enrolments`, src/store/): create an enrolment when a profile is issued, and read an
 * account's enrolments (and whether one holds a verified chain) for the status route.
 *
 * A record's shape is the store's (MDM-CONTRACT.md part B): the enrolment token is kept only as its
 * SHA-256 (hex, as every secret: src/auth/secrets.ts `sha256Hex`), single use is the store's binding
 * (`bind` by token hash on the first mdm.Authenticate / TokenUpdate). One live enrolment per identity
 * key: creating one for a key that has one supersedes the old (its token binds no more).
 * `memoryEnrolmentRecords` keeps them in memory: tests, and the app until the store's domain is wired.
 */

export type EnrolmentState = "issued" | "enrolled" | "checked_out";

export interface EnrolmentRecord {
  readonly id: string;
  readonly accountId: string;
  /** The device token the enrolment was made with. */
  readonly providerTokenId: string;
  /** The identity key's canonical 65-byte point, base64. */
  readonly identityKey: string;
  /** SHA-256 (hex) of the single-use enrolment token carried in the profile's URLs (`?e=`). */
  readonly tokenHash: string;
  /** Unix ms. */
  readonly createdAt: number;
  /** The token binds no enrolment after this (Unix ms). */
  readonly tokenExpiresAt: number;
  readonly nanomdmId: string | null;
  readonly serial: string | null;
  readonly state: EnrolmentState;
  readonly updatedAt: number;
}

export type NewEnrolment = Omit<EnrolmentRecord, "nanomdmId" | "serial" | "state" | "updatedAt">;

export interface EnrolmentRecords {
  /** Records a new enrolment in state `issued` (superseding a live one of the same identity key). */
  create(enrolment: NewEnrolment): Promise<EnrolmentRecord>;
  /** The account's enrolments, oldest first. */
  forAccount(accountId: string): Promise<readonly EnrolmentRecord[]>;
  /** When the enrolment's last verified chain was verified (Unix ms); null without one. */
  lastVerifiedAt(enrolmentId: string): Promise<number | null>;
}

/** In-memory records; `verified` marks an enrolment's chain verified (tests stand in for part B's chains). */
export interface MemoryEnrolmentRecords extends EnrolmentRecords {
  readonly all: () => readonly EnrolmentRecord[];
  setState(id: string, state: EnrolmentState, at: number, binding?: { nanomdmId: string; serial: string }): void;
  verified(id: string, at: number): void;
}

export function memoryEnrolmentRecords(): MemoryEnrolmentRecords {
  const records = new Map<string, EnrolmentRecord>();
  const chains = new Map<string, number>();
  return {
    all: () => [...records.values()],
    async create(enrolment) {
      for (const old of records.values()) {
        if (old.identityKey === enrolment.identityKey && old.state !== "checked_out") {
          records.set(old.id, { ...old, state: "checked_out", updatedAt: enrolment.createdAt });
        }
      }
      const record: EnrolmentRecord = { ...enrolment, nanomdmId: null, serial: null, state: "issued", updatedAt: enrolment.createdAt };
      records.set(record.id, record);
      return record;
    },
    async forAccount(accountId) {
      return [...records.values()].filter((r) => r.accountId === accountId);
    },
    async lastVerifiedAt(id) {
      return chains.get(id) ?? null;
    },
    setState(id, state, at, binding) {
      const old = records.get(id);
      if (old) records.set(id, { ...old, state, updatedAt: at, ...(binding ?? {}) });
    },
    verified(id, at) {
      chains.set(id, at);
    },
  };
}
