/**
 * The device login state machine (src/auth/device-flow.ts) on a fake clock: approve, deny, expiry and
 * the tombstone after it, single delivery, slow_down and interval growth, unknown codes, user code
 * normalisation, capacity, the per-address code budget and the wrong-code limit.
 */
import { describe, expect, test } from "bun:test";
import {
  addressSubject,
  DeviceFlow,
  type DeviceFlowOptions,
  formatUserCode,
  hashDeviceCode,
  normalizeUserCode,
  USER_CODE_ALPHABET,
} from "../../../src/auth/device-flow.ts";
import { ApiError } from "../../../src/errors/api-error.ts";

const T0 = 1_800_000_000_000;

function setup(options: Partial<DeviceFlowOptions> = {}) {
  let t = T0;
  const flow = new DeviceFlow({ now: () => t, ...options });
  return {
    flow,
    advance: (ms: number) => {
      t += ms;
    },
  };
}

/** What a thrown ApiError says (status, code, param, Retry-After). */
function refusal(act: () => unknown) {
  try {
    act();
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return { status: e.status, code: e.code, param: e.param, retryAfter: e.headers?.["retry-after"] };
  }
  throw new Error("expected an ApiError");
}

const approver = { accountId: "acct_a", credential: "key_a", address: "192.0.2.1" };
const start = (flow: DeviceFlow, address = "198.51.100.7", machineName: string | null = "mac-1") => flow.start({ address, machineName });

describe("preview before the decision", () => {
  test("shows the machine name, when the code was requested and when it expires; decides nothing", () => {
    const { flow, advance } = setup();
    const s = start(flow, undefined, "studio <b>");
    advance(30_000);
    const asker = { credential: "key_a", address: "192.0.2.1" };
    expect(flow.preview({ userCode: s.userCode.toLowerCase(), ...asker })).toEqual({
      userCode: s.userCode,
      machineName: "studio <b>",
      models: null,
      trustLevel: null,
      requestedAt: T0,
      expiresAt: T0 + 600_000,
    });
    expect(flow.poll(s.deviceCode)).toEqual({ status: "authorization_pending", interval: 5 });
    flow.decide({ userCode: s.userCode, decision: "approve", ...approver });
    expect(refusal(() => flow.preview({ userCode: s.userCode, ...asker }))).toEqual({
      status: 409,
      code: "device_code_already_decided",
      param: "user_code",
      retryAfter: undefined,
    });
  });

  test("wrong codes in previews and decisions share one budget per credential", () => {
    const { flow } = setup();
    const s = start(flow);
    for (let i = 0; i < 5; i++) {
      expect(refusal(() => flow.preview({ userCode: "BBBB-BBBB", credential: "key_a", address: `192.0.2.${i}` }))).toMatchObject({
        status: 404,
      });
      expect(
        refusal(() => flow.decide({ userCode: "BBBB-BBBB", decision: "approve", ...approver, address: `192.0.2.${i + 100}` })),
      ).toMatchObject({ status: 404 });
    }
    expect(refusal(() => flow.preview({ userCode: s.userCode, credential: "key_a", address: "192.0.2.200" }))).toMatchObject({
      status: 429,
    });
    expect(refusal(() => flow.preview({ userCode: "nope", credential: "key_a", address: "192.0.2.201" }))).toMatchObject({ status: 400 });
  });
});

describe("a login from start to token", () => {
  test("start answers a fresh code pair in the documented shapes", () => {
    const { flow } = setup();
    const a = start(flow);
    const b = start(flow);
    expect(a).toEqual({
      deviceCode: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
      userCode: expect.any(String),
      expiresIn: 600,
      interval: 5,
    });
    expect(a.userCode).toMatch(new RegExp(`^[${USER_CODE_ALPHABET}]{4}-[${USER_CODE_ALPHABET}]{4}$`));
    expect(b.deviceCode).not.toBe(a.deviceCode);
    expect(b.userCode).not.toBe(a.userCode);
    expect(flow.size).toBe(2);
  });

  test("approve -> the first poll gets the account, every later poll invalid_grant (single use)", () => {
    const { flow, advance } = setup();
    const s = start(flow);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "authorization_pending", interval: 5 });
    expect(flow.decide({ userCode: s.userCode, decision: "approve", ...approver })).toEqual({
      userCode: s.userCode,
      decision: "approve",
      accountId: "acct_a",
      machineName: "mac-1",
      tokenExpiresInSeconds: null,
    });
    advance(5_000);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "approved", accountId: "acct_a", machineName: "mac-1", tokenExpiresInSeconds: null });
    advance(5_000);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "invalid_grant" });
    expect(flow.size).toBe(0);
    // The user code is gone with it.
    expect(refusal(() => flow.decide({ userCode: s.userCode, decision: "approve", ...approver }))).toMatchObject({
      status: 404,
      code: "device_code_not_found",
    });
  });

  test("an approval may set the token's lifetime; the poll hands it on; a denial carries none", () => {
    const { flow } = setup();
    const s = start(flow);
    expect(flow.decide({ userCode: s.userCode, decision: "approve", tokenExpiresInSeconds: 86_400, ...approver })).toEqual({
      userCode: s.userCode,
      decision: "approve",
      accountId: "acct_a",
      machineName: "mac-1",
      tokenExpiresInSeconds: 86_400,
    });
    expect(flow.poll(s.deviceCode)).toEqual({
      status: "approved",
      accountId: "acct_a",
      machineName: "mac-1",
      tokenExpiresInSeconds: 86_400,
    });
    const d = start(flow);
    expect(
      flow.decide({ userCode: d.userCode, decision: "deny", tokenExpiresInSeconds: 60, ...approver }).tokenExpiresInSeconds,
    ).toBeNull();
  });

  test("an approval is answered even to a poll that comes early (slow_down only while pending)", () => {
    const { flow } = setup();
    const s = start(flow);
    flow.poll(s.deviceCode);
    flow.decide({ userCode: s.userCode, decision: "approve", ...approver });
    expect(flow.poll(s.deviceCode)).toMatchObject({ status: "approved" });
  });

  test("deny -> access_denied on every poll until expiry, then expired_token", () => {
    const { flow, advance } = setup();
    const s = start(flow, undefined, null);
    expect(flow.decide({ userCode: s.userCode, decision: "deny", ...approver })).toEqual({
      userCode: s.userCode,
      decision: "deny",
      accountId: "acct_a",
      machineName: null,
      tokenExpiresInSeconds: null,
    });
    expect(flow.poll(s.deviceCode)).toEqual({ status: "access_denied" });
    advance(5_000);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "access_denied" });
    advance(600_000);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "expired_token" });
  });

  test("a second decision on the same code is 409, whichever it is", () => {
    const { flow } = setup();
    const s = start(flow);
    flow.decide({ userCode: s.userCode, decision: "deny", ...approver });
    for (const decision of ["approve", "deny"] as const) {
      expect(refusal(() => flow.decide({ userCode: s.userCode, decision, ...approver, accountId: "acct_b" }))).toEqual({
        status: 409,
        code: "device_code_already_decided",
        param: "user_code",
        retryAfter: undefined,
      });
    }
    expect(flow.poll(s.deviceCode)).toEqual({ status: "access_denied" });
  });

  test("with a viewer: a code another account decided is 404 to it, 409 to the deciding account", () => {
    const { flow } = setup();
    const s = flow.start({ address: "198.51.100.7", machineName: "mac", models: ["org/a"], trustLevel: "hardware" });
    const asker = { credential: "key_b", address: "192.0.2.9" };
    expect(flow.preview({ userCode: s.userCode, ...asker, viewer: "acct_b" })).toMatchObject({ models: ["org/a"], trustLevel: "hardware" });
    flow.decide({ userCode: s.userCode, decision: "approve", ...approver, viewer: "acct_a" });
    expect(refusal(() => flow.preview({ userCode: s.userCode, ...asker, viewer: "acct_b" }))).toMatchObject({
      status: 404,
      code: "device_code_not_found",
    });
    expect(
      refusal(() => flow.decide({ userCode: s.userCode, decision: "deny", ...asker, accountId: "acct_b", viewer: "acct_b" })),
    ).toMatchObject({
      status: 404,
    });
    expect(refusal(() => flow.preview({ userCode: s.userCode, ...approver, viewer: "acct_a" }))).toMatchObject({ status: 409 });
    expect(flow.poll(s.deviceCode)).toMatchObject({ status: "approved", accountId: "acct_a" });
  });
});

describe("expiry", () => {
  test("at expires_in the code is expired: polls say expired_token, approval says 404, for as long again", () => {
    const { flow, advance } = setup();
    const s = start(flow);
    advance(599_999);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "authorization_pending", interval: 5 });
    advance(1);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "expired_token" });
    expect(refusal(() => flow.decide({ userCode: s.userCode, decision: "approve", ...approver }))).toMatchObject({
      status: 404,
      code: "device_code_not_found",
    });
    expect(flow.size).toBe(0);
    advance(599_999);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "expired_token" });
    advance(1);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "invalid_grant" });
  });

  test("an approval not collected in time lapses", () => {
    const { flow, advance } = setup();
    const s = start(flow);
    flow.decide({ userCode: s.userCode, decision: "approve", ...approver });
    advance(600_000);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "expired_token" });
  });

  test("lifetime and interval are configurable", () => {
    const { flow, advance } = setup({ expiresInSeconds: 30, intervalSeconds: 2 });
    const s = start(flow);
    expect(s).toMatchObject({ expiresIn: 30, interval: 2 });
    advance(30_000);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "expired_token" });
  });
});

describe("polling pace (RFC 8628 section 3.5)", () => {
  test("sooner than the interval after the previous poll -> slow_down, and the interval grows by 5 s each time", () => {
    const { flow, advance } = setup();
    const s = start(flow);
    // The first poll has no previous poll to be early against.
    expect(flow.poll(s.deviceCode)).toEqual({ status: "authorization_pending", interval: 5 });
    advance(1_000);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "slow_down", interval: 10 });
    advance(5_000);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "slow_down", interval: 15 });
    advance(15_000);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "authorization_pending", interval: 15 });
    // Half a second of jitter is tolerated; more is not.
    advance(14_500);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "authorization_pending", interval: 15 });
    advance(14_499);
    expect(flow.poll(s.deviceCode)).toEqual({ status: "slow_down", interval: 20 });
  });

  test("each code keeps its own interval", () => {
    const { flow } = setup();
    const a = start(flow);
    const b = start(flow);
    flow.poll(a.deviceCode);
    expect(flow.poll(a.deviceCode)).toEqual({ status: "slow_down", interval: 10 });
    expect(flow.poll(b.deviceCode)).toEqual({ status: "authorization_pending", interval: 5 });
  });
});

describe("unknown codes", () => {
  test.each([
    ["a random device code", "x".repeat(43)],
    ["an empty string", ""],
    ["a code's hash instead of the code", "HASH"],
  ])("%s -> invalid_grant", (_, code) => {
    const { flow } = setup();
    const s = start(flow);
    expect(flow.poll(code === "HASH" ? hashDeviceCode(s.deviceCode) : code)).toEqual({ status: "invalid_grant" });
  });

  test("a well-formed user code nobody was given -> 404, the same answer as an expired one", () => {
    const { flow } = setup();
    start(flow);
    expect(refusal(() => flow.decide({ userCode: "BBBB-BBBB", decision: "approve", ...approver }))).toEqual({
      status: 404,
      code: "device_code_not_found",
      param: "user_code",
      retryAfter: undefined,
    });
  });
});

describe("user codes", () => {
  test("normalisation: case, dashes and spaces are ignored", () => {
    expect(["bcdf-ghjk", "BCDFGHJK", " bcdf ghjk ", "Bc-Df-Gh-Jk", "BCDF\tGHJK"].map(normalizeUserCode)).toEqual(Array(5).fill("BCDFGHJK"));
    expect(formatUserCode("BCDFGHJK")).toBe("BCDF-GHJK");
  });

  test.each([["BCDF-GHJ"], ["BCDF-GHJKL"], ["BCDF-GHJA"], ["BCDF-GHJ0"], ["BCDF_GHJK"], [""], ["ÄCDF-GHJK"]])(
    "%p cannot be a user code",
    (typed) => {
      expect(normalizeUserCode(typed)).toBeUndefined();
      const { flow } = setup();
      expect(refusal(() => flow.decide({ userCode: typed, decision: "approve", ...approver }))).toEqual({
        status: 400,
        code: "invalid_value",
        param: "user_code",
        retryAfter: undefined,
      });
    },
  );

  test("the code as typed by a person approves the login, answered in its shown form", () => {
    const { flow } = setup();
    const s = start(flow);
    const typed = ` ${s.userCode.toLowerCase().replace("-", " ")} `;
    expect(flow.decide({ userCode: typed, decision: "approve", ...approver }).userCode).toBe(s.userCode);
    expect(flow.poll(s.deviceCode)).toMatchObject({ status: "approved" });
  });

  test("codes use every letter of the alphabet and nothing else", () => {
    const { flow } = setup({ maxPending: 1_000, codesPerMinute: 1_000 });
    const seen = new Set<string>();
    for (let i = 0; i < 500; i++) for (const c of start(flow).userCode.replace("-", "")) seen.add(c);
    expect([...seen].sort().join("")).toBe(USER_CODE_ALPHABET);
  });
});

describe("capacity", () => {
  test("beyond maxPending -> 503 with Retry-After; expired and delivered logins free their places", () => {
    const { flow, advance } = setup({ maxPending: 3 });
    const first = start(flow, "203.0.113.1");
    start(flow, "203.0.113.2");
    advance(1_000);
    const third = start(flow, "203.0.113.3");
    expect(refusal(() => start(flow, "203.0.113.4"))).toEqual({
      status: 503,
      code: "service_unavailable",
      param: undefined,
      retryAfter: "60",
    });
    // Delivering one frees a place.
    flow.decide({ userCode: third.userCode, decision: "approve", ...approver });
    expect(flow.poll(third.deviceCode)).toMatchObject({ status: "approved" });
    start(flow, "203.0.113.5");
    expect(refusal(() => start(flow, "203.0.113.6"))).toMatchObject({ status: 503 });
    // The two oldest expire: two places.
    advance(599_000);
    expect(flow.size).toBe(1);
    start(flow, "203.0.113.7");
    start(flow, "203.0.113.8");
    expect(flow.poll(first.deviceCode)).toEqual({ status: "expired_token" });
  });
});

describe("rate limits", () => {
  test("10 codes per address, then 429 with Retry-After; other addresses are not affected; one more every 6 s", () => {
    const { flow, advance } = setup();
    for (let i = 0; i < 10; i++) start(flow, "198.51.100.7");
    expect(refusal(() => start(flow, "198.51.100.7"))).toEqual({
      status: 429,
      code: "rate_limit_exceeded",
      param: undefined,
      retryAfter: "6",
    });
    start(flow, "198.51.100.8");
    advance(6_000);
    start(flow, "198.51.100.7");
    expect(refusal(() => start(flow, "198.51.100.7"))).toMatchObject({ status: 429 });
  });

  test("IPv6 addresses share a budget per /64; IPv4-mapped addresses count as IPv4", () => {
    expect(addressSubject("2001:db8:1:2:aaaa::1")).toBe("2001:db8:1:2::/64");
    expect(addressSubject("2001:0db8:0001:0002:ffff:0:0:7")).toBe("2001:db8:1:2::/64");
    expect(addressSubject("2001:db8::1")).toBe("2001:db8:0:0::/64");
    expect(addressSubject("fe80::1%lo0")).toBe("fe80:0:0:0::/64");
    expect(addressSubject("::ffff:192.0.2.1")).toBe("192.0.2.1");
    expect(addressSubject("192.0.2.1")).toBe("192.0.2.1");
    expect(addressSubject(undefined)).toBe("unknown");
    const { flow } = setup();
    for (let i = 0; i < 10; i++) start(flow, `2001:db8:1:2::${i + 1}`);
    expect(refusal(() => start(flow, "2001:db8:1:2:ffff::9"))).toMatchObject({ status: 429 });
    start(flow, "2001:db8:1:3::1");
  });

  test("10 wrong user codes per credential, then 429 even for the right code; right codes cost nothing", () => {
    const { flow, advance } = setup();
    const s = start(flow);
    // Right codes (and 409s on them) do not use up the budget.
    flow.decide({ userCode: s.userCode, decision: "deny", ...approver });
    for (let i = 0; i < 12; i++)
      expect(refusal(() => flow.decide({ userCode: s.userCode, decision: "deny", ...approver }))).toMatchObject({ status: 409 });
    const other = start(flow);
    for (let i = 0; i < 10; i++) {
      expect(
        refusal(() => flow.decide({ userCode: "BBBB-BBBB", decision: "approve", ...approver, address: `192.0.2.${i + 10}` })),
      ).toMatchObject({
        status: 404,
      });
    }
    // The credential is blocked from any address, right code or not: a blocked guesser learns nothing.
    expect(refusal(() => flow.decide({ userCode: other.userCode, decision: "approve", ...approver, address: "192.0.2.99" }))).toEqual({
      status: 429,
      code: "rate_limit_exceeded",
      param: undefined,
      retryAfter: "6",
    });
    // Another credential from a fresh address still works.
    expect(
      flow.decide({ userCode: other.userCode, decision: "approve", ...approver, credential: "key_b", address: "192.0.2.200" }),
    ).toMatchObject({
      decision: "approve",
    });
    advance(6_000);
    expect(refusal(() => flow.decide({ userCode: "BBBB-BBBB", decision: "approve", ...approver }))).toMatchObject({ status: 404 });
  });

  test("10 wrong user codes per address, whatever the credential", () => {
    const { flow } = setup();
    const s = start(flow);
    for (let i = 0; i < 10; i++) {
      refusal(() => flow.decide({ userCode: "BBBB-BBBB", decision: "approve", ...approver, credential: `key_${i}` }));
    }
    expect(refusal(() => flow.decide({ userCode: s.userCode, decision: "approve", ...approver, credential: "key_fresh" }))).toMatchObject({
      status: 429,
      retryAfter: "6",
    });
    // The blocked attempt did not use up the fresh credential's budget.
    expect(
      flow.decide({ userCode: s.userCode, decision: "approve", ...approver, credential: "key_fresh", address: "192.0.2.50" }),
    ).toMatchObject({
      decision: "approve",
    });
  });

  test("malformed user codes are 400 and do not count as guesses", () => {
    const { flow } = setup();
    const s = start(flow);
    for (let i = 0; i < 20; i++)
      expect(refusal(() => flow.decide({ userCode: "nope", decision: "approve", ...approver }))).toMatchObject({ status: 400 });
    expect(flow.decide({ userCode: s.userCode, decision: "approve", ...approver })).toMatchObject({ decision: "approve" });
  });
});
