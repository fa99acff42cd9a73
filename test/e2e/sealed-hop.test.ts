/**
 * The sealed provider hop: a provider that announces an X25519 key gets every request HPKE-sealed to
 * it and must answer with sealed, numbered chunks and a sealed final frame. A reordered, replayed,
 * tampered or plaintext frame fails the request (502 invalid_provider_output before commit, one in-band
 * error after) without failover, and cuts the provider off. Production refuses plaintext sessions and
 * sessions whose evidence earned no trust.
 */
import { describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { buildEvidence, FULL_SECURITY, SoftwareIdentity } from "../../attestation/provider/index.ts";
import { ChunkSealer } from "../../src/crypto/chunks.ts";
import { toBase64url } from "../../src/crypto/encoding.ts";
import { CLOSE } from "../../src/protocol/frames.ts";
import { startAgent } from "../../src/provider/agent.ts";
import { createEchoEngine } from "../../src/provider/engines/echo.ts";
import { chatEnv } from "../support/chat-env.ts";
import { connectFakeProvider, type SealedContext, type Step } from "../support/fake-provider.ts";
import { seedAccount } from "../support/harness.ts";
import { chatBody, errorOf, parseSse, postChat, providerToken } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";

const frame = (make: (ctx: SealedContext) => readonly string[]): Step => ({ do: "frames", make });
const chunkText = (ctx: SealedContext, sealed: { seq: number; sealed: string }) =>
  JSON.stringify({ type: "sealed_chunk", ...ctx.ids, ...sealed });
/** Flips one bit in a base64url ciphertext. */
function flip(sealed: string): string {
  const bytes = Buffer.from(sealed, "base64url");
  bytes[0] = (bytes[0] as number) ^ 1;
  return toBase64url(bytes);
}

describe("sealed sessions", () => {
  test("requests reach the provider sealed (no plaintext inference, no prompt text on the wire) and answers are opened", async () => {
    await using ctx = await chatEnv();
    const p = await ctx.provider({ sealed: true });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("sealed secret words"));
    expect(((await response.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content).toBe(
      "sealed secret words",
    );
    const sealedFrames = p.received.filter((f) => f.type === "sealed_inference");
    expect([sealedFrames.length, p.received.filter((f) => f.type === "inference").length]).toEqual([1, 0]);
    expect(JSON.stringify(sealedFrames)).not.toContain("secret");
    // A provider that does not offer session keys: one HPKE setup per request (its own enc).
    expect(sealedFrames[0]).toMatchObject({ enc: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/) });
    expect(sealedFrames[0]).not.toHaveProperty("n");

    const stream = await postChat(ctx.server.url, ctx.apiKey, chatBody("one two three", { stream: true }));
    const events = parseSse(await stream.text()).data;
    expect(events.at(-1)).toBe("[DONE]");
  });

  test("a provider offering session keys: one HPKE setup at welcome, then requests counted by n without enc", async () => {
    await using ctx = await chatEnv();
    const p = await ctx.provider({ sealed: true, sessionKeys: true });
    const welcome = p.received.find((f) => f.type === "welcome");
    expect(welcome).toMatchObject({ session_enc: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/) });
    for (const words of ["first sealed words", "second sealed words"]) {
      const response = await postChat(ctx.server.url, ctx.apiKey, chatBody(words));
      expect(((await response.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content).toBe(words);
    }
    const stream = await postChat(ctx.server.url, ctx.apiKey, chatBody("third one", { stream: true }));
    expect(parseSse(await stream.text()).data.at(-1)).toBe("[DONE]");
    const sealedFrames = p.received.filter((f) => f.type === "sealed_inference");
    expect(sealedFrames.map((f) => f.n)).toEqual([1, 2, 3]);
    expect(sealedFrames.every((f) => f.enc === undefined)).toBe(true);
    expect(JSON.stringify(sealedFrames)).not.toContain("sealed words");
  });

  test("a hello offering session keys with a low-order encryption key is refused at welcome (1002)", async () => {
    await using ctx = await chatEnv();
    const token = await providerToken(ctx.t, (await seedAccount(ctx.t)).accountId);
    await using p = await connectFakeProvider({
      url: ctx.server.url,
      token,
      models: [BUILD],
      hello: { encryption_key: "A".repeat(43), session_keys: true },
    });
    expect(await p.closed).toMatchObject({ code: CLOSE.protocolError, reason: "encryption_key rejected" });
    expect(p.received.some((f) => f.type === "welcome")).toBe(false);
  });

  test.each<[string, (ctx: SealedContext) => readonly string[]]>([
    [
      "a reordered chunk (seq 1 first)",
      (c) => {
        c.seal({ content: "a" }, false);
        return [chunkText(c, c.seal({ content: "b" }, false))];
      },
    ],
    [
      "a tampered chunk (one bit flipped)",
      (c) => {
        const s = c.seal({ content: "a" }, false);
        return [chunkText(c, { ...s, sealed: flip(s.sealed) })];
      },
    ],
    ["a plaintext chunk in a sealed session", (c) => [JSON.stringify({ type: "chunk", ...c.ids, seq: 0, delta: { content: "a" } })]],
    ["a chunk sealed as final (truncation of the stream's meaning)", (c) => [chunkText(c, c.seal({ content: "a" }, true))]],
    [
      "a final frame whose payload is not a final",
      (c) => [JSON.stringify({ type: "sealed_complete", ...c.ids, ...c.seal({ content: "a" }, true) })],
    ],
  ])("before commit, %s -> 502 invalid_provider_output, no failover, provider cut off", async (_, make) => {
    await using ctx = await chatEnv();
    const bad = await ctx.provider({ behave: () => [{ do: "accept" }, frame(make), { do: "hang" }], sealed: true });
    const healthy = await ctx.provider({ sealed: true });
    // The bad provider connected first and both are idle: it is tried first.
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x"));
    expect(await errorOf(response)).toEqual({
      status: 502,
      contentType: "application/json",
      retryAfter: null,
      body: { error: { message: expect.any(String), type: "provider_error", code: "invalid_provider_output" } },
    });
    expect(healthy.received.filter((f) => f.type === "sealed_inference")).toEqual([]);
    expect((await bad.closed).code).toBe(CLOSE.protocolError);
    expect(ctx.t.app.fleet.list().map((s) => s.id)).toEqual([healthy.providerId]);
  });

  test("after commit, a replayed chunk -> one in-band invalid_provider_output event, no [DONE]", async () => {
    await using ctx = await chatEnv();
    const p = await ctx.provider({
      behave: () => [
        { do: "accept" },
        frame((c) => {
          const first = chunkText(c, c.seal({ content: "hello " }, false));
          return [first, first];
        }),
        { do: "hang" },
      ],
      sealed: true,
    });
    const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("x", { stream: true }));
    expect(response.status).toBe(200);
    const events = parseSse(await response.text()).data;
    expect(events.filter((d) => d.includes('"invalid_provider_output"'))).toHaveLength(1);
    expect(events).not.toContain("[DONE]");
    expect((await p.closed).code).toBe(CLOSE.protocolError);
  });

  test("a chunk sealed with another key -> 502 invalid_provider_output", async () => {
    await using ctx = await chatEnv();
    await ctx.provider({
      behave: () => [
        { do: "accept" },
        frame((c) => {
          const stranger = new ChunkSealer({
            responseKey: new Uint8Array(randomBytes(32)),
            ...{ requestId: c.ids.request_id, attempt: c.ids.attempt },
          });
          const s = stranger.seal(new TextEncoder().encode(JSON.stringify({ content: "a" })), false);
          return [JSON.stringify({ type: "sealed_chunk", ...c.ids, seq: s.seq, sealed: toBase64url(s.ciphertext) })];
        }),
        { do: "hang" },
      ],
      sealed: true,
    });
    expect((await errorOf(await postChat(ctx.server.url, ctx.apiKey, chatBody("x")))).body.error.code).toBe("invalid_provider_output");
  });
});

describe("production requires sealed, attested sessions", () => {
  test("a plaintext hello is refused (1002), a sealed one without evidence too (4003); a sealed, attested provider serves", async () => {
    await using ctx = await chatEnv({ env: { UMBRA_MODE: "production", UMBRA_TRUST_ROOT: "apple", UMBRA_MIN_TRUST: "self_signed" } });
    const plain = await ctx.provider({ sealed: false });
    expect((await plain.closed).code).toBe(CLOSE.protocolError);
    const unattested = await ctx.provider({ sealed: true });
    expect(await unattested.closed).toEqual({
      code: CLOSE.untrusted,
      reason: "this coordinator admits attested providers only: no attestation evidence",
    });
    expect(unattested.received).toEqual([]);
    // Signed evidence without a device chain earns self_signed, the floor here.
    const identity = SoftwareIdentity.generate();
    const posture = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;
    const agent = startAgent({
      url: `${ctx.server.url.replace(/^http/, "ws")}/v1/provider/connect`,
      token: ctx.token,
      engine: createEchoEngine({ models: [BUILD] }),
      maxConcurrency: 4,
      identity,
      evidence: async (encryptionKey) => buildEvidence({ identity, encryptionKey, posture, timestamp: Date.now() }).wire,
    });
    try {
      await waitFor(() => agent.state().connected, "the attested provider");
      expect(agent.state().trustLevel).toBe("self_signed");
      const response = await postChat(ctx.server.url, ctx.apiKey, chatBody("only sealed"));
      expect(response.status).toBe(200);
      await response.json();
    } finally {
      await agent.stop();
    }
  });
});
