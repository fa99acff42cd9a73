/**
 * The cluster wire format (src/cluster/wire.ts) and the fleet digest (digest.ts) without a server:
 * round trips, requests in parts within max_payload, and every malformed message a ProtocolError.
 */
import { describe, expect, test } from "bun:test";
import { mergeSummaries, summarizeFacts } from "../../../attestation/provider/levels.ts";
import { type DigestProvider, decodeDigest, encodeDigest } from "../../../src/cluster/digest.ts";
import { RemoteFleet } from "../../../src/cluster/remote-fleet.ts";
import {
  chunkRequest,
  decodeControl,
  decodeOwner,
  decodeRequestBody,
  decodeRequestPart,
  encodeControl,
  encodeOwner,
  MAX_PARTS,
  type OwnerMessage,
} from "../../../src/cluster/wire.ts";
import { ProtocolError } from "../../../src/protocol/parse.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const request = { id: "req_1", attempt: 1, build: "org/b-4bit", deadlineMs: 5000 };
const body = { messages: [{ role: "user" as const, content: "hi\nthere" }], max_tokens: 16, temperature: 0.5 };

describe("forwarded requests", () => {
  test("one part round trip", () => {
    const [only, ...rest] = chunkRequest({ ...request, body }, 1024 * 1024);
    expect(rest).toEqual([]);
    const part = decodeRequestPart(only as Uint8Array);
    expect({ ...part, bytes: undefined }).toEqual({ ...request, index: 0, parts: 1, bytes: undefined });
    expect(decodeRequestBody(part.bytes)).toEqual(body);
  });

  test("a large body splits into parts within max_payload that reassemble byte for byte", () => {
    const big = { ...body, messages: [{ role: "user" as const, content: "é€".repeat(20_000) }] };
    const parts = chunkRequest({ ...request, body: big }, 8192);
    expect(parts.every((p) => p.length <= 8192)).toBe(true);
    const decoded = parts.map(decodeRequestPart);
    expect(decoded.map((p) => [p.index, p.parts])).toEqual(parts.map((_, i) => [i, parts.length]));
    expect(decodeRequestBody(Buffer.concat(decoded.map((p) => p.bytes)))).toEqual(big);
  });

  test("beyond MAX_PARTS is the caller's RangeError", () => {
    const huge = { ...body, messages: [{ role: "user" as const, content: "x".repeat(MAX_PARTS * 4096) }] };
    expect(() => chunkRequest({ ...request, body: huge }, 4096)).toThrow(RangeError);
  });

  test.each([
    ["not JSON", "{nope\n{}"],
    ["wrong version", `{"v":2,"k":"d","id":"r","a":0,"b":"m","dl":1,"i":0,"n":1}\n{}`],
    ["id not a subject token", `{"v":1,"k":"d","id":"a.b","a":0,"b":"m","dl":1,"i":0,"n":1}\n{}`],
    ["index past parts", `{"v":1,"k":"d","id":"r","a":0,"b":"m","dl":1,"i":1,"n":1}\n{}`],
    ["too many parts", `{"v":1,"k":"d","id":"r","a":0,"b":"m","dl":1,"i":0,"n":${MAX_PARTS + 1}}\n{}`],
    ["zero deadline", `{"v":1,"k":"d","id":"r","a":0,"b":"m","dl":0,"i":0,"n":1}\n{}`],
  ])("a malformed part (%s) is a ProtocolError", (_, text) => {
    expect(() => decodeRequestPart(enc(text))).toThrow(ProtocolError);
  });

  test.each([
    ["not JSON", "{"],
    ["no messages", `{"max_tokens":1}`],
    ["bad max_tokens", `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`],
    ["invalid UTF-8", "\xff"],
  ])("a malformed body (%s) is a ProtocolError", (_, text) => {
    const bytes = text === "\xff" ? new Uint8Array([0xff]) : enc(text);
    expect(() => decodeRequestBody(bytes)).toThrow(ProtocolError);
  });
});

describe("owner and control messages", () => {
  const messages: OwnerMessage[] = [
    { s: 0, k: "ok", acct: "acct_1" },
    { s: 0, k: "no", why: "capacity" },
    { s: 7, k: "ka" },
    {
      s: 3,
      k: "ev",
      e: [
        { type: "accepted" },
        { type: "chunk", delta: { content: "a", reasoning_content: "b" } },
        { type: "tool_call", call: { index: 0, id: "c", name: "f", arguments: "{}" } },
        {
          type: "complete",
          finishReason: "stop",
          usage: { prompt_tokens: 1, completion_tokens: 2, cached_tokens: 1 },
          receipt: { signature: "sig", responseHash: "ab", requestHash: "cd", modelBuild: "m", providerKeyId: "k", trustLevel: "hardware" },
        },
        { type: "error", code: "busy" },
        { type: "lost", reason: "x" },
        { type: "invalid", reason: "y" },
      ],
    },
  ];
  test.each(messages.map((m) => [m.k, m]))("%s round trip", (_, m) => {
    expect(decodeOwner(encodeOwner(m))).toEqual(m);
  });

  test.each([
    ["unknown kind", `{"s":0,"k":"zz"}`],
    ["negative s", `{"s":-1,"k":"ka"}`],
    ["refusal outside the vocabulary", `{"s":0,"k":"no","why":"bored"}`],
    ["no events", `{"s":0,"k":"ev","e":[]}`],
    ["unknown event", `{"s":0,"k":"ev","e":[{"type":"boom"}]}`],
    ["error code outside the vocabulary", `{"s":0,"k":"ev","e":[{"type":"error","code":"nope"}]}`],
    ["bad usage", `{"s":0,"k":"ev","e":[{"type":"complete","finishReason":"stop","usage":{"prompt_tokens":-1,"completion_tokens":0}}]}`],
    ["delta content not text", `{"s":0,"k":"ev","e":[{"type":"chunk","delta":{"content":5}}]}`],
    ["array header", "[1]"],
  ])("a malformed owner message (%s) is a ProtocolError", (_, text) => {
    expect(() => decodeOwner(enc(text))).toThrow(ProtocolError);
  });

  test("control messages round trip; unknown ones are ProtocolErrors", () => {
    expect(decodeControl(encodeControl({ k: "ack", s: -1 }))).toEqual({ k: "ack", s: -1 });
    expect(decodeControl(encodeControl({ k: "cancel", r: "client_gone" }))).toEqual({ k: "cancel", r: "client_gone" });
    expect(() => decodeControl(enc(`{"k":"cancel","r":"bored"}`))).toThrow(ProtocolError);
    expect(() => decodeControl(enc(`{"k":"stop"}`))).toThrow(ProtocolError);
  });
});

describe("fleet digests", () => {
  const provider = (i: number): DigestProvider => ({
    id: `prov_${i}`,
    account: "acct_x",
    builds: ["org/b-4bit"],
    warm: [],
    max: 4,
    active: 1,
    draining: false,
    trust: "self_signed",
    pub: {
      provider_id: `prov_${i}`,
      trust_level: "self_signed",
      routable: true,
      secure_enclave: true,
      device_chain_verified: false,
      device_chain_source: null,
      device_chain_accepted_until: null,
      identity_key: "k".repeat(87),
      identity_key_sha256: "a".repeat(64),
      encryption_key: null,
      posture: { sip_enabled: true },
      models: ["org/b-4bit"],
    },
  });

  test("pages within max_payload that decode to the providers", () => {
    const providers = Array.from({ length: 60 }, (_, i) => ({ ...provider(i), att: { se: true, sip: i % 2 === 0, sb: false } }));
    const pages = encodeDigest("r1", 9, providers, 8192);
    expect(pages.length).toBeGreaterThan(1);
    expect(pages.every((p) => p.length <= 8192)).toBe(true);
    const decoded = pages.map(decodeDigest);
    expect(decoded.map((p) => [p.replica, p.seq, p.index, p.pages])).toEqual(pages.map((_, i) => ["r1", 9, i, pages.length]));
    expect(decoded.flatMap((p) => p.providers)).toEqual(providers);
  });

  test.each([
    ["not JSON", "{"],
    ["replica not a token", `{"v":1,"r":"a.b","q":0,"i":0,"n":1,"p":[]}`],
    [
      "unknown trust",
      `{"v":1,"r":"a","q":0,"i":0,"n":1,"p":[{"id":"p","account":"x","builds":[],"warm":[],"max":1,"active":0,"draining":false,"trust":"total"}]}`,
    ],
    [
      "zero slots",
      `{"v":1,"r":"a","q":0,"i":0,"n":1,"p":[{"id":"p","account":"x","builds":[],"warm":[],"max":0,"active":0,"draining":false,"trust":"none"}]}`,
    ],
    ["pub of another provider", JSON.stringify({ v: 1, r: "a", q: 0, i: 0, n: 1, p: [{ ...provider(1), pub: provider(2).pub }] })],
    ["att not booleans", JSON.stringify({ v: 1, r: "a", q: 0, i: 0, n: 1, p: [{ ...provider(1), att: { se: 1, sip: true, sb: true } }] })],
  ])("a malformed page (%s) is a ProtocolError", (_, text) => {
    expect(() => decodeDigest(enc(text))).toThrow(ProtocolError);
  });
});

describe("the other replicas' providers (RemoteFleet)", () => {
  const entry = (id: string, trust: DigestProvider["trust"], att?: DigestProvider["att"]): DigestProvider => ({
    id,
    account: "acct_x",
    builds: ["org/b"],
    warm: [],
    max: 2,
    active: 0,
    draining: false,
    trust,
    ...(att ? { att } : {}),
    pub: {
      provider_id: id,
      trust_level: trust,
      routable: true,
      secure_enclave: att?.se ?? false,
      device_chain_verified: false,
      device_chain_source: null,
      device_chain_accepted_until: null,
      identity_key: null,
      identity_key_sha256: null,
      encryption_key: null,
      posture: null,
      models: ["org/b"],
    },
  });
  const digest = (replica: string, seq: number, providers: DigestProvider[]) =>
    encodeDigest(replica, seq, providers, 65536)[0] as Uint8Array;

  test("attestation figures summarize the remote providers' verified facts; they merge with this replica's", () => {
    let now = 0;
    const remote = new RemoteFleet("a", { digestMs: 100, missedDigests: 3, minTrust: "none", now: () => now });
    remote.onDigest(
      digest("b", 1, [
        entry("p1", "hardware", { se: true, sip: true, sb: true }),
        entry("p2", "self_signed", { se: true, sip: false, sb: false }),
      ]),
    );
    remote.onDigest(digest("c", 1, [entry("p3", "none")]));
    const away = remote.capacity("org/b");
    expect(away).toEqual({
      providerCount: 3,
      routableProviders: 3,
      warmProviders: 0,
      canAccept: true,
      attestedProviders: 2,
      trustLevel: "hardware",
      attestation: { secureEnclave: true, sipEnabled: false, secureBoot: false, deviceChainVerified: false, deviceChainSources: [] },
    });
    // Merged with a local summary: the same as summarizing all of them together.
    const local = summarizeFacts([{ level: "hardware", secureEnclave: false, sipEnabled: true, secureBoot: true }]);
    const all = summarizeFacts([
      { level: "hardware", secureEnclave: true, sipEnabled: true, secureBoot: true },
      { level: "self_signed", secureEnclave: true, sipEnabled: false, secureBoot: false },
      { level: "hardware", secureEnclave: false, sipEnabled: true, secureBoot: true },
    ]);
    expect(mergeSummaries(local, away)).toEqual(all);
    expect(mergeSummaries(summarizeFacts([]), away)).toEqual(mergeSummaries(away, summarizeFacts([])));
    now = 1000;
    expect(remote.capacity("org/b")).toEqual({
      providerCount: 0,
      routableProviders: 0,
      warmProviders: 0,
      canAccept: false,
      attestedProviders: 0,
      trustLevel: "none",
    });
  });

  test("the version moves when the public entries change or a replica is dropped, not on every digest", () => {
    let now = 0;
    const remote = new RemoteFleet("a", { digestMs: 100, missedDigests: 3, minTrust: "none", now: () => now });
    const v0 = remote.version;
    remote.onDigest(digest("b", 1, [entry("p1", "self_signed")]));
    const v1 = remote.version;
    remote.onDigest(digest("b", 2, [{ ...entry("p1", "self_signed"), active: 1 }]));
    expect([v1 > v0, remote.version]).toEqual([true, v1]);
    remote.onDigest(digest("b", 3, [entry("p1", "self_signed"), entry("p2", "self_signed")]));
    const v2 = remote.version;
    now = 1000;
    expect([v2 > v1, remote.version > v2, remote.publicAttestations()]).toEqual([true, true, []]);
  });
});
