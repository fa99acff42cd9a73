/**
 * Reading one setting: the shared mechanics of both configurations (coordinator, provider).
 *
 * Precedence: flag > environment > `<ENV>_FILE` (secrets only) > the caller's default. Every error is a
 * ConfigError whose message names the flag, so an operator knows what to fix.
 */
import { readFileSync } from "node:fs";
import type { ParseArgsConfig } from "node:util";

export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

export type Env = Readonly<Record<string, string | undefined>>;
export type FlagValues = Readonly<Record<string, string | boolean | (string | boolean)[] | undefined>>;

export interface Setting {
  readonly flag: string;
  readonly env: string;
  readonly kind: "string" | "int" | "enum" | "list";
  readonly secret?: boolean;
  readonly values?: readonly string[];
  readonly help: string;
}

/** parseArgs option descriptors for a table of settings (lists repeat). */
export function optionsOf(settings: Readonly<Record<string, Setting>>): NonNullable<ParseArgsConfig["options"]> {
  return Object.fromEntries(
    Object.values(settings).map((s) => [
      s.flag,
      s.kind === "list" ? { type: "string" as const, multiple: true } : { type: "string" as const },
    ]),
  );
}

/** The raw text of a setting, or undefined when it is not given anywhere. */
export function readSetting(s: Setting, flags: FlagValues, env: Env): string | undefined {
  const flag = flags[s.flag];
  if (typeof flag === "string") return flag;
  const fromEnv = env[s.env];
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  if (s.secret) {
    const file = env[`${s.env}_FILE`];
    if (file) {
      try {
        return readFileSync(file, "utf8").trim();
      } catch {
        throw new ConfigError(`${s.env}_FILE: cannot read ${file}`);
      }
    }
  }
  return undefined;
}

/** A repeatable setting: every flag occurrence, or the environment twin split on commas. */
export function readList(s: Setting, flags: FlagValues, env: Env): string[] {
  const flag = flags[s.flag];
  if (Array.isArray(flag)) return flag.filter((v): v is string => typeof v === "string");
  if (typeof flag === "string") return [flag];
  const fromEnv = env[s.env];
  if (fromEnv === undefined || fromEnv === "") return [];
  return fromEnv.split(",").map((v) => v.trim());
}

/** One of the setting's allowed values; `fallback` undefined makes the setting required. */
export function enumSetting<T extends string>(s: Setting, value: string | undefined, fallback: T | undefined): T {
  const allowed = s.values ?? [];
  if (value === undefined) {
    if (fallback === undefined) throw new ConfigError(`--${s.flag} is required: one of ${allowed.join(", ")}`);
    return fallback;
  }
  if (!allowed.includes(value)) throw new ConfigError(`--${s.flag}: '${value}' is not one of ${allowed.join(", ")}`);
  return value as T;
}

/** A whole number within min..max. */
export function intSetting(s: Setting, value: string | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value)) throw new ConfigError(`--${s.flag}: '${value}' is not a whole number`);
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new ConfigError(`--${s.flag}: ${value} is outside ${min}..${max}`);
  return n;
}

/** The process environment: the one place outside tests where it is read (entry points pass it on). */
export function processEnv(): Env {
  return process.env;
}
