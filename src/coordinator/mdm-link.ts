/**
 * MDM mode's services for createApp (issue 23; `config.mdm` and `config.mdmEnrolment`, one switch): the
 * NanoMDM client, the webhook receiver (POST /v1/mdm/webhook), the attestation scheduler the fleet tells
 * of connections, enrolment (the /v1/provider/enroll routes) over the store's records, and the device
 * trust the fleet asks when a provider connects (a stored chain re-checked now: mdm/device-trust.ts).
 * Part A's checks are bound here: verifyMdaAnswer (loaded on first use: @peculiar/x509) with the MDA seed
 * and the provider trust anchor (the pinned Apple root; the development root in development), and the
 * epoch nonces. Development without a seed runs on a random one made for this process, with a warning:
 * chains stored under it fail after a restart (production refuses MDM mode without a seed: config/).
 */
// reflect-metadata in this module's static graph: in place before the @peculiar/x509 graph it imports
// lazily, whatever the entry point (STACK.md item 1; a script running the app in-process has no preload).
import "../../attestation/provider/preload.ts";
import { randomBytes } from "node:crypto";
import { type ProviderAttestation, vouchedAttestation } from "../../attestation/provider/levels.ts";
import { mdaEpoch, mdaNonce } from "../../attestation/provider/mda-nonce.ts";
import type { TrustAnchor, TrustMode } from "../../attestation/provider/roots.ts";
import type { DeviceTrustSource } from "../fleet/session-trust.ts";
import { AttestationScheduler, type AttestationSchedulerOptions } from "../mdm/attestation-scheduler.ts";
import { MdmDeviceTrust } from "../mdm/device-trust.ts";
import { EnrolmentService, type MdmEnrolmentConfig } from "../mdm/enrolment.ts";
import { storeEnrolmentRecords } from "../mdm/enrolment-records.ts";
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
  readonly revouchMs: number;
  readonly webhook: MdmWebhook;
  readonly scheduler: AttestationScheduler;
  readonly enrolment: EnrolmentService;
  readonly deviceTrust: MdmDeviceTrust;
  readonly checks: MdmChecks;
  /** A hello's assessment through the stored chain (`assessWithStoredChain`). */
  assess(assessed: ProviderAttestation): Promise<ProviderAttestation>;
  close(): void;
}

export interface MdmSettings {
  readonly mdm: MdmConfig;
  readonly enrolment: MdmEnrolmentConfig;
  readonly seed: Uint8Array | undefined;
  readonly mode: TrustMode;
}

export interface MdmDeps {
  readonly store: Store;
  /** The provider trust anchor (createApp's trust policy: the Apple root, or the development root). */
  readonly anchor: () => Promise<TrustAnchor>;
  readonly now: () => number;
  readonly logger: Logger;
  /** A verified chain was stored for this identity key (65-byte point): the fleet raises its sessions. */
  readonly onAttested: (identityKey: Uint8Array) => void;
  /** The scheduler's connection jitter and backoff (tests shorten them; defaults otherwise). */
  readonly timings?: MdmTimings;
}

export type MdmTimings = Pick<AttestationSchedulerOptions, "connectJitterMs" | "retry"> & {
  /** How often the fleet re-vouches self_signed sessions (default REVOUCH_MS). */
  readonly revouchMs?: number;
};

/** A chain stored through another replica raises this replica's connections within this time. */
export const REVOUCH_MS = 60_000;

/** Part A's verifyMdaAnswer and nonces bound to a seed and anchor. */
export function mdmChecks(seed: Uint8Array, anchor: () => Promise<TrustAnchor>, mode: TrustMode, now: () => number): MdmChecks {
  return {
    verify: async (input) => {
      const [{ verifyMdaAnswer }, trustAnchor] = await Promise.all([import("../../attestation/provider/mda-answer.ts"), anchor()]);
      return verifyMdaAnswer(input, { seed, anchor: trustAnchor, mode, now });
    },
    nonces: { epoch: mdaEpoch, nonce: (epoch, identityKey) => mdaNonce(seed, epoch, identityKey) },
  };
}

export function startMdm(settings: MdmSettings, deps: MdmDeps): AppMdm {
  const { store, now, logger } = deps;
  let seed = settings.seed;
  if (seed === undefined) {
    if (settings.mode === "production") throw new Error("MDM mode (--mdm-url) needs the MDA seed (UMBRA_MDA_SEED) in production");
    seed = new Uint8Array(randomBytes(32));
    logger.warn("mdm mode without an MDA seed: a random one for this process; chains stored under it fail after a restart", {
      reason: "no UMBRA_MDA_SEED",
    });
  }
  const checks = mdmChecks(seed, deps.anchor, settings.mode, now);
  const webhook = new MdmWebhook({
    key: settings.mdm.webhookKey,
    store: store.mdm,
    verify: checks.verify,
    now,
    logger,
    onAttested: (enrolment) => deps.onAttested(new Uint8Array(Buffer.from(enrolment.identityKey, "base64"))),
  });
  const scheduler = new AttestationScheduler({
    store: store.mdm,
    client: new NanoMdmClient({ url: settings.mdm.url, apiKey: settings.mdm.apiKey }),
    nonces: checks.nonces,
    now,
    logger,
    maxInFlight: settings.mdm.maxInFlight,
    ...(deps.timings?.connectJitterMs !== undefined ? { connectJitterMs: deps.timings.connectJitterMs } : {}),
    ...(deps.timings?.retry !== undefined ? { retry: deps.timings.retry } : {}),
  }).start();
  const deviceTrust = new MdmDeviceTrust({ store: store.mdm, verify: checks.verify, logger });
  const records = storeEnrolmentRecords(store.mdm, async (enrolment) => (await deviceTrust.vouchFor(enrolment))?.verifiedAt ?? null);
  const enrolment = new EnrolmentService(settings.enrolment, records, now, logger);
  const revouchMs = deps.timings?.revouchMs ?? REVOUCH_MS;
  const app: AppMdm = {
    revouchMs,
    webhook,
    scheduler,
    enrolment,
    deviceTrust,
    checks,
    assess: (assessed) => assessWithStoredChain(app, assessed),
    close: () => scheduler.stop(),
  };
  return app;
}

/** The fleet's device trust in MDM mode: stored chains vouch, and connections reach the scheduler. */
export function mdmDeviceTrust(mdm: AppMdm, logger: Logger): DeviceTrustSource {
  return {
    vouch: (identityKey) => mdm.deviceTrust.vouch(identityKey),
    connected: (identityKey) => {
      mdm.scheduler.onProviderConnected(identityKey).catch(() => logger.warn("mdm attestation request failed", { reason: "scheduler" }));
    },
    disconnected: (identityKey) => mdm.scheduler.onProviderDisconnected(identityKey),
    revouchMs: mdm.revouchMs,
  };
}

/**
 * A hello's assessment in MDM mode: its own device chain grants nothing (that path is `--dev-attestation`'s,
 * without MDM), so hardware comes only from a stored chain passing now for the same identity key, checked
 * here before the welcome (never waiting on NanoMDM); otherwise the session serves at self_signed.
 */
export async function assessWithStoredChain(mdm: AppMdm, assessed: ProviderAttestation): Promise<ProviderAttestation> {
  const own = assessed.level === "hardware" ? { ...assessed, level: "self_signed" as const, mdaVerified: false } : assessed;
  const point = own.identityKey?.point;
  if (own.level !== "self_signed" || point === undefined) return own;
  const vouch = await mdm.deviceTrust.vouch(point);
  return vouch === undefined ? own : vouchedAttestation(own, vouch);
}
