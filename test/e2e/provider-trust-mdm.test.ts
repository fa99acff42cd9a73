/**
 * Issue 23 point 5 end to end: a coordinator in MDM mode on a real socket, the fake NanoMDM and a simulated
 * Mac (leaves from the coordinator's own development root), real provider sessions with a software identity.
 * Enrolment through the route, the Mac's check-ins through the webhook, then the provider connects: it
 * serves at self_signed until its first chain, the fleet asks the scheduler, DeviceInformation is enqueued
 * and answered, the chain stored, and the live session rises to hardware without a reconnect. A reconnect
 * keeps hardware from the stored chain with NanoMDM down; a chain stored through another replica (straight
 * into the store here) raises it at the fleet's next re-vouch; a chain stored for another key never does.
 */
import { describe, expect, test } from "bun:test";
import { type PlistValue, parse } from "plist";
import { buildEvidence, FULL_SECURITY, SoftwareIdentity } from "../../attestation/provider/index.ts";
import { mdaEpoch, mdaNonce } from "../../attestation/provider/mda-nonce.ts";
import { enrolMessage } from "../../src/mdm/enrolment.ts";
import { type Agent, startAgent } from "../../src/provider/agent.ts";
import { createEchoEngine } from "../../src/provider/engines/echo.ts";
import { issueAppleLeaf } from "../support/apple-leaf.ts";
import { FakeNanoMdm } from "../support/fake-nanomdm.ts";
import { seedAccount, seedCatalog, tempDir, testApp } from "../support/harness.ts";
import { mdmEnv, testCa } from "../support/mdm-ca.ts";
import { providerToken, startServer } from "../support/server.ts";
import { SimulatedMac } from "../support/simulated-mac.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
const POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.5" } as const;
const API_KEY = "e2e-nanomdm-api-key";
const WEBHOOK_KEY = "e2e-webhook-hmac-key-0123456789";
const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");
const SEED = new Uint8Array(32).fill(0x5e);

interface Listed {
  readonly trust_level: string;
  readonly identity_key: string | null;
  readonly device_chain_verified: boolean;
  readonly device_chain_source: string | null;
  readonly device_chain_accepted_until: number | null;
  readonly posture: Record<string, unknown> | null;
}

async function setup() {
  const dir = tempDir();
  let webhookUrl = "";
  const fake = new FakeNanoMdm({ apiKey: API_KEY, webhookUrl: () => webhookUrl, webhookKey: WEBHOOK_KEY }).start();
  const env = {
    ...mdmEnv(dir.path, testCa()),
    UMBRA_MDM_URL: fake.url,
    UMBRA_MDM_API_KEY: API_KEY,
    UMBRA_MDM_WEBHOOK_KEY: WEBHOOK_KEY,
    UMBRA_MDA_SEED: Buffer.from(SEED).toString("hex"),
  };
  const t = await testApp({ env, mdmTimings: { connectJitterMs: 1, retry: { baseMs: 10, maxMs: 50, attempts: 5 }, revouchMs: 1 } });
  await seedCatalog(t);
  const { accountId } = await seedAccount(t);
  const token = await providerToken(t, accountId);
  const server = startServer(t);
  webhookUrl = `${server.url}/v1/mdm/webhook`;
  const root = (await t.app.trust()).devRoot;
  if (!root) throw new Error("no development root");
  const agents: Agent[] = [];
  let macs = 0;

  /** Part C's route: challenge, signature, profile; the enrolment token read from the profile's URL. */
  async function enrolKey(identity: SoftwareIdentity): Promise<string> {
    const auth = { authorization: `Bearer ${token}` };
    const c = await fetch(`${server.url}/v1/provider/enroll/challenge`, { method: "POST", headers: auth });
    const challenge = new Uint8Array(Buffer.from(((await c.json()) as { challenge: string }).challenge, "base64"));
    const body = {
      challenge: b64(challenge),
      identity_key: b64(identity.publicKey(65)),
      signature: b64(identity.sign(enrolMessage(challenge))),
    };
    const r = await fetch(`${server.url}/v1/provider/enroll`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(r.headers.get("content-type")).toBe("application/x-apple-aspen-config");
    const profile = parse(await r.text()) as { PayloadContent: { [key: string]: PlistValue }[] };
    return new URL(String(profile.PayloadContent[1]?.ServerURL)).searchParams.get("e") ?? "";
  }

  /** Enrols the key, then its Mac installs the profile: Authenticate and TokenUpdate through the webhook. */
  async function enrolledMac(identity: SoftwareIdentity): Promise<SimulatedMac> {
    const e = await enrolKey(identity);
    const i = ++macs;
    const mac = new SimulatedMac({
      issuer: root as NonNullable<typeof root>,
      now: Date.now,
      serial: `C02E2E${String(i).padStart(6, "0")}`,
      udid: `00008112-${String(i).padStart(16, "0")}`,
      nanomdmId: `${String(i).padStart(8, "0")}-0000-4000-8000-000000000000`,
    });
    await fake.enrol(mac, e);
    await fake.tokenUpdate(mac);
    return mac;
  }

  async function connect(identity: SoftwareIdentity): Promise<Agent> {
    const agent = startAgent({
      identity,
      url: `${server.url.replace(/^http/, "ws")}/v1/provider/connect`,
      token,
      engine: createEchoEngine({ models: [BUILD] }),
      maxConcurrency: 2,
      evidence: async (encryptionKey) => buildEvidence({ identity, encryptionKey, posture: POSTURE, timestamp: Date.now() }).wire,
    });
    agents.push(agent);
    await waitFor(() => agent.state().connected, "welcome");
    return agent;
  }

  async function listed(identity: SoftwareIdentity): Promise<Listed | undefined> {
    const r = await fetch(`${server.url}/v1/providers/attestation`);
    const key = Buffer.from(identity.publicKey(65)).toString("base64url");
    return ((await r.json()) as { data: Listed[] }).data.find((p) => p.identity_key === key);
  }

  return {
    t,
    root,
    token,
    fake,
    server,
    enrolledMac,
    connect,
    listed,
    async [Symbol.asyncDispose]() {
      for (const a of agents) await a.stop();
      await server[Symbol.asyncDispose]();
      await fake[Symbol.asyncDispose]().catch(() => undefined);
      await t[Symbol.asyncDispose]();
      dir[Symbol.dispose]();
    },
  };
}

describe("hardware trust from stored MDM chains", () => {
  test("enrol, check in, connect at self_signed, DeviceInformation answered, chain stored: hardware without a reconnect", async () => {
    await using env = await setup();
    const identity = SoftwareIdentity.generate();
    const mac = await env.enrolledMac(identity);
    // The Mac's answer is held: the provider waits for its first chain at self_signed.
    env.fake.webhookMode = () => "hold";
    const agent = await env.connect(identity);
    expect(agent.state().trustLevel).toBe("self_signed");
    await waitFor(() => env.fake.held.length === 1, "the Mac answered DeviceInformation");
    expect((await env.listed(identity))?.trust_level).toBe("self_signed");
    expect(env.fake.enqueues.map((q) => q.id)).toEqual([mac.nanomdmId]);
    await env.fake.releaseHeld();
    expect(env.fake.delivered.filter((d) => d.topic === "mdm.Connect").map((d) => (d.body as { result: string }).result)).toContain(
      "attested",
    );
    await waitFor(async () => (await env.listed(identity))?.trust_level === "hardware", "raised to hardware");
    const entry = await env.listed(identity);
    expect(entry).toMatchObject({
      trust_level: "hardware",
      device_chain_verified: true,
      device_chain_source: "mdm",
      posture: { sip_enabled: true, secure_boot: "Full Security", third_party_kexts: false },
    });
    expect(entry?.device_chain_accepted_until).toBeGreaterThan(Date.now());
    // The enrolment's status reads the same stored chain.
    const status = await fetch(`${env.server.url}/v1/provider/enroll/status`, { headers: { authorization: `Bearer ${env.token}` } });
    expect(((await status.json()) as { state: string }).state).toBe("attested");
  });

  test("a reconnect keeps hardware from the stored chain with NanoMDM down", async () => {
    await using env = await setup();
    const identity = SoftwareIdentity.generate();
    await env.enrolledMac(identity);
    const first = await env.connect(identity);
    await waitFor(async () => (await env.listed(identity))?.trust_level === "hardware", "first chain");
    await first.stop();
    await env.fake[Symbol.asyncDispose]();
    const again = await env.connect(identity);
    // At welcome already: the stored chain re-checked from the store, never waiting on NanoMDM.
    expect(again.state().trustLevel).toBe("hardware");
    expect(await env.listed(identity)).toMatchObject({ trust_level: "hardware", device_chain_source: "mdm" });
  });

  test("a chain stored through another replica raises the connection at the fleet's next re-vouch", async () => {
    await using env = await setup();
    const identity = SoftwareIdentity.generate();
    const mac = await env.enrolledMac(identity);
    // This replica's own request is answered, but its webhook goes elsewhere (another replica).
    env.fake.webhookMode = () => "drop";
    await env.connect(identity);
    await waitFor(() => env.fake.enqueues.length === 1, "DeviceInformation enqueued");
    expect((await env.listed(identity))?.trust_level).toBe("self_signed");
    const store = env.t.app.store.mdm;
    const enrolment = await store.enrolments.byIdentityKey(b64(identity.publicKey(65)));
    if (!enrolment) throw new Error("no enrolment");
    const now = Date.now();
    const chain = await issueAppleLeaf(env.root, {
      nonce: mdaNonce(SEED, mdaEpoch(now), identity.publicKey(65)),
      serialNumber: mac.serial,
      udid: mac.udid,
    });
    await store.chains.put({
      enrolmentId: enrolment.id,
      certificates: chain.map((c) => b64(c)),
      chainSha256: "",
      serial: mac.serial,
      udid: mac.udid,
      osVersion: "15.5",
      leafNotBefore: now,
      epoch: mdaEpoch(now),
      verifiedAt: now,
    });
    env.t.app.fleet.sweep();
    await waitFor(async () => (await env.listed(identity))?.trust_level === "hardware", "raised by the re-vouch");
  });

  test("a chain stored for another identity key never gives hardware", async () => {
    await using env = await setup();
    const owner = SoftwareIdentity.generate();
    const other = SoftwareIdentity.generate();
    await env.enrolledMac(owner);
    await env.enrolledMac(other);
    const a = await env.connect(owner);
    await waitFor(async () => (await env.listed(owner))?.trust_level === "hardware", "the owner's chain");
    await a.stop();
    // The owner's chain copied onto the other key's enrolment (a Mac lending its attestation).
    const store = env.t.app.store.mdm;
    const ownerEnrolment = await store.enrolments.byIdentityKey(b64(owner.publicKey(65)));
    const otherEnrolment = await store.enrolments.byIdentityKey(b64(other.publicKey(65)));
    const chain = ownerEnrolment && (await store.chains.get(ownerEnrolment.id));
    if (!chain || !otherEnrolment) throw new Error("no chain or enrolment");
    await store.chains.put({ ...chain, enrolmentId: otherEnrolment.id, serial: otherEnrolment.serial ?? "" });
    await env.fake[Symbol.asyncDispose]();
    const b = await env.connect(other);
    expect(b.state().trustLevel).toBe("self_signed");
    expect(await env.listed(other)).toMatchObject({ trust_level: "self_signed", device_chain_verified: false, device_chain_source: null });
  });
});
