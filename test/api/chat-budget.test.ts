/**
 * The int64 bound of the output budget through the chat route: the body's literal digits decide, since
 * JSON.parse reads 2^63 - 1 and 2^63 (up to 2^63 + 1024) as the same double. A budget that passes
 * validation goes on (here to 503 model_unavailable: no provider is connected); one beyond int64 is 400.
 */
import { describe, expect, test } from "bun:test";
import { seedAccount, seedCatalog, testApp } from "../support/harness.ts";

const OVER = {
  status: 400,
  body: {
    error: {
      message: "'FIELD' must be an int64 (at most 9223372036854775807)",
      type: "invalid_request_error",
      code: "invalid_value",
      param: "FIELD",
    },
  },
};
const PASSED = {
  status: 503,
  body: { error: { message: expect.any(String), type: "service_unavailable", code: "model_unavailable", param: "model" } },
};

describe.each(["max_tokens", "max_completion_tokens"])("%s", (field) => {
  test.each([
    ["9223372036854775807", PASSED],
    ["9223372036854775808", OVER],
    ["9223372036854775809", OVER],
    ["9223372036854776832", OVER],
    ["9300000000000000000", OVER],
  ])("%s", async (literal, expected) => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t, {}, 1_000_000_000_000);
    const r = await t.call("POST", "/v1/chat/completions", {
      token: apiKey,
      rawBody: `{"model":"org/model","messages":[{"role":"user","content":"x"}],"${field}":${literal}}`,
      headers: { "content-type": "application/json" },
    });
    expect({ status: r.status, body: r.body }).toEqual(withField(expected, field));
  });
});

/** The expected answer with FIELD replaced by the field's name (PASSED holds a matcher: kept as it is). */
function withField<T>(expected: T, field: string): T {
  return expected === PASSED ? expected : (JSON.parse(JSON.stringify(expected).replaceAll("FIELD", field)) as T);
}
