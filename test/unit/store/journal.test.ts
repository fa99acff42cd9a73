/**
 * The settlement journal after close: its descriptor number goes back to the process, and the next file
 * opened gets it (a database's WAL, in a process that closed one app and opened another). A late
 * `clear()` (a wallets apply timer firing after shutdown) once truncated that other file; `append()`
 * would have written settlements into it.
 */
import { describe, expect, test } from "bun:test";
import { closeSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openJournal } from "../../../src/store/journal.ts";
import { tempDir } from "../../support/harness.ts";

describe("settlement journal after close", () => {
  test("clear() is a no-op and append() refuses: another file that got the descriptor is untouched", () => {
    using dir = tempDir();
    const journal = openJournal(join(dir.path, "umbra.db-settlements"));
    journal.close();
    const other = join(dir.path, "umbra.db-wal");
    writeFileSync(other, "another file's bytes");
    // The lowest free descriptor: the journal's, just released.
    const fd = openSync(other, "r+");
    try {
      journal.clear();
      expect(() => journal.append([])).toThrow("the settlement journal is closed");
      expect(readFileSync(other, "utf8")).toBe("another file's bytes");
    } finally {
      closeSync(fd);
    }
  });
});
