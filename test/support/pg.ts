/**
 * A Postgres database per test file: `testDatabase()` creates `umbra_t_<random>` on the server named by
 * UMBRA_TEST_PG_URL (default: the machine's PostgreSQL, user postgres, trust auth) and drops it after the
 * file's tests. When no server answers it returns undefined and prints one line naming the suites it
 * skips and how to enable them; the caller registers them as skipped, never silently.
 */
import { afterAll } from "bun:test";
import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { createPgStore, type PgStore, type PgStoreOptions } from "../../src/store/pg/index.ts";
import type { OpenStore } from "../store/conformance.ts";

export const PG_ADMIN_URL = process.env.UMBRA_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

const TABLES =
  "accounts, balances, ledger_entries, api_keys, provider_tokens, model_builds, model_aliases, model_prices, usage, store_meta, holds, console_sessions, sign_in_links, mdm_enrolments, mdm_commands, mdm_chains";

export interface TestDatabase {
  /** The database's URL. */
  readonly url: string;
  /** A store on a database emptied first (every table truncated, identities restarted). */
  readonly open: OpenStore;
  /** A store on the database as it is. */
  store(options?: PgStoreOptions): Promise<PgStore>;
}

/** The file's database, dropped after its tests; undefined (with the skip line printed) without a server. */
export async function testDatabase(suites: readonly string[]): Promise<TestDatabase | undefined> {
  const admin = postgres(PG_ADMIN_URL, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    await admin`SELECT 1`;
  } catch {
    await admin.end({ timeout: 1 }).catch(() => {});
    console.warn(
      `skipped (no PostgreSQL at ${new URL(PG_ADMIN_URL).host}): ${suites.join(", ")}; ` +
        "start PostgreSQL there or set UMBRA_TEST_PG_URL=postgres://user@host:port/db to run them",
    );
    return undefined;
  }
  const name = `umbra_t_${randomBytes(6).toString("hex")}`;
  await admin.unsafe(`CREATE DATABASE ${name}`);
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  let cleaner: postgres.Sql | undefined;
  afterAll(async () => {
    await cleaner?.end({ timeout: 5 });
    await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end({ timeout: 5 });
  });
  const store = (options: PgStoreOptions = {}) => createPgStore(url.toString(), options);
  return {
    url: url.toString(),
    store,
    async open() {
      const s = await store();
      cleaner ??= postgres(url.toString(), { max: 1, onnotice: () => {} });
      await cleaner.unsafe(`TRUNCATE ${TABLES} RESTART IDENTITY CASCADE`);
      return { store: s, [Symbol.asyncDispose]: () => s.end() };
    },
  };
}
