/**
 * Sealed transport for consumers, over a real socket with docs/examples/sealed-chat.ts as the client:
 * a sealed body is opened in memory and the answer sealed back (JSON, stream, and errors after opening);
 * an envelope that is malformed or does not open is a plain 400 with the field at fault.
 */
import { describe, expect, test } from "bun:test";
import { sealedChat } from "../../docs/examples/sealed-chat.ts";
import { consumerInfo, SEALED_CONTENT_TYPE, sealConsumerRequest } from "../../src/crypto/consumer-seal.ts";
import { fromBase64url, toBase64url } from "../../src/crypto/encoding.ts";
import { generateX25519KeyPair, hpkeSeal } from "../../src/crypto/seal.ts";
import { connectFakeProvider, type FakeProvider } from "../support/fake-provider.ts";
import { seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";
import { chatBody, providerToken, startServer, type TestServer } from "../support/server.ts";

const BUILD = "org/base-build-4bit";
const CANARY = "sealed-canary-7f3a9";

interface Ctx extends AsyncDisposable {
  readonly t: TestApp;
  readonly server: TestServer;
  readonly apiKey: string;
  readonly provider: FakeProvider;
}

async function setup(): Promise<Ctx> {
  const t = await testApp();
  await seedCatalog(t);
  const { accountId, apiKey } = await seedAccount(t);
  const server = startServer(t);
  const provider = await connectFakeProvider({ url: server.url, token: await providerToken(t, accountId), models: [BUILD] });
  return {
    t,
    server,
    apiKey,
    provider,
    async [Symbol.asyncDispose]() {
      await provider[Symbol.asyncDispose]();
      await server[Symbol.asyncDispose]();
      await t[Symbol.asyncDispose]();
    },
  };
}

async function sealingKey(url: string): Promise<Uint8Array> {
  const doc = (await (await fetch(`${url}/v1/attestation`)).json()) as { sealing_public_key: string };
  return fromBase64url(doc.sealing_public_key);
}

function postRaw(url: string, apiKey: string, body: string, type = SEALED_CONTENT_TYPE) {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": type },
    body,
  });
}

const encode = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

describe("sealed consumer transport", () => {
  test("a sealed JSON request is answered with a sealed body that opens to the ordinary completion", async () => {
    await using ctx = await setup();
    const answer = await sealedChat(ctx.server.url, ctx.apiKey, chatBody(CANARY));
    expect(answer.status).toBe(200);
    expect(answer.sealed).toBe(true);
    const json = answer.json as { object: string; choices: { message: { content: string } }[]; usage: object };
    expect(json.object).toBe("chat.completion");
    expect(json.choices[0]?.message.content).toBe(CANARY);
    expect(json.usage).toBeDefined();
  });

  test("nothing readable on the wire: the sealed answer's raw bytes do not carry the content", async () => {
    await using ctx = await setup();
    const { envelope, opener } = await sealConsumerRequest(
      await sealingKey(ctx.server.url),
      encode(chatBody(CANARY)),
      "/v1/chat/completions",
    );
    expect(JSON.stringify(envelope)).not.toContain(CANARY);
    const response = await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope));
    expect(response.headers.get("content-type")).toBe(SEALED_CONTENT_TYPE);
    const raw = await response.text();
    expect(raw).not.toContain(CANARY);
    expect(new TextDecoder().decode(opener.body(JSON.parse(raw)))).toContain(CANARY);
  });

  test("a sealed streaming request is answered frame by frame; the opened events are the ordinary stream", async () => {
    await using ctx = await setup();
    const answer = await sealedChat(ctx.server.url, ctx.apiKey, chatBody(`one two ${CANARY}`, { stream: true }));
    expect([answer.status, answer.sealed]).toEqual([200, true]);
    const events = answer.events ?? [];
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as { object: string; choices: { delta?: { content?: string } }[] });
    expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe(`one two ${CANARY}`);
  });

  test("errors after opening are sealed too, with their ordinary status", async () => {
    await using ctx = await setup();
    const unknown = await sealedChat(ctx.server.url, ctx.apiKey, { model: "org/nope", messages: [{ role: "user", content: "x" }] });
    expect(unknown).toMatchObject({ status: 404, sealed: true, json: { error: { code: "model_not_found" } } });
    const invalid = await sealedChat(ctx.server.url, ctx.apiKey, { model: "org/model" });
    expect(invalid).toMatchObject({ status: 400, sealed: true, json: { error: { code: "missing_field", param: "messages" } } });

    // Not JSON inside the seal: invalid_json, sealed.
    const { envelope, opener } = await sealConsumerRequest(
      await sealingKey(ctx.server.url),
      new TextEncoder().encode("{nope"),
      "/v1/chat/completions",
    );
    const response = await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope));
    expect(response.status).toBe(400);
    const error = JSON.parse(new TextDecoder().decode(opener.body(await response.json()))) as { error: { code: string } };
    expect(error.error.code).toBe("invalid_json");
  });

  test("each bad envelope is a plain 400 naming the field; nothing reaches a provider", async () => {
    await using ctx = await setup();
    const key = await sealingKey(ctx.server.url);
    const good = (await sealConsumerRequest(key, encode(chatBody("x")), "/v1/chat/completions")).envelope;
    const otherKey = (await generateX25519KeyPair()).publicKey;
    const toOtherKey = (await sealConsumerRequest(otherKey, encode(chatBody("x")), "/v1/chat/completions")).envelope;
    const otherPath = (await sealConsumerRequest(key, encode(chatBody("x")), "/v1/completions")).envelope;
    const providerHop = await hpkeSeal(key, encode(chatBody("x")), consumerInfo("/v1/chat/completions").slice(1));
    const ciphertext = fromBase64url(good.ciphertext);
    ciphertext[0] = (ciphertext[0] as number) ^ 1;
    const cases: [string, string, string][] = [
      ["not JSON", "{", "invalid_json"],
      ["an array", "[]", "invalid_value:body"],
      ["no version", JSON.stringify({ enc: good.enc, ciphertext: good.ciphertext }), "missing_field:version"],
      ["version 2", JSON.stringify({ ...good, version: 2 }), "invalid_value:version"],
      ["no enc", JSON.stringify({ version: 1, ciphertext: good.ciphertext }), "missing_field:enc"],
      ["enc a number", JSON.stringify({ ...good, enc: 5 }), "invalid_value:enc"],
      ["enc not base64url", JSON.stringify({ ...good, enc: "***" }), "invalid_value:enc"],
      ["enc 31 bytes", JSON.stringify({ ...good, enc: toBase64url(new Uint8Array(31)) }), "invalid_value:enc"],
      ["no ciphertext", JSON.stringify({ version: 1, enc: good.enc }), "missing_field:ciphertext"],
      [
        "ciphertext shorter than a tag",
        JSON.stringify({ ...good, ciphertext: toBase64url(new Uint8Array(15)) }),
        "invalid_value:ciphertext",
      ],
      ["a tampered ciphertext", JSON.stringify({ ...good, ciphertext: toBase64url(ciphertext) }), "invalid_value:ciphertext"],
      ["sealed to another key", JSON.stringify(toOtherKey), "invalid_value:ciphertext"],
      ["sealed for another path", JSON.stringify(otherPath), "invalid_value:ciphertext"],
      [
        "sealed under another info",
        JSON.stringify({ version: 1, enc: toBase64url(providerHop.enc), ciphertext: toBase64url(providerHop.ciphertext) }),
        "invalid_value:ciphertext",
      ],
      ["a plain chat body sent as sealed", JSON.stringify(chatBody(CANARY)), "missing_field:version"],
    ];
    for (const [name, body, expected] of cases) {
      const response = await postRaw(ctx.server.url, ctx.apiKey, body);
      expect(response.headers.get("content-type"), name).toBe("application/json");
      const { error } = (await response.json()) as { error: { code: string; param?: string; message: string } };
      expect([response.status, error.param === undefined ? error.code : `${error.code}:${error.param}`], name).toEqual([400, expected]);
      expect(error.message, name).not.toContain(CANARY);
    }
    expect(ctx.provider.received.filter((f) => f.type === "sealed_inference" || f.type === "inference")).toEqual([]);
  });

  test("credentials are checked before opening: a bad key is a plain 401", async () => {
    await using ctx = await setup();
    const { envelope } = await sealConsumerRequest(await sealingKey(ctx.server.url), encode(chatBody("x")), "/v1/chat/completions");
    const response = await postRaw(ctx.server.url, "sk-umbra-wrong", JSON.stringify(envelope));
    expect(response.status).toBe(401);
    expect(response.headers.get("content-type")).toBe("application/json");
  });

  test("a client that leaves in the middle of a sealed stream does not disturb the coordinator", async () => {
    await using ctx = await setup();
    const { envelope } = await sealConsumerRequest(
      await sealingKey(ctx.server.url),
      encode(chatBody("a b c d e f g h", { stream: true })),
      "/v1/chat/completions",
    );
    const abort = new AbortController();
    const response = await fetch(`${ctx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${ctx.apiKey}`, "content-type": SEALED_CONTENT_TYPE },
      body: JSON.stringify(envelope),
      signal: abort.signal,
    });
    const reader = response.body?.getReader();
    await reader?.read();
    abort.abort();
    const again = await sealedChat(ctx.server.url, ctx.apiKey, chatBody("still here"));
    expect(again).toMatchObject({ status: 200, sealed: true });
  });
});
