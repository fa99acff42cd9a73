/**
 * What a stored chain vouches for now (issue 23 point 5): the identity key's live enrolment (enrolled,
 * bound to a serial), its last verified chain (store.mdm.chains), re-checked at this instant through the
 * same verifier the webhook used (part A's verifyMdaAnswer: every input is stored). Never waits on MDM
 * or NanoMDM: the store and the clock only. A chain that fails now (its epoch window, the 21-day leaf age
 * or a certificate's notAfter passed; another seed) vouches for nothing until a fresh one is stored.
 * The proven posture is the only one a passing chain can carry: SIP on, Full Security, no third-party
 * kexts, and the chain's OS version. Trust never depends on the provider binary's hash. A stored chain
 * that failed a check is not verified again (time only moves on): the fleet asks every minute or so.
 */
import type { DeviceChainVouch } from "../../attestation/provider/levels.ts";
import { FULL_SECURITY } from "../../attestation/provider/posture.ts";
import type { Logger } from "../observability/logger.ts";
import type { MdmEnrolment, MdmStore } from "../store/mdm-types.ts";
import { failedCheck, type MdaAnswerVerifier } from "./types.ts";

/** A stored chain that passes now, for one identity key (acceptedUntil: part A's). */
export interface MdmVouch extends DeviceChainVouch {
  readonly enrolmentId: string;
  /** When the chain was verified on arrival (Unix ms). */
  readonly verifiedAt: number;
}

/** Stored chains remembered as refused (bounded: cleared when full). */
const MAX_REFUSED = 10_000;

export class MdmDeviceTrust {
  /** Enrolment id -> the refused stored chain (its hash and verification time). */
  private readonly refused = new Map<string, string>();

  constructor(private readonly deps: { readonly store: MdmStore; readonly verify: MdaAnswerVerifier; readonly logger: Logger }) {}

  /** The vouch of the identity key's stored chain (65-byte point, or its base64), or undefined. Never throws. */
  async vouch(identityKey: Uint8Array | string): Promise<MdmVouch | undefined> {
    const key = typeof identityKey === "string" ? identityKey : Buffer.from(identityKey).toString("base64");
    try {
      const enrolment = await this.deps.store.enrolments.byIdentityKey(key);
      return enrolment === undefined ? undefined : await this.vouchFor(enrolment);
    } catch {
      this.deps.logger.warn("mdm stored chain unreadable", { reason: "store" });
      return undefined;
    }
  }

  /** The vouch of one enrolment's stored chain (enrolled, with a serial), or undefined. */
  async vouchFor(enrolment: MdmEnrolment): Promise<MdmVouch | undefined> {
    if (enrolment.state !== "enrolled" || enrolment.serial === null) return undefined;
    const chain = await this.deps.store.chains.get(enrolment.id);
    if (chain === undefined) return undefined;
    const mark = `${chain.chainSha256}:${chain.verifiedAt}:${enrolment.serial}`;
    if (this.refused.get(enrolment.id) === mark) return undefined;
    try {
      const verified = await this.deps.verify({
        chain: chain.certificates.map((der) => new Uint8Array(Buffer.from(der, "base64"))),
        serialNumber: chain.serial,
        provisioningUdid: chain.udid === "" ? undefined : chain.udid,
        enrolmentSerial: enrolment.serial,
        identityKey: new Uint8Array(Buffer.from(enrolment.identityKey, "base64")),
      });
      const osVersion = verified.claims.osVersion ?? chain.osVersion;
      return {
        source: "mdm",
        enrolmentId: enrolment.id,
        chainSha256: verified.chainSha256,
        verifiedAt: chain.verifiedAt,
        acceptedUntil: verified.acceptedUntil,
        posture: { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion },
      };
    } catch (e) {
      const check = failedCheck(e);
      this.deps.logger.debug("mdm stored chain no longer passes", { check, account_id: enrolment.accountId });
      // A check that failed fails for good; anything else (the trust anchor unavailable) is asked again.
      if (check !== "error") {
        if (this.refused.size >= MAX_REFUSED) this.refused.clear();
        this.refused.set(enrolment.id, mark);
      }
      return undefined;
    }
  }
}
