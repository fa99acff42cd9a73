/**
 * A forged receipt over real sockets, with the check on the thread pool (src/fleet/sealed-channel.ts
 * verifyReceiptThen): a real agent at level hardware whose identity signs its evidence and challenge
 * answers honestly but its receipts with another key. The stream relays the content, then ends in-band
 * with one invalid_provider_output error and no [DONE], as with the synchronous check (the same
 * test passes at the parent commit); a JSON request gets 502. An honest agent's concurrent answers
 * each carry their own verified receipt.
 */
import { expect, test } from "bun:test";
import { buildEvidence, FULL_SECURITY, SoftwareIdentity } from "../../attestation/provider/index.ts";
import { startAgent } from "../../src/provider/agent.ts";
import { createEchoEngine } from "../../src/provider/engines/echo.ts";
import { seedCatalog, testApp } from "../support/harness.ts";
import { chatBody, postChat, providerToken, readSse, startServer } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
const INVALID = {
  error: { message: "the provider's output failed verification", type: "provider_error", code: "invalid_provider_output" },
};
const POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;
const isReceipt = (message: Uint8Array) => new TextDecoder().decode(message.subarray(0, 32)).includes("umbra-receipt-v2");

async function withAgent(forge: boolean, run: (url: string, apiKey: string) => Promise<void>): Promise<void> {
  await using t = await testApp();
  await seedCatalog(t);
  const consumer = await t.app.admin.createAccount({ name: "consumer" });
  await t.app.admin.creditAccount(consumer.id, { amount_micro_usd: 1_000_000 });
  const key = await t.app.admin.createKey({ account_id: consumer.id });
  const machine = await t.app.admin.createAccount({ name: "machine" });
  const token = await providerToken(t, machine.id);
  await using server = startServer(t);
  const { devRoot } = await t.app.trust();
  if (!devRoot) throw new Error("no development root");
  const identity = SoftwareIdentity.generate();
  if (forge) {
    const honest = identity.sign.bind(identity);
    const forger = SoftwareIdentity.generate();
    identity.sign = (message: Uint8Array) => (isReceipt(message) ? forger.sign(message) : honest(message));
  }
  const agent = startAgent({
    identity,
    url: `${server.url.replace(/^http/, "ws")}/v1/provider/connect`,
    token,
    engine: createEchoEngine({ models: [BUILD] }),
    maxConcurrency: 8,
    evidence: async (encryptionKey) => {
      const mdaChain = await devRoot.issueDeviceChain({ identityKey: identity.publicKey(), posture: POSTURE });
      return buildEvidence({ identity, encryptionKey, posture: POSTURE, timestamp: Date.now(), mdaChain }).wire;
    },
  });
  try {
    await waitFor(() => agent.state().trustLevel === "hardware", "welcome at hardware");
    await run(server.url, key.key);
  } finally {
    await agent.stop();
  }
}

test("a forged receipt after content: the content, then one in-band invalid_provider_output, no [DONE]", async () => {
  await withAgent(true, async (url, apiKey) => {
    const response = await postChat(url, apiKey, chatBody("forged words", { stream: true }));
    expect(response.status).toBe(200);
    const { data } = await readSse(response);
    const events = data.map((d) => (d === "[DONE]" ? d : (JSON.parse(d) as Record<string, unknown>)));
    expect(events.at(-1)).toEqual(INVALID);
    expect(events).not.toContain("[DONE]");
    expect(JSON.stringify(events.slice(0, -1))).toContain("forged");
  });
});

test("a forged receipt on a JSON answer: 502 invalid_provider_output", async () => {
  await withAgent(true, async (url, apiKey) => {
    const response = await postChat(url, apiKey, chatBody("forged words"));
    expect({ status: response.status, body: await response.json() }).toEqual({ status: 502, body: INVALID });
  });
});

test("concurrent answers of an honest provider: each carries its own verified receipt", async () => {
  await withAgent(false, async (url, apiKey) => {
    const answers = await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        const response = await postChat(url, apiKey, chatBody(`words ${i}`));
        return {
          status: response.status,
          body: (await response.json()) as { choices: { message: { content: string } }[]; se_signature?: string },
        };
      }),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(200));
    expect(answers.map((a, i) => a.body.choices[0]?.message.content.includes(`words ${i}`))).toEqual(Array(8).fill(true));
    const signatures = answers.map((a) => a.body.se_signature);
    expect(signatures.every((s) => typeof s === "string" && s.length > 0)).toBe(true);
    expect(new Set(signatures).size).toBe(8);
  });
});
