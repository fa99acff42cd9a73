/**
 * The report: one aligned line per check then the verdict (colour on a terminal only), or with --json
 * one object `{version, trust_required, ready, blocking, checks}` (tests assert its exact shape).
 */
import { VERSION } from "../../version.ts";
import type { Status, TrustLevel } from "./check.ts";
import type { CheckResult } from "./checks.ts";
import { summary, type Verdict } from "./verdict.ts";

const LABELS: Record<Status, { text: string; colour: string }> = {
  pass: { text: "pass", colour: "\x1b[32m" },
  warn: { text: "warn", colour: "\x1b[33m" },
  fail: { text: "FAIL", colour: "\x1b[1;31m" },
  skip: { text: "skip", colour: "\x1b[2m" },
};

export function renderHuman(checks: readonly CheckResult[], verdict: Verdict, trust: TrustLevel, colour: boolean): string {
  const paint = (code: string, text: string) => (colour ? `${code}${text}\x1b[0m` : text);
  const width = Math.max(...checks.map((c) => c.title.length)) + 2;
  const lines = checks.map((c) => {
    const label = paint(LABELS[c.status].colour, LABELS[c.status].text);
    return `${label}  ${c.title.padEnd(width)}${c.detail}${c.fix ? ` — ${c.fix}` : ""}`;
  });
  lines.push("", paint(verdict.ready ? "\x1b[1;32m" : "\x1b[1;31m", summary(checks, verdict, trust)));
  return `${lines.join("\n")}\n`;
}

export function renderJson(checks: readonly CheckResult[], verdict: Verdict, trust: TrustLevel): string {
  return `${JSON.stringify({ version: VERSION, trust_required: trust, ready: verdict.ready, blocking: verdict.blocking, checks })}\n`;
}
