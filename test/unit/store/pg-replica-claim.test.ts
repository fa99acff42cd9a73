/**
 * One process per replica id on a database (src/store/pg/replica-claim.ts), on real PostgreSQL: a second
 * claim of an id is refused, naming it, while the first holds it; another id is free; the id is free again
 * once its holder's store ends, and a holder whose connection was cut claims it again. Skipped, saying so,
 * without PostgreSQL.
 */
import { afterAll, describe, expect, test } from "bun:test";
import postgres from "postgres";
import { StoreOpenError } from "../../../src/store/errors.ts";
import { testDatabase } from "../../support/pg.ts";
import { waitFor } from "../../support/wait.ts";

const SUITE = "Postgres replica claims";
const db = await testDatabase([SUITE]);
const raw = db && postgres(db.url, { max: 1, onnotice: () => {} });
afterAll(() => raw?.end({ timeout: 5 }));

/** The claim connections that hold an advisory lock now (a terminated one may linger in pg_stat_activity a moment). */
const holders = async (): Promise<number[]> =>
  (
    await (raw as postgres.Sql)<{ pid: number }[]>`
      SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted
      WHERE a.application_name = 'umbra-replica-claim' AND a.datname = current_database()`
  ).map((r) => r.pid);

describe.skipIf(db === undefined)(SUITE, () => {
  test("a claimed id is refused to another process until its holder ends; other ids are free", async () => {
    const first = await (db as NonNullable<typeof db>).store();
    const second = await (db as NonNullable<typeof db>).store();
    try {
      await first.claimReplica("a");
      const refused = await second.claimReplica("a").catch((e) => e);
      expect([refused instanceof StoreOpenError, String(refused.message)]).toEqual([
        true,
        "another running replica uses --replica-id a on this database: give each replica its own id (or none: one is generated)",
      ]);
      await second.claimReplica("b");
      await first.end();
      await second.claimReplica("a");
    } finally {
      await Promise.all([first.end(), second.end()]);
    }
  });

  test("a holder whose connection is cut claims its id again; a process that took it meanwhile is reported", async () => {
    const first = await (db as NonNullable<typeof db>).store();
    const second = await (db as NonNullable<typeof db>).store();
    const lost: string[] = [];
    try {
      await first.claimReplica("c", (id) => lost.push(id));
      const terminate = () =>
        (raw as postgres.Sql)`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'umbra-replica-claim' AND datname = current_database()`;
      const before = await holders();
      await terminate();
      // Claimed again: a new connection holds the lock (not the terminated one, which may still be listed).
      await waitFor(async () => (await holders()).some((pid) => !before.includes(pid)), "the id claimed again", 10_000);
      expect(await second.claimReplica("c").catch((e) => e instanceof StoreOpenError)).toBe(true);
      // Cut again, and another process takes the id before the holder reconnects: the holder hears of it.
      await terminate();
      await second.claimReplica("c");
      await waitFor(() => lost.length > 0, "the lost claim reported", 10_000);
      expect(lost).toEqual(["c"]);
    } finally {
      await Promise.all([first.end(), second.end()]);
    }
  });
});
