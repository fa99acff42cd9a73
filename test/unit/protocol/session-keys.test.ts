/**
 * Session keys on the wire (docs/protocol.md "Session keys"): the hello's `session_keys` offer, the
 * welcome's `session_enc`, and `sealed_inference` carrying exactly one of `enc` (its own HPKE setup) and
 * `n` (the session's request counter).
 */
import { describe, expect, test } from "bun:test";
import { ProtocolError, parseCoordinatorFrame, parseProviderFrame } from "../../../src/protocol/parse.ts";
import { WELCOME } from "../../support/frames.ts";

const KEY = "A".repeat(43);
const HELLO = {
  type: "hello",
  protocol_versions: [2],
  provider_version: "1.0.0",
  engine: "echo",
  models: [{ build_id: "org/m" }],
  max_concurrency: 4,
  encryption_key: KEY,
};
const SEALED = {
  type: "sealed_inference",
  request_id: "req_1",
  attempt: 0,
  model: "org/m",
  first_content_deadline_ms: 1000,
  ciphertext: "B".repeat(22),
};
const parse = (o: unknown) => parseCoordinatorFrame(JSON.stringify(o));

describe("session keys on the wire", () => {
  test("hello: session_keys true is kept; any other value is dropped (not offered)", () => {
    expect(parseProviderFrame(JSON.stringify({ ...HELLO, session_keys: true }))).toMatchObject({ session_keys: true });
    expect(parseProviderFrame(JSON.stringify({ ...HELLO, session_keys: "yes" }))).not.toHaveProperty("session_keys");
    expect(parseProviderFrame(JSON.stringify(HELLO))).not.toHaveProperty("session_keys");
  });

  test("welcome: session_enc must be 43 characters of base64url", () => {
    expect(parse({ ...WELCOME, session_enc: KEY })).toMatchObject({ session_enc: KEY });
    expect(parse(WELCOME)).not.toHaveProperty("session_enc");
    for (const bad of ["A".repeat(42), "A".repeat(44), `${"A".repeat(42)}=`, 7]) {
      expect(() => parse({ ...WELCOME, session_enc: bad })).toThrow(ProtocolError);
    }
  });

  test("sealed_inference: exactly one of enc and n; n is an integer from 1", () => {
    expect(parse({ ...SEALED, enc: KEY })).toMatchObject({ enc: KEY });
    expect(parse({ ...SEALED, n: 1 })).toMatchObject({ n: 1 });
    expect(parse({ ...SEALED, n: Number.MAX_SAFE_INTEGER })).toMatchObject({ n: Number.MAX_SAFE_INTEGER });
    expect(parse({ ...SEALED, n: 3 })).not.toHaveProperty("enc");
    const bad: unknown[] = [SEALED, { ...SEALED, enc: KEY, n: 1 }, { ...SEALED, n: 0 }, { ...SEALED, n: 1.5 }, { ...SEALED, n: "1" }];
    for (const frame of bad) expect(() => parse(frame)).toThrow(ProtocolError);
  });
});
