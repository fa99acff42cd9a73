/**
 * The MDM path on the Postgres store (test/support/pg.ts; skipped, saying so, without a server): check-ins
 * bind, a report is attested once (a duplicate ignored), and two Macs claiming one serial at once enrol
 * one, through the same webhook route, fake NanoMDM and scheduler as scenarios.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { mdmEnv } from "../../support/mdm-env.ts";
import { testDatabase } from "../../support/pg.ts";

const SUITE = "MDM scenarios on Postgres";
const db = await testDatabase([SUITE]);

if (db) {
  describe(SUITE, () => {
    test("enrol, attest, a duplicate report ignored", async () => {
      const { store } = await db.open();
      await using env = await mdmEnv({ store });
      env.fake.webhookMode = () => "twice";
      const p = await env.provider();
      await env.enrol(p);
      await env.attest(p);
      expect(env.results()).toEqual(["attested", "ignored:unsolicited"]);
      expect((await env.store.mdm.chains.get(p.enrolmentId))?.serial).toBe(p.mac.serial);
    });

    test("two Macs checking in with one serial at once: one enrolled, the other refused", async () => {
      const { store } = await db.open();
      await using env = await mdmEnv({ store });
      const a = await env.provider({ serial: "C02SAMESERIAL" });
      const b = await env.provider({ serial: "C02SAMESERIAL" });
      const answers = await Promise.all([env.fake.enrol(a.mac, a.token), env.fake.enrol(b.mac, b.token)]);
      expect(answers.map((r) => (r as { result: string }).result).sort()).toEqual(["bind_refused:serial_taken", "bound"]);
    });
  });
} else {
  describe.skip("Postgres (no server: see the line above)", () => {
    test(SUITE, () => {});
  });
}
