/**
 * `--identity-helper` without `--dev-attestation`, on a coordinator with MDM enrolment (issue 23): the
 * helper's identity key signs the hello's evidence and the challenge answers with the posture this Mac
 * reads of itself (SIP from `csrutil status`, Secure Boot from `system_profiler SPiBridgeDataType`, the
 * macOS version from `sw_vers`; kexts are possible only below Full Security), and no device chain: the
 * coordinator grants `hardware` from the Mac's stored MDM chain for this key (umbra-provider enroll), and
 * `self_signed` until there is one. A coordinator without MDM enrolment (its enrolment status is 404)
 * refuses the combination at start: there a device chain comes only from `--dev-attestation on`.
 */
import { parseChallenge } from "../../attestation/provider/challenge.ts";
import { FULL_SECURITY, type Posture, type SecureBootLevel } from "../../attestation/provider/posture.ts";
import { ConfigError } from "../config/settings.ts";
import type { Logger } from "../observability/logger.ts";
import { coordinatorBaseOf, type ProviderConfig } from "./config.ts";
import { type Attestation, identityOf, type Pin } from "./dev-attestation.ts";
import { describeEnrolment, fetchEnrolmentStatus } from "./enrolment-status.ts";
import { signChallengeAnswer, signEvidence } from "./identity.ts";

/** Runs a command (argv) and returns its exit code and output. */
export type RunCommand = (argv: readonly string[]) => Promise<{ readonly exitCode: number | null; readonly stdout: string }>;

const LOWER = new Set<string>(["Reduced Security", "Permissive Security"]);

/** This Mac's posture as it reads it (self-reported: the stored chain proves it or the level stays self_signed). */
export async function readPosture(run: RunCommand): Promise<Posture> {
  const [sip, bridge, version] = await Promise.all([
    run(["/usr/bin/csrutil", "status"]),
    run(["/usr/sbin/system_profiler", "-json", "SPiBridgeDataType"]),
    run(["/usr/bin/sw_vers", "-productVersion"]),
  ]);
  const sipLine = /System Integrity Protection status:\s*([^\n]*)/.exec(sip.stdout)?.[1]?.trim() ?? "";
  let level: unknown;
  try {
    level = (JSON.parse(bridge.stdout) as { SPiBridgeDataType?: { ibridge_secure_boot?: unknown }[] }).SPiBridgeDataType?.[0]
      ?.ibridge_secure_boot;
  } catch {
    level = undefined;
  }
  const secureBoot: SecureBootLevel =
    level === FULL_SECURITY ? FULL_SECURITY : LOWER.has(String(level)) ? (level as SecureBootLevel) : "Permissive Security";
  const os = version.stdout.trim();
  return {
    sipEnabled: /^enabled\.?$/.test(sipLine),
    secureBoot,
    thirdPartyKexts: secureBoot !== FULL_SECURITY,
    osVersion: /^\d{1,4}(\.\d{1,4}){0,2}$/.test(os) ? os : "0",
  };
}

/**
 * The attestation for `start`; throws ConfigError when the coordinator offers no MDM enrolment or cannot
 * be asked. `fetchImpl` carries the pinned TLS options when --coordinator-image is given.
 */
export async function mdmAttestation(config: ProviderConfig, logger: Logger, pin: Pin | undefined, run: RunCommand): Promise<Attestation> {
  const base = coordinatorBaseOf(config.connectUrl);
  let tls: Awaited<ReturnType<Pin>>["tls"] | undefined;
  try {
    tls = pin ? (await pin()).tls : undefined;
  } catch (error) {
    throw new ConfigError(`--identity-helper: cannot verify the coordinator: ${(error as Error).message}`);
  }
  let answer: Awaited<ReturnType<typeof fetchEnrolmentStatus>>;
  try {
    answer = await fetchEnrolmentStatus(base, config.token, {
      signal: AbortSignal.timeout(10_000),
      ...(tls ? { fetch: (url: string, init: RequestInit) => fetch(url, { ...init, tls }) } : {}),
    });
  } catch (error) {
    throw new ConfigError(`--identity-helper: cannot ask ${base} for its MDM enrolment (${(error as Error).message})`);
  }
  if (!answer.offered) {
    throw new ConfigError(
      "--identity-helper needs --dev-attestation on, or a coordinator with MDM enrolment (this one has none: umbra-provider enroll is for MDM coordinators)",
    );
  }
  const identity = await identityOf(config);
  const posture = await readPosture(run);
  logger.info("mdm attestation: hardware from the stored chain", { reason: describeEnrolment(answer), status: identity.kind });
  return {
    identity,
    answerChallenge: async (challenge) => signChallengeAnswer(identity, parseChallenge(challenge), posture),
    evidence: (encryptionKey) => signEvidence(identity, encryptionKey, posture),
  };
}
