/**
 * Provider trust from verified evidence: a provider's hello evidence is checked against the coordinator's
 * trust anchor (here the development root, through the same code as Apple's) and bound to the hello's
 * encryption key. The level it earns sets routing (the floor) and the /v1/models attestation metadata;
 * nothing unverified counts.
 */
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  answerChallenge,
  buildEvidence,
  FULL_SECURITY,
  parseChallenge,
  parseIdentityKey,
  SoftwareIdentity,
  verifyIdentitySignature,
} from "../../attestation/provider/index.ts";
import { toHex } from "../../src/crypto/encoding.ts";
import { receiptBytes, responseSha256 } from "../../src/crypto/receipts.ts";
import { type Agent, type AgentOptions, startAgent } from "../../src/provider/agent.ts";
import { createEchoEngine } from "../../src/provider/engines/echo.ts";
import { seedAccount, seedCatalog, type TestApp, tempDir, testApp } from "../support/harness.ts";
import { startProvider } from "../support/processes.ts";
import { chatBody, postChat, providerToken, startServer, type TestServer } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
const POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;

type EvidenceMaker = (t: TestApp, encryptionKey: Uint8Array) => Promise<Readonly<Record<string, unknown>>>;

/** Evidence with a device chain from the app's development root for `identity`: earns `hardware`. */
const hardwareFor =
  (identity: SoftwareIdentity): EvidenceMaker =>
  async (t, encryptionKey) => {
    const { devRoot } = await t.app.trust();
    if (!devRoot) throw new Error("no development root");
    const mdaChain = await devRoot.issueDeviceChain({ identityKey: identity.publicKey(), posture: POSTURE });
    return buildEvidence({ identity, encryptionKey, posture: POSTURE, timestamp: Date.now(), mdaChain }).wire;
  };

/** Evidence with a device chain from the app's development root: earns `hardware`. */
const hardware: EvidenceMaker = async (t, encryptionKey) => {
  const { devRoot } = await t.app.trust();
  if (!devRoot) throw new Error("no development root");
  const identity = SoftwareIdentity.generate();
  const mdaChain = await devRoot.issueDeviceChain({ identityKey: identity.publicKey(), posture: POSTURE });
  return buildEvidence({ identity, encryptionKey, posture: POSTURE, timestamp: Date.now(), mdaChain }).wire;
};

interface Ctx extends AsyncDisposable {
  readonly t: TestApp;
  readonly server: TestServer;
  readonly apiKey: string;
  provider(
    evidence?: EvidenceMaker,
    identity?: { sign(message: Uint8Array): Uint8Array },
    answer?: AgentOptions["answerChallenge"],
  ): Promise<Agent>;
  metadata(): Promise<Record<string, unknown>>;
}

async function setup(env: Record<string, string> = {}): Promise<Ctx> {
  const t = await testApp({ env });
  await seedCatalog(t);
  const { accountId, apiKey } = await seedAccount(t);
  const token = await providerToken(t, accountId);
  const server = startServer(t);
  const agents: Agent[] = [];
  return {
    t,
    server,
    apiKey,
    async provider(evidence, identity, answer) {
      const agent = startAgent({
        ...(identity ? { identity } : {}),
        ...(answer ? { answerChallenge: answer } : {}),
        url: `${server.url.replace(/^http/, "ws")}/v1/provider/connect`,
        token,
        engine: createEchoEngine({ models: [BUILD] }),
        maxConcurrency: 4,
        ...(evidence ? { evidence: (key: Uint8Array) => evidence(t, key) } : {}),
      });
      agents.push(agent);
      await waitFor(() => agent.state().connected, "welcome");
      return agent;
    },
    async metadata() {
      const r = await fetch(`${server.url}/v1/models/org/model`, { headers: { authorization: `Bearer ${apiKey}` } });
      return ((await r.json()) as { metadata: Record<string, unknown> }).metadata;
    },
    async [Symbol.asyncDispose]() {
      for (const a of agents) await a.stop();
      await server[Symbol.asyncDispose]();
      await t[Symbol.asyncDispose]();
    },
  };
}

describe("trust from verified evidence", () => {
  test("development-root evidence earns hardware: welcome, /v1/models metadata with posture booleans", async () => {
    await using ctx = await setup();
    const agent = await ctx.provider(hardware);
    expect(agent.state().trustLevel).toBe("hardware");
    expect(await ctx.metadata()).toEqual(
      expect.objectContaining({
        provider_count: 1,
        attested_providers: 1,
        trust_level: "hardware",
        attestation: {
          secure_enclave: true,
          sip_enabled: true,
          secure_boot: true,
          device_chain_verified: true,
          device_chain_sources: ["evidence"],
        },
      }),
    );
  });

  test("GET /v1/providers/attestation publishes keys, verified levels and posture, without credentials or accounts", async () => {
    await using ctx = await setup();
    await ctx.provider(hardware);
    await ctx.provider();
    const response = await fetch(`${ctx.server.url}/v1/providers/attestation`);
    const body = (await response.json()) as { object: string; data: Record<string, unknown>[] };
    const byLevel = Object.fromEntries(body.data.map((p) => [String(p.trust_level), p]));
    expect(byLevel.hardware).toEqual({
      provider_id: expect.stringMatching(/^prov_/),
      trust_level: "hardware",
      routable: true,
      secure_enclave: true,
      device_chain_verified: true,
      device_chain_source: "evidence",
      device_chain_accepted_until: null,
      identity_key: expect.stringMatching(/^[A-Za-z0-9_-]{87}$/),
      identity_key_sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
      encryption_key: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
      posture: { sip_enabled: true, secure_boot: "Full Security", third_party_kexts: false, os_version: "15.1" },
      models: [BUILD],
    });
    expect(byLevel.none).toEqual(
      expect.objectContaining({ secure_enclave: false, device_chain_verified: false, identity_key: null, posture: null }),
    );
    expect(JSON.stringify(body)).not.toMatch(/acct_|umbra-pt-|serial/);
  });

  test("signed evidence without a device chain earns self_signed; posture is not proven", async () => {
    await using ctx = await setup();
    const agent = await ctx.provider(
      async (_t, encryptionKey) =>
        buildEvidence({ identity: SoftwareIdentity.generate(), encryptionKey, posture: POSTURE, timestamp: Date.now() }).wire,
    );
    expect(agent.state().trustLevel).toBe("self_signed");
    expect(await ctx.metadata()).toEqual(
      expect.objectContaining({
        attested_providers: 1,
        trust_level: "self_signed",
        attestation: {
          secure_enclave: true,
          sip_enabled: false,
          secure_boot: false,
          device_chain_verified: false,
          device_chain_sources: [],
        },
      }),
    );
  });

  test.each<[string, EvidenceMaker | undefined]>([
    ["no evidence", undefined],
    ["evidence bound to another encryption key", async (t) => hardware(t, new Uint8Array(32).fill(7))],
    [
      "evidence whose signed payload was altered",
      async (t, key) => {
        const wire = (await hardware(t, key)) as Record<string, unknown>;
        const payload = String(wire.payload);
        const altered = payload.slice(0, -4) + (payload.slice(-4) === "AAAA" ? "BBBB" : "AAAA");
        return { ...wire, payload: altered };
      },
    ],
  ])("%s -> trust none, nothing attested", async (_, evidence) => {
    await using ctx = await setup();
    const agent = await ctx.provider(evidence);
    expect(agent.state().trustLevel).toBe("none");
    const metadata = await ctx.metadata();
    expect([metadata.attested_providers, metadata.trust_level, metadata.attestation]).toEqual([0, "none", undefined]);
  });

  test("the routing floor: below it a provider is connected but not routable; at it, it serves", async () => {
    await using ctx = await setup({ UMBRA_MIN_TRUST: "hardware" });
    await ctx.provider();
    expect(await ctx.metadata()).toEqual(expect.objectContaining({ provider_count: 1, routable_providers: 0, can_accept: false }));
    const refused = await postChat(ctx.server.url, ctx.apiKey, chatBody("x"));
    expect([refused.status, ((await refused.json()) as { error: { code: string } }).error.code]).toEqual([503, "model_unavailable"]);

    const identity = SoftwareIdentity.generate();
    await ctx.provider(hardwareFor(identity), identity);
    const served = await postChat(ctx.server.url, ctx.apiKey, chatBody("attested only"));
    expect(((await served.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content).toBe("attested only");
  });
});

describe("receipts", () => {
  test("an attested provider signs every answer; a consumer verifies it with the published key", async () => {
    await using ctx = await setup();
    const identity = SoftwareIdentity.generate();
    await ctx.provider(hardwareFor(identity), identity);
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("signed words"));
    const body = (await response.json()) as {
      choices: { message: { content: string } }[];
      usage: { prompt_tokens: number; completion_tokens: number };
      se_signature: string;
      response_hash: string;
      metadata: { receipt_version: number; provider_key_id: string; trust_level: string; request_hash: string; model_build: string };
    };
    const content = body.choices[0]?.message.content ?? "";
    expect(body.response_hash).toBe(toHex(responseSha256(content)));
    expect([body.metadata.receipt_version, body.metadata.trust_level, body.metadata.model_build]).toEqual([2, "hardware", BUILD]);

    // What a consumer does: the provider's key from the public list, the receipt bytes from the answer.
    const providers = (await (await fetch(`${ctx.server.url}/v1/providers/attestation`)).json()) as {
      data: { identity_key: string; identity_key_sha256: string }[];
    };
    const published = providers.data.find((p) => p.identity_key_sha256 === body.metadata.provider_key_id);
    if (!published) throw new Error("the signing provider is not published");
    const key = parseIdentityKey(Buffer.from(published.identity_key, "base64url"));
    const bytes = receiptBytes({
      requestId: response.headers.get("x-request-id") as string,
      modelBuild: body.metadata.model_build,
      requestSha256: Buffer.from(body.metadata.request_hash, "hex"),
      responseSha256: Buffer.from(body.response_hash, "hex"),
      usage: { promptTokens: body.usage.prompt_tokens, cachedTokens: 0, completionTokens: body.usage.completion_tokens },
    });
    expect(() => verifyIdentitySignature(key, bytes, Buffer.from(body.se_signature, "base64url"), "receipt")).not.toThrow();
    // One changed claim and it no longer verifies.
    const forged = receiptBytes({
      requestId: response.headers.get("x-request-id") as string,
      modelBuild: BUILD,
      requestSha256: Buffer.from(body.metadata.request_hash, "hex"),
      responseSha256: Buffer.from(body.response_hash, "hex"),
      usage: { promptTokens: body.usage.prompt_tokens, cachedTokens: 0, completionTokens: body.usage.completion_tokens + 1 },
    });
    expect(() => verifyIdentitySignature(key, forged, Buffer.from(body.se_signature, "base64url"), "receipt")).toThrow();
  });

  test.each<[string, { sign(message: Uint8Array): Uint8Array } | undefined]>([
    ["signs with another key", SoftwareIdentity.generate()],
    ["signs nothing", undefined],
  ])("an attested provider that %s -> 502 invalid_provider_output, cut off", async (_, signer) => {
    await using ctx = await setup();
    const identity = SoftwareIdentity.generate();
    await ctx.provider(hardwareFor(identity), signer);
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x"));
    expect([response.status, ((await response.json()) as { error: { code: string } }).error.code]).toEqual([
      502,
      "invalid_provider_output",
    ]);
    await waitFor(() => ctx.t.app.fleet.list().length === 0, "the provider cut off");
  });

  test("a provider without verified identity gets no receipt fields", async () => {
    await using ctx = await setup();
    await ctx.provider();
    const body = (await (await postChat(ctx.server.url, ctx.apiKey, chatBody("plain"))).json()) as Record<string, unknown>;
    expect(["se_signature", "response_hash", "metadata"].filter((k) => k in body)).toEqual([]);
  });
});

describe("a separately started provider joins a development coordinator at hardware", () => {
  test("umbra-provider start --dev-attestation on: hardware, and its answers carry receipts", async () => {
    await using ctx = await setup();
    const account = await ctx.t.app.admin.createAccount({ name: "machine" });
    const token = (await ctx.t.app.admin.createProviderToken({ account_id: account.id })).token;
    await using proc = startProvider([
      "--coordinator",
      ctx.server.url,
      "--token",
      token,
      "--engine",
      "echo",
      "--model",
      BUILD,
      "--dev-attestation",
      "on",
    ]);
    await proc.connected;
    expect(await ctx.metadata()).toEqual(expect.objectContaining({ trust_level: "hardware", attested_providers: 1 }));
    const body = (await (await postChat(ctx.server.url, ctx.apiKey, chatBody("from another process"))).json()) as Record<string, unknown>;
    expect([typeof body.se_signature, (body.metadata as { trust_level: string }).trust_level]).toEqual(["string", "hardware"]);
  });

  test("umbra-provider start --identity-helper: the helper's key is the published identity and signs receipts", async () => {
    await using ctx = await setup();
    const account = await ctx.t.app.admin.createAccount({ name: "machine" });
    const token = (await ctx.t.app.admin.createProviderToken({ account_id: account.id })).token;
    const secret = SoftwareIdentity.generate();
    const secretHex = "11".repeat(32);
    const helperKey = SoftwareIdentity.fromSecretKey(new Uint8Array(Buffer.from(secretHex, "hex")));
    using dir = tempDir();
    const helper = join(dir.path, "umbra-se-helper");
    writeFileSync(helper, `#!/bin/sh\nexec "${process.execPath}" "${join(import.meta.dir, "../fixtures/fake-identity-helper.ts")}" ok\n`, {
      mode: 0o755,
    });
    const args = ["--coordinator", ctx.server.url, "--token", token, "--engine", "echo", "--model", BUILD];

    await using proc = startProvider([...args, "--dev-attestation", "on", "--identity-helper", helper], { FAKE_HELPER_KEY: secretHex });
    await proc.connected;
    const published = (await (await fetch(`${ctx.server.url}/v1/providers/attestation`)).json()) as {
      data: { identity_key: string; trust_level: string }[];
    };
    expect(published.data.map((p) => [p.identity_key, p.trust_level])).toEqual([
      [Buffer.from(helperKey.publicKey()).toString("base64url"), "hardware"],
    ]);
    expect(Buffer.from(secret.publicKey()).toString("base64url")).not.toBe(published.data[0]?.identity_key);
    const body = (await (await postChat(ctx.server.url, ctx.apiKey, chatBody("signed by the helper"))).json()) as Record<string, unknown>;
    expect((body.metadata as { trust_level: string }).trust_level).toBe("hardware");

    // Without --dev-attestation, and this coordinator offering no MDM enrolment: a clear refusal.
    const alone = Bun.spawn(
      [process.execPath, join(import.meta.dir, "../../src/provider/main.ts"), "start", ...args, "--identity-helper", helper],
      {
        stdout: "pipe",
        stderr: "pipe",
      },
    );
    expect(await alone.exited).not.toBe(0);
    expect(await new Response(alone.stderr).text()).toContain(
      "--identity-helper needs --dev-attestation on, or a coordinator with MDM enrolment",
    );
  });

  test("a production coordinator offers no development chain: 404, and the provider does not start", async () => {
    await using ctx = await setup({ UMBRA_MODE: "production", UMBRA_TRUST_ROOT: "apple" });
    const account = await ctx.t.app.admin.createAccount({ name: "machine" });
    const token = (await ctx.t.app.admin.createProviderToken({ account_id: account.id })).token;
    const direct = await fetch(`${ctx.server.url}/v1/provider/dev-chain`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({
        identity_key: Buffer.from(SoftwareIdentity.generate().publicKey()).toString("base64url"),
        posture: { sip_enabled: true, secure_boot: "Full Security", third_party_kexts: false, os_version: "15.1" },
      }),
    });
    expect(direct.status).toBe(404);
    await using proc = startProvider([
      "--coordinator",
      ctx.server.url,
      "--token",
      token,
      "--engine",
      "echo",
      "--model",
      BUILD,
      "--dev-attestation",
      "on",
    ]);
    expect(await proc.proc.exited).not.toBe(0);
  });

  test("the dev-chain endpoint wants a live provider device token", async () => {
    await using ctx = await setup();
    const response = await fetch(`${ctx.server.url}/v1/provider/dev-chain`, {
      method: "POST",
      headers: { authorization: `Bearer ${ctx.apiKey}` },
    });
    expect(response.status).toBe(401);
  });
});

describe("challenges", () => {
  /** Fast challenge rounds: every 150 ms, 60 ms to answer; the sweep runs every 15 ms. */
  const FAST = {
    UMBRA_CHALLENGE_INTERVAL_MS: "150",
    UMBRA_CHALLENGE_TIMEOUT_MS: "60",
    UMBRA_PROVIDER_HEARTBEAT_MS: "30",
    UMBRA_PROVIDER_LIVENESS_MS: "2000",
  };
  const answerWith =
    (identity: SoftwareIdentity): AgentOptions["answerChallenge"] =>
    (challenge) => {
      const wire = answerChallenge(identity, parseChallenge(challenge), POSTURE).wire;
      return { payload: String(wire.payload), signature: String(wire.signature) };
    };

  test("a provider that answers every challenge keeps its trust across rounds", async () => {
    await using ctx = await setup(FAST);
    const identity = SoftwareIdentity.generate();
    await ctx.provider(hardwareFor(identity), identity, answerWith(identity));
    const started = Date.now();
    await waitFor(() => Date.now() - started > 700, "several challenge rounds", 5_000);
    expect((await ctx.metadata()).trust_level).toBe("hardware");
  });

  test.each<[string, (identity: SoftwareIdentity) => AgentOptions["answerChallenge"] | undefined]>([
    ["never answers", () => undefined],
    ["answers with another key", () => answerWith(SoftwareIdentity.generate())],
  ])("a provider that %s loses its trust at once and stops receiving requests", async (_, answer) => {
    await using ctx = await setup({ ...FAST, UMBRA_MIN_TRUST: "hardware" });
    const identity = SoftwareIdentity.generate();
    await ctx.provider(hardwareFor(identity), identity, answer(identity));
    expect((await ctx.metadata()).trust_level).toBe("hardware");
    const listed = async () => ((await (await fetch(`${ctx.server.url}/v1/providers/attestation`)).json()) as { data: unknown[] }).data;
    expect((await listed()).length).toBe(1);
    await waitFor(async () => (await ctx.metadata()).trust_level === "none", "trust withdrawn", 5_000);
    // Below the floor now: no longer listed publicly (the list was rebuilt on the change).
    expect(await listed()).toEqual([]);
    expect(await ctx.metadata()).toEqual(expect.objectContaining({ attested_providers: 0, routable_providers: 0, can_accept: false }));
    const refused = await postChat(ctx.server.url, ctx.apiKey, chatBody("x"));
    expect(refused.status).toBe(503);
    await refused.json();
  });
});
