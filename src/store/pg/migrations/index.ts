/**
 * The Postgres migrations, embedded in the binary as the SQLite ones are (src/store/migrations/index.ts).
 * Add one import per generated file; test/unit/store/pg-migrations.test.ts fails when the journal names
 * a migration this list lacks or the embedded text differs from the file.
 */

import type { EmbeddedMigration } from "../../migrations/index.ts";
import m0000 from "./0000_init.sql" with { type: "text" };
import m0001 from "./0001_holds.sql" with { type: "text" };
import m0002 from "./0002_money_fns.sql" with { type: "text" };
import m0003 from "./0003_money_batch.sql" with { type: "text" };
import m0004 from "./0004_change_feed.sql" with { type: "text" };
import m0005 from "./0005_console_sessions.sql" with { type: "text" };
import m0006 from "./0006_provider_token_names.sql" with { type: "text" };
import m0007 from "./0007_mdm_enrolments.sql" with { type: "text" };
import m0008 from "./0008_money_leases.sql" with { type: "text" };
import journal from "./meta/_journal.json" with { type: "json" };

const TEXTS: Readonly<Record<string, string>> = {
  "0000_init": m0000,
  "0001_holds": m0001,
  "0002_money_fns": m0002,
  "0003_money_batch": m0003,
  "0004_change_feed": m0004,
  "0005_console_sessions": m0005,
  "0006_provider_token_names": m0006,
  "0007_mdm_enrolments": m0007,
  "0008_money_leases": m0008,
};

export const PG_MIGRATIONS: readonly EmbeddedMigration[] = journal.entries.map((e) => {
  const sql = TEXTS[e.tag];
  if (sql === undefined) throw new Error(`migration ${e.tag} is in the journal but not embedded`);
  return { tag: e.tag, when: e.when, sql };
});
