/**
 * The console's usage export as CSV (RFC 4180): a header row, then one line per usage row with the
 * columns of the JSON answer. Text cells are always quoted (quotes doubled), and a text cell that a
 * spreadsheet would run as a formula (first character `=`, `+`, `-`, `@`, tab or carriage return) gets a
 * leading `'` first (OWASP, "CSV Injection"). Numbers and empty cells (null) are written bare.
 */
import type { UsageJson } from "./console-json.ts";

export const USAGE_CSV_COLUMNS = [
  "request_id",
  "started_at",
  "key_id",
  "key_name",
  "model",
  "prompt_tokens",
  "cached_tokens",
  "completion_tokens",
  "cost_micro_usd",
  "outcome",
  "duration_ms",
] as const satisfies readonly (keyof UsageJson)[];

/** One cell: numbers bare, null empty, text quoted and defused. */
export function csvCell(value: string | number | null): string {
  if (value === null) return "";
  if (typeof value === "number") return String(value);
  const defused = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return `"${defused.replaceAll('"', '""')}"`;
}

export function usageCsv(rows: readonly UsageJson[]): string {
  const lines = [USAGE_CSV_COLUMNS.join(",")];
  for (const row of rows) lines.push(USAGE_CSV_COLUMNS.map((c) => csvCell(row[c])).join(","));
  return `${lines.join("\r\n")}\r\n`;
}
