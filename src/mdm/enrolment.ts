/**
 * Enrolment (issue 23 point 2; docs/api.md "MDM enrolment"): a machine proves it holds its identity key and
 * receives its own MDM profile.
 *   1. challenge: 32 random bytes for one device token, valid 5 minutes, used at most once; at most 4
 *      outstanding per token (the oldest dropped), MAX_CHALLENGES in all; 10 profiles per token per hour.
 *   2. enrol: the challenge (consumed by its first use by its own token, whatever the outcome; another
 *      token's attempt leaves it), the identity key and its signature, ECDSA P-256 SHA-256 over UTF-8
 *      "umbra-enroll-v1" || challenge. Then an enrolment token (32 random bytes, base64url), its record
 *      (SHA-256 hex only), a device identity from the MDM CA, the profile (signed when configured).
 *   3. status: the enrolment of the given identity key in the caller's account, else the latest made with
 *      this token: none | issued | enrolled | attested (a stored chain that passes now); checked out: none.
 * node-forge is loaded on the first enrolment, not at start. Challenges live in this process: in cluster
 * mode both calls must reach one replica (docs/operations.md).
 */
import { createHash, randomBytes } from "node:crypto";
import { type IdentityKey, parseIdentityKey, verifyIdentitySignature } from "../../attestation/provider/identity-key.ts";
import { Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import type { EnrolmentRecords } from "./enrolment-records.ts";

export const ENROL_MESSAGE_TAG = "umbra-enroll-v1";
/** The profile's media type (Apple's, for .mobileconfig). */
export const PROFILE_CONTENT_TYPE = "application/x-apple-aspen-config";
export const CHALLENGE_TTL_MS = 5 * 60_000;
export const ENROLMENT_TOKEN_TTL_MS = 24 * 3_600_000;
const MAX_CHALLENGES_PER_TOKEN = 4;
const MAX_CHALLENGES = 10_000;
/** Profiles one device token may get per hour (each costs an RSA key generation). */
export const MAX_PROFILES_PER_HOUR = 10;
const HOUR_MS = 3_600_000;

/** The MDM enrolment settings (config/mdm-enrol-config.ts reads them). */
export interface MdmEnrolmentConfig {
  /** NanoMDM's public check-in and command URL (https, no query): the profile's ServerURL and CheckInURL. */
  readonly serverUrl: string;
  /** The APNs MDM push topic (com.apple.mgmt.External.<uuid>). */
  readonly topic: string;
  /** The MDM CA certificate (PEM; NanoMDM's `-ca`). */
  readonly caCertificate: string;
  /** The MDM CA's RSA private key (PEM). A secret. */
  readonly caKey: string;
  /** A PKCS#12 identity to sign profiles with (CMS); absent: profiles go unsigned. */
  readonly signingP12?: Uint8Array;
  /** Its password. A secret. */
  readonly signingP12Password?: string;
}

/** Who is asking: the live device token's record. */
export interface EnrolCaller {
  readonly id: string;
  readonly accountId: string;
}

export interface EnrolRequest {
  readonly challenge: Uint8Array;
  readonly identityKey: Uint8Array;
  readonly signature: Uint8Array;
}

export type EnrolmentStatus =
  | { readonly state: "none" }
  | {
      readonly state: "issued" | "enrolled" | "attested";
      readonly enrolment_id: string;
      readonly identity_key: string;
      readonly created_at: number;
      readonly updated_at: number;
      readonly attested_at: number | null;
    };

interface Outstanding {
  readonly tokenId: string;
  readonly expiresAt: number;
}

/** The exact bytes an identity key signs to enrol. */
export function enrolMessage(challenge: Uint8Array): Uint8Array {
  return Buffer.concat([Buffer.from(ENROL_MESSAGE_TAG, "utf8"), challenge]);
}

export class EnrolmentService {
  /** base64 challenge -> its token and expiry, in issue order. */
  private readonly challenges = new Map<string, Outstanding>();
  /** Device token id -> times of its profiles within the last hour. */
  private readonly issued = new Map<string, number[]>();
  private issuer: Promise<(enrolmentId: string, identityKey: Uint8Array, token: string) => Promise<Uint8Array>> | undefined;

  constructor(
    private readonly config: MdmEnrolmentConfig,
    private readonly records: EnrolmentRecords,
    private readonly now: () => number,
    private readonly logger: Logger,
  ) {}

  challenge(caller: EnrolCaller): { challenge: string; expires_at: number } {
    const now = this.now();
    this.sweep(now);
    const mine = [...this.challenges].filter(([, c]) => c.tokenId === caller.id);
    for (const [key] of mine.slice(0, Math.max(0, mine.length - MAX_CHALLENGES_PER_TOKEN + 1))) this.challenges.delete(key);
    if (this.challenges.size >= MAX_CHALLENGES) throw Errors.rateLimited("too many enrolments in progress: try again shortly", 30);
    const challenge = randomBytes(32).toString("base64");
    const expiresAt = now + CHALLENGE_TTL_MS;
    this.challenges.set(challenge, { tokenId: caller.id, expiresAt });
    return { challenge, expires_at: expiresAt };
  }

  /** Checks the proof, records the enrolment and returns the profile's bytes. Throws ApiError (400). */
  async enrol(caller: EnrolCaller, request: EnrolRequest): Promise<Uint8Array> {
    const now = this.now();
    const key = Buffer.from(request.challenge).toString("base64");
    const outstanding = this.challenges.get(key);
    if (outstanding === undefined || outstanding.tokenId !== caller.id || outstanding.expiresAt <= now) {
      if (outstanding !== undefined && outstanding.expiresAt <= now) this.challenges.delete(key);
      throw Errors.invalidValue("the challenge is unknown, expired or already used: ask for a new one", "challenge");
    }
    this.challenges.delete(key);
    let identityKey: IdentityKey;
    try {
      identityKey = parseIdentityKey(request.identityKey);
    } catch {
      throw Errors.invalidValue("'identity_key' must be a P-256 public key (65-byte uncompressed point, base64)", "identity_key");
    }
    try {
      verifyIdentitySignature(identityKey, enrolMessage(request.challenge), request.signature, "the enrolment");
    } catch {
      throw Errors.invalidValue("the signature does not verify with the identity key over the challenge", "signature");
    }
    const recent = (this.issued.get(caller.id) ?? []).filter((at) => at > now - HOUR_MS);
    if (recent.length >= MAX_PROFILES_PER_HOUR) {
      throw Errors.rateLimited(
        `at most ${MAX_PROFILES_PER_HOUR} enrolment profiles per hour per device token`,
        Math.ceil(((recent[0] ?? now) + HOUR_MS - now) / 1000),
      );
    }
    this.issued.set(caller.id, [...recent, now]);
    const token = randomBytes(32).toString("base64url");
    const id = `enr_${randomBytes(12).toString("base64url").replaceAll("-", "x").replaceAll("_", "y")}`;
    const issue = await this.profileIssuer();
    const profile = await issue(id, identityKey.point, token);
    await this.records.create({
      id,
      accountId: caller.accountId,
      providerTokenId: caller.id,
      identityKey: Buffer.from(identityKey.point).toString("base64"),
      tokenHash: createHash("sha256").update(token).digest("hex"),
      createdAt: now,
      tokenExpiresAt: now + ENROLMENT_TOKEN_TTL_MS,
    });
    this.logger.info("mdm enrolment profile issued", { account_id: caller.accountId });
    return profile;
  }

  /** The enrolment state the caller may read (its own account's only). */
  async status(caller: EnrolCaller, identityKey?: Uint8Array): Promise<EnrolmentStatus> {
    const mine = await this.records.forAccount(caller.accountId);
    const wanted = identityKey === undefined ? undefined : Buffer.from(identityKey).toString("base64");
    const live = mine.filter((r) => r.state !== "checked_out");
    const record = (
      wanted === undefined ? live.filter((r) => r.providerTokenId === caller.id) : live.filter((r) => r.identityKey === wanted)
    )
      .sort((a, b) => a.createdAt - b.createdAt)
      .at(-1);
    if (record === undefined) return { state: "none" };
    const attestedAt = record.state === "enrolled" ? await this.records.attestedAt(record) : null;
    return {
      state: attestedAt !== null ? "attested" : record.state === "enrolled" ? "enrolled" : "issued",
      enrolment_id: record.id,
      identity_key: record.identityKey,
      created_at: record.createdAt,
      updated_at: record.updatedAt,
      attested_at: attestedAt,
    };
  }

  private sweep(now: number): void {
    for (const [key, c] of this.challenges) if (c.expiresAt <= now) this.challenges.delete(key);
    for (const [id, times] of this.issued) if ((times.at(-1) ?? 0) <= now - HOUR_MS) this.issued.delete(id);
  }

  /** Loads node-forge and the CA once (the first enrolment); a CA or signing identity that fails is logged and retried. */
  private profileIssuer() {
    this.issuer ??= (async () => {
      const [{ loadMdmCa, issueDeviceIdentity }, { buildProfile, openSigningIdentity, signProfile }] = await Promise.all([
        import("./device-identity.ts"),
        import("./profile.ts"),
      ]);
      const ca = loadMdmCa(this.config.caCertificate, this.config.caKey);
      const { signingP12, signingP12Password } = this.config;
      const signer = signingP12 === undefined ? undefined : openSigningIdentity(signingP12, signingP12Password ?? "");
      return async (enrolmentId: string, identityKey: Uint8Array, token: string) => {
        const identity = await issueDeviceIdentity(ca, enrolmentId, this.now());
        const xml = buildProfile({ identityKey, identity, token, serverUrl: this.config.serverUrl, topic: this.config.topic });
        return signer === undefined ? xml : signProfile(xml, signer, this.now());
      };
    })();
    return this.issuer.catch((error: unknown) => {
      this.issuer = undefined;
      this.logger.error("mdm enrolment unavailable", { reason: error instanceof Error ? error.message : "unknown" });
      throw Errors.serviceUnavailable(
        "MDM enrolment is misconfigured on this coordinator: its operator must fix the MDM CA or signing identity",
      );
    });
  }
}
