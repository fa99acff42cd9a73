/**
 * `umbra-coordinator admin <noun> <verb>`, run as real processes from source, against its HTTP twin
 * /admin/v1 (in-process): the same sequence of operations on two databases gives the same answers once
 * generated ids, secrets and times are normalized. Also: refusals print the envelope on stderr (exit 1),
 * bad usage exits 2, `--help` lists the verbs, and the CLI and a running app share one database file.
 * Every run names the database it opened (stderr); read verbs never create one (run outside the checkout,
 * the default ./data/umbra.db is not there).
 */
import { describe, expect, test } from "bun:test";
import { existsSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { type CallResult, seedCatalog, type TestApp, tempDir, testApp } from "../support/harness.ts";
import { runCoordinator } from "../support/processes.ts";

const ROOT = join(import.meta.dir, "../..");
const BUN = join(ROOT, "node_modules/.bin/bun");

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** One `admin` process on `db`, with no UMBRA_* variables from the test's environment. */
async function cli(db: string, args: readonly string[]): Promise<Run> {
  const proc = Bun.spawn([BUN, "src/coordinator/main.ts", "admin", "--db", db, ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  // Every run that opens the database names it first (" (new)" when it creates it); the rest is the verb's.
  const named = [`database: ${db}\n`, `database: ${db} (new)\n`].find((line) => stderr.startsWith(line)) ?? "";
  return { code, stdout, stderr: stderr.slice(named.length) };
}

/** Ids that later steps refer to, captured per side from earlier answers. */
interface Ids {
  account: string;
  key: string;
  token: string;
}

interface Step {
  readonly name: string;
  readonly cli: (ids: Ids) => string[];
  readonly http: (ids: Ids) => [method: string, path: string, body?: unknown];
  /** Reads ids out of this step's answer. */
  readonly capture?: (answer: Record<string, string>, ids: Ids) => void;
}

/** An answer as the two twins agree on it: `ok` (exit 0 / HTTP 200) or `refused` (exit 1 / HTTP 4xx) with its JSON. */
interface Outcome {
  readonly step: string;
  readonly outcome: "ok" | "refused" | "unexpected";
  readonly answer: unknown;
}

function cliOutcome(step: string, run: Run): Outcome {
  if (run.code === 0 && run.stderr === "") return { step, outcome: "ok", answer: JSON.parse(run.stdout) };
  if (run.code === 1 && run.stdout === "") return { step, outcome: "refused", answer: JSON.parse(run.stderr) };
  return { step, outcome: "unexpected", answer: run };
}

function httpOutcome(step: string, r: CallResult): Outcome {
  if (r.status === 200) return { step, outcome: "ok", answer: r.body };
  if (r.status >= 400 && r.status < 500) return { step, outcome: "refused", answer: r.body };
  return { step, outcome: "unexpected", answer: { status: r.status, body: r.body } };
}

const GENERATED_ID = /^(acct|key|pt)_[A-Za-z0-9]{16}$/;

/**
 * Replaces what differs between two runs of the same sequence: generated ids (numbered by first
 * appearance, so references stay checked), secrets and hints (checked for shape), and times within
 * the run's window (other numbers, e.g. a `created` given explicitly, stay as they are).
 */
function normalizer(window: { from: number; to: number }) {
  const names = new Map<string, string>();
  const walk = (value: unknown, key?: string): unknown => {
    if (Array.isArray(value)) return value.map((v) => walk(v));
    if (typeof value === "object" && value !== null) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v, k)]));
    }
    if (typeof value === "string") {
      if (key === "key") return /^sk-umbra-[A-Za-z0-9_-]{43}$/.test(value) ? "<api key>" : `<malformed key ${value}>`;
      if (key === "token") return /^umbra-pt-[A-Za-z0-9_-]{43}$/.test(value) ? "<provider token>" : `<malformed token ${value}>`;
      if (key === "hint") {
        const m = /^(sk-umbra-|umbra-pt-)\.\.\.[A-Za-z0-9_-]{4}$/.exec(value);
        return m ? `${m[1]}...<hint>` : `<malformed hint ${value}>`;
      }
      if (GENERATED_ID.test(value)) {
        const prefix = value.slice(0, value.indexOf("_"));
        if (!names.has(value)) names.set(value, `<${prefix} ${[...names.keys()].filter((n) => n.startsWith(`${prefix}_`)).length + 1}>`);
        return names.get(value);
      }
    }
    if (typeof value === "number" && (key === "created" || key === "revoked_at") && value >= window.from && value <= window.to) {
      return "<time>";
    }
    return value;
  };
  return walk;
}

const FULL_BUILD = {
  created: 1_700_000_000,
  owned_by: "org",
  model_type: "chat",
  name: "Base",
  display_name: "Base (4-bit)",
  hugging_face_id: "org/base",
  description: "Every optional field.",
  quantization: "4bit",
  deprecation_date: "2027-06-30",
  input_modalities: ["text", "image"],
  output_modalities: ["text"],
  supported_sampling_parameters: ["temperature", "top_p"],
  supported_features: ["tools"],
  context_length: 8192,
  max_output_length: 2048,
};

const KEY_OPTIONS = {
  name: "ci",
  allowed_models: ["org/model", "other/plain"],
  spend_cap_micro_usd: 1_000_000,
  rpm: 60,
  tpm: 100_000,
  self_route_only: true,
  link_machines: true,
};

/** A device token's expiry in 30 days (Unix seconds): outside the run's window, so compared as is. */
const TOKEN_EXPIRES_AT = Math.floor(Date.now() / 1000) + 30 * 86_400;

/** One sequence, written once for each twin. */
const STEPS: readonly Step[] = [
  {
    name: "accounts create",
    cli: () => ["accounts", "create", "--name", "Acme", "--jwt-subject", "user-1"],
    http: () => ["POST", "/accounts", { name: "Acme", jwt_subject: "user-1" }],
    capture: (a, ids) => {
      ids.account = a.id ?? "";
    },
  },
  {
    name: "accounts credit",
    cli: (ids) => ["accounts", "credit", ids.account, "--amount", "2500000"],
    http: (ids) => ["POST", `/accounts/${ids.account}/credit`, { amount_micro_usd: 2_500_000 }],
  },
  {
    name: "accounts credit: not a number",
    cli: (ids) => ["accounts", "credit", ids.account, "--amount", "abc"],
    http: (ids) => ["POST", `/accounts/${ids.account}/credit`, { amount_micro_usd: "abc" }],
  },
  {
    name: "accounts credit: unknown account",
    cli: () => ["accounts", "credit", "acct_nope", "--amount", "5"],
    http: () => ["POST", "/accounts/acct_nope/credit", { amount_micro_usd: 5 }],
  },
  { name: "accounts get", cli: (ids) => ["accounts", "get", ids.account], http: (ids) => ["GET", `/accounts/${ids.account}`] },
  { name: "accounts list", cli: () => ["accounts", "list"], http: () => ["GET", "/accounts"] },
  {
    name: "models upsert --json",
    cli: () => ["models", "upsert", "org/base-build", "--json", JSON.stringify(FULL_BUILD)],
    http: () => ["PUT", "/models/org/base-build", FULL_BUILD],
  },
  {
    name: "models upsert with flags",
    cli: () => [
      "models",
      "upsert",
      "other/plain",
      "--name",
      "Plain",
      "--description",
      "A plain build",
      "--quantization",
      "8bit",
      "--context-length",
      "4096",
      "--max-output-length",
      "1024",
      "--owned-by",
      "other",
    ],
    http: () => [
      "PUT",
      "/models/other/plain",
      {
        name: "Plain",
        description: "A plain build",
        quantization: "8bit",
        context_length: 4096,
        max_output_length: 1024,
        owned_by: "other",
      },
    ],
  },
  {
    name: "models upsert: flags override --json",
    cli: () => [
      "models",
      "upsert",
      "org/mixed",
      "--json",
      '{"name":"J","context_length":100,"supported_features":["tools"]}',
      "--context-length",
      "200",
    ],
    http: () => ["PUT", "/models/org%2Fmixed", { name: "J", context_length: 200, supported_features: ["tools"] }],
  },
  {
    name: "models upsert: max output over context",
    cli: () => ["models", "upsert", "org/bad", "--context-length", "10", "--max-output-length", "20"],
    http: () => ["PUT", "/models/org/bad", { context_length: 10, max_output_length: 20 }],
  },
  { name: "models list", cli: () => ["models", "list"], http: () => ["GET", "/models"] },
  {
    name: "aliases set",
    cli: () => ["aliases", "set", "org/model", "org/base-build"],
    http: () => ["PUT", "/aliases/org/model", { build_id: "org/base-build" }],
  },
  {
    name: "aliases set: re-point",
    cli: () => ["aliases", "set", "org/model", "other/plain"],
    http: () => ["PUT", "/aliases/org/model", { build_id: "other/plain" }],
  },
  {
    name: "aliases set: unknown build",
    cli: () => ["aliases", "set", "org/other", "org/missing"],
    http: () => ["PUT", "/aliases/org/other", { build_id: "org/missing" }],
  },
  { name: "aliases list", cli: () => ["aliases", "list"], http: () => ["GET", "/aliases"] },
  {
    name: "keys create with every option",
    cli: (ids) => [
      "keys",
      "create",
      "--account",
      ids.account,
      "--name",
      "ci",
      "--allowed-model",
      "org/model",
      "--allowed-model",
      "other/plain",
      "--spend-cap",
      "1000000",
      "--rpm",
      "60",
      "--tpm",
      "100000",
      "--self-route-only",
      "--link-machines",
    ],
    http: (ids) => ["POST", "/keys", { account_id: ids.account, ...KEY_OPTIONS }],
    capture: (a, ids) => {
      ids.key = a.id ?? "";
    },
  },
  {
    name: "keys create: unknown allowed model",
    cli: (ids) => ["keys", "create", "--account", ids.account, "--allowed-model", "org/missing"],
    http: (ids) => ["POST", "/keys", { account_id: ids.account, allowed_models: ["org/missing"] }],
  },
  {
    name: "keys create with no option",
    cli: (ids) => ["keys", "create", "--account", ids.account],
    http: (ids) => ["POST", "/keys", { account_id: ids.account }],
  },
  {
    name: "keys list --account",
    cli: (ids) => ["keys", "list", "--account", ids.account],
    http: (ids) => ["GET", `/keys?account_id=${ids.account}`],
  },
  { name: "keys revoke", cli: (ids) => ["keys", "revoke", ids.key], http: (ids) => ["DELETE", `/keys/${ids.key}`] },
  { name: "keys list", cli: () => ["keys", "list"], http: () => ["GET", "/keys"] },
  {
    name: "provider-tokens create",
    cli: (ids) => ["provider-tokens", "create", "--account", ids.account],
    http: (ids) => ["POST", "/provider-tokens", { account_id: ids.account }],
    capture: (a, ids) => {
      ids.token = a.id ?? "";
    },
  },
  {
    name: "provider-tokens revoke",
    cli: (ids) => ["provider-tokens", "revoke", ids.token],
    http: (ids) => ["DELETE", `/provider-tokens/${ids.token}`],
  },
  {
    name: "provider-tokens list --account",
    cli: (ids) => ["provider-tokens", "list", "--account", ids.account],
    http: (ids) => ["GET", `/provider-tokens?account_id=${ids.account}`],
  },
  {
    name: "provider-tokens create --name --expires-at",
    cli: (ids) => [
      "provider-tokens",
      "create",
      "--account",
      ids.account,
      "--name",
      "Ada’s Mac mini",
      "--expires-at",
      String(TOKEN_EXPIRES_AT),
    ],
    http: (ids) => ["POST", "/provider-tokens", { account_id: ids.account, name: "Ada’s Mac mini", expires_at: TOKEN_EXPIRES_AT }],
  },
  {
    name: "provider-tokens create: --expires-in and --expires-at",
    cli: (ids) => ["provider-tokens", "create", "--account", ids.account, "--expires-in", "60", "--expires-at", String(TOKEN_EXPIRES_AT)],
    http: (ids) => ["POST", "/provider-tokens", { account_id: ids.account, expires_in_seconds: 60, expires_at: TOKEN_EXPIRES_AT }],
  },
  {
    name: "provider-tokens create: --expires-in 0",
    cli: (ids) => ["provider-tokens", "create", "--account", ids.account, "--expires-in", "0"],
    http: (ids) => ["POST", "/provider-tokens", { account_id: ids.account, expires_in_seconds: 0 }],
  },
  {
    name: "prices set",
    cli: () => ["prices", "set", "org/model", "--input", "65000", "--output", "130000", "--cache-read", "30000"],
    http: () => ["PUT", "/prices/org/model", { input_price: 65_000, output_price: 130_000, cache_read_price: 30_000 }],
  },
  {
    name: "prices set without cache-read",
    cli: () => ["prices", "set", "other/plain", "--input", "1", "--output", "2"],
    http: () => ["PUT", "/prices/other/plain", { input_price: 1, output_price: 2 }],
  },
  { name: "prices clear", cli: () => ["prices", "clear", "org/model"], http: () => ["DELETE", "/prices/org/model"] },
  { name: "prices clear again", cli: () => ["prices", "clear", "org/model"], http: () => ["DELETE", "/prices/org/model"] },
  { name: "prices list", cli: () => ["prices", "list"], http: () => ["GET", "/prices"] },
  { name: "aliases delete", cli: () => ["aliases", "delete", "org/model"], http: () => ["DELETE", "/aliases/org/model"] },
];

const envelope = (type: string, code: string, param: string) => ({ error: { message: expect.any(String), type, code, param } });

const BUILD_DEFAULTS = {
  object: "model_build",
  created: "<time>",
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
};
const BASE_BUILD = { ...BUILD_DEFAULTS, id: "org/base-build", ...FULL_BUILD };
const MIXED_BUILD = { ...BUILD_DEFAULTS, id: "org/mixed", name: "J", context_length: 200, supported_features: ["tools"] };
const PLAIN_BUILD = {
  ...BUILD_DEFAULTS,
  id: "other/plain",
  name: "Plain",
  description: "A plain build",
  quantization: "8bit",
  context_length: 4096,
  max_output_length: 1024,
  owned_by: "other",
};
const ACCOUNT = {
  id: "<acct 1>",
  object: "account",
  name: "Acme",
  jwt_subject: "user-1",
  created: "<time>",
  balance_micro_usd: 2_500_000,
  reserved_micro_usd: 0,
};
const FULL_KEY = {
  id: "<key 1>",
  object: "api_key",
  account_id: "<acct 1>",
  hint: "sk-umbra-...<hint>",
  spent_micro_usd: 0,
  created: "<time>",
  revoked_at: null,
  ...KEY_OPTIONS,
};
const PLAIN_KEY = {
  ...FULL_KEY,
  id: "<key 2>",
  name: null,
  allowed_models: null,
  spend_cap_micro_usd: null,
  rpm: null,
  tpm: null,
  self_route_only: false,
  link_machines: false,
};
const REVOKED_KEY = { ...FULL_KEY, revoked_at: "<time>" };
const REVOKED_TOKEN = {
  id: "<pt 1>",
  object: "provider_token",
  account_id: "<acct 1>",
  hint: "umbra-pt-...<hint>",
  name: null,
  created: "<time>",
  expires_at: null,
  revoked_at: "<time>",
};

/** What the sequence answers, normalized: both twins must give exactly this. */
const EXPECTED: readonly Omit<Outcome, "step">[] = [
  { outcome: "ok", answer: { ...ACCOUNT, balance_micro_usd: 0 } },
  { outcome: "ok", answer: ACCOUNT },
  { outcome: "refused", answer: envelope("invalid_request_error", "invalid_value", "amount_micro_usd") },
  { outcome: "refused", answer: envelope("not_found_error", "not_found", "id") },
  { outcome: "ok", answer: { ...ACCOUNT, earnings_micro_usd: 0 } },
  { outcome: "ok", answer: { object: "list", data: [ACCOUNT] } },
  { outcome: "ok", answer: BASE_BUILD },
  { outcome: "ok", answer: PLAIN_BUILD },
  { outcome: "ok", answer: MIXED_BUILD },
  { outcome: "refused", answer: envelope("invalid_request_error", "invalid_value", "max_output_length") },
  { outcome: "ok", answer: { object: "list", data: [BASE_BUILD, MIXED_BUILD, PLAIN_BUILD] } },
  { outcome: "ok", answer: { alias: "org/model", object: "model_alias", build_id: "org/base-build" } },
  { outcome: "ok", answer: { alias: "org/model", object: "model_alias", build_id: "other/plain" } },
  { outcome: "refused", answer: envelope("not_found_error", "model_not_found", "build_id") },
  { outcome: "ok", answer: { object: "list", data: [{ alias: "org/model", object: "model_alias", build_id: "other/plain" }] } },
  { outcome: "ok", answer: { ...FULL_KEY, key: "<api key>" } },
  { outcome: "refused", answer: envelope("not_found_error", "model_not_found", "allowed_models") },
  { outcome: "ok", answer: { ...PLAIN_KEY, key: "<api key>" } },
  { outcome: "ok", answer: { object: "list", data: [FULL_KEY, PLAIN_KEY] } },
  { outcome: "ok", answer: REVOKED_KEY },
  { outcome: "ok", answer: { object: "list", data: [REVOKED_KEY, PLAIN_KEY] } },
  { outcome: "ok", answer: { ...REVOKED_TOKEN, revoked_at: null, token: "<provider token>" } },
  { outcome: "ok", answer: REVOKED_TOKEN },
  { outcome: "ok", answer: { object: "list", data: [REVOKED_TOKEN] } },
  {
    outcome: "ok",
    answer: {
      ...REVOKED_TOKEN,
      id: "<pt 2>",
      name: "Ada’s Mac mini",
      expires_at: TOKEN_EXPIRES_AT,
      revoked_at: null,
      token: "<provider token>",
    },
  },
  { outcome: "refused", answer: envelope("invalid_request_error", "invalid_value", "expires_at") },
  { outcome: "refused", answer: envelope("invalid_request_error", "invalid_value", "expires_in_seconds") },
  {
    outcome: "ok",
    answer: { model: "org/model", object: "price", input_price: 65_000, output_price: 130_000, cache_read_price: 30_000 },
  },
  { outcome: "ok", answer: { model: "other/plain", object: "price", input_price: 1, output_price: 2, cache_read_price: null } },
  { outcome: "ok", answer: { model: "org/model", object: "price", deleted: true } },
  { outcome: "ok", answer: { model: "org/model", object: "price", deleted: false } },
  {
    outcome: "ok",
    answer: { object: "list", data: [{ model: "other/plain", object: "price", input_price: 1, output_price: 2, cache_read_price: null }] },
  },
  { outcome: "ok", answer: { alias: "org/model", object: "model_alias", deleted: true } },
];

describe("CLI and HTTP twins", () => {
  test("the same sequence through `admin` processes and through /admin/v1 gives the same answers", async () => {
    const from = Math.floor(Date.now() / 1000);
    using dir = tempDir();
    const db = join(dir.path, "cli.db");
    await using t = await testApp();

    const cliIds: Ids = { account: "", key: "", token: "" };
    const httpIds: Ids = { account: "", key: "", token: "" };
    const cliRaw: Outcome[] = [];
    const httpRaw: Outcome[] = [];
    /** Secrets as printed at creation, to check each hint against its secret. */
    const secrets: [hint: unknown, secret: unknown][] = [];
    for (const step of STEPS) {
      const c = cliOutcome(step.name, await cli(db, step.cli(cliIds)));
      const [method, path, body] = step.http(httpIds);
      const h = httpOutcome(step.name, await t.admin(method, path, body));
      for (const [o, ids] of [
        [c, cliIds],
        [h, httpIds],
      ] as const) {
        const answer = o.answer as Record<string, string>;
        if (o.outcome === "ok") step.capture?.(answer, ids);
        if (o.outcome === "ok" && (answer.key ?? answer.token) !== undefined) secrets.push([answer.hint, answer.key ?? answer.token]);
      }
      cliRaw.push(c);
      httpRaw.push(h);
    }

    const window = { from, to: Math.ceil(Date.now() / 1000) };
    // Each side gets its own numbering of generated ids: references are compared, not values.
    const normalize = (raw: Outcome[]) => {
      const walk = normalizer(window);
      return raw.map((o) => ({ ...o, answer: walk(o.answer) }));
    };
    expect(EXPECTED.length).toBe(STEPS.length);
    const expected = STEPS.map((s, i) => ({
      step: s.name,
      ...(EXPECTED[i] ?? { outcome: "unexpected" as const, answer: "no expectation" }),
    }));
    expect(normalize(cliRaw)).toEqual(expected);
    expect(normalize(httpRaw)).toEqual(expected);
    // Refusals carry the same message on both sides, not only the same code.
    expect(cliRaw.filter((o) => o.outcome === "refused").map((o) => o.answer)).toEqual(
      httpRaw.filter((o) => o.outcome === "refused").map((o) => o.answer),
    );
    expect(secrets.map(([hint, secret]) => String(hint).slice(-4) === String(secret).slice(-4))).toEqual([
      true,
      true,
      true,
      true,
      true,
      true,
      true,
      true,
    ]);
  }, 60_000);
});

// Each case has its own database and process: they run side by side.
describe.concurrent("CLI usage", () => {
  test.each([
    ["an unknown noun", ["wallets", "list"], /unknown admin noun 'wallets'/],
    ["an unknown verb", ["accounts", "delete", "acct_x"], /unknown verb 'delete' for 'accounts'/],
    ["a flag of another verb", ["accounts", "list", "--rpm", "5"], /--rpm does not apply to 'admin accounts list'/],
    ["a missing positional", ["aliases", "set", "org/model"], /usage: umbra-coordinator admin aliases set ALIAS BUILD_ID/],
    ["an extra positional", ["accounts", "list", "extra"], /usage: umbra-coordinator admin accounts list/],
  ] as const)("%s exits 2 with usage on stderr", async (_, args, message) => {
    using dir = tempDir();
    expect(await cli(join(dir.path, "umbra.db"), args)).toEqual({ code: 2, stdout: "", stderr: expect.stringMatching(message) });
  });

  test("admin --help exits 0 and lists every verb", async () => {
    using dir = tempDir();
    const run = await cli(join(dir.path, "umbra.db"), ["--help"]);
    expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
    const verbs = [
      "accounts create",
      "accounts list",
      "accounts get",
      "accounts credit",
      "accounts ledger",
      "accounts usage",
      "keys create",
      "keys list",
      "keys revoke",
      "provider-tokens create",
      "provider-tokens list",
      "provider-tokens revoke",
      "models upsert",
      "models list",
      "aliases set",
      "aliases delete",
      "aliases list",
      "prices set",
      "prices clear",
      "prices list",
    ];
    expect(verbs.filter((v) => !run.stdout.includes(`\n  ${v}`))).toEqual([]);
  });
});

describe("one database file, two processes", () => {
  async function listedModels(t: TestApp, key: string) {
    const r = await t.call("GET", "/v1/models", { token: key });
    return { status: r.status, body: r.status === 200 ? (r.body as { data: { id: string }[] }).data.map((m) => m.id) : r.body };
  }

  test("a key created by the CLI on the app's database authenticates in the running app; a CLI revoke takes effect at once", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const account = (await t.admin("POST", "/accounts", { name: "Shared" })).body as { id: string };

    const created = await cli(t.config.db, ["keys", "create", "--account", account.id, "--allowed-model", "org/model"]);
    expect({ code: created.code, stderr: created.stderr }).toEqual({ code: 0, stderr: "" });
    const key = JSON.parse(created.stdout) as { id: string; key: string };
    expect(await listedModels(t, key.key)).toEqual({ status: 200, body: ["org/model"] });

    const revoked = await cli(t.config.db, ["keys", "revoke", key.id]);
    expect({ code: revoked.code, stderr: revoked.stderr }).toEqual({ code: 0, stderr: "" });
    expect(await listedModels(t, key.key)).toEqual({
      status: 401,
      body: { error: { message: expect.any(String), type: "authentication_error", code: "invalid_api_key" } },
    });
    expect((await t.admin("GET", `/keys?account_id=${account.id}`)).body).toEqual({ object: "list", data: [JSON.parse(revoked.stdout)] });
  });
});

describe("which database", () => {
  test.each([["accounts list"], ["accounts get acct_x"], ["keys list"], ["prices list"], ["accounts credit acct_x --amount 5"]])(
    "outside the checkout without --db, `admin %s` exits 1 naming the missing database and how to point at one; nothing is created",
    async (verb) => {
      using dir = tempDir();
      const cwd = realpathSync(dir.path);
      expect(await runCoordinator(["admin", ...verb.split(" ")], { cwd })).toEqual({
        code: 1,
        stdout: "",
        stderr: `umbra-coordinator: no database at ${cwd}/data/umbra.db; point at yours with --db PATH or UMBRA_DB (the default, ./data/umbra.db, is relative to the current folder)\n`,
      });
      expect(existsSync(join(cwd, "data"))).toBe(false);
    },
  );

  test("`accounts create` makes a missing database and names it (new); later runs, by cwd or UMBRA_DB, name the same one", async () => {
    using dir = tempDir();
    const cwd = realpathSync(dir.path);
    const db = join(cwd, "data/umbra.db");
    const created = await runCoordinator(["admin", "accounts", "create", "--name", "First"], { cwd });
    expect({ code: created.code, stderr: created.stderr }).toEqual({ code: 0, stderr: `database: ${db} (new)\n` });
    const account = JSON.parse(created.stdout) as { id: string };
    const listed = [
      await runCoordinator(["admin", "accounts", "list"], { cwd }),
      await runCoordinator(["admin", "accounts", "list"], { env: { UMBRA_DB: db } }),
    ];
    expect(
      listed.map((r) => ({
        code: r.code,
        stderr: r.stderr,
        ids: (JSON.parse(r.stdout) as { data: { id: string }[] }).data.map((a) => a.id),
      })),
    ).toEqual([
      { code: 0, stderr: `database: ${db}\n`, ids: [account.id] },
      { code: 0, stderr: `database: ${db}\n`, ids: [account.id] },
    ]);
  });
});
