/**
 * One MDM test environment (issue 23's scenarios): a real SQLite store, the webhook route on a real socket
 * (port 0), the fake NanoMDM (fake-nanomdm.ts) posting to it, the scheduler calling it through the real
 * client, part A's verifyMdaAnswer and nonces (seed and development root bound as createApp binds them:
 * coordinator/mdm-link.ts `mdmChecks`), and a clock the test moves. `provider()` makes an issued
 * enrolment and its simulated Mac; `enrol()` runs its check-ins; `attest()` connects it and waits until
 * the scheduler, NanoMDM and the Mac are done.
 */
import { createHash, randomBytes } from "node:crypto";
import { join } from "node:path";
import { p256 } from "@noble/curves/nist.js";
import { Elysia } from "elysia";
import { DevelopmentRoot } from "../../attestation/provider/index.ts";
import { errorHandling } from "../../src/api/errors.ts";
import { mdmWebhookRoutes } from "../../src/api/mdm-webhook.ts";
import { mdmChecks } from "../../src/coordinator/mdm-link.ts";
import { AttestationScheduler, type AttestationSchedulerOptions } from "../../src/mdm/attestation-scheduler.ts";
import { NanoMdmClient } from "../../src/mdm/nanomdm-client.ts";
import { MdmWebhook } from "../../src/mdm/webhook.ts";
import { createSqliteStore } from "../../src/store/sqlite/index.ts";
import type { Store } from "../../src/store/types.ts";
import { FakeNanoMdm } from "./fake-nanomdm.ts";
import { tempDir } from "./harness.ts";
import { type LogLine, recordingLogger } from "./logs.ts";
import { SimulatedMac } from "./simulated-mac.ts";

export const T0 = Date.UTC(2026, 10, 26, 12);
export const WEBHOOK_KEY = "test-webhook-hmac-key-0123456789";
const API_KEY = "test-nanomdm-api-key";

export interface TestProvider {
  readonly identityKey: string;
  readonly token: string;
  readonly enrolmentId: string;
  readonly mac: SimulatedMac;
}

export type MdmEnv = Awaited<ReturnType<typeof mdmEnv>>;

export async function mdmEnv(
  options: Partial<Pick<AttestationSchedulerOptions, "maxInFlight" | "connectJitterMs" | "retry">> & {
    latencyMs?: number;
    /** Another store (empty; closed with the environment): Postgres. Default: a SQLite file. */
    store?: Store;
  } = {},
) {
  const clock = { t: T0 };
  const now = () => clock.t;
  const dir = tempDir();
  const store: Store = options.store ?? createSqliteStore(join(dir.path, "umbra.db"));
  await store.accounts.create({ id: "acct_a", name: "a", at: T0 });
  await store.providerTokens.create({ id: "ptok_a", accountId: "acct_a", tokenHash: "pt", hint: "…a", createdAt: T0 });
  const seed = randomBytes(32);
  const issuer = await DevelopmentRoot.generate(now);
  const checks = mdmChecks(seed, async () => issuer.anchor, "development", now);
  const nonces = checks.nonces;
  const logs: LogLine[] = [];
  const logger = recordingLogger(logs);
  const webhook = new MdmWebhook({
    key: WEBHOOK_KEY,
    store: store.mdm,
    verify: checks.verify,
    now,
    logger,
  });
  const app = new Elysia().use(errorHandling(logger)).use(mdmWebhookRoutes({ webhook, bodyTimeoutMs: 5_000 }));
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (request) => app.handle(request) });
  const webhookUrl = `http://127.0.0.1:${server.port}/v1/mdm/webhook`;
  const fake = new FakeNanoMdm({
    apiKey: API_KEY,
    webhookUrl,
    webhookKey: WEBHOOK_KEY,
    ...(options.latencyMs ? { latencyMs: options.latencyMs } : {}),
  }).start();
  const scheduler = new AttestationScheduler({
    store: store.mdm,
    client: new NanoMdmClient({ url: fake.url, apiKey: API_KEY }),
    nonces,
    now,
    logger,
    maxInFlight: options.maxInFlight ?? 4,
    connectJitterMs: options.connectJitterMs ?? 0,
    retry: options.retry ?? { baseMs: 5, maxMs: 40, attempts: 8 },
  });
  let n = 0;

  /** An issued enrolment (as part C records it) and its Mac, not yet checked in. */
  async function provider(
    mac: Partial<{ serial: string; udid: string; nanomdmId: string; same: SimulatedMac }> = {},
  ): Promise<TestProvider> {
    const i = ++n;
    const identityKey = Buffer.from(p256.getPublicKey(p256.utils.randomSecretKey(), false)).toString("base64");
    const token = randomBytes(24).toString("base64url");
    const enrolmentId = `enr_${i}`;
    await store.mdm.enrolments.create({
      id: enrolmentId,
      accountId: "acct_a",
      providerTokenId: "ptok_a",
      identityKey,
      tokenHash: createHash("sha256").update(token).digest("hex"),
      createdAt: now(),
      tokenExpiresAt: now() + 3_600_000,
    });
    const simulated =
      mac.same ??
      new SimulatedMac({
        issuer,
        now,
        serial: mac.serial ?? `C02SIM${String(i).padStart(6, "0")}`,
        udid: mac.udid ?? `00006030-${String(i).padStart(16, "0")}`,
        nanomdmId: mac.nanomdmId ?? `${String(i).padStart(8, "0")}-5FDF-5EC4-8429-15640684C489`,
      });
    return { identityKey, token, enrolmentId, mac: simulated };
  }

  async function enrol(p: TestProvider): Promise<void> {
    await fake.enrol(p.mac, p.token);
    await fake.tokenUpdate(p.mac);
  }

  /** Connects the provider and waits for every consequence (requests, pushes, the Mac's reports). */
  async function attest(p: TestProvider) {
    const outcome = await scheduler.onProviderConnected(p.identityKey);
    await settle();
    return outcome;
  }

  async function settle(): Promise<void> {
    for (let i = 0; i < 3; i++) {
      await scheduler.settled();
      await fake.idle();
    }
  }

  /** The webhook results of command reports (mdm.Connect, Idle left out), in order. */
  const results = () =>
    fake.delivered
      .filter((d) => d.topic === "mdm.Connect")
      .map((d) => (d.body as { result?: string } | undefined)?.result)
      .filter((r) => r !== "ignored:idle");

  return {
    clock,
    now,
    store,
    seed,
    nonces,
    issuer,
    logs,
    webhook,
    webhookUrl,
    fake,
    scheduler,
    provider,
    enrol,
    attest,
    settle,
    results,
    async [Symbol.asyncDispose]() {
      scheduler.stop();
      await fake[Symbol.asyncDispose]();
      await server.stop(true);
      store.close();
      dir[Symbol.dispose]();
    },
  };
}
