/**
 * The scheduler's timing on injected timers (test/support/manual-timers.ts) and a recording NanoMDM
 * client: at an epoch boundary, the providers connected then are asked again, each after its own jitter;
 * a disconnected one is not; a refused enqueue is retried after its backoff, a bounded number of times.
 * (The scenarios over real sockets are in scenarios.test.ts.)
 */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { mdaEpoch, mdaNonce } from "../../../attestation/provider/mda-nonce.ts";
import { AttestationScheduler, MDA_EPOCH_MS } from "../../../src/mdm/attestation-scheduler.ts";
import type { EnqueueResult } from "../../../src/mdm/nanomdm-client.ts";
import { silentLogger } from "../../../src/observability/logger.ts";
import { createSqliteStore } from "../../../src/store/sqlite/index.ts";
import { tempDir } from "../../support/harness.ts";
import { manualTimers, turns } from "../../support/manual-timers.ts";

const EPOCH = 2969;

async function setup(enqueueResult: () => EnqueueResult = () => ({ enqueued: true, pushed: true, status: 200 })) {
  const dir = tempDir();
  const store = createSqliteStore(join(dir.path, "umbra.db"));
  const timers = manualTimers();
  const base = EPOCH * MDA_EPOCH_MS + MDA_EPOCH_MS - 1_000; // one second before the next epoch
  const now = () => base + timers.now();
  const calls: { id: string; at: number }[] = [];
  const randoms = [0.25, 0.75, 0.5];
  const scheduler = new AttestationScheduler({
    store: store.mdm,
    client: {
      enqueue: async (id) => {
        calls.push({ id, at: timers.now() });
        return enqueueResult();
      },
      push: async () => ({ pushed: true, status: 200 }),
    },
    nonces: { epoch: mdaEpoch, nonce: (epoch: number, key: Uint8Array) => mdaNonce(new Uint8Array(32), epoch, key) },
    now,
    logger: silentLogger,
    maxInFlight: 1,
    connectJitterMs: 0,
    epochJitterMs: 10_000,
    retry: { baseMs: 1_000, maxMs: 8_000, attempts: 3 },
    timers,
    random: () => randoms.shift() ?? 0,
  });
  await store.accounts.create({ id: "acct_a", name: "a", at: base });
  await store.providerTokens.create({ id: "ptok_a", accountId: "acct_a", tokenHash: "pt", hint: "…a", createdAt: base });
  const keys: string[] = [];
  for (const i of [1, 2, 3]) {
    // The nonce takes a 65-byte uncompressed point (0x04 first); no signature is checked here.
    const key = Buffer.concat([Buffer.from([4]), Buffer.alloc(64, i)]).toString("base64");
    keys.push(key);
    await store.mdm.enrolments.create({
      id: `enr_${i}`,
      accountId: "acct_a",
      providerTokenId: "ptok_a",
      identityKey: key,
      tokenHash: `h${i}`,
      createdAt: base,
      tokenExpiresAt: base + 3_600_000,
    });
    await store.mdm.enrolments.bind({ tokenHash: `h${i}`, nanomdmId: `HW-${i}`, serial: `S${i}`, at: base });
    // A chain of this epoch: a connection now asks nothing.
    await store.mdm.chains.put({
      enrolmentId: `enr_${i}`,
      certificates: ["AA=="],
      chainSha256: "00",
      serial: `S${i}`,
      udid: `U${i}`,
      osVersion: "15.5",
      leafNotBefore: base,
      epoch: EPOCH,
      verifiedAt: base,
    });
  }
  return {
    store,
    timers,
    calls,
    scheduler,
    keys,
    async [Symbol.asyncDispose]() {
      scheduler.stop();
      store.close();
      dir[Symbol.dispose]();
    },
  };
}

describe("AttestationScheduler timing", () => {
  test("at the epoch boundary, connected providers are asked again, each after its jitter; a disconnected one is not", async () => {
    await using t = await setup();
    const outcomes = await Promise.all(t.keys.map((k) => t.scheduler.onProviderConnected(k)));
    expect(outcomes).toEqual(["current", "current", "current"]);
    t.scheduler.onProviderDisconnected(t.keys[2] as string);
    t.scheduler.start();
    t.timers.advance(1_000); // the boundary
    await turns();
    expect([t.scheduler.pending, t.calls]).toEqual([2, []]);
    t.timers.advance(2_500); // jitter 0.25 x 10 s
    await turns();
    t.timers.advance(5_000); // jitter 0.75 x 10 s
    await turns();
    expect(t.calls).toEqual([
      { id: "HW-1", at: 3_500 },
      { id: "HW-2", at: 8_500 },
    ]);
    expect(t.timers.pending()).toBe(1); // only the next boundary's timer
  });

  test("a refused enqueue is retried after its backoff, at most `attempts` times, its command withdrawn each time", async () => {
    await using t = await setup(() => ({ enqueued: false, pushed: false, status: 500, error: "foreign key" }));
    t.timers.advance(1_000); // the next epoch: the stored chain is old now
    expect(await t.scheduler.onProviderConnected(t.keys[0] as string)).toBe("scheduled");
    const step = async (ms: number) => {
      t.timers.advance(ms);
      await turns();
      return t.calls.length;
    };
    // random(): 0.25 for the connection's jitter (x 0 ms), then 0.75 and 0.5 shape the backoffs:
    // 1 s x (0.5 + 0.75 / 2) = 875 ms, then 2 s x (0.5 + 0.5 / 2) = 1500 ms; the third refusal gives up.
    expect([await step(0), await step(874), await step(1), await step(1_499), await step(1), await step(60_000)]).toEqual([
      1, 1, 2, 2, 3, 3,
    ]);
    expect(t.calls.map((c) => c.at)).toEqual([1_000, 1_875, 3_375]);
    expect([t.scheduler.pending, await t.store.mdm.commands.outstanding("enr_1", 10 ** 15)]).toEqual([0, undefined]);
  });
});
