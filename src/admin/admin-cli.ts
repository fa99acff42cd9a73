/**
 * `umbra-coordinator admin <noun> <verb> [args]`: the CLI twin of /admin/v1, calling the same
 * AdminService on the configured database. Prints the JSON answer on stdout (exit 0), or the error
 * envelope on stderr (exit 1 for a refused operation, 2 for bad usage), after the line naming the
 * database that the CLI (src/coordinator/cli.ts) prints on stderr first. Only the verbs that can succeed
 * on an empty database (`createsDatabase`) create a missing one; the others refuse to run without it.
 */
import type { ParseArgsConfig } from "node:util";
import { ApiError, Errors } from "../errors/api-error.ts";
import type { AdminService } from "./admin-service.ts";

type Options = NonNullable<ParseArgsConfig["options"]>;
type Values = Readonly<Record<string, string | boolean | (string | boolean)[] | undefined>>;

interface Verb {
  readonly usage: string;
  readonly options?: Options;
  readonly positionals: number;
  /** May create a missing database (first set-up); any other verb could only list nothing or refuse on one. */
  readonly createsDatabase?: true;
  run(admin: AdminService, args: readonly string[], values: Values): Promise<unknown>;
}

/** A flag holding a whole number becomes a JSON number, anything else stays a string for the service to refuse. */
function num(value: unknown): unknown {
  return typeof value === "string" && /^-?\d+$/.test(value) ? Number(value) : value;
}

function defined(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}

function jsonFlag(value: unknown): unknown {
  if (typeof value !== "string") return {};
  try {
    return JSON.parse(value) as unknown;
  } catch {
    throw Errors.invalidJson("--json is not valid JSON");
  }
}

const str = { type: "string" } as const;
const flag = { type: "boolean" } as const;

export const ADMIN_COMMANDS: Readonly<Record<string, Readonly<Record<string, Verb>>>> = {
  accounts: {
    create: {
      usage: "accounts create --name NAME [--jwt-subject SUBJECT]",
      options: { name: str, "jwt-subject": str },
      positionals: 0,
      createsDatabase: true,
      run: (a, _, v) => a.createAccount(defined({ name: v.name, jwt_subject: v["jwt-subject"] })),
    },
    list: { usage: "accounts list", positionals: 0, run: (a) => a.listAccounts() },
    "sign-in-link": {
      usage: "accounts sign-in-link --account ACCOUNT_ID",
      options: { account: str },
      positionals: 0,
      run: (a, _, v) => {
        if (typeof v.account !== "string") throw Errors.missingField("account");
        return a.createSignInLink(v.account);
      },
    },
    get: { usage: "accounts get ACCOUNT_ID", positionals: 1, run: (a, [id]) => a.getAccount(id as string) },
    credit: {
      usage: "accounts credit ACCOUNT_ID --amount MICRO_USD",
      options: { amount: str },
      positionals: 1,
      run: (a, [id], v) => a.creditAccount(id as string, defined({ amount_micro_usd: num(v.amount) })),
    },
    ledger: {
      usage: "accounts ledger ACCOUNT_ID [--limit N]",
      options: { limit: str },
      positionals: 1,
      run: (a, [id], v) => a.accountLedger(id as string, { limit: v.limit }),
    },
    usage: {
      usage: "accounts usage ACCOUNT_ID [--since YYYY-MM-DD] [--until YYYY-MM-DD]",
      options: { since: str, until: str },
      positionals: 1,
      run: (a, [id], v) => a.accountUsage(id as string, { since: v.since, until: v.until }),
    },
  },
  keys: {
    create: {
      usage:
        "keys create --account ACCOUNT_ID [--name NAME] [--allowed-model MODEL ...] [--spend-cap MICRO_USD] [--rpm N] [--tpm N] [--self-route-only] [--link-machines]",
      options: {
        account: str,
        name: str,
        "allowed-model": { type: "string", multiple: true },
        "spend-cap": str,
        rpm: str,
        tpm: str,
        "self-route-only": flag,
        "link-machines": flag,
      },
      positionals: 0,
      run: (a, _, v) =>
        a.createKey(
          defined({
            account_id: v.account,
            name: v.name,
            allowed_models: v["allowed-model"],
            spend_cap_micro_usd: num(v["spend-cap"]),
            rpm: num(v.rpm),
            tpm: num(v.tpm),
            self_route_only: v["self-route-only"],
            link_machines: v["link-machines"],
          }),
        ),
    },
    list: {
      usage: "keys list [--account ACCOUNT_ID]",
      options: { account: str },
      positionals: 0,
      run: (a, _, v) => a.listKeys(v.account as string | undefined),
    },
    revoke: { usage: "keys revoke KEY_ID", positionals: 1, run: (a, [id]) => a.revokeKey(id as string) },
  },
  "provider-tokens": {
    create: {
      usage: "provider-tokens create --account ACCOUNT_ID [--name NAME] [--expires-in SECONDS | --expires-at UNIX_SECONDS]",
      options: { account: str, name: str, "expires-in": str, "expires-at": str },
      positionals: 0,
      run: (a, _, v) =>
        a.createProviderToken(
          defined({
            account_id: v.account,
            name: v.name,
            expires_in_seconds: num(v["expires-in"]),
            expires_at: num(v["expires-at"]),
          }),
        ),
    },
    list: {
      usage: "provider-tokens list [--account ACCOUNT_ID]",
      options: { account: str },
      positionals: 0,
      run: (a, _, v) => a.listProviderTokens(v.account as string | undefined),
    },
    revoke: { usage: "provider-tokens revoke TOKEN_ID", positionals: 1, run: (a, [id]) => a.revokeProviderToken(id as string) },
  },
  models: {
    upsert: {
      usage:
        'models upsert BUILD_ID [--json \'{"name":...,"context_length":...}\'] [--name N] [--description D] [--quantization Q] [--context-length N] [--max-output-length N] [--owned-by O]',
      options: {
        json: str,
        name: str,
        description: str,
        quantization: str,
        "context-length": str,
        "max-output-length": str,
        "owned-by": str,
      },
      positionals: 1,
      createsDatabase: true,
      run: (a, [id], v) => {
        const base = jsonFlag(v.json);
        const extra = defined({
          name: v.name,
          description: v.description,
          quantization: v.quantization,
          context_length: num(v["context-length"]),
          max_output_length: num(v["max-output-length"]),
          owned_by: v["owned-by"],
        });
        return a.upsertModel(
          id as string,
          typeof base === "object" && base !== null && !Array.isArray(base) ? { ...base, ...extra } : base,
        );
      },
    },
    list: { usage: "models list", positionals: 0, run: (a) => a.listBuilds() },
  },
  aliases: {
    set: {
      usage: "aliases set ALIAS BUILD_ID",
      positionals: 2,
      run: (a, [alias, build]) => a.setAlias(alias as string, { build_id: build }),
    },
    delete: { usage: "aliases delete ALIAS", positionals: 1, run: (a, [alias]) => a.deleteAlias(alias as string) },
    list: { usage: "aliases list", positionals: 0, run: (a) => a.listAliases() },
  },
  prices: {
    set: {
      usage: "prices set MODEL --input MICRO_USD_PER_M --output MICRO_USD_PER_M [--cache-read MICRO_USD_PER_M]",
      options: { input: str, output: str, "cache-read": str },
      positionals: 1,
      run: (a, [model], v) =>
        a.setPrice(
          model as string,
          defined({ input_price: num(v.input), output_price: num(v.output), cache_read_price: num(v["cache-read"]) }),
        ),
    },
    clear: { usage: "prices clear MODEL", positionals: 1, run: (a, [model]) => a.clearPrice(model as string) },
    list: { usage: "prices list", positionals: 0, run: (a) => a.listPrices() },
  },
};

export function adminUsage(): string {
  const lines = ["usage: umbra-coordinator admin [--db PATH] <noun> <verb> ...", ""];
  for (const verbs of Object.values(ADMIN_COMMANDS)) for (const v of Object.values(verbs)) lines.push(`  ${v.usage}`);
  return lines.join("\n");
}

export class UsageError extends Error {
  override readonly name = "UsageError";
}

/** Looks up `<noun> <verb>`; throws UsageError naming what is wrong. */
export function findVerb(noun: string | undefined, verb: string | undefined): Verb {
  const verbs = noun === undefined ? undefined : ADMIN_COMMANDS[noun];
  if (!verbs) throw new UsageError(`unknown admin noun '${noun ?? ""}'\n\n${adminUsage()}`);
  const found = verb === undefined ? undefined : verbs[verb];
  if (!found) throw new UsageError(`unknown verb '${verb ?? ""}' for '${noun}'\n\n${adminUsage()}`);
  return found;
}

/** Runs one verb; returns the process exit code. */
export async function runVerb(
  admin: AdminService,
  verb: Verb,
  args: readonly string[],
  values: Values,
  out: (text: string) => void,
  err: (text: string) => void,
): Promise<number> {
  if (args.length !== verb.positionals) {
    err(`usage: umbra-coordinator admin ${verb.usage}`);
    return 2;
  }
  try {
    out(JSON.stringify(await verb.run(admin, args, values), null, 2));
    return 0;
  } catch (e) {
    if (e instanceof ApiError) {
      err(JSON.stringify(e.toEnvelope()));
      return 1;
    }
    throw e;
  }
}
