/**
 * What a doctor check is: one entry `{id, title, needs, run}` (checks.ts lists them in order), and the
 * Context every check reads. `needs` names what each trust level asks of the check: "pass" (only a pass
 * counts) or "ok" (pass or warn); a level it does not name takes the check as advice (verdict.ts).
 */
import type { TrustLevel } from "../../../attestation/provider/levels.ts";
import type { EngineName, ModelMapping } from "../config.ts";
import type { CoordinatorExpectation, PinnedCoordinator } from "../coordinator-pin.ts";
import type { ProviderHome, StoredCredentials } from "../home.ts";
import type { Probe } from "./probe.ts";

export type Status = "pass" | "warn" | "fail" | "skip";
/** The trust levels (attestation/provider/levels.ts), strictest first as doctor lists them. */
export const TRUST_LEVELS: readonly TrustLevel[] = ["hardware", "self_signed", "none"];
export type { TrustLevel };
export type Need = "pass" | "ok";

/** What a check found; the runner adds its id and title. */
export interface Outcome {
  readonly status: Status;
  readonly detail: string;
  readonly fix?: string;
}

export interface Check<Id extends string = string> {
  readonly id: Id;
  readonly title: string;
  readonly needs: Readonly<Partial<Record<TrustLevel, Need>>>;
  run(context: Context): Outcome | Promise<Outcome>;
}

/** Keeps the literal id, so that the ordered list of checks defines the CheckId union. */
export const defineCheck = <const Id extends string>(check: Check<Id>): Check<Id> => check;

export const outcome = (status: Status, detail: string, fix?: string): Outcome => ({
  status,
  detail,
  ...(fix !== undefined ? { fix } : {}),
});

/** What every service check needs at every level. */
export const SERVICE_NEEDS = { hardware: "ok", self_signed: "ok", none: "ok" } as const;

export interface Timeouts {
  readonly commandMs: number;
  readonly profilerMs: number;
  readonly networkMs: number;
  readonly helperMs: number;
}

/** The coordinator's base URL, or why there is no usable one. */
export interface Target {
  readonly base?: string;
  readonly problem?: { readonly detail: string; readonly fix: string };
}

/** The coordinator check's outcome and, when it answered, what the clock check measures. */
export interface Health {
  readonly outcome: Outcome;
  readonly reached?: { readonly sentAt: number; readonly receivedAt: number; readonly date: string | null };
}

/** The doctor's settings, read from flags, environment and the stored login (context.ts). */
export interface Settings {
  readonly probe: Probe;
  readonly timeouts: Timeouts;
  readonly home: ProviderHome;
  readonly engine?: EngineName;
  readonly upstream?: string;
  readonly models: readonly ModelMapping[];
  readonly identityHelper?: string;
  readonly modelsDir?: string;
  readonly coordinator: Target;
  readonly token?: { readonly value: string; readonly source: string };
  readonly tokenProblem?: string;
  readonly stored?: StoredCredentials;
  /** --coordinator-image: the attestation the coordinator must show before anything is sent to it. */
  readonly expectation?: CoordinatorExpectation;
}

/** The settings, and the coordinator's answers that several checks share (started once by checks.ts). */
export interface Context extends Settings {
  /** The verified attestation's pin, when there is an expectation and a base URL. */
  readonly pinned?: Promise<PinnedCoordinator>;
  readonly health: Promise<Health>;
}
