/**
 * The NanoMDM formats the coordinator reads and writes: NanoMDM's own webhook test data
 * (test/fixtures/nanomdm/, copied from micromdm/nanomdm service/webhook/testdata) read by the check-in and
 * command-report readers; the DeviceInformation command plist; the client against the fake NanoMDM
 * (a wrong key throws, an enrolment without a row is a 500 with nothing queued, nopush, push errors, an
 * unreachable server throws); and a webhook body signed the way NanoMDM signs it.
 */
import { describe, expect, test } from "bun:test";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "plist";
import { DevelopmentRoot } from "../../../attestation/provider/index.ts";
import { deviceInformationCommand, readCheckIn, readCommandReport } from "../../../src/mdm/device-information.ts";
import { NanoMdmClient, NanoMdmError } from "../../../src/mdm/nanomdm-client.ts";
import { MdmWebhook } from "../../../src/mdm/webhook.ts";
import { silentLogger } from "../../../src/observability/logger.ts";
import type { MdmStore } from "../../../src/store/mdm-types.ts";
import { FakeNanoMdm } from "../../support/fake-nanomdm.ts";
import { SimulatedMac } from "../../support/simulated-mac.ts";

const fixture = (name: string) => JSON.parse(readFileSync(join(import.meta.dir, "..", "..", "fixtures", "nanomdm", name), "utf8"));
const raw = (event: { checkin_event?: { raw_payload: string }; acknowledge_event?: { raw_payload: string } }) =>
  Buffer.from((event.checkin_event ?? event.acknowledge_event)?.raw_payload ?? "", "base64");

describe("NanoMDM's own webhook test data", () => {
  test("Authenticate.2.json: the check-in's serial and UDID", () => {
    const event = fixture("Authenticate.2.json");
    expect([event.topic, event.checkin_event.ids]).toEqual([
      "mdm.Authenticate",
      { id: "66ADE930-5FDF-5EC4-8429-15640684C489", type: "Device" },
    ]);
    expect(readCheckIn(raw(event))).toEqual({
      messageType: "Authenticate",
      serialNumber: "C02MT66KFLHH",
      udid: "66ADE930-5FDF-5EC4-8429-15640684C489",
    });
  });

  test("DeviceInformation.1.json: a command report without an attestation", () => {
    const event = fixture("DeviceInformation.1.json");
    expect([event.topic, event.acknowledge_event.status]).toEqual(["mdm.Connect", "Acknowledged"]);
    expect(readCommandReport(raw(event))).toEqual({
      commandUuid: "76eda240-5488-4989-8339-f2ae160113c4",
      status: "Acknowledged",
      requestType: "DeviceInformation",
      chain: undefined,
      serialNumber: undefined,
      provisioningUdid: undefined,
      osVersion: undefined,
    });
    expect(readCommandReport(new TextEncoder().encode("not a plist"))).toBeUndefined();
  });
});

test("the DeviceInformation command: queries, nonce as data, our CommandUUID", () => {
  const nonce = Uint8Array.from({ length: 32 }, (_, i) => i);
  expect(parse(deviceInformationCommand("9f0c5d2e-0000-4000-8000-000000000001", nonce))).toEqual({
    CommandUUID: "9f0c5d2e-0000-4000-8000-000000000001",
    Command: {
      RequestType: "DeviceInformation",
      Queries: ["DevicePropertiesAttestation", "SerialNumber", "ProvisioningUDID", "OSVersion"],
      DeviceAttestationNonce: nonce,
    },
  });
});

describe("NanoMdmClient against the fake NanoMDM", () => {
  test("enqueue and push: results, the 500 before the enrolment row, nopush, a wrong key, an unreachable server", async () => {
    await using fake = new FakeNanoMdm({ apiKey: "k", webhookUrl: "http://127.0.0.1:9/none", webhookKey: "w".repeat(16) }).start();
    const client = new NanoMdmClient({ url: fake.url, apiKey: "k" });
    const mac = new SimulatedMac({
      issuer: await DevelopmentRoot.generate(Date.now),
      now: Date.now,
      serial: "S",
      udid: "U",
      nanomdmId: "HW-1",
    });
    mac.awake = false;
    const command = deviceInformationCommand("c-1", new Uint8Array(32));
    const early = await client.enqueue("HW-1", command);
    fake.register(mac, "token");
    const queued = await client.enqueue("HW-1", deviceInformationCommand("c-2", new Uint8Array(32)));
    const quiet = await client.enqueue("HW-1", deviceInformationCommand("c-3", new Uint8Array(32)), { noPush: true });
    expect([early.enqueued, early.pushed, early.status, early.error?.includes("foreign key")]).toEqual([false, false, 500, true]);
    expect([queued.enqueued, queued.pushed, queued.status]).toEqual([true, true, 200]);
    expect([quiet.enqueued, quiet.pushed, quiet.status]).toEqual([true, false, 200]);
    expect(fake.queueOf(mac).map((q) => q.commandUuid)).toEqual(["c-2", "c-3"]);
    expect([(await client.push("HW-1")).pushed, (await client.push("HW-unknown")).status]).toEqual([true, 500]);
    expect(new NanoMdmClient({ url: fake.url, apiKey: "wrong" }).push("HW-1")).rejects.toBeInstanceOf(NanoMdmError);
    expect(new NanoMdmClient({ url: "http://127.0.0.1:9", apiKey: "k", timeoutMs: 2000 }).push("HW-1")).rejects.toBeInstanceOf(
      NanoMdmError,
    );
  });
});

test("the webhook's signature: NanoMDM's base64 HMAC-SHA256 of the exact body", () => {
  const webhook = new MdmWebhook({
    key: "k".repeat(16),
    store: {} as MdmStore,
    verify: () => Promise.reject(new Error()),
    now: Date.now,
    logger: silentLogger,
  });
  const body = new TextEncoder().encode(JSON.stringify(fixture("Authenticate.2.json")));
  const good = createHmac("sha256", "k".repeat(16)).update(body).digest("base64");
  const flipped = Buffer.from(body);
  flipped[10] = (flipped[10] as number) ^ 1;
  expect([
    webhook.signed(body, good),
    webhook.signed(flipped, good),
    webhook.signed(body, null),
    webhook.signed(body, good.slice(0, 20)),
  ]).toEqual([true, false, false, false]);
});
