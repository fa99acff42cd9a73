/**
 * The MDM store's conformance suite (src/store/mdm-types.ts), run by runStoreConformance on every
 * implementation. Pins: a re-enrolment of an identity key checks the earlier one out; bind is idempotent,
 * refuses unknown, expired, checked-out and foreign tokens and a serial enrolled under another key (the
 * same Mac re-enrolling supersedes its earlier enrolment), also when binds race; one outstanding command
 * per enrolment, consumed once, never after expiry or for another enrolment; chains replaced whole.
 */
import { describe, expect, test } from "bun:test";
import type { MdmChain, MdmCommand, NewMdmEnrolment } from "../../src/store/mdm-types.ts";
import type { OpenStore } from "./conformance.ts";

const T0 = 1_790_000_000_000;
const MIN = 60_000;

const enrolment = (id: string, key: string, extra: Partial<NewMdmEnrolment> = {}): NewMdmEnrolment => ({
  id,
  accountId: "acct_a",
  providerTokenId: "ptok_a",
  identityKey: key,
  tokenHash: `hash-${id}`,
  createdAt: T0,
  tokenExpiresAt: T0 + 60 * MIN,
  ...extra,
});

const command = (uuid: string, enrolmentId: string, issuedAt = T0): MdmCommand => ({
  commandUuid: uuid,
  enrolmentId,
  epoch: 2960,
  issuedAt,
  expiresAt: issuedAt + 30 * MIN,
});

export function runMdmStoreConformance(open: OpenStore): void {
  const seeded = async () => {
    const t = await open();
    await t.store.accounts.create({ id: "acct_a", name: "a", at: T0 });
    await t.store.providerTokens.create({ id: "ptok_a", accountId: "acct_a", tokenHash: "pt-hash", hint: "…a", createdAt: T0 });
    return t;
  };

  describe("mdm enrolments", () => {
    test("create records an issued enrolment; unknown account or token writes nothing", async () => {
      await using t = await seeded();
      const input = enrolment("enr_1", "K1");
      const expected = { ...input, nanomdmId: null, serial: null, state: "issued" as const, updatedAt: T0 };
      expect(await t.store.mdm.enrolments.create(input)).toEqual(expected);
      expect(await t.store.mdm.enrolments.get("enr_1")).toEqual(expected);
      expect(await t.store.mdm.enrolments.findByTokenHash("hash-enr_1")).toEqual(expected);
      expect(await t.store.mdm.enrolments.byIdentityKey("K1")).toEqual(expected);
      expect(await t.store.mdm.enrolments.create(enrolment("enr_2", "K2", { accountId: "acct_none" }))).toBeUndefined();
      expect(await t.store.mdm.enrolments.create(enrolment("enr_3", "K3", { providerTokenId: "ptok_none" }))).toBeUndefined();
      expect(await t.store.mdm.enrolments.forAccount("acct_a")).toEqual([expected]);
    });

    test("a second create for one identity key checks the first out; forAccount is newest first", async () => {
      await using t = await seeded();
      await t.store.mdm.enrolments.create(enrolment("enr_1", "K1"));
      await t.store.mdm.enrolments.bind({ tokenHash: "hash-enr_1", nanomdmId: "HW-1", serial: "SER1", at: T0 + 1 });
      await t.store.mdm.commands.issue(command("cmd-1", "enr_1"), T0 + 2);
      await t.store.mdm.enrolments.create(enrolment("enr_2", "K1", { createdAt: T0 + 5 }));
      expect((await t.store.mdm.enrolments.get("enr_1"))?.state).toBe("checked_out");
      expect(await t.store.mdm.commands.outstanding("enr_1", T0 + 6)).toBeUndefined();
      expect((await t.store.mdm.enrolments.byIdentityKey("K1"))?.id).toBe("enr_2");
      expect((await t.store.mdm.enrolments.forAccount("acct_a")).map((e) => e.id)).toEqual(["enr_2", "enr_1"]);
    });

    test("bind enrols once, is idempotent, and refuses unknown, expired, foreign and checked-out tokens", async () => {
      await using t = await seeded();
      await t.store.mdm.enrolments.create(enrolment("enr_1", "K1"));
      await t.store.mdm.enrolments.create(enrolment("enr_2", "K2", { tokenExpiresAt: T0 + MIN }));
      const bound = await t.store.mdm.enrolments.bind({ tokenHash: "hash-enr_1", nanomdmId: "HW-1", serial: "SER1", at: T0 + 10 });
      const expected = { ...enrolment("enr_1", "K1"), nanomdmId: "HW-1", serial: "SER1", state: "enrolled" as const, updatedAt: T0 + 10 };
      expect(bound).toEqual({ ok: true, enrolment: expected });
      expect(await t.store.mdm.enrolments.bind({ tokenHash: "hash-enr_1", nanomdmId: "HW-1", serial: "SER1", at: T0 + 20 })).toEqual({
        ok: true,
        enrolment: expected,
      });
      expect(await t.store.mdm.enrolments.byNanomdmId("HW-1")).toEqual(expected);
      const refusals = [
        await t.store.mdm.enrolments.bind({ tokenHash: "nope", nanomdmId: "HW-9", serial: "SER9", at: T0 }),
        await t.store.mdm.enrolments.bind({ tokenHash: "hash-enr_1", nanomdmId: "HW-2", serial: "SER2", at: T0 + 30 }),
        await t.store.mdm.enrolments.bind({ tokenHash: "hash-enr_2", nanomdmId: "HW-2", serial: "SER2", at: T0 + MIN }),
      ];
      expect(refusals).toEqual([
        { ok: false, reason: "unknown_token" },
        { ok: false, reason: "other_device" },
        { ok: false, reason: "token_expired" },
      ]);
      await t.store.mdm.enrolments.checkOut("enr_1", T0 + 40);
      expect(await t.store.mdm.enrolments.bind({ tokenHash: "hash-enr_1", nanomdmId: "HW-1", serial: "SER1", at: T0 + 50 })).toEqual({
        ok: false,
        reason: "checked_out",
      });
      expect(await t.store.mdm.enrolments.byNanomdmId("HW-1")).toBeUndefined();
    });

    test("one identity key per serial: another Mac's serial refused, the same Mac re-enrolling supersedes", async () => {
      await using t = await seeded();
      for (const [id, key] of [
        ["enr_1", "K1"],
        ["enr_2", "K2"],
        ["enr_3", "K3"],
      ] as const) {
        await t.store.mdm.enrolments.create(enrolment(id, key));
      }
      await t.store.mdm.enrolments.bind({ tokenHash: "hash-enr_1", nanomdmId: "HW-1", serial: "SER1", at: T0 + 1 });
      // Another device claiming the serial: refused, the token stays issued.
      expect(await t.store.mdm.enrolments.bind({ tokenHash: "hash-enr_2", nanomdmId: "HW-X", serial: "SER1", at: T0 + 2 })).toEqual({
        ok: false,
        reason: "serial_taken",
      });
      expect((await t.store.mdm.enrolments.get("enr_2"))?.state).toBe("issued");
      // The same Mac with a new identity key's enrolment: the old enrolment is checked out.
      const again = await t.store.mdm.enrolments.bind({ tokenHash: "hash-enr_3", nanomdmId: "HW-1", serial: "SER1", at: T0 + 3 });
      expect(again.ok).toBe(true);
      expect((await t.store.mdm.enrolments.get("enr_1"))?.state).toBe("checked_out");
      expect((await t.store.mdm.enrolments.byNanomdmId("HW-1"))?.id).toBe("enr_3");
    });

    test("racing binds of one serial from two Macs enrol exactly one", async () => {
      await using t = await seeded();
      const ids = Array.from({ length: 6 }, (_, i) => `enr_${i}`);
      for (const id of ids) await t.store.mdm.enrolments.create(enrolment(id, `K-${id}`));
      const results = await Promise.all(
        ids.map((id) => t.store.mdm.enrolments.bind({ tokenHash: `hash-${id}`, nanomdmId: `HW-${id}`, serial: "SER1", at: T0 + 1 })),
      );
      expect(results.filter((r) => r.ok).length).toBe(1);
      expect(results.filter((r) => !r.ok).map((r) => (r.ok ? "" : r.reason))).toEqual(Array(5).fill("serial_taken"));
    });
  });

  describe("mdm commands and chains", () => {
    test("one outstanding command per enrolment; an expired one is replaced; unknown enrolment undefined", async () => {
      await using t = await seeded();
      await t.store.mdm.enrolments.create(enrolment("enr_1", "K1"));
      expect(await t.store.mdm.commands.issue(command("c1", "enr_1"), T0)).toEqual({ command: command("c1", "enr_1"), created: true });
      expect(await t.store.mdm.commands.issue(command("c2", "enr_1", T0 + MIN), T0 + MIN)).toEqual({
        command: command("c1", "enr_1"),
        created: false,
      });
      expect(await t.store.mdm.commands.outstanding("enr_1", T0 + 29 * MIN)).toEqual(command("c1", "enr_1"));
      expect(await t.store.mdm.commands.outstanding("enr_1", T0 + 30 * MIN)).toBeUndefined();
      const later = command("c3", "enr_1", T0 + 31 * MIN);
      expect(await t.store.mdm.commands.issue(later, T0 + 31 * MIN)).toEqual({ command: later, created: true });
      expect(await t.store.mdm.commands.issue(command("c4", "enr_none"), T0)).toBeUndefined();
    });

    test("consume once, only for its enrolment and before expiry; withdraw removes", async () => {
      await using t = await seeded();
      await t.store.mdm.enrolments.create(enrolment("enr_1", "K1"));
      await t.store.mdm.enrolments.create(enrolment("enr_2", "K2"));
      await t.store.mdm.commands.issue(command("c1", "enr_1"), T0);
      await t.store.mdm.commands.issue(command("c2", "enr_2"), T0);
      expect(await t.store.mdm.commands.consume("c1", "enr_2", T0 + 1)).toBeUndefined();
      expect(await t.store.mdm.commands.consume("c2", "enr_2", T0 + 30 * MIN)).toBeUndefined();
      const racing = await Promise.all(Array.from({ length: 5 }, () => t.store.mdm.commands.consume("c1", "enr_1", T0 + 1)));
      expect(racing.filter((c) => c !== undefined)).toEqual([command("c1", "enr_1")]);
      expect(await t.store.mdm.commands.withdraw("c2")).toBe(true);
      expect(await t.store.mdm.commands.withdraw("c2")).toBe(false);
    });

    test("a chain is stored and replaced whole; unknown enrolment refused", async () => {
      await using t = await seeded();
      await t.store.mdm.enrolments.create(enrolment("enr_1", "K1"));
      const chain: MdmChain = {
        enrolmentId: "enr_1",
        certificates: ["AAEC", "AwQF"],
        chainSha256: "ab".repeat(32),
        serial: "SER1",
        udid: "00006030-000651690A84001C",
        osVersion: "15.5",
        leafNotBefore: T0 - MIN,
        epoch: 2960,
        verifiedAt: T0,
      };
      expect(await t.store.mdm.chains.put(chain)).toBe(true);
      expect(await t.store.mdm.chains.get("enr_1")).toEqual(chain);
      const next = { ...chain, certificates: ["BgcI"], epoch: 2961, verifiedAt: T0 + MIN };
      expect(await t.store.mdm.chains.put(next)).toBe(true);
      expect(await t.store.mdm.chains.get("enr_1")).toEqual(next);
      expect(await t.store.mdm.chains.put({ ...chain, enrolmentId: "enr_none" })).toBe(false);
    });
  });
}
