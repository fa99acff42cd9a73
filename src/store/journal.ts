/**
 * The settlement journal: an append-only file (`<db>-settlements`, mode 0600) in front of the database's
 * settlement commits. src/billing/settlement-writer.ts appends each group of settlements here in one write
 * and applies them to the database later in larger batches (docs/operations.md "Money").
 *
 * Format: one JSON settlement per line, a group per write; ids, models, token counts and amounts, never
 * content. The file is emptied once every batch is in the database; what a killed process left is applied
 * at start before any money moves, idempotently (a settlement's usage row is its marker). A torn last line
 * was never acknowledged and is ignored; damage anywhere else refuses the start (the file holds charges
 * nobody else has). Durability is the database's own (`synchronous = NORMAL`): it survives a killed
 * process, not a power loss.
 */
import { closeSync, fchmodSync, ftruncateSync, openSync, readFileSync, writeSync } from "node:fs";
import { StoreOpenError } from "./errors.ts";
import type { Settlement, SettlementJournal } from "./types.ts";

/** The journal's path for a database file. */
export function journalPath(databasePath: string): string {
  return `${databasePath}-settlements`;
}

/** Opens (creating, or tightening to, mode 0600) the journal at `path` and reads what a previous process left. */
export function openJournal(path: string): SettlementJournal {
  let text = "";
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw new StoreOpenError(`cannot read settlement journal ${path}: ${reason(e)}`);
  }
  const recovered = parseJournal(text, path);
  let fd: number;
  try {
    fd = openSync(path, "a", 0o600);
  } catch (e) {
    throw new StoreOpenError(`cannot open settlement journal ${path}: ${reason(e)}`);
  }
  try {
    fchmodSync(fd, 0o600); // a journal left with looser modes is tightened too
  } catch (e) {
    closeSync(fd);
    throw new StoreOpenError(`cannot restrict settlement journal ${path} to mode 0600: ${reason(e)}`);
  }
  let open = true;
  return {
    recovered,
    append(batch) {
      // After close the number `fd` may belong to another file of this process (a database's WAL).
      if (!open) throw new Error("the settlement journal is closed");
      if (batch.length === 0) return;
      let lines = "";
      for (const s of batch) lines += `${JSON.stringify(s)}\n`;
      const bytes = Buffer.from(lines);
      let written = 0;
      // O_APPEND: each write lands at the end; a short write (disk full) continues or throws.
      while (written < bytes.length) written += writeSync(fd, bytes, written);
    },
    clear() {
      // A late apply after close (shutdown) must not truncate whatever file now has this descriptor.
      if (!open) return;
      ftruncateSync(fd, 0);
    },
    close() {
      if (!open) return;
      open = false;
      closeSync(fd);
    },
  };
}

/** The settlements in a journal's text; a torn last line is dropped, any other damage throws. */
export function parseJournal(text: string, path = "journal"): Settlement[] {
  const lines = text.split("\n");
  // A complete journal ends with a newline, so the last element is "" or a torn (unacknowledged) line.
  lines.pop();
  return lines.map((line, i) => {
    const s = parseLine(line);
    if (!s) throw new StoreOpenError(`settlement journal ${path} is damaged at line ${i + 1}; keep the file and restore it intact`);
    return s;
  });
}

function parseLine(line: string): Settlement | undefined {
  let x: unknown;
  try {
    x = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof x !== "object" || x === null) return undefined;
  const s = x as Record<string, unknown>;
  const u = s.usage as Record<string, unknown> | null | undefined;
  const ok =
    typeof s.requestId === "string" &&
    typeof s.accountId === "string" &&
    (s.keyId === null || typeof s.keyId === "string") &&
    Number.isSafeInteger(s.charge) &&
    (s.providerAccountId === null || typeof s.providerAccountId === "string") &&
    Number.isSafeInteger(s.earning) &&
    Number.isSafeInteger(s.fee) &&
    Number.isFinite(s.at) &&
    typeof u === "object" &&
    u !== null &&
    u.requestId === s.requestId &&
    typeof u.model === "string";
  return ok ? (x as Settlement) : undefined;
}

function reason(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
