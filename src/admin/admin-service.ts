/**
 * Administration operations, shared by the HTTP API (/admin/v1) and the CLI (`umbra-coordinator admin`):
 * one validation, one set of answers (admin-json.ts), as docs/api.md "Admin API" describes them. Inputs
 * are untrusted JSON. Here: accounts, reports, console sign-in links, API keys, provider tokens; the catalog's operations
 * (builds, aliases, prices) are in catalog-admin.ts.
 *
 * Errors: 400 with `param` for bad values, 404 for unknown ids, 409 for id collisions. Every operation
 * validates everything before its first write, and multi-row writes are single store transactions.
 * Reports: an account's `reserved_micro_usd` is the running coordinator's live holds when the hooks
 * provide them (`reservedFor`), else the stored value (the CLI, a separate process, has no live holds).
 */
import { machineNameField } from "../auth/device-report.ts";
import { API_KEY_PREFIX, issueSecret, newId, PROVIDER_TOKEN_PREFIX } from "../auth/secrets.ts";
import { issueSignInLink } from "../auth/sign-in-links.ts";
import { Errors } from "../errors/api-error.ts";
import { DuplicateError } from "../store/errors.ts";
import type { Account, ApiKeyRecord, Store } from "../store/types.ts";
import {
  type JsonObject,
  MODEL_ID,
  objectBody,
  optionalBool,
  optionalInt,
  optionalString,
  optionalStringArray,
  queryInt,
  requiredInt,
  requiredString,
} from "../validation/fields.ts";
import { accountJson, keyJson, ledgerEntryJson, providerTokenJson, seconds, usageSumsJson, usageTotal } from "./admin-json.ts";
import { CatalogAdmin } from "./catalog-admin.ts";

const MAX_MONEY = Number.MAX_SAFE_INTEGER;
const SUBJECT = { max: 256 };
const DAY_MS = 86_400_000;
const LEDGER_LIMIT = { min: 1, max: 1000, fallback: 100 } as const;
/** The longest lifetime a provider device token may be given: ten years (365-day years), in seconds. */
export const MAX_PROVIDER_TOKEN_LIFETIME_SECONDS = 315_360_000;

/** A UTC calendar date as YYYY-MM-DD and the Unix ms of its midnight; undefined when absent. */
function utcDay(value: unknown, param: string): { day: string; start: number } | undefined {
  if (value === undefined) return undefined;
  const refused = () => Errors.invalidValue(`'${param}' must be a UTC date as YYYY-MM-DD`, param);
  if (typeof value !== "string" || !/^\d{4}-\d{2}-\d{2}$/.test(value)) throw refused();
  // Date.parse rolls over or refuses impossible days (02-30); the round trip catches both.
  const start = Date.parse(`${value}T00:00:00Z`);
  if (Number.isNaN(start) || new Date(start).toISOString().slice(0, 10) !== value) throw refused();
  return { day: value, start };
}

const LABEL = { max: 128, pattern: /^[\x21-\x7e]+$/, patternHint: "must be printable ASCII without spaces" };

/** A key's settable fields in a request body (besides its account). */
export const KEY_FIELDS = ["name", "allowed_models", "spend_cap_micro_usd", "rpm", "tpm", "self_route_only", "link_machines"] as const;

/** A key's settable fields, validated. */
export interface KeyFields {
  readonly name: string | null;
  readonly allowedModels: string[] | null;
  readonly spendCap: number | null;
  readonly rpm: number | null;
  readonly tpm: number | null;
  readonly selfRouteOnly: boolean;
  readonly linkMachines: boolean;
}

/** Reads KEY_FIELDS from an untrusted object (400 with `param`); the allowed models are checked by `issueKey`. */
export function readKeyFields(o: JsonObject): KeyFields {
  return {
    name: optionalString(o, "name", { max: 200 }) ?? null,
    allowedModels: optionalStringArray(o, "allowed_models", MODEL_ID) ?? null,
    spendCap: optionalInt(o, "spend_cap_micro_usd", 0, MAX_MONEY) ?? null,
    rpm: optionalInt(o, "rpm", 1, 1_000_000_000) ?? null,
    tpm: optionalInt(o, "tpm", 1, 1_000_000_000_000) ?? null,
    selfRouteOnly: optionalBool(o, "self_route_only") ?? false,
    linkMachines: optionalBool(o, "link_machines") ?? false,
  };
}

export interface AdminHooks {
  /** A provider device token was revoked: its live sessions must end. */
  providerTokenRevoked?(tokenId: string): void;
  /** The running coordinator's live holds on the account, in micro-USD (its in-memory reservations). */
  reservedFor?(accountId: string): number;
  /** Credit was added: the running coordinator re-reads the balance it holds in memory. */
  accountCredited?(accountId: string): void;
  /** Resolves once every settlement made durable so far is in the store (journaled ones are applied later). */
  settled?(): Promise<void>;
  /** The coordinator's public base URL (config/config.ts publicBaseUrl): console sign-in links are built on it. */
  readonly publicUrl?: string;
}

/** Every admin operation: the catalog's (CatalogAdmin), then accounts, reports, API keys and provider tokens. */
export class AdminService extends CatalogAdmin {
  constructor(
    store: Store,
    now: () => number,
    private readonly hooks: AdminHooks = {},
  ) {
    super(store, now);
  }

  /** Reads an account for a report: balances, ledgers and usage include every answer delivered so far. */
  private async account(id: string, param = "account_id"): Promise<Account> {
    await this.hooks.settled?.();
    const account = await this.store.accounts.get(id);
    if (!account) throw Errors.notFound(`no account '${id.slice(0, 64)}'`, param);
    return account;
  }

  /** The account answer, with the live reserved amount when the hooks know it. */
  private accountJson(a: Account) {
    return { ...accountJson(a), reserved_micro_usd: this.hooks.reservedFor?.(a.id) ?? a.reserved };
  }

  async createAccount(body: unknown) {
    const o = objectBody(body, ["name", "jwt_subject"]);
    const name = requiredString(o, "name", { max: 200 });
    const jwtSubject = optionalString(o, "jwt_subject", SUBJECT) ?? null;
    try {
      return this.accountJson(await this.store.accounts.create({ id: newId("acct"), name, jwtSubject, at: this.now() }));
    } catch (e) {
      if (e instanceof DuplicateError) throw Errors.conflict("another account already has this jwt_subject", "jwt_subject");
      throw e;
    }
  }

  async listAccounts() {
    await this.hooks.settled?.();
    return { object: "list" as const, data: (await this.store.accounts.list()).map((a) => this.accountJson(a)) };
  }

  /** The account with its earnings as a provider: the sum of its `earning` ledger entries. */
  async getAccount(id: string) {
    const account = await this.account(id, "id");
    return { ...this.accountJson(account), earnings_micro_usd: await this.store.accounts.earnings(id) };
  }

  /** Ledger entries, newest first; `limit` 1..1000, default 100. */
  async accountLedger(id: string, query: { readonly limit?: unknown }) {
    const limit = queryInt(query.limit, "limit", LEDGER_LIMIT);
    await this.account(id, "id");
    return { object: "list" as const, data: (await this.store.accounts.ledger(id, limit)).map(ledgerEntryJson) };
  }

  /** Usage totals per model, per key (`jwt` for JWT requests) and per UTC day, `since` to `until` (YYYY-MM-DD) inclusive. */
  async accountUsage(id: string, query: { readonly since?: unknown; readonly until?: unknown }) {
    const since = utcDay(query.since, "since");
    const until = utcDay(query.until, "until");
    if (since && until && until.start < since.start) throw Errors.invalidValue("'until' must not be before 'since'", "until");
    await this.account(id, "id");
    const totals = await this.store.usage.totals(id, {
      ...(since ? { since: since.start } : {}),
      ...(until ? { until: until.start + DAY_MS } : {}),
    });
    return {
      account_id: id,
      since: since?.day ?? null,
      until: until?.day ?? null,
      by_model: totals.byModel.map((r) => ({ model: r.key, ...usageSumsJson(r) })),
      by_key: totals.byKey.map((r) => ({ key_id: r.key, ...usageSumsJson(r) })),
      by_day: totals.byDay.map((r) => ({ day: r.key, ...usageSumsJson(r) })),
      total: usageSumsJson(usageTotal(totals.byModel)),
    };
  }

  async creditAccount(id: string, body: unknown) {
    const o = objectBody(body, ["amount_micro_usd"]);
    const amount = requiredInt(o, "amount_micro_usd", 1, MAX_MONEY);
    const account = await this.account(id, "id");
    if (account.balance + amount > MAX_MONEY) {
      throw Errors.invalidValue("the resulting balance would exceed the largest supported amount", "amount_micro_usd");
    }
    const updated = await this.store.accounts.credit({ accountId: id, amount, at: this.now() });
    if (!updated) throw Errors.notFound(`no account '${id.slice(0, 64)}'`, "id");
    this.hooks.accountCredited?.(id);
    return this.accountJson(updated);
  }

  /** A new API key; it links machines (approves provider device logins) only when created with `link_machines`. */
  async createKey(body: unknown) {
    const o = objectBody(body, ["account_id", ...KEY_FIELDS]);
    const accountId = requiredString(o, "account_id", LABEL);
    const { record, secret } = await this.issueKey(accountId, readKeyFields(o));
    return { ...keyJson(record), key: secret };
  }

  /**
   * Issues a key to an existing account with fields read by `readKeyFields` (the admin API and the
   * console share it): 404 for an unknown account, model_not_found for an unknown allowed model. The
   * secret is never stored or shown again.
   */
  async issueKey(accountId: string, fields: KeyFields): Promise<{ record: ApiKeyRecord; secret: string }> {
    await this.account(accountId);
    if (fields.allowedModels) {
      for (const id of fields.allowedModels) {
        if (!(await this.store.catalog.getAlias(id)) && !(await this.store.catalog.getBuild(id))) {
          throw Errors.modelNotFound(`allowed_models names an unknown model '${id}'`, "allowed_models");
        }
      }
    }
    const issued = issueSecret(API_KEY_PREFIX);
    const record = await this.store.keys.create({
      id: newId("key"),
      accountId,
      keyHash: issued.hash,
      hint: issued.hint,
      ...fields,
      createdAt: this.now(),
    });
    if (!record) throw Errors.notFound(`no account '${accountId}'`, "account_id");
    return { record, secret: issued.secret };
  }

  /** A single-use console sign-in link for the account, valid 15 minutes (src/auth/sign-in-links.ts). */
  async createSignInLink(accountId: string) {
    await this.account(accountId, "id");
    const link = await issueSignInLink(this.store, { accountId, now: this.now(), publicUrl: this.hooks.publicUrl });
    return { url: link.url, expires_at: seconds(link.expiresAt) };
  }

  async listKeys(accountId?: string) {
    if (accountId !== undefined) await this.account(accountId);
    return { object: "list" as const, data: (await this.store.keys.list(accountId)).map(keyJson) };
  }

  async revokeKey(id: string) {
    const key = await this.store.keys.revoke(id, this.now());
    if (!key) throw Errors.notFound(`no API key '${id.slice(0, 64)}'`, "id");
    return keyJson(key);
  }

  /**
   * A new device token, named by `name` (the machine's, as `machine_name` of a device login) or unnamed;
   * it expires `expires_in_seconds` from now, or at `expires_at` (Unix seconds, in the future), at most
   * ten years ahead; with neither it does not expire. Not both.
   */
  async createProviderToken(body: unknown) {
    const o = objectBody(body, ["account_id", "name", "expires_in_seconds", "expires_at"]);
    const accountId = requiredString(o, "account_id", LABEL);
    const name = machineNameField(o, "name");
    const now = this.now();
    const expiresIn = optionalInt(o, "expires_in_seconds", 1, MAX_PROVIDER_TOKEN_LIFETIME_SECONDS);
    const nowSeconds = seconds(now);
    const expiresAt = optionalInt(o, "expires_at", nowSeconds + 1, nowSeconds + MAX_PROVIDER_TOKEN_LIFETIME_SECONDS);
    if (expiresIn !== undefined && expiresAt !== undefined) {
      throw Errors.invalidValue("give 'expires_in_seconds' or 'expires_at', not both", "expires_at");
    }
    await this.account(accountId);
    const issued = issueSecret(PROVIDER_TOKEN_PREFIX);
    const record = await this.store.providerTokens.create({
      id: newId("pt"),
      accountId,
      tokenHash: issued.hash,
      hint: issued.hint,
      name,
      createdAt: now,
      expiresAt: expiresIn !== undefined ? now + expiresIn * 1000 : expiresAt !== undefined ? expiresAt * 1000 : null,
    });
    if (!record) throw Errors.notFound(`no account '${accountId}'`, "account_id");
    return { ...providerTokenJson(record), token: issued.secret };
  }

  async listProviderTokens(accountId?: string) {
    if (accountId !== undefined) await this.account(accountId);
    return { object: "list" as const, data: (await this.store.providerTokens.list(accountId)).map(providerTokenJson) };
  }

  async revokeProviderToken(id: string) {
    const token = await this.store.providerTokens.revoke(id, this.now());
    if (!token) throw Errors.notFound(`no provider token '${id.slice(0, 64)}'`, "id");
    this.hooks.providerTokenRevoked?.(token.id);
    return providerTokenJson(token);
  }
}
