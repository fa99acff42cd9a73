/**
 * Admitting a provider session: its hello, then evidence, session keys and welcome.
 *
 * A hello must offer protocol version 2 (one offering only version 1 is refused with 4002,
 * RETIRED_V1_REASON) and, where sealed sessions are required, an encryption key. Its evidence is then
 * verified (asynchronously) and earns a trust level; `none` is refused with 4003 where untrusted
 * providers are. A sealed hello offering `session_keys` gets one HPKE setup for the connection. An
 * attested provider's challenge schedule starts. The welcome names hello models that are not catalog
 * builds (`model_warnings`): they get no requests. A session that ends meanwhile stops admission.
 */
import type { ChallengeSession } from "../../attestation/provider/challenge.ts";
import type { ProviderAttestation } from "../../attestation/provider/levels.ts";
import { fromBase64url, toBase64url } from "../crypto/encoding.ts";
import { openSenderSession, type SessionSealer } from "../crypto/session.ts";
import type { Logger } from "../observability/logger.ts";
import { CLOSE, encode, type Hello, type ModelWarning, PROTOCOL_VERSION, RETIRED_V1_REASON } from "../protocol/frames.ts";
import { ProtocolError } from "../protocol/parse.ts";

export interface AdmissionSettings {
  readonly heartbeatIntervalMs: number;
  readonly livenessTimeoutMs: number;
  /** Refuse plaintext sessions (production): every request must be sealed to the provider's key. */
  readonly requireSealed: boolean;
  /**
   * Refuse sessions whose evidence earned trust level `none` (production): closed with 4003 before
   * `welcome`, never admitted (self-route applies the routing floor too, so no path would use them).
   */
  readonly refuseUntrusted: boolean;
  /** The hello's model ids that are not catalog builds (welcome.model_warnings); never throws. */
  readonly modelWarnings: (buildIds: readonly string[]) => Promise<readonly ModelWarning[]>;
  /** Verifies a hello's evidence against its encryption key; never throws (failures earn `none`). */
  readonly assess: (evidence: unknown, encryptionKey: Uint8Array | undefined) => Promise<ProviderAttestation>;
  /** Starts the challenge schedule of an attested provider (the trust policy's interval and timeout). */
  readonly challenge: (attestation: ProviderAttestation) => Promise<ChallengeSession | undefined>;
}

/** A session end decided during admission. */
export interface Refusal {
  readonly code: number;
  readonly reason: string;
}

/** A welcomed session: what it earned, how to seal to it, and the welcome frame to send. */
export interface Welcome {
  readonly attestation: ProviderAttestation;
  readonly challenges: ChallengeSession | undefined;
  /** Sealed sessions whose hello offered `session_keys`: seals each request under the session's keys. */
  readonly sessionSealer: SessionSealer | undefined;
  readonly modelWarnings: readonly ModelWarning[];
  /** The `welcome` frame, encoded. */
  readonly frame: string;
}

/** The session being admitted. */
export interface Applicant {
  readonly id: string;
  /** False once the session ended: admission stops at its next step. */
  readonly waiting: () => boolean;
}

/**
 * Checks a hello before its evidence: a refusal for an unsupported protocol version, else the
 * hello's encryption key (undefined for a plaintext session).
 * @throws ProtocolError for a plaintext hello where sealed sessions are required.
 * @throws InvalidInputError for an encryption key that is not base64url.
 */
export function checkHello(hello: Hello, settings: AdmissionSettings): Refusal | { readonly encryptionKey: Uint8Array | undefined } {
  if (!hello.protocol_versions.includes(PROTOCOL_VERSION)) {
    const reason = hello.protocol_versions.includes(1)
      ? RETIRED_V1_REASON
      : `no supported protocol version (coordinator speaks ${PROTOCOL_VERSION})`;
    return { code: CLOSE.version, reason };
  }
  if (hello.encryption_key === undefined && settings.requireSealed) {
    throw new ProtocolError("this coordinator requires sealed sessions: hello needs an encryption_key");
  }
  return { encryptionKey: hello.encryption_key === undefined ? undefined : fromBase64url(hello.encryption_key, "encryption_key") };
}

/**
 * Verifies the hello's evidence and prepares the welcome at the level it earned. Undefined when the
 * session ended meanwhile; never throws.
 */
export async function admit(
  hello: Hello,
  encryptionKey: Uint8Array | undefined,
  applicant: Applicant,
  settings: AdmissionSettings,
): Promise<Welcome | Refusal | undefined> {
  const attestation = await settings.assess(hello.evidence, encryptionKey);
  if (!applicant.waiting()) return undefined;
  if (attestation.level === "none" && settings.refuseUntrusted) {
    const why = attestation.failure ? `evidence refused (${attestation.failure.check})` : "no attestation evidence";
    return { code: CLOSE.untrusted, reason: `this coordinator admits attested providers only: ${why}` };
  }
  let sessionSealer: SessionSealer | undefined;
  let sessionEnc: Uint8Array | undefined;
  if (encryptionKey !== undefined && hello.session_keys === true) {
    try {
      const session = await openSenderSession(encryptionKey, { protocolVersion: PROTOCOL_VERSION, providerId: applicant.id });
      sessionEnc = session.enc;
      sessionSealer = session.sealer;
    } catch {
      return { code: CLOSE.protocolError, reason: "encryption_key rejected" };
    }
    if (!applicant.waiting()) return undefined;
  }
  const challenges = attestation.level === "none" ? undefined : await settings.challenge(attestation);
  if (!applicant.waiting()) return undefined;
  // Aliases and unknown ids stay in `models` but are never asked for (routing is by build): say so.
  const modelWarnings = await settings.modelWarnings(hello.models.map((m) => m.build_id));
  const frame = encode({
    type: "welcome",
    protocol_version: PROTOCOL_VERSION,
    provider_id: applicant.id,
    trust_level: attestation.level,
    heartbeat_interval_ms: settings.heartbeatIntervalMs,
    liveness_timeout_ms: settings.livenessTimeoutMs,
    batch_frames: true,
    ...(hello.binary_frames === true ? { binary_frames: true } : {}),
    ...(sessionEnc !== undefined ? { session_enc: toBase64url(sessionEnc) } : {}),
    ...(modelWarnings.length > 0 ? { model_warnings: modelWarnings } : {}),
  });
  return { attestation, challenges, sessionSealer, modelWarnings, frame };
}

/** Logs a welcome: each model warning, then the connection. */
export function logWelcome(
  logger: Logger,
  session: { readonly id: string; readonly accountId: string; readonly models: number },
  welcome: Welcome,
): void {
  for (const w of welcome.modelWarnings) {
    logger.warn("provider serves a model that is not a catalog build", {
      provider_id: session.id,
      model: w.model,
      reason: w.reason,
      ...(w.build_id !== undefined ? { build_id: w.build_id } : {}),
    });
  }
  logger.info("provider connected", {
    provider_id: session.id,
    account_id: session.accountId,
    count: session.models,
    status: welcome.attestation.level,
  });
}
