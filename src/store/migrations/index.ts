/**
 * The migrations, embedded in the binary: drizzle's `migrate()` reads files from disk, and a compiled
 * binary has none. Add one import per generated file; test/unit/store/migrations.test.ts fails when the
 * journal names a migration this list lacks or the embedded text differs from the file.
 */

import m0000 from "./0000_init.sql" with { type: "text" };
import m0001 from "./0001_ledger_without_request_index.sql" with { type: "text" };
import m0002 from "./0002_ledger_ids_without_autoincrement.sql" with { type: "text" };
import m0003 from "./0003_key_link_machines_and_token_expiry.sql" with { type: "text" };
import m0004 from "./0004_console_sessions.sql" with { type: "text" };
import m0005 from "./0005_provider_token_names.sql" with { type: "text" };
import m0006 from "./0006_mdm_enrolments.sql" with { type: "text" };
import journal from "./meta/_journal.json" with { type: "json" };

export interface EmbeddedMigration {
  readonly tag: string;
  /** drizzle-kit's journal timestamp; the order and the applied marker. */
  readonly when: number;
  readonly sql: string;
}

const TEXTS: Readonly<Record<string, string>> = {
  "0000_init": m0000,
  "0001_ledger_without_request_index": m0001,
  "0002_ledger_ids_without_autoincrement": m0002,
  "0003_key_link_machines_and_token_expiry": m0003,
  "0004_console_sessions": m0004,
  "0005_provider_token_names": m0005,
  "0006_mdm_enrolments": m0006,
};

export const MIGRATIONS: readonly EmbeddedMigration[] = journal.entries.map((e) => {
  const sql = TEXTS[e.tag];
  if (sql === undefined) throw new Error(`migration ${e.tag} is in the journal but not embedded`);
  return { tag: e.tag, when: e.when, sql };
});
