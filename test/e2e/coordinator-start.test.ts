/**
 * Starting the coordinator, as real processes from source (issue 18 points 6 and 8): one coordinator per
 * database (a second `serve`, `dev` or `migrate` refuses, naming the database and the holder; the admin
 * CLI works beside it; a SIGKILLed holder leaves no stale lock), a busy port refuses the start before
 * anything is minted, and `dev` keeps one live demo key and device token and prices each demo build the
 * same by its alias and by its build id.
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { discountedCacheRead } from "../../src/billing/money.ts";
import { modelPricing } from "../../src/billing/pricing.ts";
import { DEMO_CATALOG } from "../../src/coordinator/dev.ts";
import { tempDir } from "../support/harness.ts";
import { runCoordinator, startCoordinator, startDev } from "../support/processes.ts";

const ENV = { UMBRA_MODE: "development", UMBRA_ADMIN_TOKEN: "start-test-admin-token-0123456789abcdef0123", UMBRA_LOG_LEVEL: "warn" };

const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Rows per table, read straight from the file. */
function counts(db: string) {
  const client = new Database(db, { readonly: true });
  try {
    const count = (table: string) => (client.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
    return { accounts: count("accounts"), api_keys: count("api_keys"), provider_tokens: count("provider_tokens") };
  } finally {
    client.close();
  }
}

describe("one coordinator per database", () => {
  test("a second serve, dev or migrate exits 1 naming the database and the first process; the admin CLI works beside it; after kill -9 a new one starts", async () => {
    using dir = tempDir();
    const db = join(dir.path, "umbra.db");
    await using first = await startCoordinator({}, { dir: dir.path });
    const refusal = {
      code: 1,
      stdout: "",
      stderr: expect.stringMatching(
        new RegExp(
          `^umbra-coordinator: database ${escaped(db)} is in use by another process \\(pid ${first.proc.pid}: umbra-coordinator serve, started \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z\\); stop it first, or give this one another --db\\n$`,
        ),
      ),
    };
    const [serve, dev, migrate, admin] = await Promise.all([
      runCoordinator(["serve", "--listen", "127.0.0.1:0", "--db", db], { env: ENV }),
      runCoordinator(["dev", "--listen", "127.0.0.1:0", "--db", db], { env: ENV }),
      runCoordinator(["migrate", "--db", db], { env: ENV }),
      runCoordinator(["admin", "--db", db, "accounts", "create", "--name", "Beside"]),
    ]);
    expect({ serve, dev, migrate }).toEqual({ serve: refusal, dev: refusal, migrate: refusal });
    expect({ code: admin.code, stderr: admin.stderr }).toEqual({ code: 0, stderr: `database: ${db}\n` });
    const created = JSON.parse(admin.stdout) as { id: string };
    expect(await first.admin("GET", `/accounts/${created.id}`)).toEqual(expect.objectContaining({ id: created.id, name: "Beside" }));

    first.proc.kill("SIGKILL");
    await first.proc.exited;
    await using second = await startCoordinator({}, { dir: dir.path });
    expect(await second.admin("GET", `/accounts/${created.id}`)).toEqual(expect.objectContaining({ id: created.id, name: "Beside" }));
  }, 60_000);
});

describe("a busy port", () => {
  test.each(["serve", "dev"])(
    "%s exits 1 with 'cannot listen on HOST:PORT: address already in use' and writes no account, key or token",
    async (command) => {
      using dir = tempDir();
      const db = join(dir.path, "umbra.db");
      const busy = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("busy") });
      try {
        const run = await runCoordinator([command, "--listen", `127.0.0.1:${busy.port}`, "--db", db], { env: ENV });
        expect(run).toEqual({
          code: 1,
          stdout: "",
          stderr: `umbra-coordinator: cannot listen on 127.0.0.1:${busy.port}: address already in use\n`,
        });
      } finally {
        await busy.stop(true);
      }
      expect(counts(db)).toEqual({ accounts: 0, api_keys: 0, provider_tokens: 0 });
    },
  );
});

describe("umbra-coordinator dev", () => {
  test("a restart prints a new demo key and revokes the previous key and device token", async () => {
    using dir = tempDir();
    const db = join(dir.path, "umbra.db");
    const previous = await startDev(db);
    await previous[Symbol.asyncDispose]();
    await using dev = await startDev(db);

    const models = async (key: string) => (await fetch(`${dev.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status;
    expect({ previous: await models(previous.apiKey), current: await models(dev.apiKey) }).toEqual({ previous: 401, current: 200 });
    const live = (list: { data: { name?: string | null; revoked_at: number | null }[] }) =>
      list.data.map((r) => ({ name: r.name ?? null, live: r.revoked_at === null }));
    expect(live(await dev.admin("GET", "/keys"))).toEqual([
      { name: "demo", live: false },
      { name: "demo", live: true },
    ]);
    expect(live(await dev.admin("GET", "/provider-tokens"))).toEqual([
      { name: null, live: false },
      { name: null, live: true },
    ]);
  }, 60_000);

  test("each demo build costs the same by its alias and by its build id", async () => {
    using dir = tempDir();
    await using dev = await startDev(join(dir.path, "umbra.db"));
    const pricing = async (id: string) => {
      const response = await fetch(`${dev.url}/v1/models/${id}`, { headers: { authorization: `Bearer ${dev.apiKey}` } });
      return ((await response.json()) as { pricing?: unknown }).pricing;
    };
    // The demo's own prices (the cache-read rate, when the demo gives none, is the default 50% discount).
    const expected = DEMO_CATALOG.map((m) => ({
      build: m.id,
      pricing: modelPricing({
        input: m.price.input_price,
        output: m.price.output_price,
        cacheRead: "cache_read_price" in m.price ? m.price.cache_read_price : discountedCacheRead(m.price.input_price, 50),
        source: "model",
      }),
    }));
    const byAlias = await Promise.all(DEMO_CATALOG.map(async (m) => ({ build: m.id, pricing: await pricing(m.alias) })));
    const byBuild = await Promise.all(DEMO_CATALOG.map(async (m) => ({ build: m.id, pricing: await pricing(m.id) })));
    expect({ byAlias, byBuild }).toEqual({ byAlias: expected, byBuild: expected });
  }, 60_000);
});
