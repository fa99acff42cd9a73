import { describe, expect, test } from "bun:test";
import { p256 } from "@noble/curves/nist.js";
import {
  AttestationError,
  answerChallenge,
  buildEvidence,
  type Challenge,
  ChallengeSession,
  challengeFields,
  encodeBase64,
  type Posture,
  parseChallenge,
  parseIdentityKey,
  SoftwareIdentity,
  verifyChallengeResponse,
} from "../../../attestation/provider/index.ts";

const T0 = Date.parse("2026-11-21T12:00:00Z");
const INTERVAL = 300_000;
const TIMEOUT = 30_000;
const POSTURE: Posture = { sipEnabled: true, secureBoot: "Full Security", thirdPartyKexts: false, osVersion: "15.1" };

/** A session with a hand-driven clock and counting nonces. */
function setup(keyForm: 64 | 65 = 65) {
  const clock = { t: T0 };
  const identity = SoftwareIdentity.generate();
  let counter = 0;
  const session = new ChallengeSession({
    identityKey: parseIdentityKey(identity.publicKey(keyForm)),
    posture: POSTURE,
    now: () => clock.t,
    intervalMs: INTERVAL,
    timeoutMs: TIMEOUT,
    randomBytes: (n) => new Uint8Array(n).fill(++counter),
  });
  /** Advances to the next challenge and returns it. */
  const next = (): Challenge => {
    clock.t += INTERVAL;
    const c = session.poll();
    if (!c) throw new Error("no challenge was due");
    return c;
  };
  return { clock, identity, session, next };
}

function failedCheck(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    if (e instanceof AttestationError) return e.check;
    throw e;
  }
  return "no error";
}

describe("ChallengeSession", () => {
  test("issues on the interval, accepts a right answer, and schedules the next one", () => {
    const { clock, identity, session } = setup();
    clock.t += INTERVAL - 1;
    expect(session.poll()).toBeUndefined();
    clock.t += 1;
    const first = session.poll()!;
    expect(challengeFields(first)).toEqual({ nonce: encodeBase64(new Uint8Array(32).fill(1)), timestamp: T0 + INTERVAL });
    expect(session.poll()).toBeUndefined(); // one outstanding at a time
    clock.t += 1000;
    session.answer({ type: "challenge_response", ...answerChallenge(identity, first, POSTURE).wire });
    expect([session.trusted, session.pending]).toEqual([true, undefined]);
    clock.t = first.timestamp + INTERVAL - 1;
    expect(session.poll()).toBeUndefined();
    clock.t += 1;
    expect(session.poll()?.nonce).toEqual(new Uint8Array(32).fill(2));
  });

  test.each([64, 65] as const)("works with a %d-byte identity key", (form) => {
    const { identity, session, next } = setup(form);
    session.answer(answerChallenge(identity, next(), POSTURE).wire);
    expect(session.trusted).toBe(true);
  });

  test("an answer exactly at the deadline is accepted", () => {
    const { clock, identity, session, next } = setup();
    const c = next();
    clock.t += TIMEOUT;
    session.answer(answerChallenge(identity, c, POSTURE).wire);
    expect(session.trusted).toBe(true);
  });

  test("a late answer untrusts at once", () => {
    const { clock, identity, session, next } = setup();
    const c = next();
    clock.t += TIMEOUT + 1;
    expect(failedCheck(() => session.answer(answerChallenge(identity, c, POSTURE).wire))).toBe("challenge_late");
    expect([session.trusted, session.failure?.check]).toEqual([false, "challenge_late"]);
  });

  test("a missing answer untrusts when the deadline passes", () => {
    const { clock, session, next } = setup();
    next();
    clock.t += TIMEOUT;
    expect([session.poll(), session.trusted]).toEqual([undefined, true]);
    clock.t += 1;
    expect([session.poll(), session.trusted, session.failure?.check]).toEqual([undefined, false, "challenge_missing"]);
  });

  test("a replayed answer (same answer twice) untrusts", () => {
    const { identity, session, next } = setup();
    const answer = answerChallenge(identity, next(), POSTURE).wire;
    session.answer(answer);
    expect(failedCheck(() => session.answer(answer))).toBe("challenge_nonce");
    expect(session.trusted).toBe(false);
  });

  test("an old answer replayed against a new challenge untrusts", () => {
    const { identity, session, next } = setup();
    const old = answerChallenge(identity, next(), POSTURE).wire;
    session.answer(old);
    next();
    expect(failedCheck(() => session.answer(old))).toBe("challenge_nonce");
    expect(session.trusted).toBe(false);
  });

  test("an unsolicited answer untrusts", () => {
    const { identity, session } = setup();
    const made: Challenge = { nonce: new Uint8Array(32), timestamp: T0 };
    expect(failedCheck(() => session.answer(answerChallenge(identity, made, POSTURE).wire))).toBe("challenge_nonce");
    expect(session.trusted).toBe(false);
  });

  test("an answer by another key untrusts", () => {
    const { session, next } = setup();
    expect(failedCheck(() => session.answer(answerChallenge(SoftwareIdentity.generate(), next(), POSTURE).wire))).toBe("signature");
    expect(session.trusted).toBe(false);
  });

  test.each([
    ["SIP turned off", { sipEnabled: false }],
    ["Secure Boot lowered", { secureBoot: "Reduced Security" }],
    ["kexts allowed", { thirdPartyKexts: true }],
    ["an OS update", { osVersion: "15.2" }],
  ] as const)("a posture change untrusts: %s", (_, change) => {
    const { identity, session, next } = setup();
    expect(failedCheck(() => session.answer(answerChallenge(identity, next(), { ...POSTURE, ...change }).wire))).toBe("challenge_posture");
    expect(session.trusted).toBe(false);
  });

  test("a malformed frame untrusts", () => {
    const { session, next } = setup();
    next();
    expect(failedCheck(() => session.answer({ payload: "not base64!", signature: "" }))).toBe("challenge_format");
    expect(session.trusted).toBe(false);
  });

  test("once untrusted, the session stays untrusted and issues nothing", () => {
    const { clock, identity, session, next } = setup();
    const c = next();
    clock.t += TIMEOUT + 1;
    session.poll();
    expect(failedCheck(() => session.answer(answerChallenge(identity, c, POSTURE).wire))).toBe("challenge_missing");
    clock.t += 10 * INTERVAL;
    expect([session.poll(), session.trusted]).toEqual([undefined, false]);
  });

  test("a timeout not shorter than the interval is refused", () => {
    const identityKey = parseIdentityKey(SoftwareIdentity.generate().publicKey());
    expect(() => new ChallengeSession({ identityKey, posture: POSTURE, now: () => 0, intervalMs: 1000, timeoutMs: 1000 })).toThrow(
      RangeError,
    );
  });
});

describe("verifyChallengeResponse", () => {
  const identity = SoftwareIdentity.generate();
  const challenge: Challenge = { nonce: new Uint8Array(32).fill(9), timestamp: T0 };
  const check = {
    challenge,
    identityKey: parseIdentityKey(identity.publicKey()),
    posture: POSTURE,
    now: () => T0 + 1000,
    timeoutMs: TIMEOUT,
  };

  test("a flipped bit in the payload fails the signature", () => {
    const { payload, signature } = answerChallenge(identity, challenge, POSTURE);
    const at = new TextDecoder().decode(payload).indexOf('"os_version":"15.1"') + '"os_version":"15.'.length;
    const tampered = Uint8Array.from(payload);
    tampered[at]! ^= 0x01;
    expect(failedCheck(() => verifyChallengeResponse({ payload: tampered, signature }, check))).toBe("signature");
  });

  test("a truncated payload fails", () => {
    const { payload, signature } = answerChallenge(identity, challenge, POSTURE);
    expect(failedCheck(() => verifyChallengeResponse({ payload: payload.subarray(0, -1), signature }, check))).toBe("challenge_format");
  });

  test("a truncated signature fails", () => {
    const { payload, signature } = answerChallenge(identity, challenge, POSTURE);
    expect(failedCheck(() => verifyChallengeResponse({ payload, signature: signature.subarray(0, -2) }, check))).toBe("signature");
  });

  test("a high-S answer is accepted", () => {
    const { payload, signature } = answerChallenge(identity, challenge, POSTURE);
    const sig = p256.Signature.fromBytes(signature, "der");
    const high = new p256.Signature(sig.r, p256.Point.CURVE().n - sig.s).toBytes("der");
    expect(failedCheck(() => verifyChallengeResponse({ payload, signature: high }, check))).toBe("no error");
  });

  test("an answer echoing another timestamp fails", () => {
    const { payload, signature } = answerChallenge(identity, { ...challenge, timestamp: T0 - 1 }, POSTURE);
    expect(failedCheck(() => verifyChallengeResponse({ payload, signature }, check))).toBe("challenge_nonce");
  });

  test("evidence signed by the same key is not an answer", () => {
    const { payload, signature } = buildEvidence({ identity, encryptionKey: new Uint8Array(32), posture: POSTURE, timestamp: T0 });
    expect(failedCheck(() => verifyChallengeResponse({ payload, signature }, check))).toBe("challenge_format");
  });
});

describe("challenge frame", () => {
  test("round-trips through its JSON fields", () => {
    const c: Challenge = { nonce: new Uint8Array(32).fill(3), timestamp: T0 };
    expect(parseChallenge(JSON.parse(JSON.stringify(challengeFields(c))))).toEqual(c);
  });

  test.each([
    ["a short nonce", { nonce: encodeBase64(new Uint8Array(31)), timestamp: T0 }],
    ["a fractional timestamp", { nonce: encodeBase64(new Uint8Array(32)), timestamp: 1.5 }],
    ["no nonce", { timestamp: T0 }],
  ])("refuses %s", (_, frame) => {
    expect(failedCheck(() => parseChallenge(frame))).toBe("challenge_format");
  });
});
