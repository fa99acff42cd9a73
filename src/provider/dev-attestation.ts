/**
 * `--dev-attestation on`: a software identity key (or the --identity-helper's) and a device chain from the
 * development coordinator's root (POST /v1/provider/dev-chain with the device token), so this provider
 * earns `hardware` there through the same verification as a Mac. A production coordinator answers 404 and
 * the start fails. With --coordinator-image the token goes only to a coordinator whose attestation passed.
 */
// The modules themselves, not attestation/provider/index.ts: its verification side brings @peculiar/x509,
// which a provider never needs (test/unit/provider/modules.test.ts).
import { parseChallenge } from "../../attestation/provider/challenge.ts";
import { FULL_SECURITY, postureJson } from "../../attestation/provider/posture.ts";
import { SoftwareIdentity } from "../../attestation/provider/software-identity.ts";
import { ConfigError } from "../config/settings.ts";
import type { Logger } from "../observability/logger.ts";
import { coordinatorBaseOf, type ProviderConfig } from "./config.ts";
import { CoordinatorRefused, type PinnedCoordinator, type PinnedTls } from "./coordinator-pin.ts";
import { helperIdentity, type ProviderIdentity, signChallengeAnswer, signEvidence, softwareIdentity } from "./identity.ts";

/** Verifies the coordinator's attestation and returns TLS options pinning its key (coordinator-pin.ts). */
export type Pin = () => Promise<PinnedCoordinator>;

/** The posture a development provider claims (and its development chain states). */
const DEV_POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;

export interface Attestation {
  readonly identity: ProviderIdentity;
  readonly answerChallenge: (challenge: { nonce: string; timestamp: number }) => Promise<{ payload: string; signature: string }>;
  readonly evidence: (encryptionKey: Uint8Array) => Promise<Readonly<Record<string, unknown>>>;
}

/** Obtains a development chain for this machine's identity key; throws ConfigError when refused. */
export async function developmentAttestation(config: ProviderConfig, logger: Logger, pin: Pin | undefined): Promise<Attestation> {
  const identity = await identityOf(config);
  const base = coordinatorBaseOf(config.connectUrl);
  // The token goes only to a coordinator whose attestation passed (--coordinator-image).
  let tls: PinnedTls | undefined;
  try {
    tls = pin ? (await pin()).tls : undefined;
  } catch (error) {
    throw new ConfigError(
      `--dev-attestation: ${error instanceof CoordinatorRefused ? "" : "cannot verify the coordinator: "}${(error as Error).message}`,
    );
  }
  const response = await fetch(`${base}/v1/provider/dev-chain`, {
    method: "POST",
    headers: { authorization: `Bearer ${config.token}`, "content-type": "application/json" },
    body: JSON.stringify({ identity_key: Buffer.from(identity.publicKey).toString("base64url"), posture: postureJson(DEV_POSTURE) }),
    ...(tls ? { tls } : {}),
  });
  if (!response.ok) throw new ConfigError(`--dev-attestation: the coordinator refused a development chain (HTTP ${response.status})`);
  const { chain } = (await response.json()) as { chain: string[] };
  const mdaChain = chain.map((der) => new Uint8Array(Buffer.from(der, "base64url")));
  logger.info("development attestation ready", { count: mdaChain.length, reason: identity.kind });
  return {
    identity,
    answerChallenge: async (challenge) => signChallengeAnswer(identity, parseChallenge(challenge), DEV_POSTURE),
    evidence: (encryptionKey) => signEvidence(identity, encryptionKey, DEV_POSTURE, mdaChain),
  };
}

/** The identity key: the signing helper named by --identity-helper, else a fresh software key. */
export async function identityOf(config: ProviderConfig): Promise<ProviderIdentity> {
  if (config.identityHelper === undefined) return softwareIdentity(SoftwareIdentity.generate());
  try {
    return await helperIdentity([config.identityHelper]);
  } catch (error) {
    throw new ConfigError(`--identity-helper: ${error instanceof Error ? error.message : String(error)}`);
  }
}
