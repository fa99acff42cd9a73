/**
 * A session's trust after welcome: the level its evidence earned (admission.ts), kept only while the
 * provider answers its challenges. A wrong, late or missing answer withdraws it at once: level `none`
 * with the failure recorded (withdrawTrust), no more challenges; the session stays connected, below any
 * production floor. Before welcome the level is `none` and there is no attestation.
 * A stored MDM chain (DeviceChainVouch) raises a self_signed session to hardware while it passes: at
 * welcome (the fleet's assess) or later, when a fresh chain is stored; its `acceptedUntil` passing brings
 * the session back to self_signed. A withdrawn session is never raised again.
 */
import { type Challenge, type ChallengeSession, challengeFields } from "../../attestation/provider/challenge.ts";
import { AttestationError } from "../../attestation/provider/errors.ts";
import {
  type DeviceChainVouch,
  type ProviderAttestation,
  type TrustLevel,
  unvouchedAttestation,
  vouchedAttestation,
  withdrawTrust,
} from "../../attestation/provider/levels.ts";
import { type ChallengeResponse, encode } from "../protocol/frames.ts";
import { ProtocolError } from "../protocol/parse.ts";

/** Stored device chains (MDM mode: src/mdm/device-trust.ts and the attestation scheduler, wired by the app). */
export interface DeviceTrustSource {
  /** The stored chain passing now for this identity key (65-byte point), or undefined. Never throws. */
  vouch(identityKey: Uint8Array): Promise<DeviceChainVouch | undefined>;
  /** An attested session with this identity key was welcomed / ended. */
  connected(identityKey: Uint8Array): void;
  disconnected(identityKey: Uint8Array): void;
  /** How often self_signed sessions are re-vouched (a chain stored through another replica). */
  readonly revouchMs: number;
}

export class SessionTrust {
  private current: ProviderAttestation | undefined;
  private challenges: ChallengeSession | undefined;

  get level(): TrustLevel {
    return this.current?.level ?? "none";
  }

  /** What the hello's evidence proved (undefined before welcome). */
  get attestation(): ProviderAttestation | undefined {
    return this.current;
  }

  /** At welcome: what the evidence earned, and the challenge schedule of an attested provider. */
  earned(attestation: ProviderAttestation, challenges: ChallengeSession | undefined): void {
    this.current = attestation;
    this.challenges = challenges;
  }

  /**
   * Checks a challenge answer; returns the failure when it withdrew trust.
   * @throws ProtocolError when no challenge schedule runs.
   */
  answer(frame: ChallengeResponse): AttestationError | undefined {
    if (!this.challenges) throw new ProtocolError("challenge_response without a challenge");
    try {
      this.challenges.answer(frame);
      return undefined;
    } catch (e) {
      return this.withdraw(e instanceof AttestationError ? e : new AttestationError("challenge_format", "the answer could not be checked"));
    }
  }

  /** The sweep's duty: a challenge now due (its frame), or the failure of an overdue answer. */
  poll(): { readonly due?: string; readonly withdrawn?: AttestationError } {
    const c = this.challenges;
    if (!c) return {};
    const due: Challenge | undefined = c.poll();
    if (!c.trusted && c.failure) {
      const withdrawn = this.withdraw(c.failure);
      return withdrawn ? { withdrawn } : {};
    }
    return due ? { due: encode({ type: "challenge", ...challengeFields(due) }) } : {};
  }

  /**
   * The stored chain now vouching for the identity key (undefined: none): raises or lowers a session
   * that earned self_signed or better. True when the level or the vouching chain changed.
   */
  vouch(vouch: DeviceChainVouch | undefined, now: number): boolean {
    const current = this.current;
    if (!current || current.level === "none") return false;
    const next = vouch && vouch.acceptedUntil >= now ? vouchedAttestation(current, vouch) : unvouchedAttestation(current);
    this.current = next;
    return next.level !== current.level || next.deviceChain?.chainSha256 !== current.deviceChain?.chainSha256;
  }

  /** Back to self_signed when the vouching chain's acceptedUntil has passed; true when it did. */
  expire(now: number): boolean {
    const chain = this.current?.deviceChain;
    if (!this.current || chain === undefined || chain.acceptedUntil >= now) return false;
    this.current = unvouchedAttestation(this.current);
    return true;
  }

  /** Withdraws trust; the error when the level moved (undefined when it was `none` already). */
  private withdraw(error: AttestationError): AttestationError | undefined {
    if (!this.current || this.current.level === "none") return undefined;
    this.current = withdrawTrust(this.current, error);
    this.challenges = undefined;
    return error;
  }
}
