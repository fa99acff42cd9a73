/**
 * The device-flow client of `umbra-provider login` (src/provider/login.ts) against a scripted
 * coordinator on a real socket: it honours the interval, slows down by 5 s after `slow_down` (RFC 8628
 * section 3.5), keeps polling while pending, and ends with a clear LoginError on every refusal.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { machineReport } from "../../../src/provider/config.ts";
import { deviceLogin, LoginError } from "../../../src/provider/login.ts";

interface Script {
  /** Answers of the token endpoint, in order: an OAuth error code, or "token". */
  readonly answers: readonly string[];
  readonly interval?: number;
  readonly codeStatus?: number;
  /** The token answer's `expires_in`, when the approver gave the token a lifetime. */
  readonly expiresIn?: number;
}

let server: ReturnType<typeof Bun.serve> | undefined;
afterEach(() => {
  server?.stop(true);
  server = undefined;
});

function coordinator(script: Script) {
  const polls: Record<string, unknown>[] = [];
  let started: Record<string, unknown> | undefined;
  server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      const path = new URL(request.url).pathname;
      if (path === "/v1/provider/device/code") {
        started = (await request.json()) as Record<string, unknown>;
        if (script.codeStatus) {
          return Response.json(
            { error: { message: "slow down there", type: "rate_limit_error", code: "rate_limit_exceeded" } },
            { status: script.codeStatus },
          );
        }
        return Response.json({
          device_code: "dc_1",
          user_code: "BCDF-GHJK",
          verification_uri: "http://127.0.0.1/console/device",
          expires_in: 600,
          ...(script.interval === undefined ? {} : { interval: script.interval }),
        });
      }
      if (path === "/v1/provider/device/token") {
        polls.push((await request.json()) as Record<string, unknown>);
        const answer = script.answers[polls.length - 1] ?? "expired_token";
        if (answer === "token") {
          return Response.json({
            access_token: "prov_new",
            token_type: "Bearer",
            account_id: "acct_1",
            ...(script.expiresIn === undefined ? {} : { expires_in: script.expiresIn }),
          });
        }
        return Response.json({ error: answer, error_description: "scripted" }, { status: 400 });
      }
      return new Response("not found", { status: 404 });
    },
  });
  return { base: `http://127.0.0.1:${server.port}`, polls, started: () => started };
}

function recordingSleep() {
  const waits: number[] = [];
  return { waits, sleep: async (ms: number) => void waits.push(ms) };
}

describe("deviceLogin", () => {
  test("pending, slow_down, pending, then the token: waits 5 s by default, 5 s more after slow_down", async () => {
    const c = coordinator({ answers: ["authorization_pending", "slow_down", "authorization_pending", "token"] });
    const { waits, sleep } = recordingSleep();
    let shown: string | undefined;
    const result = await deviceLogin(
      c.base,
      { name: "studio-1" },
      (code) => {
        shown = code.user_code;
      },
      { sleep },
    );
    expect(result).toEqual({ token: "prov_new", accountId: "acct_1", expiresIn: null });
    expect(shown).toBe("BCDF-GHJK");
    expect(waits).toEqual([5000, 5000, 10000, 10000]);
    expect(c.started()).toEqual({ client_id: "umbra-provider", machine_name: "studio-1" });
    expect(c.polls[0]).toEqual({
      grant_type: "urn:ietf:params:oauth:grant-type:device_code",
      device_code: "dc_1",
      client_id: "umbra-provider",
    });
  });

  test("the machine's configured models and expected trust go with the code request, when there are some", async () => {
    const c = coordinator({ answers: ["token"] });
    const { sleep } = recordingSleep();
    await deviceLogin(c.base, { name: "m", models: ["org/a-4bit"], trustLevel: "hardware" }, () => {}, { sleep });
    expect(c.started()).toEqual({ client_id: "umbra-provider", machine_name: "m", models: ["org/a-4bit"], trust_level: "hardware" });
  });

  test("machineReport: build ids from the environment or the config file, hardware with development attestation on", () => {
    expect(machineReport({})).toEqual({});
    expect(machineReport({ UMBRA_PROVIDER_MODEL: "org/a-4bit=a,org/b" })).toEqual({ models: ["org/a-4bit", "org/b"] });
    expect(machineReport({}, { model: ["org/c"], "dev-attestation": "on" })).toEqual({ models: ["org/c"], trustLevel: "hardware" });
    expect(machineReport({ UMBRA_PROVIDER_DEV_ATTESTATION: "off" }, { "dev-attestation": "on" })).toEqual({});
    // Not valid: left out (start says why).
    expect(machineReport({ UMBRA_PROVIDER_MODEL: "org/a,org/a", UMBRA_PROVIDER_DEV_ATTESTATION: "maybe" })).toEqual({});
  });

  test("a token with a lifetime: expires_in is handed on", async () => {
    const { sleep } = recordingSleep();
    const result = await deviceLogin(coordinator({ answers: ["token"], expiresIn: 86_400 }).base, { name: "m" }, () => {}, { sleep });
    expect(result).toEqual({ token: "prov_new", accountId: "acct_1", expiresIn: 86_400 });
  });

  test("the coordinator's interval is honoured, but never below one second", async () => {
    const { waits, sleep } = recordingSleep();
    await deviceLogin(coordinator({ answers: ["token"], interval: 2 }).base, { name: "m" }, () => {}, { sleep });
    server?.stop(true);
    await deviceLogin(coordinator({ answers: ["token"], interval: 0 }).base, { name: "m" }, () => {}, { sleep });
    expect(waits).toEqual([2000, 1000]);
  });

  test.each([
    ["access_denied", "denied this login"],
    ["expired_token", "expired before it was approved"],
    ["invalid_grant", "the login failed: invalid_grant"],
  ])("%s ends the login with a clear message", async (answer, message) => {
    const { sleep } = recordingSleep();
    const run = deviceLogin(coordinator({ answers: ["authorization_pending", answer] }).base, { name: "m" }, () => {}, { sleep });
    await expect(run).rejects.toBeInstanceOf(LoginError);
    await expect(run).rejects.toThrow(message);
  });

  test("a refused start shows the coordinator's own message", async () => {
    const { sleep } = recordingSleep();
    await expect(deviceLogin(coordinator({ answers: [], codeStatus: 429 }).base, { name: "m" }, () => {}, { sleep })).rejects.toThrow(
      "the coordinator refused to start a login: slow down there (HTTP 429)",
    );
  });

  test("an unreachable coordinator is a LoginError naming it", async () => {
    await expect(deviceLogin("http://127.0.0.1:9", { name: "m" }, () => {})).rejects.toThrow(
      "cannot reach the coordinator at http://127.0.0.1:9",
    );
  });
});
