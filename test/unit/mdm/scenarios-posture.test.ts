/**
 * Issue 23 point 6's attestation scenarios, each a test, end to end as in scenarios.test.ts: Apple's cache
 * rule across epochs, an identity key rotated mid-epoch, a leaf refused for its posture (SIP off, Reduced
 * Security, kexts allowed, macOS 14.0 without posture OIDs) or its serial. A refused answer stores no chain.
 */
import { describe, expect, test } from "bun:test";
import { MDA_EPOCH_MS as EPOCH_MS } from "../../../attestation/provider/mda-nonce.ts";
import { type MdmEnv, mdmEnv, type TestProvider } from "../../support/mdm-env.ts";

const DAY = 86_400_000;

async function enrolled(env: MdmEnv, mac?: Parameters<MdmEnv["provider"]>[0]): Promise<TestProvider> {
  const p = await env.provider(mac);
  await env.enrol(p);
  return p;
}

describe("MDM attestation scenarios", () => {
  test("Apple's cached leaf: the previous epoch's nonce is accepted, one from four epochs ago refused", async () => {
    await using env = await mdmEnv();
    env.clock.t = (env.nonces.epoch(env.now()) + 1) * EPOCH_MS - 2 * DAY; // two days before an epoch boundary
    const p = await enrolled(env);
    await env.attest(p);
    const minted = env.nonces.epoch(env.now());
    env.clock.t += 3 * DAY; // the next epoch, 3 days after the mint: the Mac returns its cached leaf
    expect(await env.attest(p)).toBe("scheduled");
    const chain = await env.store.mdm.chains.get(p.enrolmentId);
    expect([p.mac.mints, chain?.epoch, env.nonces.epoch(chain?.verifiedAt ?? 0)]).toEqual([1, minted, minted + 1]);
    expect(await env.scheduler.onProviderConnected(p.identityKey)).toBe("current"); // asked this epoch already

    const stale = await enrolled(env);
    await env.attest(stale);
    stale.mac.frozenCache = true; // a device that keeps returning an old leaf
    env.clock.t += 4 * EPOCH_MS;
    await env.attest(stale);
    expect(env.results().slice(-1)).toEqual(["refused:mda_freshness"]);
    expect((await env.store.mdm.chains.get(stale.enrolmentId))?.epoch).toBe(minted + 1); // the old chain, not renewed
  });

  test("identity key rotated mid-epoch: the cached leaf bound to the old key is refused; the next mint is accepted", async () => {
    await using env = await mdmEnv();
    const old = await enrolled(env);
    await env.attest(old);
    env.clock.t += 2 * DAY;
    const rotated = await enrolled(env, { same: old.mac });
    expect((await env.store.mdm.enrolments.get(old.enrolmentId))?.state).toBe("checked_out");
    expect(await env.scheduler.onProviderConnected(old.identityKey)).toBe("not_enrolled");
    await env.attest(rotated);
    expect(env.results()).toEqual(["attested", "refused:mda_freshness"]);
    expect(await env.store.mdm.chains.get(rotated.enrolmentId)).toBeUndefined();
    env.clock.t += 7 * DAY; // Apple mints again: now for the new key's nonce
    await env.attest(rotated);
    expect(env.results().slice(-1)).toEqual(["attested"]);
    expect(old.mac.mints).toBe(2);
  });

  test("SIP off: refused", async () => {
    await using env = await mdmEnv();
    const p = await enrolled(env);
    p.mac.posture = { sipOff: true };
    await env.attest(p);
    expect([env.results(), await env.store.mdm.chains.get(p.enrolmentId)]).toEqual([["refused:mda_sip"], undefined]);
  });

  test("Reduced Security: refused", async () => {
    await using env = await mdmEnv();
    const p = await enrolled(env);
    p.mac.posture = { secureBoot: "Reduced Security" };
    await env.attest(p);
    expect([env.results(), await env.store.mdm.chains.get(p.enrolmentId)]).toEqual([["refused:mda_secure_boot"], undefined]);
  });

  test("third-party kernel extensions allowed: refused", async () => {
    await using env = await mdmEnv();
    const p = await enrolled(env);
    p.mac.posture = { kexts: true };
    await env.attest(p);
    expect([env.results(), await env.store.mdm.chains.get(p.enrolmentId)]).toEqual([["refused:mda_kexts"], undefined]);
  });

  test("a macOS 14.0 leaf without posture OIDs: refused, never a chain", async () => {
    await using env = await mdmEnv();
    const p = await enrolled(env);
    p.mac.posture = { noPosture: true, osVersion: "14.0" };
    await env.attest(p);
    expect([env.results(), await env.store.mdm.chains.get(p.enrolmentId)]).toEqual([["refused:mda_posture_missing"], undefined]);
  });

  test("serial mismatch: leaf, answered SerialNumber and enrolment serial must agree", async () => {
    await using env = await mdmEnv();
    const leaf = await enrolled(env);
    leaf.mac.posture = { serial: "C02OTHERMAC1" }; // Apple's leaf names another Mac
    await env.attest(leaf);
    const answered = await enrolled(env);
    answered.mac.answeredSerial = "C02OTHERMAC2"; // the device answers another serial
    await env.attest(answered);
    expect(env.results()).toEqual(["refused:mda_serial", "refused:mda_serial"]);
    expect([await env.store.mdm.chains.get(leaf.enrolmentId), await env.store.mdm.chains.get(answered.enrolmentId)]).toEqual([
      undefined,
      undefined,
    ]);
  });
});
