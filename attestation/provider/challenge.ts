/**
 * Challenge-response: proof, every few minutes, that the key which signed the evidence is still
 * present and the posture unchanged. Any failure untrusts the provider at once.
 *
 * Wire format (protocol frames; the coordinator adds `type`):
 *   C->P challenge:          { "nonce": base64 of 32 random bytes, "timestamp": integer ms since epoch }
 *   P->C challenge_response: { "payload": base64 of the exact signed JSON bytes,
 *                              "signature": base64 DER ECDSA P-256 over SHA-256(payload) by the identity key }
 * Signed payload (UTF-8 JSON, exactly these fields, no repeated keys):
 *   { "kind": "umbra.challenge-response", "version": 1,
 *     "nonce": the challenge's nonce (same base64), "timestamp": the challenge's timestamp (echoed),
 *     "posture": current posture (posture.ts) }
 * The kind tag keeps evidence and answers apart: one can never be replayed as the other.
 *
 * verifyChallengeResponse (pure), in order: size and JSON (challenge_format), signature, nonce and
 * timestamp equal to the outstanding challenge (challenge_nonce: replayed, stale or foreign),
 * deadline (challenge_late), posture identical to the accepted one (challenge_posture).
 *
 * ChallengeSession (one per provider connection, injected clock and randomness) keeps the one
 * outstanding challenge: poll() issues the next challenge when the interval has passed and untrusts a
 * provider whose answer is overdue (challenge_missing); answer() consumes the challenge whatever the
 * outcome, so a replayed answer finds no challenge and fails. Once untrusted, a session stays
 * untrusted: trust returns only through fresh evidence on a new connection.
 */
import { bytesEqual, decodeBase64, encodeBase64, objectOf, onlyFields, parseSignedJson } from "./encoding.ts";
import { AttestationError, ensure } from "./errors.ts";
import { type IdentityKey, verifyIdentitySignature } from "./identity-key.ts";
import { type Posture, parsePosture, samePosture } from "./posture.ts";

export const CHALLENGE_RESPONSE_KIND = "umbra.challenge-response";
export const CHALLENGE_VERSION = 1;
export const NONCE_BYTES = 32;
export const DEFAULT_CHALLENGE_INTERVAL_MS = 5 * 60 * 1000;
export const DEFAULT_CHALLENGE_TIMEOUT_MS = 30 * 1000;
const MAX_ANSWER_BYTES = 4 * 1024;
const FIELDS = ["kind", "version", "nonce", "timestamp", "posture"] as const;

export interface Challenge {
  readonly nonce: Uint8Array;
  /** When the coordinator issued it, ms since the Unix epoch. */
  readonly timestamp: number;
}

export interface ChallengeAnswer {
  readonly payload: Uint8Array;
  readonly signature: Uint8Array;
}

/** The JSON fields of a challenge frame. */
export function challengeFields(c: Challenge): { nonce: string; timestamp: number } {
  return { nonce: encodeBase64(c.nonce), timestamp: c.timestamp };
}

/** Reads a challenge frame's fields (provider side). Throws AttestationError("challenge_format"). */
export function parseChallenge(value: unknown): Challenge {
  const o = objectOf(value, "challenge_format", "challenge");
  const nonce = decodeBase64(o.nonce, "challenge_format", "challenge.nonce");
  ensure(nonce.length === NONCE_BYTES, "challenge_format", `challenge.nonce is not ${NONCE_BYTES} bytes`);
  ensure(typeof o.timestamp === "number" && Number.isSafeInteger(o.timestamp), "challenge_format", "challenge.timestamp is not an integer");
  return { nonce, timestamp: o.timestamp };
}

/** Reads a challenge_response frame's fields. Throws AttestationError("challenge_format"). */
export function parseChallengeAnswer(value: unknown): ChallengeAnswer {
  const o = objectOf(value, "challenge_format", "challenge_response");
  onlyFields(o, ["type", "payload", "signature"], "challenge_format", "challenge_response");
  return {
    payload: decodeBase64(o.payload, "challenge_format", "challenge_response.payload"),
    signature: decodeBase64(o.signature, "challenge_format", "challenge_response.signature"),
  };
}

export interface ChallengeCheck {
  readonly challenge: Challenge;
  readonly identityKey: IdentityKey;
  /** The posture accepted with the evidence. */
  readonly posture: Posture;
  readonly now: () => number;
  /** How long after the challenge's timestamp an answer is accepted. */
  readonly timeoutMs: number;
}

/**
 * Verifies an answer to `check.challenge`. Throws AttestationError with check challenge_format,
 * signature, challenge_nonce, challenge_late or challenge_posture.
 */
export function verifyChallengeResponse(answer: ChallengeAnswer, check: ChallengeCheck): void {
  ensure(answer.payload.length <= MAX_ANSWER_BYTES, "challenge_format", "answer payload is too large");
  const o = parseSignedJson(answer.payload, "challenge_format");
  onlyFields(o, FIELDS, "challenge_format", "answer");
  ensure(o.kind === CHALLENGE_RESPONSE_KIND, "challenge_format", `answer kind is not ${CHALLENGE_RESPONSE_KIND}`);
  ensure(o.version === CHALLENGE_VERSION, "challenge_format", `unsupported answer version ${String(o.version)}`);
  verifyIdentitySignature(check.identityKey, answer.payload, answer.signature, "challenge answer");

  const nonce = decodeBase64(o.nonce, "challenge_format", "answer.nonce");
  ensure(bytesEqual(nonce, check.challenge.nonce), "challenge_nonce", "the answer is not for the outstanding challenge");
  ensure(o.timestamp === check.challenge.timestamp, "challenge_nonce", "the answer echoes another challenge's timestamp");
  const elapsed = check.now() - check.challenge.timestamp;
  ensure(elapsed <= check.timeoutMs, "challenge_late", `answered after ${elapsed} ms, the limit is ${check.timeoutMs} ms`);

  const posture = parsePosture(o.posture, "challenge_format");
  ensure(samePosture(posture, check.posture), "challenge_posture", "the posture changed since the evidence was verified");
}

export interface ChallengeSessionOptions {
  readonly identityKey: IdentityKey;
  readonly posture: Posture;
  readonly now: () => number;
  readonly intervalMs?: number;
  readonly timeoutMs?: number;
  /** Source of nonces; WebCrypto by default. */
  readonly randomBytes?: (n: number) => Uint8Array;
}

export class ChallengeSession {
  readonly intervalMs: number;
  readonly timeoutMs: number;
  private outstanding: Challenge | undefined;
  private nextAt: number;
  private failed: AttestationError | undefined;

  constructor(private readonly options: ChallengeSessionOptions) {
    this.intervalMs = options.intervalMs ?? DEFAULT_CHALLENGE_INTERVAL_MS;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_CHALLENGE_TIMEOUT_MS;
    if (!(this.intervalMs > 0 && this.timeoutMs > 0 && this.timeoutMs < this.intervalMs)) {
      throw new RangeError("challenge timeout must be positive and shorter than the interval");
    }
    this.nextAt = options.now() + this.intervalMs;
  }

  get trusted(): boolean {
    return this.failed === undefined;
  }

  /** Why the session lost trust, if it did. */
  get failure(): AttestationError | undefined {
    return this.failed;
  }

  /** The challenge awaiting an answer, if any. */
  get pending(): Challenge | undefined {
    return this.outstanding;
  }

  /**
   * Advances the session to now: untrusts it when the outstanding answer is overdue, and returns a new
   * challenge to send when one is due. Returns undefined when there is nothing to send.
   */
  poll(): Challenge | undefined {
    if (this.failed) return undefined;
    const now = this.options.now();
    if (this.outstanding) {
      if (now - this.outstanding.timestamp > this.timeoutMs) {
        this.untrust(new AttestationError("challenge_missing", `no answer within ${this.timeoutMs} ms`));
      }
      return undefined;
    }
    if (now < this.nextAt) return undefined;
    const random = this.options.randomBytes ?? ((n: number) => crypto.getRandomValues(new Uint8Array(n)));
    const nonce = random(NONCE_BYTES);
    if (nonce.length !== NONCE_BYTES) throw new RangeError(`randomBytes returned ${nonce.length} bytes`);
    this.outstanding = { nonce: Uint8Array.from(nonce), timestamp: now };
    return this.outstanding;
  }

  /**
   * Checks a challenge_response frame (its decoded JSON object). Throws AttestationError, after which
   * the session is untrusted; on success schedules the next challenge one interval after this one.
   */
  answer(frame: unknown): void {
    if (this.failed) throw this.failed;
    const challenge = this.outstanding;
    this.outstanding = undefined;
    try {
      if (!challenge) throw new AttestationError("challenge_nonce", "no challenge is outstanding (replayed or unsolicited answer)");
      verifyChallengeResponse(parseChallengeAnswer(frame), {
        challenge,
        identityKey: this.options.identityKey,
        posture: this.options.posture,
        now: this.options.now,
        timeoutMs: this.timeoutMs,
      });
    } catch (e) {
      this.untrust(e instanceof AttestationError ? e : new AttestationError("challenge_format", "the answer could not be checked"));
      throw e;
    }
    this.nextAt = challenge.timestamp + this.intervalMs;
  }

  private untrust(error: AttestationError): void {
    this.failed ??= error;
    this.outstanding = undefined;
  }
}
