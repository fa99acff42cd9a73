/**
 * The Postgres store: the store and money conformance suites unchanged, on a database of this file's own
 * (test/support/pg.ts); skipped, saying so, when no PostgreSQL answers.
 */
import { describe, test } from "bun:test";
import { runStoreConformance } from "../../store/conformance.ts";
import { runMoneyConformance } from "../../store/money-conformance.ts";
import { testDatabase } from "../../support/pg.ts";

const SUITES = ["Postgres store conformance", "Postgres money conformance"];
const db = await testDatabase(SUITES);

if (db) {
  runStoreConformance(SUITES[0] as string, db.open);
  runMoneyConformance(SUITES[1] as string, db.open);
} else {
  describe.skip("Postgres (no server: see the line above)", () => {
    for (const suite of SUITES) test(suite, () => {});
  });
}
