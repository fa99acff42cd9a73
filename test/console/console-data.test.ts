/**
 * The console's data routes through real HTTP (test/support/console.ts: the coordinator and the console
 * routes on sockets on port 0, a real SQLite file): each route's answer and its errors, with requests
 * made by real keys through the coordinator and a provider connected over its WebSocket.
 */
import { describe, expect, test } from "bun:test";
import { type ConsoleEnv, consoleEnv, type SignedIn } from "../support/console-env.ts";
import { connectFakeProvider } from "../support/fake-provider.ts";
import { chatBody, postChat, providerToken } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const DAY = 86_400_000;
const PROMPT = "console-canary-prompt-5f1e";
/** The echo provider answers one completion token per word: enough tokens for a charge above the fee. */
const WORDS = Array.from({ length: 300 }, (_, i) => `w${i}`).join(" ");

const envelope = (status: number, code: string, param?: string) => ({
  status,
  body: { error: { message: expect.any(String), type: expect.any(String), code, ...(param === undefined ? {} : { param }) } },
});
const answer = (r: { status: number; body: unknown }) => ({ status: r.status, body: r.body });

interface Key {
  readonly key: { id: string; hint: string; name: string };
  readonly secret: string;
}

async function createKey(env: ConsoleEnv, who: SignedIn, body: Record<string, unknown> = { name: "laptop" }): Promise<Key> {
  const r = await env.call(who, "POST", "/keys", { body });
  expect(r.status).toBe(201);
  return r.body as Key;
}

/** A provider of `owner`'s account on the coordinator, serving the seeded build. */
async function machine(env: ConsoleEnv, owner: SignedIn) {
  const token = await providerToken(env.t, owner.accountId);
  const provider = await connectFakeProvider({ url: env.server.url, token, models: ["org/base-build-4bit"] });
  await provider.waitFor((f) => f.type === "welcome");
  return { provider, tokenId: (await env.t.store.providerTokens.list(owner.accountId)).at(-1)?.id as string };
}

async function chat(env: ConsoleEnv, secret: string): Promise<void> {
  const r = await postChat(env.server.url, secret, chatBody(`${PROMPT} ${WORDS}`));
  expect(r.status).toBe(200);
  await r.text();
}

describe("keys", () => {
  test("create returns the secret once; the list shows hint, limits and last use from usage; revoke ends it", async () => {
    await using env = await consoleEnv();
    const a = await env.signIn();
    const created = await createKey(env, a, {
      name: "ci <b>",
      allowed_models: ["org/model"],
      spend_cap_micro_usd: 900_000,
      rpm: 60,
      tpm: 100_000,
      link_machines: true,
    });
    const now = env.clock.now();
    const expected = {
      id: expect.stringMatching(/^key_/),
      name: "ci <b>",
      hint: `sk-umbra-...${created.secret.slice(-4)}`,
      created_at: now,
      last_used_at: null,
      revoked_at: null,
      allowed_models: ["org/model"],
      spend_cap_micro_usd: 900_000,
      spent_micro_usd: 0,
      rpm: 60,
      tpm: 100_000,
      self_route_only: false,
      link_machines: true,
    };
    expect(created).toEqual({ key: expected, secret: expect.stringMatching(/^sk-umbra-/) });
    const listed = await env.call(a, "GET", "/keys");
    expect(answer(listed)).toEqual({ status: 200, body: { data: [expected] } });
    expect(listed.text).not.toContain(created.secret);
    expect(listed.headers.get("cache-control")).toBe("no-store");

    await using m = await machine(env, a).then((x) => x.provider);
    await chat(env, created.secret);
    env.clock.advance(5_000);
    await chat(env, created.secret);
    const used = (await env.call(a, "GET", "/keys")).body as { data: { last_used_at: number; spent_micro_usd: number }[] };
    expect(used.data[0]?.last_used_at).toBe(now + 5_000);

    const revoked = await env.call(a, "POST", `/keys/${created.key.id}/revoke`);
    expect(answer(revoked)).toEqual({
      status: 200,
      body: { key: { ...expected, last_used_at: now + 5_000, revoked_at: now + 5_000, spent_micro_usd: expect.any(Number) } },
    });
    expect((await postChat(env.server.url, created.secret, chatBody("hi"))).status).toBe(401);
    // Revoking again keeps the first time.
    env.clock.advance(1_000);
    expect(((await env.call(a, "POST", `/keys/${created.key.id}/revoke`)).body as { key: { revoked_at: number } }).key.revoked_at).toBe(
      now + 5_000,
    );
    void m;
  });

  test("create: validation errors name their param; unknown ids are 404; bodies must be JSON objects", async () => {
    await using env = await consoleEnv();
    const a = await env.signIn();
    const post = (body: unknown) => env.call(a, "POST", "/keys", { body });
    expect(answer(await post({}))).toEqual(envelope(400, "missing_field", "name"));
    expect(answer(await post({ name: "" }))).toEqual(envelope(400, "invalid_value", "name"));
    expect(answer(await post({ name: "x".repeat(201) }))).toEqual(envelope(400, "invalid_value", "name"));
    expect(answer(await post({ name: "k", rpm: 0 }))).toEqual(envelope(400, "invalid_value", "rpm"));
    expect(answer(await post({ name: "k", tpm: 1.5 }))).toEqual(envelope(400, "invalid_value", "tpm"));
    expect(answer(await post({ name: "k", spend_cap_micro_usd: -1 }))).toEqual(envelope(400, "invalid_value", "spend_cap_micro_usd"));
    expect(answer(await post({ name: "k", self_route_only: "yes" }))).toEqual(envelope(400, "invalid_value", "self_route_only"));
    expect(answer(await post({ name: "k", allowed_models: ["no/such"] }))).toEqual(envelope(404, "model_not_found", "allowed_models"));
    expect(answer(await post({ name: "k", allowed_models: "org/model" }))).toEqual(envelope(400, "invalid_value", "allowed_models"));
    expect(answer(await post({ name: "k", account_id: "acct_other" }))).toEqual(envelope(400, "unsupported_value", "account_id"));
    expect(answer(await post([1]))).toEqual(envelope(400, "invalid_json"));
    expect(answer(await env.call(a, "POST", "/keys", { rawBody: "{nope" }))).toEqual(envelope(400, "invalid_json"));
    expect(answer(await env.call(a, "POST", "/keys", { rawBody: "x".repeat(17 * 1024) }))).toEqual(envelope(413, "request_too_large"));
    expect(answer(await env.call(a, "POST", "/keys/key_nope/revoke"))).toEqual(envelope(404, "not_found", "id"));
    expect(answer(await env.call(a, "POST", "/keys/%E0%A4%A/revoke"))).toEqual(envelope(400, "invalid_value", "id"));
    expect(((await env.call(a, "GET", "/keys")).body as { data: unknown[] }).data).toEqual([]);
  });
});

describe("guards", () => {
  test("no session: 401 on every route; a POST without or with a wrong CSRF token: 403 and nothing changes", async () => {
    await using env = await consoleEnv();
    const a = await env.signIn();
    const key = await createKey(env, a);
    const routes: [string, string][] = [
      ["GET", "/overview"],
      ["GET", "/keys"],
      ["POST", "/keys"],
      ["POST", `/keys/${key.key.id}/revoke`],
      ["GET", "/usage"],
      ["GET", "/usage.csv"],
      ["GET", "/machines"],
      ["POST", "/machines/pt_x/unlink"],
      ["GET", "/device/BCDF-GHJK"],
      ["POST", "/device/BCDF-GHJK/approve"],
      ["POST", "/device/BCDF-GHJK/deny"],
    ];
    for (const [method, path] of routes) {
      const r = await env.call(undefined, method, path, method === "POST" ? { body: { name: "x" } } : {});
      expect([method, path, answer(r)]).toEqual([method, path, envelope(401, "invalid_token")]);
      expect(r.headers.get("cache-control")).toBe("no-store");
      if (method !== "POST") continue;
      for (const csrf of [false, "wrong"] as const) {
        const refused = await env.call(a, method, path, { body: { name: "x" }, csrf });
        expect([method, path, answer(refused)]).toEqual([method, path, envelope(403, "forbidden")]);
      }
    }
    const keys = ((await env.call(a, "GET", "/keys")).body as { data: { revoked_at: number | null }[] }).data;
    expect(keys.map((k) => k.revoked_at)).toEqual([null]);
  });

  test("an unknown /console/api path is 404 no-store; a repeated query parameter is 400", async () => {
    await using env = await consoleEnv();
    const a = await env.signIn();
    const r = await env.call(a, "GET", "/nope");
    expect(answer(r)).toEqual(envelope(404, "not_found"));
    expect(r.headers.get("cache-control")).toBe("no-store");
    expect(answer(await env.call(a, "GET", "/overview?days=3&days=4"))).toEqual(envelope(400, "invalid_value", "days"));
  });
});

describe("overview, usage and CSV", () => {
  /** Account A: two keys (one with a hostile name), three requests over two days served by its own machine. */
  async function seeded() {
    const env = await consoleEnv();
    const a = await env.signIn();
    const k1 = await createKey(env, a, { name: "first" });
    const k2 = await createKey(env, a, { name: '=HYPERLINK("http://x","y"),-1+2@' });
    const { provider } = await machine(env, a);
    const start = env.clock.now();
    await chat(env, k1.secret);
    env.clock.advance(DAY);
    await chat(env, k2.secret);
    env.clock.advance(1_000);
    await chat(env, k1.secret);
    return { env, a, k1, k2, start, provider };
  }

  test("overview: balance, every UTC day of the window oldest first, per model, per key and per day and model", async () => {
    const { env, a, k1, k2, provider } = await seeded();
    await using _env = env;
    await using _p = provider;
    const r = await env.call(a, "GET", "/overview?days=3");
    expect(r.status).toBe(200);
    const o = r.body as {
      balance_micro_usd: number;
      reserved_micro_usd: number;
      days: { date: string; requests: number; spend_micro_usd: number }[];
      by_model: { model: string; requests: number }[];
      by_key: { key_id: string; name: string; hint: string; requests: number }[];
      daily_by_model: { date: string; model: string; spend_micro_usd: number; tokens: number }[];
    };
    expect(o.days.map((d) => [d.date, d.requests])).toEqual([
      ["2027-03-09", 0],
      ["2027-03-10", 1],
      ["2027-03-11", 2],
    ]);
    const spent = o.days.reduce((sum, d) => sum + d.spend_micro_usd, 0);
    expect(spent).toBeGreaterThan(0);
    expect(o.balance_micro_usd).toBeLessThan(5_000_000);
    expect(o.reserved_micro_usd).toBe(0);
    expect(o.by_model.map((m) => [m.model, m.requests])).toEqual([["org/model", 3]]);
    expect(o.by_key.map((k) => [k.key_id, k.name, k.hint, k.requests]).sort()).toEqual(
      [
        [k1.key.id, "first", k1.key.hint, 2],
        [k2.key.id, k2.key.name, k2.key.hint, 1],
      ].sort(),
    );
    expect(o.daily_by_model.map((d) => [d.date, d.model])).toEqual([
      ["2027-03-10", "org/model"],
      ["2027-03-11", "org/model"],
    ]);
    expect(o.daily_by_model.reduce((sum, d) => sum + d.spend_micro_usd, 0)).toBe(spent);
    expect(((await env.call(a, "GET", "/overview")).body as { days: unknown[] }).days).toHaveLength(30);
    for (const days of ["0", "367", "x", "-1", "1.5"]) {
      expect(answer(await env.call(a, "GET", `/overview?days=${days}`))).toEqual(envelope(400, "invalid_value", "days"));
    }
  });

  test("usage: newest first, paged by cursor, filtered; never content; bad parameters name themselves", async () => {
    const { env, a, k1, k2, start, provider } = await seeded();
    await using _env = env;
    await using _p = provider;
    const all = await env.call(a, "GET", "/usage");
    expect(all.status).toBe(200);
    const rows = (all.body as { data: { request_id: string; started_at: number; key_id: string; key_name: string }[] }).data;
    expect(rows.map((r) => [r.started_at, r.key_id, r.key_name])).toEqual([
      [start + DAY + 1_000, k1.key.id, "first"],
      [start + DAY, k2.key.id, k2.key.name],
      [start, k1.key.id, "first"],
    ]);
    expect(Object.keys(rows[0] as object).sort()).toEqual(
      [
        "request_id",
        "started_at",
        "key_id",
        "key_name",
        "model",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "cost_micro_usd",
        "outcome",
        "duration_ms",
      ].sort(),
    );
    expect(all.text).not.toContain(PROMPT);
    expect((all.body as { next_cursor: unknown }).next_cursor).toBeNull();

    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page = await env.call(a, "GET", `/usage?limit=2${cursor ? `&cursor=${cursor}` : ""}`);
      const body = page.body as { data: { request_id: string }[]; next_cursor: string | null };
      seen.push(...body.data.map((r) => r.request_id));
      cursor = body.next_cursor;
    } while (cursor !== null);
    expect(seen).toEqual(rows.map((r) => r.request_id));

    const ids = async (query: string) =>
      ((await env.call(a, "GET", `/usage?${query}`)).body as { data: { request_id: string }[] }).data.map((r) => r.request_id);
    expect(await ids(`key_id=${k2.key.id}`)).toEqual([rows[1]?.request_id as string]);
    expect(await ids(`from=${start + 1}&to=${start + DAY + 1}`)).toEqual([rows[1]?.request_id as string]);
    expect(await ids("model=org/model&outcome=completed")).toHaveLength(3);
    expect(await ids("outcome=failed")).toEqual([]);
    expect(await ids("model=other/plain")).toEqual([]);

    const bad: [string, number, string, string][] = [
      ["limit=0", 400, "invalid_value", "limit"],
      ["limit=501", 400, "invalid_value", "limit"],
      ["from=yesterday", 400, "invalid_value", "from"],
      [`from=${start}&to=${start}`, 400, "invalid_value", "to"],
      ["outcome=ok", 400, "invalid_value", "outcome"],
      ["model=has%20space", 400, "invalid_value", "model"],
      ["cursor=bm9wZQ", 400, "invalid_value", "cursor"],
      ["cursor=%2F%2F", 400, "invalid_value", "cursor"],
      ["key_id=key_unknown", 404, "not_found", "key_id"],
      ["since=1", 400, "unsupported_value", "since"],
      ["limit=1&limit=2", 400, "invalid_value", "limit"],
    ];
    for (const [query, status, code, param] of bad) {
      expect([query, answer(await env.call(a, "GET", `/usage?${query}`))]).toEqual([query, envelope(status, code, param)]);
    }
  });

  test("usage.csv: the same rows and columns, text quoted, formulas defused, no content", async () => {
    const { env, a, k2, provider } = await seeded();
    await using _env = env;
    await using _p = provider;
    const r = await env.call(a, "GET", "/usage.csv");
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toBe("text/csv; charset=utf-8");
    expect(r.headers.get("content-disposition")).toBe('attachment; filename="umbra-usage.csv"');
    expect(r.headers.get("cache-control")).toBe("no-store");
    const lines = r.text.split("\r\n");
    expect(lines[0]).toBe(
      "request_id,started_at,key_id,key_name,model,prompt_tokens,cached_tokens,completion_tokens,cost_micro_usd,outcome,duration_ms",
    );
    expect(lines).toHaveLength(5);
    expect(lines[4]).toBe("");
    const json = ((await env.call(a, "GET", "/usage")).body as { data: Record<string, string | number>[] }).data[1] as Record<
      string,
      string | number
    >;
    expect(lines[2]).toBe(
      [
        `"${json.request_id}"`,
        json.started_at,
        `"${k2.key.id}"`,
        `"'=HYPERLINK(""http://x"",""y""),-1+2@"`,
        '"org/model"',
        json.prompt_tokens,
        json.cached_tokens,
        json.completion_tokens,
        json.cost_micro_usd,
        '"completed"',
        json.duration_ms,
      ].join(","),
    );
    expect(r.text).not.toContain(PROMPT);
    const filtered = await env.call(a, "GET", `/usage.csv?key_id=${k2.key.id}`);
    expect(filtered.text.split("\r\n")).toHaveLength(3);
    expect(answer(await env.call(a, "GET", "/usage.csv?limit=5"))).toEqual(envelope(400, "unsupported_value", "limit"));
  });
});

describe("machines", () => {
  test("one row per device token: online with trust and models while connected, requests served and earnings; unlink ends it", async () => {
    await using env = await consoleEnv();
    const a = await env.signIn("provider");
    const b = await env.signIn("consumer");
    const { provider, tokenId } = await machine(env, a);
    const linkedAt = env.clock.now();
    env.clock.advance(1_000);
    const idle = await providerToken(env.t, a.accountId);
    const key = await createKey(env, b);
    await chat(env, key.secret);
    await chat(env, key.secret);
    const costs = ((await env.call(b, "GET", "/usage")).body as { data: { cost_micro_usd: number }[] }).data.map((r) => r.cost_micro_usd);
    const earned = costs.reduce((sum, c) => sum + c - Math.ceil(c / 10), 0);
    expect(earned).toBeGreaterThan(0);
    const tokens = await env.t.store.providerTokens.list(a.accountId);
    const listed = await env.call(a, "GET", "/machines");
    const row = (id: string, createdAt: number, extra: Record<string, unknown>) => ({
      id,
      name: null,
      hint: expect.stringMatching(/^umbra-pt-\.\.\./),
      created_at: createdAt,
      expires_at: null,
      revoked_at: null,
      ...extra,
    });
    expect(answer(listed)).toEqual({
      status: 200,
      body: {
        data: [
          row(tokenId, linkedAt, {
            online: true,
            trust_level: "none",
            trust_source: "no_evidence",
            models: ["org/base-build-4bit"],
            requests_served: 2,
            earnings_micro_usd: earned,
          }),
          row(tokens[1]?.id as string, linkedAt + 1_000, {
            online: false,
            trust_level: null,
            trust_source: null,
            models: [],
            requests_served: 0,
            earnings_micro_usd: 0,
          }),
        ],
      },
    });
    expect(listed.text).not.toContain(idle);
    expect(answer(await env.call(b, "GET", "/machines"))).toEqual({ status: 200, body: { data: [] } });

    const unlinked = await env.call(a, "POST", `/machines/${tokenId}/unlink`);
    expect(unlinked.status).toBe(200);
    expect((unlinked.body as { machine: { revoked_at: number } }).machine.revoked_at).toBe(env.clock.now());
    expect((await provider.closed).code).toBe(4001);
    await waitFor(async () => {
      const rows = ((await env.call(a, "GET", "/machines")).body as { data: { id: string; online: boolean }[] }).data;
      return rows.find((m) => m.id === tokenId)?.online === false;
    }, "the unlinked machine offline");
    expect(answer(await env.call(a, "POST", "/machines/pt_unknown/unlink"))).toEqual(envelope(404, "not_found", "id"));
  });
});

describe("device approval", () => {
  async function startLogin(env: ConsoleEnv, fields: Record<string, unknown> = {}) {
    const r = await fetch(`${env.server.url}/v1/provider/device/code`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ client_id: "umbra-provider", machine_name: "studio <img src=x>", ...fields }),
    });
    expect(r.status).toBe(200);
    return (await r.json()) as { device_code: string; user_code: string };
  }
  const poll = (env: ConsoleEnv, deviceCode: string) =>
    fetch(`${env.server.url}/v1/provider/device/token`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ grant_type: "urn:ietf:params:oauth:grant-type:device_code", device_code: deviceCode }),
    }).then(async (r) => ({ status: r.status, body: (await r.json()) as Record<string, unknown> }));

  test("preview shows what the machine reported; approve links it to the session's account with the chosen lifetime", async () => {
    await using env = await consoleEnv();
    const a = await env.signIn();
    const login = await startLogin(env, { models: ["org/base-build-4bit", "org/x"], trust_level: "hardware" });
    const requestedAt = env.clock.now();
    const preview = await env.call(a, "GET", `/device/${login.user_code.toLowerCase()}`);
    expect(answer(preview)).toEqual({
      status: 200,
      body: {
        user_code: login.user_code,
        machine_name: "studio <img src=x>",
        requested_at: requestedAt,
        expires_at: requestedAt + 600_000,
        models: ["org/base-build-4bit", "org/x"],
        trust: { level: "hardware", verified: false, note: "reported by the machine, verified when it connects" },
      },
    });
    const approved = await env.call(a, "POST", `/device/${login.user_code}/approve`, { body: { token_expires_in_seconds: 86_400 } });
    expect(answer(approved)).toEqual({
      status: 200,
      body: { user_code: login.user_code, decision: "approve", machine_name: "studio <img src=x>", token_expires_in_seconds: 86_400 },
    });
    expect(answer(await env.call(a, "POST", `/device/${login.user_code}/deny`))).toEqual(
      envelope(409, "device_code_already_decided", "user_code"),
    );
    const token = await poll(env, login.device_code);
    expect(token).toMatchObject({ status: 200, body: { account_id: a.accountId, expires_in: 86_400 } });
    // The machine is listed under the name the approver saw, as given (text, never markup).
    const machines = ((await env.call(a, "GET", "/machines")).body as { data: { id: string; expires_at: number }[] }).data;
    expect(machines).toEqual([
      expect.objectContaining({ id: token.body.token_id, name: "studio <img src=x>", expires_at: env.clock.now() + 86_400_000 }),
    ]);
  });

  test("deny: the tool hears access_denied; bad and unknown codes and bodies are refused", async () => {
    await using env = await consoleEnv();
    const a = await env.signIn();
    const login = await startLogin(env);
    expect((await env.call(a, "GET", `/device/${login.user_code}`)).body).toMatchObject({ models: [], trust: { level: null } });
    expect(answer(await env.call(a, "POST", `/device/${login.user_code}/deny`, { body: { token_expires_in_seconds: 60 } }))).toEqual(
      envelope(400, "unsupported_value", "token_expires_in_seconds"),
    );
    expect(answer(await env.call(a, "POST", `/device/${login.user_code}/approve`, { body: { token_expires_in_seconds: 0 } }))).toEqual(
      envelope(400, "invalid_value", "token_expires_in_seconds"),
    );
    expect((await env.call(a, "POST", `/device/${login.user_code}/deny`)).body).toMatchObject({ decision: "deny" });
    expect(await poll(env, login.device_code)).toMatchObject({ status: 400, body: { error: "access_denied" } });
    expect(answer(await env.call(a, "GET", "/device/AEIO-UAEI"))).toEqual(envelope(400, "invalid_value", "user_code"));
    expect(answer(await env.call(a, "GET", "/device/BBBB-BBBB"))).toEqual(envelope(404, "device_code_not_found", "user_code"));
    expect(answer(await env.call(a, "POST", "/device/BBBB-BBBB/approve"))).toEqual(envelope(404, "device_code_not_found", "user_code"));
  });
});
