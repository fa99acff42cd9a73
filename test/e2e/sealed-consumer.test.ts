/**
 * Sealed transport for consumers, over a real socket with docs/examples/sealed-chat.ts as the client:
 * a sealed body is opened in memory and the answer sealed back (JSON, stream, and errors after opening);
 * an envelope that is malformed or does not open is a plain 400 with the field at fault. Issue 18's
 * attacks: a captured envelope replayed under another key (a self-route-only one: the victim's prompt on the
 * attacker's machine) or the same key, late, early, as version 1, or with the replay cache full.
 */
import { describe, expect, test } from "bun:test";
import { sealedChat } from "../../docs/examples/sealed-chat.ts";
import {
  type ConsumerBinding,
  consumerInfo,
  RESPONSE_NONCE_HEADER,
  SEALED_CONTENT_TYPE,
  sealConsumerRequest,
} from "../../src/crypto/consumer-seal.ts";
import { fromBase64url, toBase64url } from "../../src/crypto/encoding.ts";
import { generateX25519KeyPair, hpkeSeal } from "../../src/crypto/seal.ts";
import { type ChatEnv, type ChatEnvOptions, chatEnv } from "../support/chat-env.ts";
import { connectFakeProvider, type FakeProvider } from "../support/fake-provider.ts";
import { seedAccount } from "../support/harness.ts";
import { chatBody, postChat, providerToken } from "../support/server.ts";

const BUILD = "org/base-build-4bit";
const CANARY = "sealed-canary-7f3a9";

/** The chat environment with one echo provider connected. */
async function setup(options: ChatEnvOptions = {}): Promise<ChatEnv & { readonly echo: FakeProvider }> {
  const ctx = await chatEnv(options);
  try {
    return Object.assign(ctx, { echo: await ctx.provider() });
  } catch (e) {
    await ctx[Symbol.asyncDispose]();
    throw e;
  }
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
const PATH = "/v1/chat/completions";
const nowSeconds = () => Math.floor(Date.now() / 1000);

/** Seals `body` for `apiKey` now (or as `binding` says). */
async function seal(url: string, apiKey: string, body: Uint8Array, binding: Partial<ConsumerBinding> = {}) {
  return sealConsumerRequest(await sealingKey(url), body, { path: PATH, credential: apiKey, timestamp: nowSeconds(), ...binding });
}

/** Inference frames the provider received (plain or sealed). */
const dispatched = (provider: FakeProvider) => provider.received.filter((f) => f.type === "sealed_inference" || f.type === "inference");

async function plainError(response: Response) {
  return {
    status: response.status,
    type: response.headers.get("content-type"),
    nonce: response.headers.get(RESPONSE_NONCE_HEADER),
    body: (await response.json()) as unknown,
  };
}

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
    const { envelope, answers } = await seal(ctx.server.url, ctx.apiKey, encode(chatBody(CANARY)));
    expect(JSON.stringify(envelope)).not.toContain(CANARY);
    const response = await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope));
    expect(response.headers.get("content-type")).toBe(SEALED_CONTENT_TYPE);
    const raw = await response.text();
    expect(raw).not.toContain(CANARY);
    const opener = answers.opener(response.headers.get(RESPONSE_NONCE_HEADER));
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
    const { envelope, answers } = await seal(ctx.server.url, ctx.apiKey, new TextEncoder().encode("{nope"));
    const response = await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope));
    expect(response.status).toBe(400);
    const opener = answers.opener(response.headers.get(RESPONSE_NONCE_HEADER));
    const error = JSON.parse(new TextDecoder().decode(opener.body(await response.json()))) as { error: { code: string } };
    expect(error.error.code).toBe("invalid_json");

    // An unexpected failure inside (the price store throwing): a sealed 500, logged like a plain one.
    const prices = ctx.t.store.prices;
    const get = prices.get.bind(prices);
    prices.get = () => Promise.reject(new Error(`store down ${CANARY}`));
    const failed = await sealedChat(ctx.server.url, ctx.apiKey, { model: BUILD, messages: [{ role: "user", content: CANARY }] });
    prices.get = get;
    expect(failed).toMatchObject({ status: 500, sealed: true, json: { error: { code: "internal_error" } } });
    const logged = ctx.t.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === "unhandled error");
    expect(logged).toEqual([expect.objectContaining({ level: "error", error_name: "Error", route: PATH })]);
    expect(ctx.t.logs.join("\n")).not.toContain(CANARY);
  });

  test("each bad envelope is a plain 400 naming the field; nothing reaches a provider", async () => {
    await using ctx = await setup();
    const key = await sealingKey(ctx.server.url);
    const binding = { path: PATH, credential: ctx.apiKey, timestamp: nowSeconds() };
    const fresh = async (change: Partial<ConsumerBinding> = {}, to = key) =>
      (await sealConsumerRequest(to, encode(chatBody("x")), { ...binding, ...change })).envelope;
    const good = await fresh();
    const toOtherKey = await fresh({}, (await generateX25519KeyPair()).publicKey);
    const otherPath = await fresh({ path: "/v1/completions" });
    const otherCredential = await fresh({ credential: "sk-umbra-someone-else" });
    const providerHop = await hpkeSeal(key, encode(chatBody("x")), consumerInfo(binding).slice(1));
    const ciphertext = fromBase64url(good.ciphertext);
    ciphertext[0] = (ciphertext[0] as number) ^ 1;
    const cases: [string, string, string][] = [
      ["not JSON", "{", "invalid_json"],
      ["an array", "[]", "invalid_value:body"],
      ["no version", JSON.stringify({ ...good, version: undefined }), "missing_field:version"],
      ["version 3", JSON.stringify({ ...good, version: 3 }), "invalid_value:version"],
      ["version 1", JSON.stringify({ ...good, version: 1 }), "unsupported_value:version"],
      ["no timestamp", JSON.stringify({ ...good, timestamp: undefined }), "missing_field:timestamp"],
      ["timestamp a string", JSON.stringify({ ...good, timestamp: String(good.timestamp) }), "invalid_value:timestamp"],
      ["no enc", JSON.stringify({ ...good, enc: undefined }), "missing_field:enc"],
      ["enc a number", JSON.stringify({ ...good, enc: 5 }), "invalid_value:enc"],
      ["enc not base64url", JSON.stringify({ ...good, enc: "***" }), "invalid_value:enc"],
      ["enc 31 bytes", JSON.stringify({ ...good, enc: toBase64url(new Uint8Array(31)) }), "invalid_value:enc"],
      ["no ciphertext", JSON.stringify({ ...good, ciphertext: undefined }), "missing_field:ciphertext"],
      [
        "ciphertext shorter than a tag",
        JSON.stringify({ ...good, ciphertext: toBase64url(new Uint8Array(15)) }),
        "invalid_value:ciphertext",
      ],
      ["a tampered ciphertext", JSON.stringify({ ...good, ciphertext: toBase64url(ciphertext) }), "invalid_value:ciphertext"],
      ["sealed to another key", JSON.stringify(toOtherKey), "invalid_value:ciphertext"],
      ["sealed for another path", JSON.stringify(otherPath), "invalid_value:ciphertext"],
      ["sealed for another credential", JSON.stringify(otherCredential), "invalid_value:ciphertext"],
      ["another timestamp than sealed for", JSON.stringify({ ...good, timestamp: good.timestamp - 1 }), "invalid_value:ciphertext"],
      [
        "sealed under another info",
        JSON.stringify({ ...good, enc: toBase64url(providerHop.enc), ciphertext: toBase64url(providerHop.ciphertext) }),
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
    expect(dispatched(ctx.echo)).toEqual([]);
    // None of them used up the good envelope's enc: it still goes through, once.
    const response = await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(good));
    expect([response.status, response.headers.get("content-type")]).toEqual([200, SEALED_CONTENT_TYPE]);
  });

  test("credentials are checked before opening: a bad key is a plain 401", async () => {
    await using ctx = await setup();
    const { envelope } = await seal(ctx.server.url, "sk-umbra-wrong", encode(chatBody("x")));
    const response = await postRaw(ctx.server.url, "sk-umbra-wrong", JSON.stringify(envelope));
    expect(response.status).toBe(401);
    expect(response.headers.get("content-type")).toBe("application/json");
  });

  test("a client that leaves in the middle of a sealed stream does not disturb the coordinator", async () => {
    await using ctx = await setup();
    const { envelope } = await seal(ctx.server.url, ctx.apiKey, encode(chatBody("a b c d e f g h", { stream: true })));
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

describe("issue 18: a captured sealed request cannot be replayed, and answers never share a keystream", () => {
  test("replayed under the attacker's self-route-only key: refused before anything is dispatched, to any machine", async () => {
    await using ctx = await setup();
    // The attacker: a self-route-only key and a machine of their own, serving the same build.
    const attacker = await seedAccount(ctx.t, { self_route_only: true });
    await using machine = await connectFakeProvider({
      url: ctx.server.url,
      token: await providerToken(ctx.t, attacker.accountId),
      models: [BUILD],
    });
    const { envelope, answers } = await seal(ctx.server.url, ctx.apiKey, encode(chatBody(CANARY)));
    // Requests dispatched to either machine (the victim's own may go to either: both serve the build).
    const total = () => dispatched(ctx.echo).length + dispatched(machine).length;
    // The victim's request, answered once.
    const first = await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope));
    expect(first.status).toBe(200);
    expect(new TextDecoder().decode(answers.opener(first.headers.get(RESPONSE_NONCE_HEADER)).body(await first.json()))).toContain(CANARY);
    expect(total()).toBe(1);

    // The same bytes under the attacker's key, after the victim's use: that enc was accepted once already.
    const late = await plainError(await postRaw(ctx.server.url, attacker.apiKey, JSON.stringify(envelope)));
    expect(late).toMatchObject({ status: 400, nonce: null, body: { error: { code: "invalid_value", param: "enc" } } });
    expect(total()).toBe(1);

    // Captured before first use and sent by the attacker first: the credential is in the seal, so it does not
    // open (and is not recorded: the victim's own request still goes through).
    const second = await seal(ctx.server.url, ctx.apiKey, encode(chatBody(CANARY)));
    const early = await plainError(await postRaw(ctx.server.url, attacker.apiKey, JSON.stringify(second.envelope)));
    expect(early).toEqual({
      status: 400,
      type: "application/json",
      nonce: null,
      body: {
        error: {
          message:
            "the sealed body does not open: it was sealed to another key (fetch GET /v1/attestation again: the key changes on restart) or for another credential, path or timestamp",
          type: "invalid_request_error",
          code: "invalid_value",
          param: "ciphertext",
        },
      },
    });
    expect(total()).toBe(1);
    expect((await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(second.envelope))).status).toBe(200);
    expect(total()).toBe(2);
  });

  test("replayed under the same key (Authorization captured too): refused, dispatched once", async () => {
    await using ctx = await setup();
    const { envelope } = await seal(ctx.server.url, ctx.apiKey, encode(chatBody(CANARY, { stream: true })));
    const first = await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope));
    expect(first.status).toBe(200);
    await first.text();
    const replays = [
      await plainError(await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope))),
      await plainError(await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope))),
    ];
    const refused = {
      status: 400,
      type: "application/json",
      nonce: null,
      body: {
        error: {
          message: "this sealed request was already received: seal every request afresh (each 'enc' is accepted once)",
          type: "invalid_request_error",
          code: "invalid_value",
          param: "enc",
        },
      },
    };
    expect(replays).toEqual([refused, refused]);
    expect(dispatched(ctx.echo).length).toBe(1);
  });

  test("the same envelope sent twice at once: one is answered, the other refused", async () => {
    await using ctx = await setup();
    const { envelope } = await seal(ctx.server.url, ctx.apiKey, encode(chatBody("twice")));
    const both = await Promise.all([1, 2].map(() => postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope))));
    expect(both.map((r) => r.status).sort()).toEqual([200, 400]);
    await Promise.all(both.map((r) => r.text()));
    expect(dispatched(ctx.echo).length).toBe(1);
  });

  test.each<[string, number]>([
    // 130, not 121: the coordinator's clock may reach the next second before it reads the envelope.
    ["sealed 130 s ago (stale)", -130],
    ["sealed 130 s ahead (future)", 130],
  ])("a timestamp %s is refused before opening, naming the coordinator's time", async (_, offset) => {
    await using ctx = await setup();
    const timestamp = nowSeconds() + offset;
    const { envelope } = await seal(ctx.server.url, ctx.apiKey, encode(chatBody(CANARY)), { timestamp });
    const refused = await plainError(await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope)));
    expect(refused).toMatchObject({ status: 400, nonce: null, body: { error: { code: "invalid_value", param: "timestamp" } } });
    const message = (refused.body as { error: { message: string } }).error.message;
    expect(message).toMatch(
      new RegExp(`^'timestamp' is more than 120 s ${offset < 0 ? "behind" : "ahead of"} the coordinator's clock \\(\\d+\\)`),
    );
    expect(dispatched(ctx.echo)).toEqual([]);
  });

  test("the window is the app's clock: a coordinator an hour ahead refuses a client on real time, and takes its own time", async () => {
    const hour = 3600;
    await using ctx = await setup({ clock: { now: () => Date.now() + hour * 1000 } });
    const late = await seal(ctx.server.url, ctx.apiKey, encode(chatBody("x")));
    expect((await plainError(await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(late.envelope)))).body).toMatchObject({
      error: { param: "timestamp" },
    });
    const onTime = await seal(ctx.server.url, ctx.apiKey, encode(chatBody("x")), { timestamp: nowSeconds() + hour });
    expect((await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(onTime.envelope))).status).toBe(200);
  });

  test("a version 1 envelope (the old, unbound format) is refused at once, pointing to version 2", async () => {
    await using ctx = await setup();
    const { envelope } = await seal(ctx.server.url, ctx.apiKey, encode(chatBody(CANARY)));
    const v1 = { version: 1, enc: envelope.enc, ciphertext: envelope.ciphertext };
    expect(await plainError(await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(v1)))).toEqual({
      status: 400,
      type: "application/json",
      nonce: null,
      body: {
        error: {
          message: 'sealed envelope version 1 is no longer accepted: seal with version 2 (docs/api.md, "Sealed transport")',
          type: "invalid_request_error",
          code: "unsupported_value",
          param: "version",
        },
      },
    });
    expect(dispatched(ctx.echo)).toEqual([]);
  });

  test("a full replay cache refuses new sealed requests with 429 and Retry-After, forgetting none; plain requests still pass", async () => {
    await using ctx = await setup({ sealedReplayEntries: 2 });
    const envelopes = await Promise.all(
      [1, 2, 3].map(async () => (await seal(ctx.server.url, ctx.apiKey, encode(chatBody("x")))).envelope),
    );
    const [a, b, c] = envelopes.map((e) => JSON.stringify(e)) as [string, string, string];
    expect([(await postRaw(ctx.server.url, ctx.apiKey, a)).status, (await postRaw(ctx.server.url, ctx.apiKey, b)).status]).toEqual([
      200, 200,
    ]);
    const full = await postRaw(ctx.server.url, ctx.apiKey, c);
    const retryAfter = Number(full.headers.get("retry-after"));
    expect({ ...(await plainError(full)), retryAfter: retryAfter >= 1 && retryAfter <= 241 }).toEqual({
      status: 429,
      type: "application/json",
      nonce: null,
      body: {
        error: {
          message: "too many sealed requests in the replay window; retry later",
          type: "rate_limit_error",
          code: "rate_limit_exceeded",
        },
      },
      retryAfter: true,
    });
    // Full, yet a replay of a recorded one is still known as such (nothing was forgotten to make room).
    expect((await plainError(await postRaw(ctx.server.url, ctx.apiKey, a))).body).toMatchObject({ error: { param: "enc" } });
    expect((await postChat(ctx.server.url, ctx.apiKey, chatBody("plain"))).status).toBe(200);
    expect(dispatched(ctx.echo).length).toBe(3);
  });

  test("every sealed answer, errors included, names its own response nonce", async () => {
    await using ctx = await setup();
    const nonces: (string | null)[] = [];
    for (const body of [chatBody("one"), chatBody("two"), { model: "org/nope", messages: [{ role: "user", content: "x" }] }]) {
      const { envelope } = await seal(ctx.server.url, ctx.apiKey, encode(body));
      const response = await postRaw(ctx.server.url, ctx.apiKey, JSON.stringify(envelope));
      await response.text();
      nonces.push(response.headers.get(RESPONSE_NONCE_HEADER));
    }
    expect(nonces.every((n) => n !== null && fromBase64url(n).byteLength === 32)).toBe(true);
    expect(new Set(nonces).size).toBe(3);
  });
});
