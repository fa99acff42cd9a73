/**
 * Account isolation of the console's data routes (issue 22, point 4): for every route, a session of
 * account A cannot read or change anything of account B. B's key ids, device token ids and the device
 * codes B decided are 404 to A (as unknown ones are), B's rows never appear in A's answers, and after
 * all of A's attempts B's keys, tokens, usage and device login are exactly as before.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { type ConsoleAnswer, type ConsoleEnv, consoleEnv, type SignedIn } from "../support/console-env.ts";
import { connectFakeProvider, type FakeProvider } from "../support/fake-provider.ts";
import { chatBody, postChat, providerToken } from "../support/server.ts";

interface World {
  env: ConsoleEnv;
  a: SignedIn;
  b: SignedIn;
  bKeyId: string;
  bKeyName: string;
  bTokenId: string;
  bRequestIds: string[];
  /** A device login B approved (its code) and one B denied; the approved one's device code. */
  bApproved: { userCode: string; deviceCode: string };
  bDenied: string;
  provider: FakeProvider;
}

let w: World;

async function deviceLogin(env: ConsoleEnv): Promise<{ userCode: string; deviceCode: string }> {
  const r = await fetch(`${env.server.url}/v1/provider/device/code`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ client_id: "umbra-provider", machine_name: "b-machine", models: ["org/b-only"] }),
  });
  const body = (await r.json()) as { user_code: string; device_code: string };
  return { userCode: body.user_code, deviceCode: body.device_code };
}

/** Everything of B's that A might reach, read from the store and B's own session. */
async function bState(x: World) {
  const { env, b } = x;
  const strip = (r: ConsoleAnswer) => ({ status: r.status, body: r.body });
  return {
    keys: strip(await env.call(b, "GET", "/keys")),
    usage: strip(await env.call(b, "GET", "/usage")),
    machines: (await env.t.store.providerTokens.list(b.accountId)).map((t) => [t.id, t.revokedAt]),
    overview: strip(await env.call(b, "GET", "/overview")),
    approved: strip(await env.call(b, "GET", `/device/${x.bApproved.userCode}`)),
    denied: strip(await env.call(b, "GET", `/device/${x.bDenied}`)),
  };
}

beforeAll(async () => {
  const env = await consoleEnv();
  const a = await env.signIn("account A");
  const b = await env.signIn("account B");
  const bKey = await env.call(b, "POST", "/keys", { body: { name: "b-secret-name" } });
  const { key, secret } = bKey.body as { key: { id: string }; secret: string };
  const token = await providerToken(env.t, b.accountId);
  const provider = await connectFakeProvider({ url: env.server.url, token, models: ["org/base-build-4bit"] });
  await provider.waitFor((f) => f.type === "welcome");
  const words = Array.from({ length: 50 }, (_, i) => `w${i}`).join(" ");
  for (let i = 0; i < 2; i++) expect((await postChat(env.server.url, secret, chatBody(words))).status).toBe(200);
  const bRequestIds = ((await env.call(b, "GET", "/usage")).body as { data: { request_id: string }[] }).data.map((r) => r.request_id);
  expect(bRequestIds).toHaveLength(2);
  const approved = await deviceLogin(env);
  expect((await env.call(b, "POST", `/device/${approved.userCode}/approve`)).status).toBe(200);
  const denied = await deviceLogin(env);
  expect((await env.call(b, "POST", `/device/${denied.userCode}/deny`)).status).toBe(200);
  const bTokenId = (await env.t.store.providerTokens.list(b.accountId))[0]?.id as string;
  w = {
    env,
    a,
    b,
    bKeyId: key.id,
    bKeyName: "b-secret-name",
    bTokenId,
    bRequestIds,
    bApproved: approved,
    bDenied: denied.userCode,
    provider,
  };
  return async () => {
    await provider[Symbol.asyncDispose]();
    await env[Symbol.asyncDispose]();
  };
});

const notFound = (code: string, param: string) => ({
  status: 404,
  body: { error: { message: expect.any(String), type: "not_found_error", code, param } },
});

/** What must not appear in any answer A gets: B's ids, names and rows (an id A sent may be quoted back). */
function leaks(x: World, answer: ConsoleAnswer): string[] {
  const sent = decodeURIComponent(answer.url);
  return [x.b.accountId, x.bKeyId, x.bKeyName, x.bTokenId, ...x.bRequestIds, "b-machine", "org/b-only"].filter(
    (s) => answer.text.includes(s) && !sent.includes(s),
  );
}

/** Each route, as A aims it at B: the answer A must get. */
const ROUTES: { name: string; attempt: (x: World) => Promise<ConsoleAnswer>; expected: (x: World) => unknown }[] = [
  {
    name: "GET /overview",
    attempt: (x) => x.env.call(x.a, "GET", "/overview"),
    expected: () => ({
      status: 200,
      body: expect.objectContaining({ balance_micro_usd: 5_000_000, by_key: [], by_model: [], daily_by_model: [] }),
    }),
  },
  { name: "GET /keys", attempt: (x) => x.env.call(x.a, "GET", "/keys"), expected: () => ({ status: 200, body: { data: [] } }) },
  {
    name: "POST /keys (an account_id in the body)",
    attempt: (x) => x.env.call(x.a, "POST", "/keys", { body: { name: "mine", account_id: x.b.accountId } }),
    expected: () => ({ status: 400, body: { error: expect.objectContaining({ code: "unsupported_value", param: "account_id" }) } }),
  },
  {
    name: "POST /keys/{B's key}/revoke",
    attempt: (x) => x.env.call(x.a, "POST", `/keys/${x.bKeyId}/revoke`),
    expected: () => notFound("not_found", "id"),
  },
  {
    name: "GET /usage",
    attempt: (x) => x.env.call(x.a, "GET", "/usage"),
    expected: () => ({ status: 200, body: { data: [], next_cursor: null } }),
  },
  {
    name: "GET /usage?key_id={B's key}",
    attempt: (x) => x.env.call(x.a, "GET", `/usage?key_id=${x.bKeyId}`),
    expected: () => notFound("not_found", "key_id"),
  },
  {
    name: "GET /usage?cursor={B's row}",
    attempt: (x) =>
      x.env.call(x.a, "GET", `/usage?cursor=${Buffer.from(`${x.env.clock.now() + 1}.${x.bRequestIds[0]}`).toString("base64url")}`),
    expected: () => ({ status: 200, body: { data: [], next_cursor: null } }),
  },
  {
    name: "GET /usage.csv",
    attempt: (x) => x.env.call(x.a, "GET", "/usage.csv"),
    expected: () => ({
      status: 200,
      body: "request_id,started_at,key_id,key_name,model,prompt_tokens,cached_tokens,completion_tokens,cost_micro_usd,outcome,duration_ms\r\n",
    }),
  },
  {
    name: "GET /usage.csv?key_id={B's key}",
    attempt: (x) => x.env.call(x.a, "GET", `/usage.csv?key_id=${x.bKeyId}`),
    expected: () => notFound("not_found", "key_id"),
  },
  { name: "GET /machines", attempt: (x) => x.env.call(x.a, "GET", "/machines"), expected: () => ({ status: 200, body: { data: [] } }) },
  {
    name: "POST /machines/{B's token}/unlink",
    attempt: (x) => x.env.call(x.a, "POST", `/machines/${x.bTokenId}/unlink`),
    expected: () => notFound("not_found", "id"),
  },
  {
    name: "GET /device/{code B approved}",
    attempt: (x) => x.env.call(x.a, "GET", `/device/${x.bApproved.userCode}`),
    expected: () => notFound("device_code_not_found", "user_code"),
  },
  {
    name: "POST /device/{code B approved}/approve",
    attempt: (x) => x.env.call(x.a, "POST", `/device/${x.bApproved.userCode}/approve`),
    expected: () => notFound("device_code_not_found", "user_code"),
  },
  {
    name: "POST /device/{code B approved}/deny",
    attempt: (x) => x.env.call(x.a, "POST", `/device/${x.bApproved.userCode}/deny`),
    expected: () => notFound("device_code_not_found", "user_code"),
  },
  {
    name: "GET /device/{code B denied}",
    attempt: (x) => x.env.call(x.a, "GET", `/device/${x.bDenied}`),
    expected: () => notFound("device_code_not_found", "user_code"),
  },
  {
    name: "POST /device/{code B denied}/approve",
    attempt: (x) => x.env.call(x.a, "POST", `/device/${x.bDenied}/approve`),
    expected: () => notFound("device_code_not_found", "user_code"),
  },
];

describe("account A's session against account B's resources", () => {
  test("every console data route is covered by the table below", () => {
    const paths = new Set(
      ROUTES.map((r) =>
        r.name
          .replace(/\?.*$/, "")
          .replace(/ \(.*\)$/, "")
          .replace(/\{[^}]+\}/g, "{}"),
      ),
    );
    expect([...paths].sort()).toEqual(
      [
        "GET /overview",
        "GET /keys",
        "POST /keys",
        "POST /keys/{}/revoke",
        "GET /usage",
        "GET /usage.csv",
        "GET /machines",
        "POST /machines/{}/unlink",
        "GET /device/{}",
        "POST /device/{}/approve",
        "POST /device/{}/deny",
      ].sort(),
    );
  });

  test.each(ROUTES.map((r) => [r.name, r] as const))(
    "%s: refused or empty, nothing of B's shown, nothing of B's changed",
    async (_, route) => {
      const before = await bState(w);
      const got = await route.attempt(w);
      expect({ status: got.status, body: got.body }).toEqual(route.expected(w) as { status: number; body: unknown });
      expect(got.headers.get("cache-control")).toBe("no-store");
      expect(leaks(w, got)).toEqual([]);
      expect(await bState(w)).toEqual(before);
    },
  );

  test("after all of that, B's approved login still delivers its token to B's machine, and B's key and machine work", async () => {
    const r = await fetch(`${w.env.server.url}/v1/provider/device/token`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ grant_type: "urn:ietf:params:oauth:grant-type:device_code", device_code: w.bApproved.deviceCode }),
    });
    expect(r.status).toBe(200);
    expect(await r.json()).toMatchObject({ account_id: w.b.accountId });
    const keys = ((await w.env.call(w.b, "GET", "/keys")).body as { data: { id: string; revoked_at: number | null }[] }).data;
    expect(keys).toEqual([expect.objectContaining({ id: w.bKeyId, revoked_at: null })]);
    const machines = ((await w.env.call(w.b, "GET", "/machines")).body as { data: { id: string; online: boolean }[] }).data;
    expect(machines.find((m) => m.id === w.bTokenId)).toMatchObject({ online: true });
  });
});
