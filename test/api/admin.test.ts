/**
 * The admin HTTP API under /admin/v1 (DESIGN.md section 12): every route's answer as a whole object, the
 * admin guard, and the refusals (400 with `param`, 404 for unknown ids, 409 for id collisions, 413 for
 * big bodies), each followed by a look at the relevant list to show that a refused call wrote nothing.
 * In-process through the harness; a settable clock pins `created` and `revoked_at`.
 */
import { describe, expect, test } from "bun:test";
import { sha256Hex } from "../../src/auth/secrets.ts";
import { ADMIN_TOKEN, type CallResult, seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";

const T0_MS = 1_800_000_000_000;
const T0 = T0_MS / 1000;

/** A clock the test moves by hand. */
function manualClock() {
  let ms = T0_MS;
  return {
    now: () => ms,
    set: (value: number) => {
      ms = value;
    },
  };
}

async function app(): Promise<TestApp & { clock: ReturnType<typeof manualClock> }> {
  const clock = manualClock();
  return Object.assign(await testApp({ clock }), { clock });
}

const TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  404: "not_found_error",
  409: "conflict_error",
  413: "request_too_large",
};

/** The expected answer for a refused call: status plus the whole envelope (message free-form). */
function refused(status: number, code: string, param?: string) {
  return {
    status,
    body: { error: { message: expect.any(String), type: TYPES[status], code, ...(param === undefined ? {} : { param }) } },
  };
}

const answer = (r: CallResult) => ({ status: r.status, body: r.body });

/** The body of a 200 answer, typed for the fields a test reads next. */
async function ok<T>(call: Promise<CallResult>): Promise<T> {
  const r = await call;
  expect({ status: r.status, error: (r.body as { error?: unknown }).error }).toEqual({ status: 200, error: undefined });
  return r.body as T;
}

interface Created {
  id: string;
}
interface CreatedKey extends Created {
  key: string;
}
interface CreatedToken extends Created {
  token: string;
}

const list = async (t: TestApp, path: string) => (await t.admin("GET", path)).body;

function accountAnswer(id: string, name: string, extra: Record<string, unknown> = {}) {
  return {
    id,
    object: "account",
    name,
    jwt_subject: null,
    created: T0,
    balance_micro_usd: 0,
    reserved_micro_usd: 0,
    ...extra,
  };
}

function keyAnswer(id: string, accountId: string, secret: string, extra: Record<string, unknown> = {}) {
  return {
    id,
    object: "api_key",
    account_id: accountId,
    name: null,
    hint: `sk-umbra-...${secret.slice(-4)}`,
    allowed_models: null,
    spend_cap_micro_usd: null,
    spent_micro_usd: 0,
    rpm: null,
    tpm: null,
    self_route_only: false,
    link_machines: false,
    created: T0,
    revoked_at: null,
    ...extra,
  };
}

function buildAnswer(id: string, extra: Record<string, unknown> = {}) {
  return {
    id,
    object: "model_build",
    created: T0,
    owned_by: "umbra",
    model_type: "chat",
    name: null,
    display_name: null,
    hugging_face_id: null,
    description: null,
    quantization: null,
    deprecation_date: null,
    input_modalities: null,
    output_modalities: null,
    supported_sampling_parameters: null,
    supported_features: null,
    context_length: null,
    max_output_length: null,
    ...extra,
  };
}

/** Every optional Model field set, in the admin API's snake_case. */
const FULL_BUILD = {
  created: 1_700_000_000,
  owned_by: "org",
  model_type: "chat",
  name: "Some Build",
  display_name: "Some Build (4-bit)",
  hugging_face_id: "org/some-build",
  description: "A build with every field set.",
  quantization: "4bit",
  deprecation_date: "2027-06-30",
  input_modalities: ["text", "image"],
  output_modalities: ["text"],
  supported_sampling_parameters: ["temperature", "top_p"],
  supported_features: ["tools", "json_mode"],
  context_length: 32768,
  max_output_length: 8192,
};

describe("admin guard", () => {
  const ROUTES: readonly [string, string, unknown?][] = [
    ["POST", "/admin/v1/accounts", { name: "x" }],
    ["GET", "/admin/v1/accounts"],
    ["GET", "/admin/v1/accounts/acct_x"],
    ["POST", "/admin/v1/accounts/acct_x/credit", { amount_micro_usd: 1 }],
    ["POST", "/admin/v1/keys", { account_id: "acct_x" }],
    ["GET", "/admin/v1/keys"],
    ["DELETE", "/admin/v1/keys/key_x"],
    ["POST", "/admin/v1/provider-tokens", { account_id: "acct_x" }],
    ["GET", "/admin/v1/provider-tokens"],
    ["DELETE", "/admin/v1/provider-tokens/pt_x"],
    ["GET", "/admin/v1/models"],
    ["PUT", "/admin/v1/models/org/x", {}],
    ["GET", "/admin/v1/aliases"],
    ["PUT", "/admin/v1/aliases/org/a", { build_id: "org/x" }],
    ["DELETE", "/admin/v1/aliases/org/a"],
    ["GET", "/admin/v1/prices"],
    ["PUT", "/admin/v1/prices/org/x", { input_price: 1, output_price: 1 }],
    ["DELETE", "/admin/v1/prices/org/x"],
  ];

  async function everyRoute(t: TestApp, headers: Record<string, string>) {
    const results = [];
    for (const [method, path, body] of ROUTES) {
      results.push(answer(await t.call(method, path, { headers, ...(body === undefined ? {} : { body }) })));
    }
    return results;
  }

  const CREDENTIALS: readonly [string, (apiKey: string, providerToken: string) => Record<string, string>][] = [
    ["no Authorization header", () => ({})],
    ["a wrong token", () => ({ authorization: `Bearer ${ADMIN_TOKEN}x` })],
    ["a prefix of the token", () => ({ authorization: `Bearer ${ADMIN_TOKEN.slice(0, -1)}` })],
    ["the token under another scheme", () => ({ authorization: `Basic ${ADMIN_TOKEN}` })],
    ["an empty bearer", () => ({ authorization: "Bearer " })],
    ["a consumer API key", (apiKey) => ({ authorization: `Bearer ${apiKey}` })],
    ["a provider device token", (_, token) => ({ authorization: `Bearer ${token}` })],
  ];

  test.each(CREDENTIALS)("%s: every admin route answers 401 and writes nothing", async (_, headers) => {
    await using t = await testApp();
    const { accountId, apiKey } = await seedAccount(t);
    const { token } = await t.app.admin.createProviderToken({ account_id: accountId });
    const before = await t.app.admin.listAccounts();

    expect(await everyRoute(t, headers(apiKey, token))).toEqual(ROUTES.map(() => refused(401, "invalid_token")));
    expect(await t.app.admin.listAccounts()).toEqual(before);
    expect((await t.app.admin.listBuilds()).data).toEqual([]);
  });

  test("with no admin token configured (empty UMBRA_ADMIN_TOKEN) the admin API is closed, even to the test token", async () => {
    await using t = await testApp({ env: { UMBRA_ADMIN_TOKEN: "" } });
    expect(t.config.adminToken).toBeUndefined();
    const headerSets: Record<string, string>[] = [{}, { authorization: `Bearer ${ADMIN_TOKEN}` }, { authorization: "Bearer " }];
    for (const headers of headerSets) {
      expect(await everyRoute(t, headers)).toEqual(ROUTES.map(() => refused(401, "invalid_token")));
    }
    expect((await t.app.admin.listAccounts()).data).toEqual([]);
  });

  test("the admin token opens the API, with any case of the Bearer scheme", async () => {
    await using t = await testApp();
    for (const scheme of ["Bearer", "bearer", "BEARER"]) {
      expect(answer(await t.call("GET", "/admin/v1/accounts", { headers: { authorization: `${scheme} ${ADMIN_TOKEN}` } }))).toEqual({
        status: 200,
        body: { object: "list", data: [] },
      });
    }
  });
});

describe("accounts", () => {
  test("create, get and list answer the whole account", async () => {
    await using t = await app();
    const a = await t.admin("POST", "/accounts", { name: "Acme" });
    expect(answer(a)).toEqual({ status: 200, body: accountAnswer(expect.stringMatching(/^acct_[A-Za-z0-9]{16}$/), "Acme") });
    const aId = (a.body as Created).id;

    t.clock.set(T0_MS + 2_000);
    const b = await t.admin("POST", "/accounts", { name: "Beta", jwt_subject: "user|42" });
    const bId = (b.body as Created).id;
    const bAnswer = accountAnswer(bId, "Beta", { jwt_subject: "user|42", created: T0 + 2 });
    expect(answer(b)).toEqual({ status: 200, body: bAnswer });
    expect(bId).not.toBe(aId);

    // GET also answers the account's earnings as a provider.
    expect(answer(await t.admin("GET", `/accounts/${bId}`))).toEqual({ status: 200, body: { ...bAnswer, earnings_micro_usd: 0 } });
    expect(answer(await t.admin("GET", "/accounts"))).toEqual({
      status: 200,
      body: { object: "list", data: [accountAnswer(aId, "Acme"), bAnswer] },
    });
  });

  test.each([
    ["no body", undefined, refused(400, "invalid_json")],
    ["an array body", ["Acme"], refused(400, "invalid_json")],
    ["a string body", "Acme", refused(400, "invalid_json")],
    ["no name", {}, refused(400, "missing_field", "name")],
    ["a null name", { name: null }, refused(400, "missing_field", "name")],
    ["a numeric name", { name: 7 }, refused(400, "invalid_value", "name")],
    ["an empty name", { name: "" }, refused(400, "invalid_value", "name")],
    ["a name over 200 characters", { name: "n".repeat(201) }, refused(400, "invalid_value", "name")],
    ["a numeric jwt_subject", { name: "Acme", jwt_subject: 42 }, refused(400, "invalid_value", "jwt_subject")],
    ["an unknown field", { name: "Acme", balance: 100 }, refused(400, "unsupported_value", "balance")],
  ] as const)("create with %s is refused and writes nothing", async (_, body, expected) => {
    await using t = await app();
    expect(answer(await t.admin("POST", "/accounts", body))).toEqual(expected);
    expect(await list(t, "/accounts")).toEqual({ object: "list", data: [] });
  });

  test("a jwt_subject already linked to another account is a 409 on jwt_subject", async () => {
    await using t = await app();
    const first = await ok<Created>(t.admin("POST", "/accounts", { name: "One", jwt_subject: "sub-1" }));
    expect(answer(await t.admin("POST", "/accounts", { name: "Two", jwt_subject: "sub-1" }))).toEqual(
      refused(409, "conflict", "jwt_subject"),
    );
    expect(await list(t, "/accounts")).toEqual({
      object: "list",
      data: [accountAnswer(first.id, "One", { jwt_subject: "sub-1" })],
    });
  });

  test("an unknown or malformed account id is refused on get and credit", async () => {
    await using t = await app();
    expect(answer(await t.admin("GET", "/accounts/acct_nope"))).toEqual(refused(404, "not_found", "id"));
    expect(answer(await t.admin("POST", "/accounts/acct_nope/credit", { amount_micro_usd: 5 }))).toEqual(refused(404, "not_found", "id"));
    // A broken percent-encoding in the path is a bad value, not a server error.
    expect(answer(await t.admin("GET", "/accounts/%"))).toEqual(refused(400, "invalid_value", "id"));
    expect(answer(await t.admin("POST", "/accounts/%E0%A4%A/credit", { amount_micro_usd: 5 }))).toEqual(
      refused(400, "invalid_value", "id"),
    );
    expect(t.logs.filter((line) => line.includes('"level":"error"'))).toEqual([]);
  });

  test("credit adds to the balance, answers the account and writes one ledger entry per credit", async () => {
    await using t = await app();
    const { id } = await ok<Created>(t.admin("POST", "/accounts", { name: "Acme" }));
    expect(answer(await t.admin("POST", `/accounts/${id}/credit`, { amount_micro_usd: 2_500_000 }))).toEqual({
      status: 200,
      body: accountAnswer(id, "Acme", { balance_micro_usd: 2_500_000 }),
    });
    expect(answer(await t.admin("POST", `/accounts/${id}/credit`, { amount_micro_usd: 1 }))).toEqual({
      status: 200,
      body: accountAnswer(id, "Acme", { balance_micro_usd: 2_500_001 }),
    });
    expect((await t.store.accounts.ledger(id, 10)).map((e) => [e.kind, e.amount, e.balanceAfter])).toEqual([
      ["credit", 1, 2_500_001],
      ["credit", 2_500_000, 2_500_000],
    ]);
  });

  test.each([
    ["0", { amount_micro_usd: 0 }, "invalid_value"],
    ["-1", { amount_micro_usd: -1 }, "invalid_value"],
    ["1.5", { amount_micro_usd: 1.5 }, "invalid_value"],
    ['"10" (a string)', { amount_micro_usd: "10" }, "invalid_value"],
    ["true", { amount_micro_usd: true }, "invalid_value"],
    ["2^53 (not a safe integer)", { amount_micro_usd: 2 ** 53 }, "invalid_value"],
    ["missing", {}, "missing_field"],
    ["null", { amount_micro_usd: null }, "missing_field"],
  ] as const)("credit of %s is a 400 on amount_micro_usd; the balance and ledger stay", async (_, body, code) => {
    await using t = await app();
    const { id } = await ok<Created>(t.admin("POST", "/accounts", { name: "Acme" }));
    await ok(t.admin("POST", `/accounts/${id}/credit`, { amount_micro_usd: 100 }));
    expect(answer(await t.admin("POST", `/accounts/${id}/credit`, body))).toEqual(refused(400, code, "amount_micro_usd"));
    expect(await list(t, `/accounts/${id}`)).toEqual(accountAnswer(id, "Acme", { balance_micro_usd: 100, earnings_micro_usd: 0 }));
    expect(await t.store.accounts.ledger(id, 10)).toHaveLength(1);
  });

  test("credit with an unknown field is refused by name", async () => {
    await using t = await app();
    const { id } = await ok<Created>(t.admin("POST", "/accounts", { name: "Acme" }));
    expect(answer(await t.admin("POST", `/accounts/${id}/credit`, { amount_micro_usd: 5, note: "x" }))).toEqual(
      refused(400, "unsupported_value", "note"),
    );
    expect(await list(t, `/accounts/${id}`)).toEqual(accountAnswer(id, "Acme", { earnings_micro_usd: 0 }));
  });

  test("a credit that would push the balance past the largest exact amount is refused and changes nothing", async () => {
    await using t = await app();
    const { id } = await ok<Created>(t.admin("POST", "/accounts", { name: "Rich" }));
    const nearTop = Number.MAX_SAFE_INTEGER - 10;
    await ok(t.admin("POST", `/accounts/${id}/credit`, { amount_micro_usd: nearTop }));
    expect(answer(await t.admin("POST", `/accounts/${id}/credit`, { amount_micro_usd: 11 }))).toEqual(
      refused(400, "invalid_value", "amount_micro_usd"),
    );
    expect(await list(t, `/accounts/${id}`)).toEqual(accountAnswer(id, "Rich", { balance_micro_usd: nearTop, earnings_micro_usd: 0 }));
    expect(answer(await t.admin("POST", `/accounts/${id}/credit`, { amount_micro_usd: 10 }))).toEqual({
      status: 200,
      body: accountAnswer(id, "Rich", { balance_micro_usd: Number.MAX_SAFE_INTEGER }),
    });
    expect(await t.store.accounts.ledger(id, 10)).toHaveLength(2);
  });
});

describe("API keys", () => {
  async function withAccount() {
    const t = await app();
    await seedCatalog(t);
    const { id } = await ok<Created>(t.admin("POST", "/accounts", { name: "Acme" }));
    return Object.assign(t, { accountId: id });
  }

  test("create with only account_id shows the key once; the list shows the same record without it", async () => {
    await using t = await withAccount();
    const r = await t.admin("POST", "/keys", { account_id: t.accountId });
    const created = r.body as CreatedKey;
    expect(answer(r)).toEqual({
      status: 200,
      body: {
        ...keyAnswer(expect.stringMatching(/^key_[A-Za-z0-9]{16}$/), t.accountId, created.key),
        key: expect.stringMatching(/^sk-umbra-[A-Za-z0-9_-]{43}$/),
      },
    });
    const listed = await list(t, "/keys");
    expect(listed).toEqual({ object: "list", data: [keyAnswer(created.id, t.accountId, created.key)] });
    const text = JSON.stringify(listed);
    expect([text.includes(created.key), text.includes(sha256Hex(created.key)), text.includes('"key"')]).toEqual([false, false, false]);
  });

  test("every optional field round-trips through create, list and authentication", async () => {
    await using t = await withAccount();
    const options = {
      name: "ci",
      allowed_models: ["org/model", "other/plain", "org/model"],
      spend_cap_micro_usd: 1_000_000,
      rpm: 60,
      tpm: 100_000,
      self_route_only: true,
      link_machines: true,
    };
    const r = await t.admin("POST", "/keys", { account_id: t.accountId, ...options });
    const created = r.body as CreatedKey;
    const record = keyAnswer(created.id, t.accountId, created.key, {
      ...options,
      allowed_models: ["org/model", "other/plain"],
    });
    expect(answer(r)).toEqual({ status: 200, body: { ...record, key: expect.stringMatching(/^sk-umbra-/) } });
    expect(await list(t, "/keys")).toEqual({ object: "list", data: [record] });
    expect(await t.app.authenticate(`Bearer ${created.key}`)).toEqual({
      kind: "api_key",
      accountId: t.accountId,
      keyId: created.id,
      allowedModels: ["org/model", "other/plain"],
      spendCap: 1_000_000,
      rpm: 60,
      tpm: 100_000,
      selfRouteOnly: true,
      linkMachines: true,
    });
  });

  test("the smallest accepted limits: spend cap 0, rpm 1, tpm 1, an empty allowlist", async () => {
    await using t = await withAccount();
    const options = { allowed_models: [], spend_cap_micro_usd: 0, rpm: 1, tpm: 1, self_route_only: false };
    const r = await t.admin("POST", "/keys", { account_id: t.accountId, ...options });
    const created = r.body as CreatedKey;
    expect(answer(r)).toEqual({
      status: 200,
      body: { ...keyAnswer(created.id, t.accountId, created.key, options), key: created.key },
    });
  });

  test("list filters by account_id; an unknown account_id is a 404", async () => {
    await using t = await withAccount();
    const other = await ok<Created>(t.admin("POST", "/accounts", { name: "Other" }));
    const mine = await ok<CreatedKey>(t.admin("POST", "/keys", { account_id: t.accountId }));
    t.clock.set(T0_MS + 1_000);
    const theirs = await ok<CreatedKey>(t.admin("POST", "/keys", { account_id: other.id, name: "theirs" }));
    const theirsRecord = keyAnswer(theirs.id, other.id, theirs.key, { name: "theirs", created: T0 + 1 });

    expect(await list(t, `/keys?account_id=${other.id}`)).toEqual({ object: "list", data: [theirsRecord] });
    expect(await list(t, "/keys")).toEqual({ object: "list", data: [keyAnswer(mine.id, t.accountId, mine.key), theirsRecord] });
    expect(answer(await t.admin("GET", "/keys?account_id=acct_nope"))).toEqual(refused(404, "not_found", "account_id"));
  });

  test.each([
    [
      "an unknown model in allowed_models",
      { allowed_models: ["org/model", "org/missing"] },
      refused(404, "model_not_found", "allowed_models"),
    ],
    ["an unknown account", { account_id: "acct_nope" }, refused(404, "not_found", "account_id")],
    ["no account_id", { account_id: undefined }, refused(400, "missing_field", "account_id")],
    ["a numeric account_id", { account_id: 5 }, refused(400, "invalid_value", "account_id")],
    ["rpm 0", { rpm: 0 }, refused(400, "invalid_value", "rpm")],
    ["rpm 1.5", { rpm: 1.5 }, refused(400, "invalid_value", "rpm")],
    ['rpm "60"', { rpm: "60" }, refused(400, "invalid_value", "rpm")],
    ["tpm 0", { tpm: 0 }, refused(400, "invalid_value", "tpm")],
    ["a negative spend cap", { spend_cap_micro_usd: -1 }, refused(400, "invalid_value", "spend_cap_micro_usd")],
    ["a fractional spend cap", { spend_cap_micro_usd: 0.5 }, refused(400, "invalid_value", "spend_cap_micro_usd")],
    ['self_route_only "yes"', { self_route_only: "yes" }, refused(400, "invalid_value", "self_route_only")],
    ['link_machines "yes"', { link_machines: "yes" }, refused(400, "invalid_value", "link_machines")],
    ["link_machines 1", { link_machines: 1 }, refused(400, "invalid_value", "link_machines")],
    ["allowed_models as a string", { allowed_models: "org/model" }, refused(400, "invalid_value", "allowed_models")],
    ["an allowed model with a space", { allowed_models: ["org/a model"] }, refused(400, "invalid_value", "allowed_models")],
    ["an empty allowed model", { allowed_models: [""] }, refused(400, "invalid_value", "allowed_models")],
    ["a numeric name", { name: 3 }, refused(400, "invalid_value", "name")],
    ["an unknown field", { expires_at: 1 }, refused(400, "unsupported_value", "expires_at")],
  ] as const)("create with %s is refused and writes no key", async (_, fields, expected) => {
    await using t = await withAccount();
    const existing = await ok<CreatedKey>(t.admin("POST", "/keys", { account_id: t.accountId }));
    const before = await list(t, "/keys");
    expect(before).toEqual({ object: "list", data: [keyAnswer(existing.id, t.accountId, existing.key)] });

    expect(answer(await t.admin("POST", "/keys", { account_id: t.accountId, ...fields }))).toEqual(expected);
    expect(await list(t, "/keys")).toEqual(before);
  });

  test("revoke sets revoked_at; a second revoke keeps the first time; the key stops authenticating", async () => {
    await using t = await withAccount();
    const created = await ok<CreatedKey>(t.admin("POST", "/keys", { account_id: t.accountId, rpm: 10 }));
    const revoked = keyAnswer(created.id, t.accountId, created.key, { rpm: 10, revoked_at: T0 + 5 });

    t.clock.set(T0_MS + 5_000);
    expect(answer(await t.admin("DELETE", `/keys/${created.id}`))).toEqual({ status: 200, body: revoked });
    t.clock.set(T0_MS + 60_000);
    expect(answer(await t.admin("DELETE", `/keys/${created.id}`))).toEqual({ status: 200, body: revoked });
    expect(await list(t, "/keys")).toEqual({ object: "list", data: [revoked] });
    expect(answer(await t.call("GET", "/v1/models", { token: created.key }))).toEqual(refused(401, "invalid_api_key"));
  });

  test("revoking an unknown or malformed key id is refused", async () => {
    await using t = await withAccount();
    expect(answer(await t.admin("DELETE", "/keys/key_nope"))).toEqual(refused(404, "not_found", "id"));
    expect(answer(await t.admin("DELETE", "/keys/%"))).toEqual(refused(400, "invalid_value", "id"));
  });
});

describe("provider device tokens", () => {
  function tokenAnswer(id: string, accountId: string, secret: string, extra: Record<string, unknown> = {}) {
    return {
      id,
      object: "provider_token",
      account_id: accountId,
      hint: `umbra-pt-...${secret.slice(-4)}`,
      name: null,
      created: T0,
      expires_at: null,
      revoked_at: null,
      ...extra,
    };
  }

  test("create shows the token once; list filters by account and never shows it; revoke keeps the first time", async () => {
    await using t = await app();
    const acme = await ok<Created>(t.admin("POST", "/accounts", { name: "Acme" }));
    const other = await ok<Created>(t.admin("POST", "/accounts", { name: "Other" }));

    const r = await t.admin("POST", "/provider-tokens", { account_id: acme.id });
    const created = r.body as CreatedToken;
    expect(answer(r)).toEqual({
      status: 200,
      body: {
        ...tokenAnswer(expect.stringMatching(/^pt_[A-Za-z0-9]{16}$/), acme.id, created.token),
        token: expect.stringMatching(/^umbra-pt-[A-Za-z0-9_-]{43}$/),
      },
    });
    t.clock.set(T0_MS + 1_000);
    const second = await ok<CreatedToken>(t.admin("POST", "/provider-tokens", { account_id: other.id }));
    const secondRecord = tokenAnswer(second.id, other.id, second.token, { created: T0 + 1 });

    const all = await list(t, "/provider-tokens");
    expect(all).toEqual({ object: "list", data: [tokenAnswer(created.id, acme.id, created.token), secondRecord] });
    expect([JSON.stringify(all).includes(created.token), JSON.stringify(all).includes(sha256Hex(created.token))]).toEqual([false, false]);
    expect(await list(t, `/provider-tokens?account_id=${other.id}`)).toEqual({ object: "list", data: [secondRecord] });

    const revoked = tokenAnswer(created.id, acme.id, created.token, { revoked_at: T0 + 7 });
    t.clock.set(T0_MS + 7_000);
    expect(answer(await t.admin("DELETE", `/provider-tokens/${created.id}`))).toEqual({ status: 200, body: revoked });
    t.clock.set(T0_MS + 9_000);
    expect(answer(await t.admin("DELETE", `/provider-tokens/${created.id}`))).toEqual({ status: 200, body: revoked });
    expect(await list(t, `/provider-tokens?account_id=${acme.id}`)).toEqual({ object: "list", data: [revoked] });
  });

  test("name: the machine's, as a device login's machine_name (1 to 64 printable characters); null is none", async () => {
    await using t = await app();
    const acme = await ok<Created>(t.admin("POST", "/accounts", { name: "Acme" }));
    const named = await ok<CreatedToken>(t.admin("POST", "/provider-tokens", { account_id: acme.id, name: "Ada’s Mac <mini>" }));
    expect(named).toEqual({ ...tokenAnswer(named.id, acme.id, named.token, { name: "Ada’s Mac <mini>" }), token: named.token });
    const longest = "🖥".repeat(64);
    t.clock.set(T0_MS + 1_000);
    const long = await ok<CreatedToken>(t.admin("POST", "/provider-tokens", { account_id: acme.id, name: longest }));
    t.clock.set(T0_MS + 2_000);
    const unnamed = await ok<CreatedToken>(t.admin("POST", "/provider-tokens", { account_id: acme.id, name: null }));
    const listed = (await list(t, "/provider-tokens")) as { data: { id: string; name: string | null }[] };
    expect(listed.data.map((p) => [p.id, p.name])).toEqual([
      [named.id, "Ada’s Mac <mini>"],
      [long.id, longest],
      [unnamed.id, null],
    ]);
  });

  test.each([
    ["an unknown account", { account_id: "acct_nope" }, refused(404, "not_found", "account_id")],
    ["no account_id", {}, refused(400, "missing_field", "account_id")],
    ["an unknown field", { account_id: "acct_nope", label: "x" }, refused(400, "unsupported_value", "label")],
    ["an empty name", { account_id: "ACME", name: "" }, refused(400, "invalid_value", "name")],
    ["a blank name", { account_id: "ACME", name: "   " }, refused(400, "invalid_value", "name")],
    ["a name of 65 characters", { account_id: "ACME", name: "m".repeat(65) }, refused(400, "invalid_value", "name")],
    ["a name with a line break", { account_id: "ACME", name: "mac\nmini" }, refused(400, "invalid_value", "name")],
    ["a name with a bidi override", { account_id: "ACME", name: "mac\u202emini" }, refused(400, "invalid_value", "name")],
    ["a numeric name", { account_id: "ACME", name: 7 }, refused(400, "invalid_value", "name")],
    ["expires_in_seconds 0", { account_id: "ACME", expires_in_seconds: 0 }, refused(400, "invalid_value", "expires_in_seconds")],
    ["expires_in_seconds 1.5", { account_id: "ACME", expires_in_seconds: 1.5 }, refused(400, "invalid_value", "expires_in_seconds")],
    [
      "expires_in_seconds beyond ten years",
      { account_id: "ACME", expires_in_seconds: 315_360_001 },
      refused(400, "invalid_value", "expires_in_seconds"),
    ],
    ['expires_in_seconds "60"', { account_id: "ACME", expires_in_seconds: "60" }, refused(400, "invalid_value", "expires_in_seconds")],
    ["expires_at now", { account_id: "ACME", expires_at: T0 }, refused(400, "invalid_value", "expires_at")],
    ["expires_at in the past", { account_id: "ACME", expires_at: T0 - 1 }, refused(400, "invalid_value", "expires_at")],
    ["expires_at beyond ten years", { account_id: "ACME", expires_at: T0 + 315_360_001 }, refused(400, "invalid_value", "expires_at")],
    ["both expiries", { account_id: "ACME", expires_in_seconds: 60, expires_at: T0 + 60 }, refused(400, "invalid_value", "expires_at")],
  ] as const)("create with %s is refused and writes no token", async (_, body, expected) => {
    await using t = await app();
    const acme = await ok<Created>(t.admin("POST", "/accounts", { name: "Acme" }));
    const existing = await ok<CreatedToken>(t.admin("POST", "/provider-tokens", { account_id: acme.id }));
    const before = { object: "list", data: [tokenAnswer(existing.id, acme.id, existing.token)] };
    expect(await list(t, "/provider-tokens")).toEqual(before);

    const sent = Object.fromEntries(Object.entries(body).map(([k, v]) => [k, v === "ACME" ? acme.id : v]));
    expect(answer(await t.admin("POST", "/provider-tokens", sent))).toEqual(expected);
    expect(await list(t, "/provider-tokens")).toEqual(before);
  });

  test("expiry: expires_in_seconds or expires_at; refused from that second on at /v1/provider/me, as a revoked token", async () => {
    await using t = await app();
    const acme = await ok<Created>(t.admin("POST", "/accounts", { name: "Acme" }));
    const inAMinute = await t.admin("POST", "/provider-tokens", { account_id: acme.id, expires_in_seconds: 60 });
    const created = inAMinute.body as CreatedToken;
    expect(answer(inAMinute)).toEqual({
      status: 200,
      body: { ...tokenAnswer(created.id, acme.id, created.token, { expires_at: T0 + 60 }), token: created.token },
    });
    const atTime = await ok<CreatedToken>(t.admin("POST", "/provider-tokens", { account_id: acme.id, expires_at: T0 + 120 }));
    const ten = await ok<CreatedToken>(t.admin("POST", "/provider-tokens", { account_id: acme.id, expires_in_seconds: 315_360_000 }));
    // Created in the same second: listed by id.
    expect(await list(t, "/provider-tokens")).toEqual({
      object: "list",
      data: [
        tokenAnswer(created.id, acme.id, created.token, { expires_at: T0 + 60 }),
        tokenAnswer(atTime.id, acme.id, atTime.token, { expires_at: T0 + 120 }),
        tokenAnswer(ten.id, acme.id, ten.token, { expires_at: T0 + 315_360_000 }),
      ].sort((a, b) => (a.id < b.id ? -1 : 1)),
    });
    const me = async (token: string) => (await t.call("GET", "/v1/provider/me", { token })).status;
    t.clock.set(T0_MS + 59_999);
    expect([await me(created.token), await me(atTime.token)]).toEqual([200, 200]);
    t.clock.set(T0_MS + 60_000);
    expect(answer(await t.call("GET", "/v1/provider/me", { token: created.token }))).toEqual(refused(401, "invalid_token"));
    expect(await me(atTime.token)).toBe(200);
    t.clock.set(T0_MS + 120_000);
    expect([await me(created.token), await me(atTime.token), await me(ten.token)]).toEqual([401, 401, 200]);
  });

  test("unknown ids: revoke and a list filter", async () => {
    await using t = await app();
    expect(answer(await t.admin("DELETE", "/provider-tokens/pt_nope"))).toEqual(refused(404, "not_found", "id"));
    expect(answer(await t.admin("DELETE", "/provider-tokens/%"))).toEqual(refused(400, "invalid_value", "id"));
    expect(answer(await t.admin("GET", "/provider-tokens?account_id=acct_nope"))).toEqual(refused(404, "not_found", "account_id"));
  });
});

describe("model builds", () => {
  test("PUT with every optional field answers the whole build; the list holds it", async () => {
    await using t = await app();
    const build = buildAnswer("org/some-build", FULL_BUILD);
    expect(answer(await t.admin("PUT", "/models/org/some-build", FULL_BUILD))).toEqual({ status: 200, body: build });
    expect(await list(t, "/models")).toEqual({ object: "list", data: [build] });
  });

  test("PUT again replaces every field (omitted ones fall back to defaults) and keeps the first created time", async () => {
    await using t = await app();
    await ok(t.admin("PUT", "/models/org/some-build", { ...FULL_BUILD, created: undefined }));
    t.clock.set(T0_MS + 50_000);
    const replaced = buildAnswer("org/some-build", { name: "Renamed", context_length: 1024 });
    expect(answer(await t.admin("PUT", "/models/org/some-build", { name: "Renamed", context_length: 1024 }))).toEqual({
      status: 200,
      body: replaced,
    });
    expect(await list(t, "/models")).toEqual({ object: "list", data: [replaced] });
  });

  test("PUT with no body creates a build with defaults; the list is sorted by id", async () => {
    await using t = await app();
    expect(answer(await t.admin("PUT", "/models/zz/plain"))).toEqual({ status: 200, body: buildAnswer("zz/plain") });
    expect(answer(await t.admin("PUT", "/models/aa/plain", {}))).toEqual({ status: 200, body: buildAnswer("aa/plain") });
    expect(await list(t, "/models")).toEqual({ object: "list", data: [buildAnswer("aa/plain"), buildAnswer("zz/plain")] });
  });

  test.each([
    ["created", "yesterday"],
    ["created", -1],
    ["owned_by", 5],
    ["model_type", ""],
    ["name", 5],
    ["display_name", ["x"]],
    ["hugging_face_id", { id: "x" }],
    ["description", "d".repeat(4001)],
    ["quantization", true],
    ["deprecation_date", "2027/06/30"],
    ["input_modalities", "text"],
    ["output_modalities", [1]],
    ["supported_sampling_parameters", [""]],
    ["supported_features", "tools"],
    ["context_length", 0],
    ["context_length", 1.5],
    ["max_output_length", "10"],
  ] as const)("PUT with an invalid %s (case %#) is a 400 on that param and writes nothing", async (field, value) => {
    await using t = await app();
    await ok(t.admin("PUT", "/models/org/existing", FULL_BUILD));
    const before = await list(t, "/models");
    expect(answer(await t.admin("PUT", "/models/org/existing", { ...FULL_BUILD, [field]: value }))).toEqual(
      refused(400, "invalid_value", field),
    );
    expect(answer(await t.admin("PUT", "/models/org/new", { [field]: value }))).toEqual(refused(400, "invalid_value", field));
    expect(await list(t, "/models")).toEqual(before);
  });

  test("an unknown field and max_output_length over context_length are refused", async () => {
    await using t = await app();
    expect(answer(await t.admin("PUT", "/models/org/x", { name: "x", pricing: {} }))).toEqual(refused(400, "unsupported_value", "pricing"));
    expect(answer(await t.admin("PUT", "/models/org/x", { context_length: 4096, max_output_length: 4097 }))).toEqual(
      refused(400, "invalid_value", "max_output_length"),
    );
    expect(await list(t, "/models")).toEqual({ object: "list", data: [] });
    expect(answer(await t.admin("PUT", "/models/org/x", { context_length: 4096, max_output_length: 4096 }))).toEqual({
      status: 200,
      body: buildAnswer("org/x", { context_length: 4096, max_output_length: 4096 }),
    });
  });

  test("build ids: literal slashes and %2F are the same id; spaces, broken escapes and edge slashes are 400 on id", async () => {
    await using t = await app();
    expect(answer(await t.admin("PUT", "/models/org/team/build-1", { name: "deep" }))).toEqual({
      status: 200,
      body: buildAnswer("org/team/build-1", { name: "deep" }),
    });
    expect(answer(await t.admin("PUT", "/models/org%2Fteam%2Fbuild-1", { name: "encoded" }))).toEqual({
      status: 200,
      body: buildAnswer("org/team/build-1", { name: "encoded" }),
    });
    expect(answer(await t.admin("PUT", "/models/vendor%2Fq4_k.m@v1:2+x", {}))).toEqual({
      status: 200,
      body: buildAnswer("vendor/q4_k.m@v1:2+x"),
    });
    for (const path of [
      "/models/org/some build",
      "/models/org/some%20build",
      "/models/org/",
      "/models/org%2F",
      "/models/%",
      "/models/a%252Fb",
    ]) {
      expect({ path, ...answer(await t.admin("PUT", path, {})) }).toEqual({ path, ...refused(400, "invalid_value", "id") });
    }
    expect(await list(t, "/models")).toEqual({
      object: "list",
      data: [buildAnswer("org/team/build-1", { name: "encoded" }), buildAnswer("vendor/q4_k.m@v1:2+x")],
    });
  });

  test("a build id equal to an existing alias is a 409 and writes nothing", async () => {
    await using t = await app();
    await seedCatalog(t);
    const before = await list(t, "/models");
    expect(answer(await t.admin("PUT", "/models/org/model", { name: "clash" }))).toEqual(refused(409, "conflict", "id"));
    expect(await list(t, "/models")).toEqual(before);
  });
});

describe("aliases", () => {
  test("set, list, re-point, delete", async () => {
    await using t = await app();
    await ok(t.admin("PUT", "/models/org/build-a", {}));
    await ok(t.admin("PUT", "/models/org/build-b", {}));

    expect(answer(await t.admin("PUT", "/aliases/org/model", { build_id: "org/build-a" }))).toEqual({
      status: 200,
      body: { alias: "org/model", object: "model_alias", build_id: "org/build-a" },
    });
    expect(answer(await t.admin("PUT", "/aliases/a-first", { build_id: "org/build-b" }))).toEqual({
      status: 200,
      body: { alias: "a-first", object: "model_alias", build_id: "org/build-b" },
    });
    expect(await list(t, "/aliases")).toEqual({
      object: "list",
      data: [
        { alias: "a-first", object: "model_alias", build_id: "org/build-b" },
        { alias: "org/model", object: "model_alias", build_id: "org/build-a" },
      ],
    });

    expect(answer(await t.admin("PUT", "/aliases/org%2Fmodel", { build_id: "org/build-b" }))).toEqual({
      status: 200,
      body: { alias: "org/model", object: "model_alias", build_id: "org/build-b" },
    });
    expect(answer(await t.admin("DELETE", "/aliases/a-first"))).toEqual({
      status: 200,
      body: { alias: "a-first", object: "model_alias", deleted: true },
    });
    expect(await list(t, "/aliases")).toEqual({
      object: "list",
      data: [{ alias: "org/model", object: "model_alias", build_id: "org/build-b" }],
    });
    expect(answer(await t.admin("DELETE", "/aliases/a-first"))).toEqual(refused(404, "model_not_found", "alias"));
  });

  test.each([
    ["an unknown build", "/aliases/org/new", { build_id: "org/missing" }, refused(404, "model_not_found", "build_id")],
    ["another alias as the build", "/aliases/org/new", { build_id: "org/model" }, refused(404, "model_not_found", "build_id")],
    ["an alias equal to a build id", "/aliases/other/plain", { build_id: "org/base-build-4bit" }, refused(409, "conflict", "alias")],
    ["no build_id", "/aliases/org/new", {}, refused(400, "missing_field", "build_id")],
    ["a build_id with a space", "/aliases/org/new", { build_id: "org/a b" }, refused(400, "invalid_value", "build_id")],
    ["an alias with a space", "/aliases/org/a%20b", { build_id: "other/plain" }, refused(400, "invalid_value", "alias")],
    ["an unknown field", "/aliases/org/new", { build_id: "other/plain", weight: 1 }, refused(400, "unsupported_value", "weight")],
    ["no body", "/aliases/org/new", undefined, refused(400, "invalid_json")],
  ] as const)("set with %s is refused and writes nothing", async (_, path, body, expected) => {
    await using t = await app();
    await seedCatalog(t);
    const before = { object: "list", data: [{ alias: "org/model", object: "model_alias", build_id: "org/base-build-4bit" }] };
    expect(await list(t, "/aliases")).toEqual(before);
    expect(answer(await t.admin("PUT", path, body))).toEqual(expected);
    expect(await list(t, "/aliases")).toEqual(before);
  });

  test("deleting an unknown or malformed alias is refused", async () => {
    await using t = await app();
    expect(answer(await t.admin("DELETE", "/aliases/org/nothing"))).toEqual(refused(404, "model_not_found", "alias"));
    expect(answer(await t.admin("DELETE", "/aliases/%"))).toEqual(refused(400, "invalid_value", "alias"));
  });
});

describe("prices", () => {
  const price = (model: string, input: number, output: number, cacheRead: number | null = null) => ({
    model,
    object: "price",
    input_price: input,
    output_price: output,
    cache_read_price: cacheRead,
  });

  test("set on an alias and on a build (cache_read_price optional), replace, list, clear true then false", async () => {
    await using t = await app();
    await seedCatalog(t);
    await ok(t.admin("DELETE", "/prices/org/model"));
    expect(await list(t, "/prices")).toEqual({ object: "list", data: [] });

    expect(answer(await t.admin("PUT", "/prices/org/model", { input_price: 65_000, output_price: 130_000 }))).toEqual({
      status: 200,
      body: price("org/model", 65_000, 130_000),
    });
    expect(answer(await t.admin("PUT", "/prices/org%2Fbase-build-4bit", { input_price: 0, output_price: 1, cache_read_price: 0 }))).toEqual(
      { status: 200, body: price("org/base-build-4bit", 0, 1, 0) },
    );
    expect(
      answer(await t.admin("PUT", "/prices/org/model", { input_price: 70_000, output_price: 140_000, cache_read_price: 7_000 })),
    ).toEqual({ status: 200, body: price("org/model", 70_000, 140_000, 7_000) });
    expect(await list(t, "/prices")).toEqual({
      object: "list",
      data: [price("org/base-build-4bit", 0, 1, 0), price("org/model", 70_000, 140_000, 7_000)],
    });

    expect(answer(await t.admin("DELETE", "/prices/org/model"))).toEqual({
      status: 200,
      body: { model: "org/model", object: "price", deleted: true },
    });
    expect(answer(await t.admin("DELETE", "/prices/org/model"))).toEqual({
      status: 200,
      body: { model: "org/model", object: "price", deleted: false },
    });
    expect(await list(t, "/prices")).toEqual({ object: "list", data: [price("org/base-build-4bit", 0, 1, 0)] });
  });

  test.each([
    ["an unknown model", "/prices/org/missing", { input_price: 1, output_price: 1 }, refused(404, "model_not_found", "model")],
    ["a negative input price", "/prices/org/model", { input_price: -1, output_price: 1 }, refused(400, "invalid_value", "input_price")],
    ["a negative output price", "/prices/org/model", { input_price: 1, output_price: -1 }, refused(400, "invalid_value", "output_price")],
    [
      "a negative cache-read price",
      "/prices/org/model",
      { input_price: 1, output_price: 1, cache_read_price: -1 },
      refused(400, "invalid_value", "cache_read_price"),
    ],
    ["a fractional input price", "/prices/org/model", { input_price: 0.5, output_price: 1 }, refused(400, "invalid_value", "input_price")],
    ["a string output price", "/prices/org/model", { input_price: 1, output_price: "1" }, refused(400, "invalid_value", "output_price")],
    [
      "a price over one million USD per million tokens",
      "/prices/org/model",
      { input_price: 1_000_000_000_001, output_price: 1 },
      refused(400, "invalid_value", "input_price"),
    ],
    ["no output price", "/prices/org/model", { input_price: 1 }, refused(400, "missing_field", "output_price")],
    [
      "an unknown field",
      "/prices/org/model",
      { input_price: 1, output_price: 1, image_price: 1 },
      refused(400, "unsupported_value", "image_price"),
    ],
    ["a model id with a space", "/prices/org/a%20model", { input_price: 1, output_price: 1 }, refused(400, "invalid_value", "model")],
  ] as const)("set with %s is refused and writes nothing", async (_, path, body, expected) => {
    await using t = await app();
    await seedCatalog(t);
    const before = { object: "list", data: [price("org/model", 65_000, 130_000)] };
    expect(await list(t, "/prices")).toEqual(before);
    expect(answer(await t.admin("PUT", path, body))).toEqual(expected);
    expect(await list(t, "/prices")).toEqual(before);
  });

  test("clearing the price of an unknown or malformed model is refused", async () => {
    await using t = await app();
    expect(answer(await t.admin("DELETE", "/prices/org/missing"))).toEqual(refused(404, "model_not_found", "model"));
    expect(answer(await t.admin("DELETE", "/prices/org/a%20b"))).toEqual(refused(400, "invalid_value", "model"));
  });
});

describe("request bodies", () => {
  const WRITES: readonly [string, string][] = [
    ["POST", "/admin/v1/accounts"],
    ["POST", "/admin/v1/accounts/ACCOUNT/credit"],
    ["POST", "/admin/v1/keys"],
    ["POST", "/admin/v1/provider-tokens"],
    ["PUT", "/admin/v1/models/org/x"],
    ["PUT", "/admin/v1/aliases/org/a"],
    ["PUT", "/admin/v1/prices/org/x"],
  ];

  async function everyWrite(t: TestApp, rawBody: () => RequestInit["body"], headers: Record<string, string> = {}) {
    const { id } = await t.app.admin.createAccount({ name: "Acme" });
    const results = [];
    for (const [method, path] of WRITES) {
      results.push(answer(await t.call(method, path.replace("ACCOUNT", id), { token: ADMIN_TOKEN, rawBody: rawBody(), headers })));
    }
    return results;
  }

  test("a body that is not JSON is a 400 invalid_json on every write route", async () => {
    await using t = await app();
    const results = await everyWrite(t, () => '{"name": "Acme"', { "content-type": "application/json" });
    expect(results).toEqual(WRITES.map(() => refused(400, "invalid_json")));
    expect((await t.app.admin.listAccounts()).data).toHaveLength(1);
  });

  test("a body over 256 KiB is a 413, whether or not its length is declared", async () => {
    await using t = await app();
    const big = `{"name": "${"x".repeat(300 * 1024)}"}`;
    expect(await everyWrite(t, () => big, { "content-type": "application/json" })).toEqual(
      WRITES.map(() => refused(413, "request_too_large")),
    );

    const chunk = new TextEncoder().encode(" ".repeat(64 * 1024));
    const stream = () =>
      new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('{"name": "Acme"}'));
          for (let i = 0; i < 5; i++) controller.enqueue(chunk);
          controller.close();
        },
      });
    expect(await everyWrite(t, stream)).toEqual(WRITES.map(() => refused(413, "request_too_large")));
    expect((await t.app.admin.listAccounts()).data).toHaveLength(2);
  });

  test("a body of exactly 256 KiB is accepted", async () => {
    await using t = await app();
    const head = '{"name": "Acme"';
    const body = `${head}${" ".repeat(256 * 1024 - head.length - 1)}}`;
    expect(body.length).toBe(256 * 1024);
    const r = await t.call("POST", "/admin/v1/accounts", {
      token: ADMIN_TOKEN,
      rawBody: body,
      headers: { "content-type": "application/json" },
    });
    expect(answer(r)).toEqual({ status: 200, body: accountAnswer((r.body as Created).id, "Acme") });
  });
});
