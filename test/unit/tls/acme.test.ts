import { describe, expect, test } from "bun:test";
import { RENEW_AT, renewalTime } from "../../../src/tls/acme.ts";

const DAY = 86_400_000;

describe("renewalTime", () => {
  test("two thirds into the certificate's life: day 60 of 90, day 4 of 6", () => {
    expect([renewalTime({ notBefore: 0, notAfter: 90 * DAY }), renewalTime({ notBefore: 10 * DAY, notAfter: 16 * DAY }), RENEW_AT]).toEqual(
      [60 * DAY, 14 * DAY, 2 / 3],
    );
  });
});
