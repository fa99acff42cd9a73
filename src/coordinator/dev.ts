/**
 * `umbra-coordinator dev`: the newcomer's main job. Seeds (idempotently) a demo account with credit, a
 * demo catalog with aliases and prices (each price on the build and on its alias: the same build costs
 * the same by either id), issues a fresh demo API key and device token and revokes the previous runs'
 * (one live demo key at a time), connects one local provider (the echo engine, in this process, over a
 * real WebSocket to the listening port), and prints ready-to-paste examples and a single-use console
 * sign-in link for the demo account (valid 15 minutes).
 */
import { parseChallenge } from "../../attestation/provider/challenge.ts";
import { FULL_SECURITY } from "../../attestation/provider/posture.ts";
import { answerChallenge, buildEvidence, SoftwareIdentity } from "../../attestation/provider/software-identity.ts";
import { issueSignInLink } from "../auth/sign-in-links.ts";
import { type Agent, startAgent } from "../provider/agent.ts";
import { createEchoEngine } from "../provider/engines/echo.ts";
import type { App } from "./app.ts";

const DEMO_SUBJECT = "umbra-demo";
const DEMO_PROVIDER_SUBJECT = "umbra-demo-provider";
/** The demo provider streams at a readable pace. */
const DEMO_TOKENS_PER_SECOND = 40;
const DEMO_CREDIT = 10_000_000; // $10
/** The name of the demo API key; only keys of this name on the demo account are revoked by a new run. */
const DEMO_KEY_NAME = "demo";

export const DEMO_CATALOG = [
  {
    id: "mlx-community/Llama-3.2-3B-Instruct-4bit",
    alias: "meta-llama/llama-3.2-3b-instruct",
    body: {
      owned_by: "meta-llama",
      name: "Llama 3.2 3B Instruct",
      display_name: "Llama 3.2 3B Instruct (MLX 4-bit)",
      hugging_face_id: "mlx-community/Llama-3.2-3B-Instruct-4bit",
      description: "Small general chat model; the demo provider answers with the echo engine.",
      quantization: "4bit",
      input_modalities: ["text"],
      output_modalities: ["text"],
      supported_sampling_parameters: ["temperature", "top_p", "stop", "max_tokens"],
      supported_features: ["streaming"],
      context_length: 131072,
      max_output_length: 8192,
    },
    price: { input_price: 65_000, output_price: 130_000 },
  },
  {
    id: "mlx-community/Qwen3-8B-8bit",
    alias: "qwen/qwen3-8b",
    body: {
      owned_by: "qwen",
      name: "Qwen3 8B",
      hugging_face_id: "mlx-community/Qwen3-8B-8bit",
      quantization: "8bit",
      input_modalities: ["text"],
      output_modalities: ["text"],
      supported_features: ["streaming"],
      context_length: 32768,
      max_output_length: 8192,
    },
    price: { input_price: 200_000, output_price: 600_000, cache_read_price: 50_000 },
  },
] as const;

export interface DevSeed {
  readonly accountId: string;
  readonly apiKey: string;
  readonly providerToken: string;
}

export async function seedDevelopment(app: App): Promise<DevSeed> {
  const { admin, store } = app;
  const existing = await store.accounts.findBySubject(DEMO_SUBJECT);
  const account = existing ?? (await admin.createAccount({ name: "Demo", jwt_subject: DEMO_SUBJECT }));
  const balance = existing ? existing.balance : 0;
  if (balance < DEMO_CREDIT) await admin.creditAccount(account.id, { amount_micro_usd: DEMO_CREDIT - balance });
  for (const m of DEMO_CATALOG) {
    await admin.upsertModel(m.id, m.body);
    await admin.setAlias(m.alias, { build_id: m.id });
    await admin.setPrice(m.id, m.price);
    await admin.setPrice(m.alias, m.price);
  }
  // The demo account holder's key: it may also approve `umbra-provider login` (link machines).
  const key = await admin.createKey({ account_id: account.id, name: DEMO_KEY_NAME, link_machines: true });
  for (const k of await store.keys.list(account.id)) {
    if (k.name === DEMO_KEY_NAME && k.revokedAt === null && k.id !== key.id) await admin.revokeKey(k.id);
  }
  const provider =
    (await store.accounts.findBySubject(DEMO_PROVIDER_SUBJECT)) ??
    (await admin.createAccount({ name: "Demo provider", jwt_subject: DEMO_PROVIDER_SUBJECT }));
  // The demo provider account holds only the local provider's device tokens.
  const token = await admin.createProviderToken({ account_id: provider.id });
  for (const t of await store.providerTokens.list(provider.id)) {
    if (t.revokedAt === null && t.id !== token.id) await admin.revokeProviderToken(t.id);
  }
  return { accountId: account.id, apiKey: key.key, providerToken: token.token };
}

/** A console sign-in link for the demo account, on `publicUrl` (the configured one, else the listening URL). */
export async function devConsoleLink(app: App, accountId: string, publicUrl: string): Promise<string> {
  return (await issueSignInLink(app.store, { accountId, now: Date.now(), publicUrl })).url;
}

/** The posture the development provider claims and its development chain proves. */
const DEV_POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;

/**
 * Starts the local echo provider and resolves once the coordinator welcomed it. It gets a software
 * identity key and a device chain from this coordinator's development root, so it earns `hardware`
 * through the same verification code a real Mac goes through (never valid against Apple's root).
 */
export async function startDevProvider(app: App, url: string, token: string): Promise<Agent> {
  const { devRoot } = await app.trust();
  const identity = SoftwareIdentity.generate();
  const mdaChain = devRoot ? await devRoot.issueDeviceChain({ identityKey: identity.publicKey(), posture: DEV_POSTURE }) : undefined;
  const agent = startAgent({
    identity,
    answerChallenge: (challenge: { nonce: string; timestamp: number }) => {
      const wire = answerChallenge(identity, parseChallenge(challenge), DEV_POSTURE).wire;
      return { payload: String(wire.payload), signature: String(wire.signature) };
    },
    evidence: async (encryptionKey) =>
      buildEvidence({ identity, encryptionKey, posture: DEV_POSTURE, timestamp: Date.now(), ...(mdaChain ? { mdaChain } : {}) }).wire,
    url: `${url.replace(/^http/, "ws")}/v1/provider/connect`,
    token,
    engine: createEchoEngine({ models: DEMO_CATALOG.map((m) => m.id), tokensPerSecond: DEMO_TOKENS_PER_SECOND }),
    maxConcurrency: 64,
    logger: app.logger,
  });
  await new Promise<void>((resolve, reject) => {
    const check = setInterval(() => {
      if (agent.state().connected) {
        clearInterval(check);
        resolve();
      }
    }, 20);
    void agent.done.then((exit) => {
      clearInterval(check);
      reject(new Error(`the local provider stopped: ${exit.message}`));
    });
  });
  return agent;
}

export function devBanner(url: string, seed: DevSeed, adminToken: string, consoleLink?: string): string {
  const model = DEMO_CATALOG[0].alias;
  const consoleLine =
    consoleLink === undefined
      ? ""
      : `\n  Console:        ${consoleLink}\n                  (signs in to the demo account once, within 15 minutes)\n`;
  return `
Umbra development coordinator on ${url}

  Demo API key:   ${seed.apiKey}
  Admin token:    ${adminToken}
  Demo account:   ${seed.accountId}
${consoleLine}
A local provider (echo engine: it answers with the words of your last message) is connected.

List the models and prices:

  curl -s ${url}/v1/models -H "Authorization: Bearer ${seed.apiKey}"
  curl -s ${url}/v1/models/${model} -H "Authorization: Bearer ${seed.apiKey}"
  curl -s ${url}/v1/pricing

Chat, as one JSON answer and as a stream:

  curl -s ${url}/v1/chat/completions -H "Authorization: Bearer ${seed.apiKey}" -H "Content-Type: application/json" \\
    -d '{"model":"${model}","messages":[{"role":"user","content":"Hello from Umbra"}]}'
  curl -sN ${url}/v1/chat/completions -H "Authorization: Bearer ${seed.apiKey}" -H "Content-Type: application/json" \\
    -d '{"model":"${model}","stream":true,"messages":[{"role":"user","content":"Hello from Umbra, streaming"}]}'

With the official openai client (npm i openai), in a file demo.mjs:

  import OpenAI from "openai";
  const client = new OpenAI({ baseURL: "${url}/v1", apiKey: "${seed.apiKey}" });
  for await (const m of client.models.list()) console.log(m.id);
  const answer = await client.chat.completions.create({ model: "${model}", messages: [{ role: "user", content: "Hello there" }] });
  console.log(answer.choices[0].message.content);
  const stream = await client.chat.completions.create({ model: "${model}", stream: true, messages: [{ role: "user", content: "one two three" }] });
  for await (const chunk of stream) process.stdout.write(chunk.choices[0]?.delta?.content ?? "");

Administration (same database):

  curl -s ${url}/admin/v1/accounts -H "Authorization: Bearer ${adminToken}"

Press Ctrl-C to stop.
`;
}
