/**
 * MDM mode's services for createApp (issue 23; UMBRA_MDM_URL): the NanoMDM client, the webhook receiver
 * the route table serves at POST /v1/mdm/webhook, and the attestation scheduler the fleet calls when an
 * enrolled provider connects (`scheduler.onProviderConnected`, part D). The MDA checks (part A's
 * verifyMdaAnswer and epoch nonces, bound to the seed) are given: without them MDM mode does not start.
 */
import { AttestationScheduler } from "../mdm/attestation-scheduler.ts";
import { NanoMdmClient } from "../mdm/nanomdm-client.ts";
import type { MdaAnswerVerifier, MdaNonces, MdmConfig } from "../mdm/types.ts";
import { MdmWebhook } from "../mdm/webhook.ts";
import type { Logger } from "../observability/logger.ts";
import type { Store } from "../store/types.ts";

/** Part A's checks bound to the coordinator's seed, trust anchor and mode. */
export interface MdmChecks {
  readonly verify: MdaAnswerVerifier;
  readonly nonces: MdaNonces;
}

export interface AppMdm {
  readonly webhook: MdmWebhook;
  readonly scheduler: AttestationScheduler;
  close(): void;
}

export function startMdm(
  config: MdmConfig,
  deps: { readonly store: Store; readonly checks: MdmChecks | undefined; readonly now: () => number; readonly logger: Logger },
): AppMdm {
  if (!deps.checks) {
    throw new Error("MDM mode (--mdm-url) needs the MDA answer checks and nonces (UMBRA_MDA_SEED): not wired into this app");
  }
  const { store, checks, now, logger } = deps;
  const webhook = new MdmWebhook({ key: config.webhookKey, store: store.mdm, verify: checks.verify, now, logger });
  const scheduler = new AttestationScheduler({
    store: store.mdm,
    client: new NanoMdmClient({ url: config.url, apiKey: config.apiKey }),
    nonces: checks.nonces,
    now,
    logger,
    maxInFlight: config.maxInFlight,
  }).start();
  return { webhook, scheduler, close: () => scheduler.stop() };
}
