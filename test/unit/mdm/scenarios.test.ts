/**
 * Issue 23 point 6's delivery scenarios, each a test, end to end over real sockets: the scheduler and the
 * NanoMDM client against the fake NanoMDM, its simulated Macs, and its HMAC-signed webhooks into the
 * webhook route on a real SQLite store (test/support/mdm-env.ts). Part A's rules are its own
 * (verifyMdaAnswer, mdaNonce; Apple-shaped leaves from test/support/apple-leaf.ts). The posture and binding refusals are in scenarios-posture.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { type MdmEnv, mdmEnv, type TestProvider } from "../../support/mdm-env.ts";
import { waitFor } from "../../support/wait.ts";

const MIN = 60_000;

async function enrolled(env: MdmEnv, mac?: Parameters<MdmEnv["provider"]>[0]): Promise<TestProvider> {
  const p = await env.provider(mac);
  await env.enrol(p);
  return p;
}

describe("MDM delivery scenarios", () => {
  test("enrolment race: the enqueue right after Authenticate is refused (500), retried with backoff, then attested", async () => {
    await using env = await mdmEnv();
    const p = await env.provider();
    await env.fake.enrol(p.mac, p.token); // Authenticate only: NanoMDM has no enrolment row yet
    expect((await env.store.mdm.enrolments.get(p.enrolmentId))?.state).toBe("enrolled");
    expect(await env.scheduler.onProviderConnected(p.identityKey)).toBe("scheduled");
    await waitFor(
      () => env.logs.some((l) => l.msg === "mdm enqueue refused: retrying later" && l.fields?.status === 500),
      "a refused enqueue",
    );
    expect(env.fake.enqueues.length).toBe(0);
    await env.fake.tokenUpdate(p.mac);
    await env.settle();
    expect(env.fake.enqueues.length).toBe(1);
    expect(env.results()).toEqual(["attested"]);
    expect((await env.store.mdm.chains.get(p.enrolmentId))?.serial).toBe(p.mac.serial);
  });

  test("push delivered but no answer: a reconnect re-pushes, never re-enqueues; NotNow keeps it; the Mac answers when it wakes", async () => {
    await using env = await mdmEnv();
    const p = await enrolled(env);
    p.mac.awake = false;
    expect(await env.attest(p)).toBe("scheduled");
    expect(await env.attest(p)).toBe("scheduled");
    expect([env.fake.enqueues.length, env.fake.pushes.length, env.fake.queueOf(p.mac).length]).toEqual([1, 2, 1]);
    expect(await env.store.mdm.chains.get(p.enrolmentId)).toBeUndefined();
    p.mac.awake = true;
    p.mac.reply = "NotNow"; // awake but busy: the command stays queued and outstanding
    await env.fake.connect(p.mac);
    expect([env.fake.queueOf(p.mac).length, !!(await env.store.mdm.commands.outstanding(p.enrolmentId, env.now()))]).toEqual([1, true]);
    p.mac.reply = "Acknowledged";
    await env.fake.connect(p.mac);
    expect(env.results()).toEqual(["pending", "attested"]);
    expect(await env.store.mdm.commands.outstanding(p.enrolmentId, env.now())).toBeUndefined();
  });

  test("late webhook: accepted within the command's 30 minutes, refused after", async () => {
    await using env = await mdmEnv();
    env.fake.webhookMode = () => "hold";
    const early = await enrolled(env);
    const late = await enrolled(env);
    await env.attest(early);
    env.clock.t += 29 * MIN;
    await env.fake.releaseHeld();
    await env.attest(late);
    env.clock.t += 30 * MIN;
    await env.fake.releaseHeld();
    expect(env.results()).toEqual(["attested", "ignored:unsolicited"]);
    expect([!!(await env.store.mdm.chains.get(early.enrolmentId)), !!(await env.store.mdm.chains.get(late.enrolmentId))]).toEqual([
      true,
      false,
    ]);
  });

  test("unsolicited, replayed and foreign CommandUUIDs are ignored and change nothing", async () => {
    await using env = await mdmEnv();
    const a = await enrolled(env);
    const b = await enrolled(env);
    await env.attest(a);
    const stored = await env.store.mdm.chains.get(a.enrolmentId);
    // Replayed: the delivered report of a's command again.
    const replayed = await env.fake.post("mdm.Connect", JSON.parse(JSON.stringify(await lastReport(env, a))));
    // Unsolicited: a report for a CommandUUID never issued.
    const answer = await a.mac.answer({ CommandUUID: crypto.randomUUID(), Command: deviceInformation(new Uint8Array(32)) });
    const unsolicited = await env.fake.post("mdm.Connect", env.fake.reportEvent(a.mac, a.token, String(answer.CommandUUID), answer));
    // Foreign: b's outstanding command answered from a's device.
    b.mac.awake = false;
    await env.attest(b);
    const bCommand = await env.store.mdm.commands.outstanding(b.enrolmentId, env.now());
    const forged = await a.mac.answer({ CommandUUID: bCommand?.commandUuid ?? "", Command: deviceInformation(new Uint8Array(32)) });
    const foreign = await env.fake.post("mdm.Connect", env.fake.reportEvent(a.mac, a.token, bCommand?.commandUuid, forged));
    expect([replayed.body, unsolicited.body, foreign.body]).toEqual([
      { topic: "mdm.Connect", result: "ignored:unsolicited" },
      { topic: "mdm.Connect", result: "ignored:unsolicited" },
      { topic: "mdm.Connect", result: "ignored:unsolicited" },
    ]);
    expect(await env.store.mdm.chains.get(a.enrolmentId)).toEqual(stored);
    expect(await env.store.mdm.chains.get(b.enrolmentId)).toBeUndefined();
    expect((await env.store.mdm.commands.outstanding(b.enrolmentId, env.now()))?.commandUuid).toBe(bCommand?.commandUuid);
  });

  test("duplicate webhook: the second delivery of one report is ignored", async () => {
    await using env = await mdmEnv();
    env.fake.webhookMode = () => "twice";
    const p = await enrolled(env);
    await env.attest(p);
    expect(env.results()).toEqual(["attested", "ignored:unsolicited"]);
    expect(env.fake.delivered.filter((d) => d.topic === "mdm.Connect").every((d) => d.status === 200)).toBe(true);
  });

  test("lost webhook: re-pushed while outstanding, re-requested once it expires, then attested", async () => {
    await using env = await mdmEnv();
    let first = true;
    env.fake.webhookMode = () => {
      const mode = first ? "drop" : "send";
      first = false;
      return mode;
    };
    const p = await enrolled(env);
    await env.attest(p);
    expect(await env.store.mdm.chains.get(p.enrolmentId)).toBeUndefined();
    env.clock.t += 10 * MIN;
    await env.attest(p);
    expect([env.fake.enqueues.length, env.fake.pushes.length]).toEqual([1, 2]);
    env.clock.t += 21 * MIN;
    await env.attest(p);
    expect(env.fake.enqueues.length).toBe(2);
    expect(env.results()).toEqual(["attested"]);
    expect(p.mac.mints).toBe(1); // the same epoch's nonce: Apple's cached leaf
  });

  test("check-in webhooks: Authenticate binds, TokenUpdate confirms, CheckOut ends the enrolment and its command", async () => {
    await using env = await mdmEnv();
    const p = await env.provider();
    await env.enrol(p);
    p.mac.awake = false;
    await env.attest(p);
    const checkIns = () => env.fake.delivered.filter((d) => d.topic !== "mdm.Connect").map((d) => d.body);
    const command = await env.store.mdm.commands.outstanding(p.enrolmentId, env.now());
    await env.fake.checkOut(p.mac);
    expect(checkIns()).toEqual([
      { topic: "mdm.Authenticate", result: "bound" },
      { topic: "mdm.TokenUpdate", result: "bound" },
      { topic: "mdm.CheckOut", result: "checked_out" },
    ]);
    expect([
      (await env.store.mdm.enrolments.get(p.enrolmentId))?.state,
      await env.store.mdm.commands.outstanding(p.enrolmentId, env.now()),
    ]).toEqual(["checked_out", undefined]);
    const answer = await p.mac.answer({ CommandUUID: command?.commandUuid ?? "", Command: deviceInformation(new Uint8Array(32)) });
    const late = await env.fake.post("mdm.Connect", env.fake.reportEvent(p.mac, p.token, command?.commandUuid, answer));
    expect(late.body).toEqual({ topic: "mdm.Connect", result: "ignored:unknown_enrolment" });
    const user = { ...env.fake.reportEvent(p.mac, p.token, undefined, { Status: "Idle" }), topic: "mdm.TokenUpdate" };
    const userChannel = { checkin_event: { ...user.acknowledge_event, ids: { id: "user-guid", type: "User" } }, topic: "mdm.TokenUpdate" };
    expect((await env.fake.post("mdm.TokenUpdate", userChannel)).body).toEqual({
      topic: "mdm.TokenUpdate",
      result: "ignored:not_device_channel",
    });
    expect(await env.scheduler.onProviderConnected(p.identityKey)).toBe("not_enrolled");
  });

  test("1,000 providers reconnecting at once: the cap and jitter hold, each gets one command, none lost", async () => {
    const JITTER_MS = 400;
    const CAP = 8;
    await using env = await mdmEnv({ maxInFlight: CAP, connectJitterMs: JITTER_MS, latencyMs: 1 });
    const providers: TestProvider[] = [];
    for (let i = 0; i < 1000; i++) {
      const p = await env.provider();
      p.mac.awake = false;
      await env.store.mdm.enrolments.bind({ tokenHash: hashOf(p.token), nanomdmId: p.mac.nanomdmId, serial: p.mac.serial, at: env.now() });
      env.fake.register(p.mac, p.token);
      providers.push(p);
    }
    const refusedOnce = new Set(providers.filter((_, i) => i % 10 === 0).map((p) => p.mac.nanomdmId));
    env.fake.refuseEnqueue = (id) => refusedOnce.delete(id);
    const started = performance.now();
    const first = await Promise.all(providers.map((p) => env.scheduler.onProviderConnected(p.identityKey)));
    const again = await Promise.all(providers.map((p) => env.scheduler.onProviderConnected(p.identityKey)));
    await env.settle();
    const ids = env.fake.enqueues.map((e) => e.id);
    const times = env.fake.enqueues.map((e) => e.at - started).sort((x, y) => x - y);
    expect(new Set(first)).toEqual(new Set(["scheduled"]));
    expect(new Set(again)).toEqual(new Set(["already_scheduled"]));
    expect([ids.length, new Set(ids).size, refusedOnce.size]).toEqual([1000, 1000, 0]);
    expect(env.fake.maxInFlight).toBeLessThanOrEqual(CAP);
    // Jitter: the requests spread over the window instead of starting together.
    expect(times[times.length - 1] as number).toBeGreaterThan(JITTER_MS / 2);
    expect(times.filter((t) => t < JITTER_MS / 10).length).toBeLessThan(300);
    const outstanding = await Promise.all(providers.map((p) => env.store.mdm.commands.outstanding(p.enrolmentId, env.now())));
    expect(outstanding.filter((c) => c !== undefined).length).toBe(1000);
    // Reconnecting again re-pushes the outstanding commands: nothing enqueued twice.
    await Promise.all(providers.map((p) => env.scheduler.onProviderConnected(p.identityKey)));
    await env.settle();
    expect([env.fake.enqueues.length, env.fake.pushes.length]).toEqual([1000, 2000]);
    expect(env.fake.maxInFlight).toBeLessThanOrEqual(CAP);
  }, 60_000);
});

function deviceInformation(nonce: Uint8Array) {
  return {
    RequestType: "DeviceInformation",
    Queries: ["DevicePropertiesAttestation", "SerialNumber", "ProvisioningUDID"],
    DeviceAttestationNonce: nonce,
  };
}

function hashOf(token: string): string {
  return new Bun.CryptoHasher("sha256").update(token).digest("hex");
}

/** The last command report event NanoMDM delivered for `p` (rebuilt from the fake's record). */
async function lastReport(env: MdmEnv, p: TestProvider): Promise<unknown> {
  const uuid = env.fake.enqueues.filter((e) => e.id === p.mac.nanomdmId).at(-1)?.commandUuid ?? "";
  const command = {
    CommandUUID: uuid,
    Command: deviceInformation(env.nonces.nonce(env.nonces.epoch(env.now()), Buffer.from(p.identityKey, "base64"))),
  };
  return env.fake.reportEvent(p.mac, p.token, uuid, await p.mac.answer(command));
}
