/**
 * The settings machinery shared by both configurations (coordinator, provider): one declarative entry per
 * setting (flag, environment twin, kind, default, bounds, help, secret), its reading and its parsing.
 *
 * Precedence: flag > environment > `<ENV>_FILE` (secrets only) > the entry's default. Every error is a
 * ConfigError whose message names the flag, so an operator knows what to fix.
 */
import { readFileSync } from "node:fs";
import { type ParseArgsConfig, parseArgs } from "node:util";

export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

export type Env = Readonly<Record<string, string | undefined>>;
export type FlagValues = Readonly<Record<string, string | boolean | (string | boolean)[] | undefined>>;
export type Options = NonNullable<ParseArgsConfig["options"]>;

interface SettingBase {
  readonly flag: string;
  /** The environment twin; a secret may also be read from the file named by `<env>_FILE`. */
  readonly env: string;
  readonly secret?: boolean;
  readonly help: string;
}
/** Free text; without a default, undefined when not given. */
export interface TextSetting extends SettingBase {
  readonly kind: "string";
  readonly default?: string;
}
/** A whole number within min..max. */
export interface IntSetting extends SettingBase {
  readonly kind: "int";
  readonly default: number;
  readonly min: number;
  readonly max: number;
}
/** One of `values`; without a default, undefined when not given (the caller supplies one, or requires it). */
export interface EnumSetting extends SettingBase {
  readonly kind: "enum";
  readonly values: readonly string[];
  readonly default?: string;
}
/** `on` or `off`, read as a boolean. */
export interface SwitchSetting extends SettingBase {
  readonly kind: "switch";
  readonly default: "on" | "off";
}
/** Repeatable: every flag occurrence, or the environment twin split on commas. */
export interface ListSetting extends SettingBase {
  readonly kind: "list";
}
export type Setting = TextSetting | IntSetting | EnumSetting | SwitchSetting | ListSetting;
export type SettingTable = Readonly<Record<string, Setting>>;

/** The parsed value of one entry, typed from the entry itself (declared `as const`). */
export type SettingValue<S extends Setting> = S extends IntSetting
  ? number
  : S extends SwitchSetting
    ? boolean
    : S extends { readonly kind: "enum"; readonly values: readonly (infer V)[] }
      ? V | (S extends { readonly default: string } ? never : undefined)
      : S extends TextSetting
        ? string | (S extends { readonly default: string } ? never : undefined)
        : never;
export type SettingValues<T extends SettingTable> = { readonly [K in keyof T]: SettingValue<T[K]> };

const SWITCH_VALUES = ["on", "off"] as const;

/** parseArgs option descriptors for a table of settings (lists repeat). */
export function optionsOf(settings: SettingTable): Options {
  return Object.fromEntries(
    Object.values(settings).map((s) => [
      s.flag,
      s.kind === "list" ? { type: "string" as const, multiple: true } : { type: "string" as const },
    ]),
  );
}

/** Parses argv with a command's options; unknown flags are an error (a ConfigError naming the flag). */
export function parseOptions(argv: readonly string[], options: Options): { values: FlagValues; positionals: string[] } {
  try {
    const { values, positionals } = parseArgs({ args: [...argv], options, allowPositionals: true, strict: true });
    return { values, positionals };
  } catch (e) {
    throw new ConfigError(e instanceof Error ? e.message : String(e));
  }
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
export function enumSetting<T extends string>(
  s: Pick<SettingBase, "flag"> & { readonly values?: readonly string[] },
  value: string | undefined,
  fallback: T | undefined,
): T {
  const allowed = s.values ?? [];
  if (value === undefined) {
    if (fallback === undefined) throw new ConfigError(`--${s.flag} is required: one of ${allowed.join(", ")}`);
    return fallback;
  }
  if (!allowed.includes(value)) throw new ConfigError(`--${s.flag}: '${value}' is not one of ${allowed.join(", ")}`);
  return value as T;
}

/** A whole number within min..max. */
function intSetting(s: Pick<SettingBase, "flag">, value: string | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value)) throw new ConfigError(`--${s.flag}: '${value}' is not a whole number`);
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new ConfigError(`--${s.flag}: ${value} is outside ${min}..${max}`);
  return n;
}

/** One setting's text (undefined: not given) parsed by its entry: kind, default and bounds. Not for lists. */
export function parseSetting<S extends Setting>(s: S, text: string | undefined): SettingValue<S> {
  return parseAny(s, text) as SettingValue<S>;
}

function parseAny(s: Setting, text: string | undefined): string | number | boolean | undefined {
  switch (s.kind) {
    case "int":
      return intSetting(s, text, s.default, s.min, s.max);
    case "enum":
      return text === undefined ? s.default : enumSetting(s, text, s.default);
    case "switch":
      return enumSetting({ flag: s.flag, values: SWITCH_VALUES }, text, s.default) === "on";
    case "string":
      return text ?? s.default;
    case "list":
      throw new TypeError(`--${s.flag} is a list: read it with readList`);
  }
}

/**
 * Every setting of `table` but those in `skip` (which the caller's own rules read), each parsed by its
 * entry, in table order. `read` gives a setting's text by name (undefined: not given).
 */
export function parseSettings<T extends SettingTable, D extends keyof T>(
  table: T,
  skip: readonly D[],
  read: (name: keyof T & string) => string | undefined,
): SettingValues<Omit<T, D>> {
  const out: Record<string, unknown> = {};
  for (const [name, s] of Object.entries(table)) {
    if (!(skip as readonly PropertyKey[]).includes(name)) out[name] = parseAny(s, read(name));
  }
  return out as SettingValues<Omit<T, D>>;
}

/** The process environment: the one place outside tests where it is read (entry points pass it on). */
export function processEnv(): Env {
  return process.env;
}
