/**
 * A session's trust after welcome: the level its evidence earned (admission.ts), kept only while the
 * provider answers its challenges. A wrong, late or missing answer withdraws it at once: level `none`
 * with the failure recorded (withdrawTrust), no more challenges; the session stays connected, below any
 * production floor. Before welcome the level is `none` and there is no attestation.
 */
import { type Challenge, type ChallengeSession, challengeFields } from "../../attestation/provider/challenge.ts";
import { AttestationError } from "../../attestation/provider/errors.ts";
import type { TrustLevel } from "../../attestation/provider/levels.ts";
import { type ProviderAttestation, withdrawTrust } from "../../attestation/provider/levels.ts";
import { type ChallengeResponse, encode } from "../protocol/frames.ts";
import { ProtocolError } from "../protocol/parse.ts";

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

  /** Withdraws trust; the error when the level moved (undefined when it was `none` already). */
  private withdraw(error: AttestationError): AttestationError | undefined {
    if (!this.current || this.current.level === "none") return undefined;
    this.current = withdrawTrust(this.current, error);
    this.challenges = undefined;
    return error;
  }
}
