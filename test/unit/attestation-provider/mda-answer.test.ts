/**
 * MDM DeviceInformation answers (attestation/provider/mda-answer.ts): an accepted answer, a negative test
 * for each rule (the failure names exactly that check), the epoch boundaries, and a stored chain
 * re-checked later. Leaves come from test/support/apple-leaf.ts under a development root.
 */
import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { encodeInteger } from "../../../attestation/provider/der.ts";
import {
  AttestationError,
  DevelopmentRoot,
  freshnessCodeFor,
  MDA_MAX_LEAF_AGE_MS,
  type MdaAnswerInput,
  mdaEpoch,
  mdaEpochAcceptedUntil,
  mdaEpochStart,
  mdaNonce,
  parseIdentityKey,
  SoftwareIdentity,
  type TrustMode,
  verifyMdaAnswer,
} from "../../../attestation/provider/index.ts";
import { type AppleLeafOptions, issueAppleLeaf, SIMULATED_SERIAL, SIMULATED_UDID } from "../../support/apple-leaf.ts";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const NOW = Date.parse("2026-11-26T12:00:00Z");
const EPOCH = mdaEpoch(NOW);
const SEED = crypto.getRandomValues(new Uint8Array(32));
const KEY = SoftwareIdentity.generate().publicKey(65);
const OTHER_KEY = SoftwareIdentity.generate().publicKey(65);
const root = await DevelopmentRoot.generate(() => NOW - 90 * DAY);
const otherRoot = await DevelopmentRoot.generate(() => NOW - 90 * DAY);

const SIP = "1.2.840.113635.100.8.13.1";
const SECURE_BOOT = "1.2.840.113635.100.8.13.2";
const KEXTS = "1.2.840.113635.100.8.13.3";
const OS = "1.2.840.113635.100.8.10.1";
const SERIAL = "1.2.840.113635.100.8.9.1";
const UDID = "1.2.840.113635.100.8.9.2";

/** A leaf with this epoch's nonce for KEY, minted an hour ago, unless told otherwise. */
function leaf(options: Partial<AppleLeafOptions> = {}, issuer: DevelopmentRoot = root): Promise<Uint8Array[]> {
  return issueAppleLeaf(issuer, { nonce: mdaNonce(SEED, EPOCH, KEY), notBefore: NOW - HOUR, ...options });
}

function input(chain: Uint8Array[], overrides: Partial<MdaAnswerInput> = {}): MdaAnswerInput {
  return {
    chain,
    serialNumber: SIMULATED_SERIAL,
    provisioningUdid: SIMULATED_UDID,
    enrolmentSerial: SIMULATED_SERIAL,
    identityKey: KEY,
    ...overrides,
  };
}

function verify(answer: MdaAnswerInput, at = NOW, mode: TrustMode = "development") {
  return verifyMdaAnswer(answer, { seed: SEED, anchor: root.anchor, mode, now: () => at });
}

async function failedCheck(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    if (e instanceof AttestationError) return e.check;
    throw e;
  }
  return "no error";
}

const edit = (f: (values: Map<string, Uint8Array>) => void): Partial<AppleLeafOptions> => ({ edit: f });
const drop = (oid: string) => edit((v) => v.delete(oid));
const set = (oid: string, value: Uint8Array | string) =>
  edit((v) => v.set(oid, typeof value === "string" ? new TextEncoder().encode(value) : value));

describe("MDA answer", () => {
  test("an answer that passes every rule: its claims, epoch, leaf time and chain hash", async () => {
    const chain = await leaf();
    const result = await verify(input(chain));
    expect({ ...result, claims: { ...result.claims, freshnessCode: Buffer.from(result.claims.freshnessCode).toString("hex") } }).toEqual({
      claims: {
        serialNumber: SIMULATED_SERIAL,
        udid: SIMULATED_UDID,
        osVersion: "15.5",
        posture: { sipEnabled: true, secureBoot: "Full Security", thirdPartyKexts: false, osVersion: "15.5" },
        freshnessCode: Buffer.from(mdaNonce(SEED, EPOCH, KEY)).toString("hex"),
      },
      leafNotBefore: NOW - HOUR,
      freshnessEpoch: EPOCH,
      chainSha256: createHash("sha256").update(Buffer.concat(chain)).digest("hex"),
      acceptedUntil: mdaEpochAcceptedUntil(EPOCH),
    });
  });

  test("the identity key may come in its 64-byte form; a key that is not a point is refused", async () => {
    const chain = await leaf();
    expect((await verify(input(chain, { identityKey: KEY.subarray(1) }))).freshnessEpoch).toBe(EPOCH);
    expect(await failedCheck(verify(input(chain, { identityKey: new Uint8Array(65).fill(4) })))).toBe("identity_key");
  });

  // Each row breaks one rule; the failure names exactly its check.
  const cases: [string, string, () => Promise<MdaAnswerInput>][] = [
    ["chain_format", "no certificate", async () => input([])],
    ["chain_format", "a truncated leaf", async () => input(await leaf().then(([l, i]) => [l!.subarray(0, 100), i!]))],
    ["chain_anchor", "a chain from another root", async () => input(await leaf({}, otherRoot))],
    ["chain_validity", "an expired leaf", async () => input(await leaf({ notBefore: NOW - 2 * DAY, validityMs: DAY }))],
    ["chain_validity", "a leaf not valid yet", async () => input(await leaf({ notBefore: NOW + HOUR }))],
    ["mda_freshness", "no freshness code", async () => input(await leaf({ nonce: null }))],
    ["mda_freshness", "another identity key's nonce", async () => input(await leaf({ nonce: mdaNonce(SEED, EPOCH, OTHER_KEY) }))],
    [
      "mda_freshness",
      "the old constant rule (SHA-256 of the key)",
      async () => input(await leaf({ nonce: freshnessCodeFor(parseIdentityKey(KEY)) })),
    ],
    ["mda_freshness", "another seed's nonce", async () => input(await leaf({ nonce: mdaNonce(new Uint8Array(32).fill(7), EPOCH, KEY) }))],
    ["mda_freshness", "a nonce cut to 16 bytes", async () => input(await leaf({ nonce: mdaNonce(SEED, EPOCH, KEY).subarray(0, 16) }))],
    ["mda_freshness", "the answer checked against another key", async () => input(await leaf(), { identityKey: OTHER_KEY })],
    ["mda_age", "a leaf older than 21 days", async () => input(await leaf({ notBefore: NOW - MDA_MAX_LEAF_AGE_MS - 1 }))],
    ["mda_posture_missing", "a macOS 14.0 leaf (no posture OIDs)", async () => input(await leaf({ posture: false }))],
    ["mda_posture_missing", "no SIP OID", async () => input(await leaf(drop(SIP)))],
    ["mda_posture_missing", "no Secure Boot OID", async () => input(await leaf(drop(SECURE_BOOT)))],
    ["mda_posture_missing", "no kext OID", async () => input(await leaf(drop(KEXTS)))],
    ["mda_posture_missing", "no OS version OID", async () => input(await leaf(drop(OS)))],
    ["mda_posture_missing", "an OS version that is not a version", async () => input(await leaf(set(OS, "fifteen")))],
    ["mda_sip", "SIP off", async () => input(await leaf({ sipEnabled: false }))],
    ["mda_sip", "SIP as a BOOLEAN", async () => input(await leaf(set(SIP, Uint8Array.from([0x01, 0x01, 0xff]))))],
    ["mda_sip", "SIP as a non-minimal INTEGER", async () => input(await leaf(set(SIP, Uint8Array.from([0x02, 0x02, 0x00, 0x00]))))],
    ["mda_sip", "SIP status -1", async () => input(await leaf(set(SIP, encodeInteger(-1n))))],
    ["mda_secure_boot", "Reduced Security", async () => input(await leaf({ secureBoot: "Reduced Security" }))],
    ["mda_secure_boot", "Permissive Security", async () => input(await leaf({ secureBoot: "Permissive Security" }))],
    ["mda_secure_boot", "an unknown level", async () => input(await leaf(set(SECURE_BOOT, "full security")))],
    ["mda_secure_boot", "a non-printable level", async () => input(await leaf(set(SECURE_BOOT, Uint8Array.from([0x46, 0x00]))))],
    ["mda_kexts", "third-party kexts allowed", async () => input(await leaf({ kexts: true }))],
    ["mda_kexts", "the kext policy as a string", async () => input(await leaf(set(KEXTS, "0")))],
    ["mda_serial", "a leaf of another serial", async () => input(await leaf({ serialNumber: "OTHERMAC99" }))],
    ["mda_serial", "no serial in the leaf", async () => input(await leaf(drop(SERIAL)))],
    ["mda_serial", "no SerialNumber in the answer", async () => input(await leaf(), { serialNumber: undefined })],
    ["mda_serial", "another SerialNumber in the answer", async () => input(await leaf(), { serialNumber: "OTHERMAC99" })],
    ["mda_serial", "another serial in the enrolment", async () => input(await leaf(), { enrolmentSerial: "OTHERMAC99" })],
    ["mda_serial", "a serial differing in case", async () => input(await leaf(), { serialNumber: SIMULATED_SERIAL.toLowerCase() })],
    ["mda_udid", "a leaf of another UDID", async () => input(await leaf({ udid: "00008112-000FFFFFFFFFFFFF" }))],
    ["mda_udid", "no UDID in the leaf", async () => input(await leaf(drop(UDID)))],
    ["mda_udid", "no ProvisioningUDID in the answer", async () => input(await leaf(), { provisioningUdid: undefined })],
    [
      "mda_udid",
      "another ProvisioningUDID in the answer",
      async () => input(await leaf(), { provisioningUdid: "00008112-000FFFFFFFFFFFFF" }),
    ],
  ];

  test.each(cases)("%s: %s", async (check, _, build) => {
    expect(await failedCheck(verify(await build()))).toBe(check);
  });

  test("development_root: a development root in production mode", async () => {
    expect(await failedCheck(verify(input(await leaf()), NOW, "production"))).toBe("development_root");
  });

  test("every mda_ check has a negative test above", () => {
    const named = new Set(cases.map(([check]) => check));
    const mda = ["mda_freshness", "mda_age", "mda_posture_missing", "mda_sip", "mda_secure_boot", "mda_kexts", "mda_serial", "mda_udid"];
    expect(mda.filter((c) => !named.has(c))).toEqual([]);
  });

  test("rules run in order: a leaf bound to another key fails mda_freshness whatever else is wrong", async () => {
    const chain = await leaf({ nonce: mdaNonce(SEED, EPOCH, OTHER_KEY), sipEnabled: false, serialNumber: "OTHERMAC99" });
    expect(await failedCheck(verify(input(chain)))).toBe("mda_freshness");
    const old = await leaf({ notBefore: NOW - 30 * DAY, posture: false });
    expect(await failedCheck(verify(input(old)))).toBe("mda_age");
  });
});

describe("MDA answer: epoch boundaries", () => {
  test.each([
    [0, "accepted"],
    [-1, "accepted"],
    [-2, "accepted"],
    [-3, "mda_freshness"],
    [1, "mda_freshness"],
  ])("a nonce of epoch current%+d: %s", async (offset, outcome) => {
    const chain = await leaf({ nonce: mdaNonce(SEED, EPOCH + offset, KEY) });
    const result = verify(input(chain));
    if (outcome === "accepted") expect((await result).freshnessEpoch).toBe(EPOCH + offset);
    else expect(await failedCheck(result)).toBe(outcome);
  });

  test("the last millisecond of an epoch and the first of the next", async () => {
    const chain = await leaf({ nonce: mdaNonce(SEED, EPOCH - 2, KEY) });
    const lastAccepted = mdaEpochStart(EPOCH + 1) - 1;
    expect((await verify(input(chain), lastAccepted)).freshnessEpoch).toBe(EPOCH - 2);
    expect(await failedCheck(verify(input(chain), lastAccepted + 1))).toBe("mda_freshness");
  });

  test("a nonce of another identity key is refused in every accepted epoch", async () => {
    for (const offset of [0, -1, -2]) {
      const chain = await leaf({ nonce: mdaNonce(SEED, EPOCH + offset, OTHER_KEY) });
      expect(await failedCheck(verify(input(chain)))).toBe("mda_freshness");
    }
  });
});

describe("MDA answer: a stored chain re-checked at a reconnect", () => {
  test("passes within its epoch window, fails once its epoch falls out", async () => {
    const minted = mdaEpochStart(EPOCH) + HOUR;
    const stored = input(await leaf({ notBefore: minted }));
    const first = await verify(stored, minted + HOUR);
    expect([first.freshnessEpoch, first.acceptedUntil]).toEqual([EPOCH, mdaEpochAcceptedUntil(EPOCH)]);
    for (const at of [minted + 7 * DAY, minted + 14 * DAY, first.acceptedUntil]) {
      expect(await verify(stored, at)).toEqual(first);
    }
    expect(await failedCheck(verify(stored, first.acceptedUntil + 1))).toBe("mda_freshness");
  });

  test("fails once its leaf passes 21 days, even inside the epoch window", async () => {
    // A leaf minted before its nonce's epoch began (a nonce known in advance): the age bound still holds.
    const minted = mdaEpochStart(EPOCH) - 2 * DAY;
    const stored = input(await leaf({ notBefore: minted }));
    const first = await verify(stored, mdaEpochStart(EPOCH));
    expect(first.acceptedUntil).toBe(minted + MDA_MAX_LEAF_AGE_MS);
    expect((await verify(stored, minted + MDA_MAX_LEAF_AGE_MS)).freshnessEpoch).toBe(EPOCH);
    expect(mdaEpoch(minted + MDA_MAX_LEAF_AGE_MS + 1)).toBe(EPOCH + 2);
    expect(await failedCheck(verify(stored, minted + MDA_MAX_LEAF_AGE_MS + 1))).toBe("mda_age");
  });

  test("fails once the leaf itself expires", async () => {
    const stored = input(await leaf({ notBefore: NOW - HOUR, validityMs: 2 * DAY }));
    const first = await verify(stored);
    expect(first.acceptedUntil).toBe(NOW - HOUR + 2 * DAY);
    expect(await failedCheck(verify(stored, first.acceptedUntil + 1))).toBe("chain_validity");
  });
});
