/**
 * Every check, in the order doctor prints them, and the table of what each trust level needs (built from
 * the entries' `needs`). `runChecks` starts the coordinator's pin and health once, runs every check at
 * once and returns the results in this order.
 */
import { catalog, deviceToken, enrolment } from "./account-checks.ts";
import { type Need, type Settings, type Status, TRUST_LEVELS, type TrustLevel } from "./check.ts";
import { disk, macos, memory, platform, secureBoot, secureEnclave, sip } from "./machine-checks.ts";
import { clock, coordinator, engine, pinOf, reachCoordinator } from "./service-checks.ts";

const CHECKS = [
  platform,
  macos,
  sip,
  secureBoot,
  secureEnclave,
  memory,
  disk,
  engine,
  coordinator,
  clock,
  deviceToken,
  catalog,
  enrolment,
] as const;

export type CheckId = (typeof CHECKS)[number]["id"];

export interface CheckResult {
  readonly id: CheckId;
  readonly title: string;
  readonly status: Status;
  readonly detail: string;
  readonly fix?: string;
}

/** What each trust level needs of each check (absent: advice only). */
export const REQUIREMENTS: Readonly<Record<TrustLevel, Partial<Record<CheckId, Need>>>> = Object.fromEntries(
  TRUST_LEVELS.map((level) => [level, Object.fromEntries(CHECKS.flatMap((c) => (c.needs[level] ? [[c.id, c.needs[level]]] : [])))]),
) as Record<TrustLevel, Partial<Record<CheckId, Need>>>;

/** Runs every check (independent ones at once) and returns them in the order of CHECKS. */
export async function runChecks(settings: Settings): Promise<CheckResult[]> {
  const pinned = pinOf(settings);
  const pinnedSettings = { ...settings, ...(pinned !== undefined ? { pinned } : {}) };
  const context = { ...pinnedSettings, health: reachCoordinator(pinnedSettings) };
  return Promise.all(
    CHECKS.map(async (check): Promise<CheckResult> => {
      const { status, detail, fix } = await check.run(context);
      return { id: check.id, title: check.title, status, detail, ...(fix !== undefined ? { fix } : {}) };
    }),
  );
}
