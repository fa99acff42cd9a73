/**
 * GET /v1/providers/attestation and the fleet's admission bounds, in-process: sessions are made through
 * the app's own fleet (`fleet.connect` with a recording transport, then a real `hello` frame), so many
 * of them cost no sockets. Issue 18 point 5: one token had opened 2,000 sessions and the public list
 * had grown to 25.8 MB, rebuilt on every read. Covered: only providers at or above the routing floor are
 * listed; pages of at most 100 with `has_more`, `after` and `limit`; the `identity_key_sha256` filter;
 * one build per fleet change however many reads; 400 for bad query values; the per-token limit and the
 * pending bound enforced where the session is counted (close 4029), before any hello.
 */
import { describe, expect, test } from "bun:test";
import { buildEvidence, FULL_SECURITY, SoftwareIdentity } from "../../attestation/provider/index.ts";
import { toBase64url } from "../../src/crypto/encoding.ts";
import { generateX25519KeyPair } from "../../src/crypto/seal.ts";
import { MAX_PENDING_SESSIONS } from "../../src/fleet/fleet.ts";
import type { ProviderSession, SessionTransport } from "../../src/fleet/session.ts";
import { CLOSE } from "../../src/protocol/frames.ts";
import { type TestApp, testApp } from "../support/harness.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
const POSTURE = { sipEnabled: true, secureBoot: FULL_SECURITY, thirdPartyKexts: false, osVersion: "15.1" } as const;

interface Recorded extends SessionTransport {
  readonly sent: string[];
  closed?: { code: number; reason: string };
}

function transport(): Recorded {
  const t: Recorded = {
    sent: [],
    send: (text) => void t.sent.push(text),
    close: (code, reason) => {
      t.closed = { code, reason };
    },
  };
  return t;
}

const hello = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    type: "hello",
    protocol_versions: [2],
    provider_version: "test",
    engine: "fake",
    models: [{ build_id: BUILD }],
    max_concurrency: 4,
    ...extra,
  });

/** Opens a session with `tokenId`; without hello it stays pending. */
function open(t: TestApp, tokenId: string): { session: ProviderSession | undefined; transport: Recorded } {
  const tr = transport();
  return { session: t.app.fleet.connect(tr, { accountId: "acct_test", tokenId, tokenExpiresAt: null }), transport: tr };
}

/** A welcomed plaintext session without evidence (trust none). */
async function plain(t: TestApp, tokenId: string): Promise<ProviderSession> {
  const { session } = open(t, tokenId);
  if (!session) throw new Error("refused");
  session.onFrame(hello());
  await waitFor(() => session.ready, "welcome");
  return session;
}

/** A welcomed sealed session with signed evidence without a device chain (trust self_signed). */
async function attested(t: TestApp, tokenId: string): Promise<{ session: ProviderSession; identity: SoftwareIdentity }> {
  const { session } = open(t, tokenId);
  if (!session) throw new Error("refused");
  const identity = SoftwareIdentity.generate();
  const keys = await generateX25519KeyPair();
  const evidence = buildEvidence({ identity, encryptionKey: keys.publicKey, posture: POSTURE, timestamp: Date.now() }).wire;
  session.onFrame(hello({ encryption_key: toBase64url(keys.publicKey), evidence }));
  await waitFor(() => session.ready, "welcome");
  return { session, identity };
}

interface Page {
  readonly object: string;
  readonly data: { provider_id: string; trust_level: string; identity_key_sha256: string | null }[];
  readonly has_more: boolean;
}

async function page(t: TestApp, query = ""): Promise<Page> {
  const r = await t.call("GET", `/v1/providers/attestation${query}`);
  expect([r.status, r.headers.get("content-type")]).toEqual([200, "application/json"]);
  return r.body as Page;
}

const sorted = (ids: string[]) => [...ids].sort((a, b) => (a < b ? -1 : 1));

describe("GET /v1/providers/attestation", () => {
  test("lists only providers at or above the routing floor", async () => {
    await using t = await testApp({ env: { UMBRA_MIN_TRUST: "self_signed" } });
    await plain(t, "tok_a");
    await plain(t, "tok_a");
    const one = await attested(t, "tok_b");
    const two = await attested(t, "tok_b");
    const entry = (a: { session: ProviderSession; identity: SoftwareIdentity }) => ({
      provider_id: a.session.id,
      trust_level: "self_signed",
      routable: true,
      secure_enclave: true,
      device_chain_verified: false,
      device_chain_source: null,
      device_chain_accepted_until: null,
      identity_key: toBase64url(a.identity.publicKey()),
      identity_key_sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
      encryption_key: toBase64url(a.session.encryptionKey as Uint8Array),
      posture: { sip_enabled: true, secure_boot: "Full Security", third_party_kexts: false, os_version: "15.1" },
      models: [BUILD],
    });
    expect(t.app.fleet.size).toBe(4);
    const [first, second] = one.session.id < two.session.id ? [one, two] : [two, one];
    expect(await page(t)).toEqual({ object: "list", data: [entry(first), entry(second)], has_more: false });

    // The receipt verifier's lookup: one identity key.
    const keyId = one.session.attestation?.identityKey?.id as string;
    expect(await page(t, `?identity_key_sha256=${keyId}`)).toEqual({ object: "list", data: [entry(one)], has_more: false });
    expect(await page(t, `?identity_key_sha256=${"0".repeat(64)}`)).toEqual({ object: "list", data: [], has_more: false });
  });

  test("with many providers a page holds at most 100 (has_more); after and limit walk the rest", async () => {
    await using t = await testApp({ env: { UMBRA_MAX_SESSIONS_PER_TOKEN: "1024" } });
    const ids: string[] = [];
    for (let i = 0; i < 130; i++) ids.push((await plain(t, "tok_many")).id);
    const all = sorted(ids);

    const first = await page(t);
    expect([first.data.length, first.has_more]).toEqual([100, true]);
    expect(first.data.map((p) => p.provider_id)).toEqual(all.slice(0, 100));
    const rest = await page(t, `?after=${all[99]}`);
    expect([rest.data.map((p) => p.provider_id), rest.has_more]).toEqual([all.slice(100), false]);

    const small = await page(t, `?limit=7&after=${all[10]}`);
    expect([small.data.map((p) => p.provider_id), small.has_more]).toEqual([all.slice(11, 18), true]);
    // A cursor need not be listed any more: the page starts after where it would sort.
    const gone = `${all[49]}~`;
    expect((await page(t, `?limit=1&after=${gone}`)).data.map((p) => p.provider_id)).toEqual(all.slice(50, 51));
    expect(await page(t, `?after=${all[129]}`)).toEqual({ object: "list", data: [], has_more: false });
  });

  test("built once per fleet change, however many reads; a session before hello changes nothing", async () => {
    await using t = await testApp();
    const a = await plain(t, "tok_a");
    await plain(t, "tok_b");
    const before = t.app.fleet.publicListBuilds;
    const reads = await Promise.all(Array.from({ length: 20 }, () => t.call("GET", "/v1/providers/attestation")));
    expect(new Set(reads.map((r) => JSON.stringify(r.body))).size).toBe(1);
    expect(t.app.fleet.publicListBuilds).toBe(before + 1);
    await page(t);
    await page(t, "?limit=1");
    expect(t.app.fleet.publicListBuilds).toBe(before + 1);

    const silent = open(t, "tok_c");
    expect(silent.session).toBeDefined();
    await page(t);
    expect(t.app.fleet.publicListBuilds).toBe(before + 1);

    a.onTransportClosed();
    const after = await page(t);
    expect([after.data.length, t.app.fleet.publicListBuilds]).toEqual([1, before + 2]);
  });

  test.each([
    ["limit 0", "?limit=0", "limit"],
    ["limit 101", "?limit=101", "limit"],
    ["limit not a number", "?limit=ten", "limit"],
    ["limit negative", "?limit=-1", "limit"],
    ["after of 257 characters", `?after=${"p".repeat(257)}`, "after"],
    ["identity_key_sha256 too short", "?identity_key_sha256=ABC", "identity_key_sha256"],
    ["identity_key_sha256 in upper case", `?identity_key_sha256=${"A".repeat(64)}`, "identity_key_sha256"],
  ])("%s -> 400 invalid_value", async (_, query, param) => {
    await using t = await testApp();
    const r = await t.call("GET", `/v1/providers/attestation${query}`);
    expect({ status: r.status, body: r.body }).toEqual({
      status: 400,
      body: { error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_value", param } },
    });
  });
});

describe("admission bounds where sessions are counted", () => {
  test("the (limit+1)th session of one token is closed with 4029 at open, before any hello; an ended one frees its place", async () => {
    await using t = await testApp({ env: { UMBRA_MAX_SESSIONS_PER_TOKEN: "2" } });
    const first = open(t, "tok_a");
    await plain(t, "tok_a");
    const third = open(t, "tok_a");
    expect([third.session, third.transport.closed]).toEqual([
      undefined,
      { code: CLOSE.tooManySessions, reason: "this device token already has 2 open sessions (the limit is 2)" },
    ]);
    expect([t.app.fleet.size, t.app.fleet.sessionsOfToken("tok_a"), t.app.fleet.refusal("tok_a")]).toEqual([
      2,
      2,
      "this device token already has 2 open sessions (the limit is 2)",
    ]);
    expect(open(t, "tok_b").session).toBeDefined();
    first.session?.onTransportClosed();
    expect(t.app.fleet.refusal("tok_a")).toBeUndefined();
    expect(open(t, "tok_a").session).toBeDefined();
    expect(t.app.fleet.sessionsOfToken("tok_a")).toBe(2);
  });

  test(`at most ${MAX_PENDING_SESSIONS} sessions wait for welcome over all tokens`, async () => {
    await using t = await testApp();
    const pending = Array.from({ length: MAX_PENDING_SESSIONS }, (_, i) => open(t, `tok_${i}`));
    expect(pending.every((p) => p.session !== undefined)).toBe(true);
    const refused = open(t, "tok_new");
    expect([refused.session, refused.transport.closed]).toEqual([
      undefined,
      { code: CLOSE.tooManySessions, reason: "too many provider connections are waiting for welcome" },
    ]);
    // A welcome frees a pending place.
    const session = pending[0]?.session as ProviderSession;
    session.onFrame(hello());
    await waitFor(() => session.ready, "welcome");
    expect(t.app.fleet.pendingCount).toBe(MAX_PENDING_SESSIONS - 1);
    expect(open(t, "tok_new").session).toBeDefined();
  });
});
