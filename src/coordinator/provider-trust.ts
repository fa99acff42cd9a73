/**
 * The provider trust policy and the fleet's evidence checks for createApp: the policy (the pinned Apple
 * root, or a development root generated for this process), a hello's assessment (in MDM mode through the
 * stored chain: AppMdm's `assess`, mdm-link.ts `assessWithStoredChain`) and the challenge schedule. The certificate-parsing
 * checks (@peculiar/x509) load when the first provider presents evidence, not at start (bench/HISTORY.md).
 */
// reflect-metadata in this module's static graph: in place before the @peculiar/x509 graph it imports
// lazily, whatever the entry point (STACK.md item 1; a script running the app in-process has no preload).
import "../../attestation/provider/preload.ts";
import type { DevelopmentRoot, TrustPolicy } from "../../attestation/provider/index.ts";
import type { ProviderAttestation } from "../../attestation/provider/levels.ts";
import type { Config } from "../config/config.ts";
import type { AdmissionSettings } from "../fleet/admission.ts";
import type { AppMdm } from "./mdm-link.ts";

export interface ProviderTrust {
  readonly policy: TrustPolicy;
  /** The development root (development trust only): issues device chains to local providers. */
  readonly devRoot?: DevelopmentRoot;
}

/** What a provider without (verifiable) evidence earns. */
const NO_ATTESTATION: ProviderAttestation = Object.freeze({ level: "none", mdaVerified: false, secureEnclave: false });

const evidenceChecks = () => import("../../attestation/provider/index.ts");

/** The trust policy: the pinned Apple root, or a development root generated for this process. */
export async function providerTrust(config: Config, now: () => number): Promise<ProviderTrust> {
  const { createTrustPolicy, DevelopmentRoot, TrustAnchor } = await evidenceChecks();
  const mode = config.mode;
  const schedule = {
    floor: config.minTrust,
    challengeIntervalMs: config.challengeIntervalMs,
    challengeTimeoutMs: config.challengeTimeoutMs,
  };
  if (config.trustRoot === "apple") return { policy: createTrustPolicy({ mode, anchor: TrustAnchor.apple(), ...schedule }) };
  const devRoot = await DevelopmentRoot.generate(now);
  return { policy: createTrustPolicy({ mode, anchor: devRoot.anchor, ...schedule }), devRoot };
}

/** The fleet's `assess` and `challenge` over the policy; neither throws (a failure earns `none`). */
export function evidenceHooks(
  trust: () => Promise<ProviderTrust>,
  now: () => number,
  mdm: AppMdm | undefined,
): Pick<AdmissionSettings, "assess" | "challenge"> {
  return {
    assess: async (evidence, encryptionKey) => {
      if (encryptionKey === undefined || evidence === undefined) return NO_ATTESTATION;
      try {
        const [{ policy }, { assessProviderEvidence }] = await Promise.all([trust(), evidenceChecks()]);
        const assessed = await assessProviderEvidence(evidence, { policy, now, helloEncryptionKey: encryptionKey });
        return mdm ? await mdm.assess(assessed) : assessed;
      } catch {
        return NO_ATTESTATION;
      }
    },
    challenge: async (attestation) => {
      try {
        const [{ policy }, { startChallenges }] = await Promise.all([trust(), evidenceChecks()]);
        return startChallenges(attestation, policy, now);
      } catch {
        return undefined;
      }
    },
  };
}
