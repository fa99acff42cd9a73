/**
 * Cluster mode's machines list: a device token whose machine is connected to another replica is online
 * as that replica's digest tells it (trust, its usual source, models); a digest entry without a token id
 * (an older replica) or of another account's token shows nothing.
 */
import { expect, test } from "bun:test";
import type { RemoteMachine } from "../../src/console/console-json.ts";
import { ConsoleService } from "../../src/console/console-service.ts";
import { testApp } from "../support/harness.ts";
import { providerToken } from "../support/server.ts";

test("machines on other replicas are online with the digest's trust and models", async () => {
  await using t = await testApp();
  const a = await t.app.admin.createAccount({ name: "a" });
  const b = await t.app.admin.createAccount({ name: "b" });
  await providerToken(t, a.id);
  await providerToken(t, b.id);
  const mine = (await t.store.providerTokens.list(a.id))[0]?.id as string;
  const theirs = (await t.store.providerTokens.list(b.id))[0]?.id as string;
  const remote: Record<string, RemoteMachine[]> = {
    [a.id]: [
      { tok: mine, trust: "self_signed", builds: ["org/y", "org/x"] },
      { tok: mine, trust: "hardware", builds: ["org/x"] },
      { trust: "hardware", builds: ["org/old-replica"] },
      { tok: theirs, trust: "hardware", builds: ["org/b"] },
    ],
  };
  const service = new ConsoleService({
    store: t.store,
    admin: t.app.admin,
    fleet: t.app.fleet,
    remoteMachines: (id) => remote[id] ?? [],
    deviceFlow: t.app.deviceFlow,
    platformFeePercent: 10,
    now: () => Date.now(),
  });
  const { data } = await service.machines(a.id);
  expect(data.map((m) => [m.id, m.online, m.trust_level, m.trust_source, m.models])).toEqual([
    [mine, true, "hardware", "mda_chain", ["org/x", "org/y"]],
  ]);
  expect((await service.machines(b.id)).data.map((m) => [m.id, m.online])).toEqual([[theirs, false]]);
});
