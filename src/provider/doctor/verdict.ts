/**
 * The verdict at a trust level: a check the level needs blocks when it failed, warned where a pass is
 * needed, or was skipped; every other check is advice. The summary line says which and why.
 */
import type { Need, TrustLevel } from "./check.ts";
import { type CheckId, type CheckResult, REQUIREMENTS } from "./checks.ts";

export interface Verdict {
  readonly ready: boolean;
  readonly failed: readonly CheckId[];
  /** Warned where the level needs a pass. */
  readonly unproven: readonly CheckId[];
  /** Skipped although the level needs it. */
  readonly unchecked: readonly CheckId[];
  /** All of the above, in check order. */
  readonly blocking: readonly CheckId[];
}

export function assess(checks: readonly CheckResult[], trust: TrustLevel): Verdict {
  const needs = REQUIREMENTS[trust];
  const pick = (test: (c: CheckResult, need: Need) => boolean) =>
    checks.filter((c) => needs[c.id] !== undefined && test(c, needs[c.id] ?? "ok")).map((c) => c.id);
  const failed = pick((c) => c.status === "fail");
  const unproven = pick((c, need) => c.status === "warn" && need === "pass");
  const unchecked = pick((c) => c.status === "skip");
  const blocking = checks.filter((c) => [...failed, ...unproven, ...unchecked].includes(c.id)).map((c) => c.id);
  return { ready: blocking.length === 0, failed, unproven, unchecked, blocking };
}

export function summary(checks: readonly CheckResult[], verdict: Verdict, trust: TrustLevel): string {
  if (verdict.ready) {
    const warnings = checks.filter((c) => c.status === "warn").length;
    const advice = checks.filter((c) => c.status === "fail").map((c) => c.id);
    const notes = [
      warnings > 0 ? `${warnings} warning${warnings === 1 ? "" : "s"}` : "",
      advice.length > 0 ? `failed but not needed at this level: ${advice.join(", ")}` : "",
    ].filter((n) => n !== "");
    return `ready to serve at trust level ${trust}${notes.length > 0 ? ` (${notes.join("; ")})` : ""}`;
  }
  const n = verdict.failed.length;
  const parts = [
    n > 0 ? `${n} check${n === 1 ? "" : "s"} failed (${verdict.failed.join(", ")})` : "",
    verdict.unproven.length > 0 ? `not proven: ${verdict.unproven.join(", ")}` : "",
    verdict.unchecked.length > 0 ? `not checked: ${verdict.unchecked.join(", ")}` : "",
  ];
  return `not ready for trust level ${trust}: ${parts.filter((p) => p !== "").join("; ")}`;
}
