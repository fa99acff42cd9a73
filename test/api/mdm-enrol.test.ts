/**
 * The MDM enrolment routes in-process (src/api/mdm-enrol.ts over src/mdm/enrolment.ts): 404 unless
 * configured; the challenge (single use, 5-minute expiry, wrong key or signature refused, another
 * account's device token can neither use nor read it); the profile served as
 * application/x-apple-aspen-config with the configured URLs whatever the Host, its token recorded only
 * hashed (the hash the webhook computes for `url_params.e`); re-enrolment keeps the identifiers; the
 * status route per account, from the store's records (attested: a stored chain that passes now).
 */
import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { type PlistValue, parse } from "plist";
import { mdaEpoch, mdaNonce } from "../../attestation/provider/mda-nonce.ts";
import { SoftwareIdentity } from "../../attestation/provider/software-identity.ts";
import { enrolMessage } from "../../src/mdm/enrolment.ts";
import type { MdmEnrolment } from "../../src/store/mdm-types.ts";
import { issueAppleLeaf } from "../support/apple-leaf.ts";
import { type CallResult, call, seedAccount, type TestApp, tempDir, testApp } from "../support/harness.ts";
import { mdmEnv, NANOMDM_ENV, testCa, testSigningIdentity, verifyCms } from "../support/mdm-ca.ts";

const ca = testCa();
type Dict = { [key: string]: PlistValue };
const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");

const SEED = new Uint8Array(32).fill(7);

interface Env {
  readonly t: TestApp;
  /** The store's enrolment records of the first account, oldest first. */
  readonly records: { all(): Promise<MdmEnrolment[]> };
  readonly clock: { now: number };
  readonly token: string;
  readonly otherToken: string;
}

async function withEnrolment(run: (env: Env) => Promise<void>): Promise<void> {
  using dir = tempDir();
  const clock = { now: 1_800_000_000_000 };
  const env = { ...NANOMDM_ENV, ...mdmEnv(dir.path, ca), UMBRA_MDA_SEED: Buffer.from(SEED).toString("hex") };
  await using t = await testApp({ env, clock: { now: () => clock.now } });
  const a = await seedAccount(t);
  const records = { all: async () => (await t.store.mdm.enrolments.forAccount(a.accountId)).reverse() };
  const b = await seedAccount(t);
  const token = (await t.app.admin.createProviderToken({ account_id: a.accountId })).token;
  const otherToken = (await t.app.admin.createProviderToken({ account_id: b.accountId })).token;
  await run({ t, records, clock, token, otherToken });
}

async function challenge(t: TestApp, token: string): Promise<Uint8Array> {
  const r = await t.call("POST", "/v1/provider/enroll/challenge", { token });
  expect(r.status).toBe(200);
  return new Uint8Array(Buffer.from((r.body as { challenge: string }).challenge, "base64"));
}

function enrolBody(identity: SoftwareIdentity, c: Uint8Array, signer = identity) {
  return { challenge: b64(c), identity_key: b64(identity.publicKey(65)), signature: b64(signer.sign(enrolMessage(c))) };
}

const errorOf = (r: CallResult) => ({ status: r.status, param: (r.body as { error?: { param?: string } }).error?.param });
const profileOf = (r: CallResult) => parse(String(r.body)) as Dict;
const mdmPayload = (profile: Dict) => (profile.PayloadContent as Dict[])[1] as Dict;

describe("MDM enrolment routes", () => {
  test("404 on every route when MDM enrolment is not configured", async () => {
    await using t = await testApp();
    const { accountId } = await seedAccount(t);
    const { token } = await t.app.admin.createProviderToken({ account_id: accountId });
    const statuses = [
      (await t.call("POST", "/v1/provider/enroll/challenge", { token })).status,
      (await t.call("POST", "/v1/provider/enroll", { token, body: {} })).status,
      (await t.call("GET", "/v1/provider/enroll/status", { token })).status,
    ];
    expect(statuses).toEqual([404, 404, 404]);
  });

  test("a challenge: 32 bytes, five minutes, no-store; 401 without a live device token", () =>
    withEnrolment(async ({ t, clock, token }) => {
      const r = await t.call("POST", "/v1/provider/enroll/challenge", { token });
      const body = r.body as { challenge: string; expires_at: number };
      expect({
        status: r.status,
        cache: r.headers.get("cache-control"),
        bytes: Buffer.from(body.challenge, "base64").length,
        expires: body.expires_at,
      }).toEqual({ status: 200, cache: "no-store", bytes: 32, expires: clock.now + 300_000 });
      expect((await t.call("POST", "/v1/provider/enroll/challenge")).status).toBe(401);
      expect((await t.call("GET", "/v1/provider/enroll/status")).status).toBe(401);
    }));

  test("the profile: aspen-config, URLs from configuration under a hostile Host, the token recorded hashed and single use", () =>
    withEnrolment(async ({ t, records, clock, token }) => {
      const identity = SoftwareIdentity.generate();
      const c = await challenge(t, token);
      const request = new Request("http://attacker.example/v1/provider/enroll", {
        method: "POST",
        headers: {
          authorization: `Bearer ${token}`,
          "content-type": "application/json",
          "x-forwarded-host": "attacker.example",
          "x-forwarded-proto": "http",
        },
        body: JSON.stringify(enrolBody(identity, c)),
      });
      const response = await t.app.http.handle(request);
      expect([response.status, response.headers.get("content-type"), response.headers.get("cache-control")]).toEqual([
        200,
        "application/x-apple-aspen-config",
        "no-store",
      ]);
      const mdm = mdmPayload(parse(await response.text()) as Dict);
      const url = new URL(String(mdm.ServerURL));
      const e = url.searchParams.get("e") ?? "";
      expect({ origin: url.origin, path: url.pathname, checkIn: mdm.CheckInURL, eLength: e.length }).toEqual({
        origin: "https://mdm.umbra.example",
        path: "/mdm",
        checkIn: mdm.ServerURL,
        eLength: 43,
      });
      const all = await records.all();
      const [record] = all;
      expect(all.length).toBe(1);
      expect(record).toMatchObject({
        identityKey: b64(identity.publicKey(65)),
        tokenHash: createHash("sha256").update(e).digest("hex"),
        createdAt: clock.now,
        tokenExpiresAt: clock.now + 86_400_000,
        state: "issued",
        nanomdmId: null,
        serial: null,
      });
      expect(JSON.stringify(all)).not.toContain(e);
      // The webhook looks the token up by the same hash (url_params.e -> sha256 hex of its UTF-8).
      expect((await t.store.mdm.enrolments.findByTokenHash(createHash("sha256").update(e, "utf8").digest("hex")))?.id).toBe(record?.id);
      expect(t.logs.join("\n")).not.toContain(e);
      // The challenge was used once.
      const again = await t.call("POST", "/v1/provider/enroll", { token, body: enrolBody(identity, c) });
      expect(errorOf(again)).toEqual({ status: 400, param: "challenge" });
    }));

  test("an expired challenge, a wrong key and a wrong signature are refused; a failed attempt uses the challenge up", () =>
    withEnrolment(async ({ t, records, clock, token }) => {
      const identity = SoftwareIdentity.generate();
      const old = await challenge(t, token);
      clock.now += 300_000;
      const expired = await t.call("POST", "/v1/provider/enroll", { token, body: enrolBody(identity, old) });
      const c1 = await challenge(t, token);
      const wrongKey = await t.call("POST", "/v1/provider/enroll", { token, body: enrolBody(identity, c1, SoftwareIdentity.generate()) });
      const retried = await t.call("POST", "/v1/provider/enroll", { token, body: enrolBody(identity, c1) });
      const c2 = await challenge(t, token);
      const body = enrolBody(identity, c2);
      const flipped = Buffer.from(body.signature, "base64");
      flipped[flipped.length - 1] = (flipped.at(-1) ?? 0) ^ 1;
      const wrongSignature = await t.call("POST", "/v1/provider/enroll", { token, body: { ...body, signature: b64(flipped) } });
      const c3 = await challenge(t, token);
      const notAKey = await t.call("POST", "/v1/provider/enroll", {
        token,
        body: { ...enrolBody(identity, c3), identity_key: b64(new Uint8Array(65)) },
      });
      expect([expired, wrongKey, retried, wrongSignature, notAKey].map(errorOf)).toEqual([
        { status: 400, param: "challenge" },
        { status: 400, param: "signature" },
        { status: 400, param: "challenge" },
        { status: 400, param: "signature" },
        { status: 400, param: "identity_key" },
      ]);
      expect(await records.all()).toEqual([]);
    }));

  test("another account's device token cannot use a challenge or read the enrolment", () =>
    withEnrolment(async ({ t, records, token, otherToken }) => {
      const identity = SoftwareIdentity.generate();
      const c = await challenge(t, token);
      const foreign = await t.call("POST", "/v1/provider/enroll", { token: otherToken, body: enrolBody(identity, c) });
      expect(errorOf(foreign)).toEqual({ status: 400, param: "challenge" });
      const own = await t.call("POST", "/v1/provider/enroll", { token, body: enrolBody(identity, c) });
      expect(own.status).toBe(200);
      const key = encodeURIComponent(b64(identity.publicKey(65)));
      const seen = await Promise.all([
        t.call("GET", "/v1/provider/enroll/status", { token: otherToken }),
        t.call("GET", `/v1/provider/enroll/status?identity_key=${key}`, { token: otherToken }),
        t.call("GET", `/v1/provider/enroll/status?identity_key=${key}`, { token }),
      ]);
      expect(seen.map((r) => (r.body as { state: string }).state)).toEqual(["none", "none", "issued"]);
      expect((await records.all()).length).toBe(1);
    }));

  test("status follows the record: issued, enrolled, attested; re-enrolment keeps the identifiers with a new token", () =>
    withEnrolment(async ({ t, records, clock, token }) => {
      const identity = SoftwareIdentity.generate();
      const status = async () => (await t.call("GET", "/v1/provider/enroll/status", { token })).body;
      expect(await status()).toEqual({ state: "none" });
      const first = await t.call("POST", "/v1/provider/enroll", { token, body: enrolBody(identity, await challenge(t, token)) });
      const [record] = await records.all();
      const id = record?.id ?? "";
      const base = { enrolment_id: id, identity_key: b64(identity.publicKey(65)), created_at: clock.now };
      expect(await status()).toEqual({ state: "issued", ...base, updated_at: clock.now, attested_at: null });
      await t.store.mdm.enrolments.bind({ tokenHash: record?.tokenHash ?? "", nanomdmId: "UDID-1", serial: "SERIAL1", at: clock.now + 1 });
      expect(await status()).toEqual({ state: "enrolled", ...base, updated_at: clock.now + 1, attested_at: null });
      // A chain as the webhook stores it: Apple-shaped, from the coordinator's development root, this epoch's nonce.
      const root = (await t.app.trust()).devRoot;
      if (!root) throw new Error("no development root");
      const nonce = mdaNonce(SEED, mdaEpoch(clock.now), identity.publicKey(65));
      const chain = await issueAppleLeaf(root, { nonce, serialNumber: "SERIAL1", udid: "UDID-X" });
      const stored = {
        enrolmentId: id,
        certificates: chain.map((c) => b64(c)),
        chainSha256: "",
        serial: "SERIAL1",
        udid: "UDID-X",
        osVersion: "15.5",
        leafNotBefore: clock.now,
        epoch: mdaEpoch(clock.now),
        verifiedAt: clock.now + 2,
      };
      await t.store.mdm.chains.put(stored);
      expect(await status()).toEqual({ state: "attested", ...base, updated_at: clock.now + 1, attested_at: clock.now + 2 });
      // A stored chain that no longer passes (another serial answered) is not an attestation.
      await t.store.mdm.chains.put({ ...stored, serial: "SERIAL2" });
      expect(await status()).toEqual({ state: "enrolled", ...base, updated_at: clock.now + 1, attested_at: null });

      clock.now += 1000;
      const second = await call(t.app, "POST", "/v1/provider/enroll", { token, body: enrolBody(identity, await challenge(t, token)) });
      const ids = (r: CallResult) => {
        const p = profileOf(r);
        return [p.PayloadIdentifier, p.PayloadUUID, mdmPayload(p).PayloadUUID, mdmPayload(p).PayloadIdentifier];
      };
      expect(ids(second)).toEqual(ids(first));
      expect(mdmPayload(profileOf(second)).ServerURL).not.toEqual(mdmPayload(profileOf(first)).ServerURL);
      expect((await records.all()).map((r) => r.state)).toEqual(["checked_out", "issued"]);
      expect((await status()) as { state: string }).toMatchObject({ state: "issued", created_at: clock.now });
    }));

  test("with a signing identity configured the profile is CMS-signed and verifies; a bad password is a 503, logged", async () => {
    using dir = tempDir();
    const signing = testSigningIdentity();
    for (const password of [signing.password, "wrong"]) {
      await using t = await testApp({ env: { ...NANOMDM_ENV, ...mdmEnv(dir.path, ca, { p12: signing.p12, password }) } });
      const { accountId } = await seedAccount(t);
      const { token } = await t.app.admin.createProviderToken({ account_id: accountId });
      const identity = SoftwareIdentity.generate();
      const response = await t.app.http.handle(
        new Request("http://localhost/v1/provider/enroll", {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: JSON.stringify(enrolBody(identity, await challenge(t, token))),
        }),
      );
      if (password === signing.password) {
        expect([response.status, response.headers.get("content-type")]).toEqual([200, "application/x-apple-aspen-config"]);
        const verified = verifyCms(new Uint8Array(await response.arrayBuffer()));
        expect({ signer: verified.signer, type: (parse(verified.content) as Dict).PayloadType }).toEqual({
          signer: "Umbra Test Profile Signer",
          type: "Configuration",
        });
      } else {
        expect(response.status).toBe(503);
        expect(t.logs.some((line) => line.includes("mdm enrolment unavailable"))).toBe(true);
      }
    }
  });

  test("at most 10 profiles per device token per hour: then 429 with Retry-After", () =>
    withEnrolment(async ({ t, clock, token, otherToken }) => {
      const identity = SoftwareIdentity.generate();
      const statuses: number[] = [];
      for (let i = 0; i < 11; i++) {
        statuses.push(
          (await t.call("POST", "/v1/provider/enroll", { token, body: enrolBody(identity, await challenge(t, token)) })).status,
        );
        clock.now += 60_000;
      }
      const limited = await t.call("POST", "/v1/provider/enroll", { token, body: enrolBody(identity, await challenge(t, token)) });
      const other = await t.call("POST", "/v1/provider/enroll", {
        token: otherToken,
        body: enrolBody(identity, await challenge(t, otherToken)),
      });
      expect({ statuses, retryAfter: limited.headers.get("retry-after"), other: other.status }).toEqual({
        statuses: [...Array(10).fill(200), 429],
        retryAfter: String(3600 - 11 * 60),
        other: 200,
      });
    }));
});
