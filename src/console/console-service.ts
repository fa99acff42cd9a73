/**
 * The console's data operations (docs/api.md, "Console API"): an account holder's overview, API keys,
 * usage, linked machines and device approvals, over the Store, the live fleet and the device flow. No
 * HTTP here: src/api/console-data.ts reads requests and calls these with the session's account.
 *
 * Invariant: every operation is scoped to `accountId`; a key, device token or device code of another
 * account is 404 `not_found` (or `device_code_not_found`) exactly as an unknown one, and nothing changes.
 * Answers are JSON-ready (console-json.ts); times in Unix ms, money in micro-USD. Usage rows carry ids,
 * counts and money only: there is no content in the store to show.
 */
import { type AdminService, KEY_FIELDS, MAX_PROVIDER_TOKEN_LIFETIME_SECONDS, readKeyFields } from "../admin/admin-service.ts";
import type { Decision, DeviceFlow } from "../auth/device-flow.ts";
import { Errors } from "../errors/api-error.ts";
import type { ApiKeyRecord, Store, UsageRecord } from "../store/types.ts";
import { objectBody, optionalInt, requiredString } from "../validation/fields.ts";
import {
  keyJson,
  type LiveMachine,
  localView,
  type MachineView,
  machineJson,
  previewJson,
  type RemoteMachine,
  remoteView,
  usageJson,
} from "./console-json.ts";
import { usageCsv } from "./usage-csv.ts";
import { decodeCursor, encodeCursor, readUsageQuery } from "./usage-query.ts";

const DAY_MS = 86_400_000;
const DAYS = { min: 1, max: 366, fallback: 30 } as const;
/** Rows per CSV read from the store, and the most one export holds. */
const CSV_PAGE = 1000;
export const MAX_CSV_ROWS = 100_000;

export interface ConsoleServiceDeps {
  readonly store: Store;
  /** Key issue, token revocation (its sessions end), and balances after the settlements delivered so far. */
  readonly admin: AdminService;
  /** The live fleet (the app's Fleet): sessions with their token, trust and models. */
  readonly fleet: { list(): readonly LiveMachine[] };
  /** Cluster mode: the account's machines on other replicas, from their digests. */
  readonly remoteMachines?: (accountId: string) => readonly RemoteMachine[];
  readonly deviceFlow: DeviceFlow;
  /** The platform's share of a charge, percent: a machine's earnings are the rest. */
  readonly platformFeePercent: number;
  /** Unix ms. */
  readonly now: () => number;
  /** Resolves once every settlement made durable so far is in the store: usage reads include every answer delivered. */
  readonly settled?: () => Promise<void>;
}

/** Who asks about a device code: the wrong-code limits count per account and per client address. */
export interface DeviceAsker {
  readonly accountId: string;
  readonly address: string | undefined;
}

const utcDate = (ms: number) => new Date(ms).toISOString().slice(0, 10);
const notFound = (what: string, id: string, param: string) => Errors.notFound(`no ${what} '${id.slice(0, 64)}'`, param);

export class ConsoleService {
  constructor(private readonly deps: ConsoleServiceDeps) {}

  /** Balance, and spend and tokens per UTC day (every day of the window, oldest first), per model, per key. */
  async overview(accountId: string, query: { readonly days?: string }) {
    const days = readDays(query.days);
    const account = await this.deps.admin.getAccount(accountId);
    const today = Math.floor(this.deps.now() / DAY_MS) * DAY_MS;
    const bounds = { since: today - (days - 1) * DAY_MS, until: today + DAY_MS };
    const { store } = this.deps;
    const [totals, dayModel, keys] = await Promise.all([
      store.usage.totals(accountId, bounds),
      store.usage.dayModelTotals(accountId, bounds),
      store.keys.list(accountId),
    ]);
    const byDay = new Map(totals.byDay.map((r) => [r.key, r]));
    const keysById = new Map(keys.map((k) => [k.id, k]));
    const sums = (r: { requests: number; promptTokens: number; completionTokens: number; cost: number }) => ({
      requests: r.requests,
      prompt_tokens: r.promptTokens,
      completion_tokens: r.completionTokens,
      spend_micro_usd: r.cost,
    });
    const zero = { requests: 0, promptTokens: 0, completionTokens: 0, cost: 0 };
    return {
      balance_micro_usd: account.balance_micro_usd,
      reserved_micro_usd: account.reserved_micro_usd,
      days: Array.from({ length: days }, (_, i) => {
        const date = utcDate(bounds.since + i * DAY_MS);
        return { date, ...sums(byDay.get(date) ?? zero) };
      }),
      by_model: totals.byModel.map((r) => ({ model: r.key, ...sums(r) })),
      by_key: totals.byKey.map((r) => {
        const key = keysById.get(r.key);
        return { key_id: r.key, name: key?.name ?? null, hint: key ? keyJson(key, null).hint : null, ...sums(r) };
      }),
      daily_by_model: dayModel.map((r) => ({
        date: r.day,
        model: r.model,
        spend_micro_usd: r.cost,
        tokens: r.promptTokens + r.completionTokens,
      })),
    };
  }

  async listKeys(accountId: string) {
    await this.deps.settled?.();
    const [keys, lastUsed] = await Promise.all([this.deps.store.keys.list(accountId), this.deps.store.usage.lastUsed(accountId)]);
    return { data: keys.map((k) => keyJson(k, lastUsed.get(k.id) ?? null)) };
  }

  /** A new key of the account: `name` required, the rest as the admin API's; the secret is in this answer only. */
  async createKey(accountId: string, body: unknown) {
    const o = objectBody(body, KEY_FIELDS);
    requiredString(o, "name", { max: 200 });
    const { record, secret } = await this.deps.admin.issueKey(accountId, readKeyFields(o));
    return { key: keyJson(record, null), secret };
  }

  /** Revokes one of the account's keys (idempotent: the first revocation time stays). */
  async revokeKey(accountId: string, keyId: string) {
    await this.ownKey(accountId, keyId);
    const revoked = await this.deps.store.keys.revoke(keyId, this.deps.now());
    if (!revoked) throw notFound("API key", keyId, "id");
    const lastUsed = await this.deps.store.usage.lastUsed(accountId);
    return { key: keyJson(revoked, lastUsed.get(keyId) ?? null) };
  }

  /** One page of the account's usage, newest first; `next_cursor` is null on the last page. */
  async usage(accountId: string, raw: Readonly<Record<string, string>>) {
    const query = readUsageQuery(raw);
    await this.deps.settled?.();
    const keys = await this.keyNames(accountId, query.keyId);
    const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    const rows = await this.deps.store.usage.page(accountId, query.filter, { limit: query.limit + 1, ...(after ? { after } : {}) });
    const page = rows.slice(0, query.limit);
    const last = page[page.length - 1];
    return {
      data: page.map((r) => usageJson(r, keys)),
      next_cursor: rows.length > query.limit && last ? encodeCursor(last) : null,
    };
  }

  /** The same rows as CSV (every page, at most MAX_CSV_ROWS), header first. */
  async usageCsv(accountId: string, raw: Readonly<Record<string, string>>): Promise<string> {
    const query = readUsageQuery(raw, { paged: false });
    await this.deps.settled?.();
    const keys = await this.keyNames(accountId, query.keyId);
    const rows: UsageRecord[] = [];
    let after: UsageRecord | undefined;
    while (rows.length < MAX_CSV_ROWS) {
      const limit = Math.min(CSV_PAGE, MAX_CSV_ROWS - rows.length);
      const page = await this.deps.store.usage.page(accountId, query.filter, { limit, ...(after ? { after } : {}) });
      rows.push(...page);
      after = page[page.length - 1];
      if (page.length < limit) break;
    }
    return usageCsv(rows.map((r) => usageJson(r, keys)));
  }

  /** One row per device token of the account, with its live sessions (this coordinator's) and what it served. */
  async machines(accountId: string) {
    await this.deps.settled?.();
    const tokens = await this.deps.store.providerTokens.list(accountId);
    const served = await this.deps.store.usage.served(
      tokens.map((t) => t.id),
      this.deps.platformFeePercent,
    );
    const byToken = new Map(served.map((s) => [s.providerId, s]));
    const views = new Map<string, MachineView[]>();
    const add = (tokenId: string | undefined, view: MachineView) => {
      if (tokenId !== undefined) views.set(tokenId, [...(views.get(tokenId) ?? []), view]);
    };
    for (const s of this.deps.fleet.list()) if (s.identity.accountId === accountId && s.ready) add(s.identity.tokenId, localView(s));
    for (const p of this.deps.remoteMachines?.(accountId) ?? []) add(p.tok, remoteView(p));
    return { data: tokens.map((t) => machineJson(t, views.get(t.id) ?? [], byToken.get(t.id))) };
  }

  /** Revokes one of the account's device tokens: its sessions end at once (AdminService's revocation path). */
  async unlinkMachine(accountId: string, tokenId: string) {
    const token = await this.deps.store.providerTokens.get(tokenId);
    if (!token || token.accountId !== accountId) throw notFound("machine", tokenId, "id");
    await this.deps.admin.revokeProviderToken(tokenId);
    const machines = await this.machines(accountId);
    return { machine: machines.data.find((m) => m.id === tokenId) };
  }

  /** A pending device login as the machine reported it; one another account decided is not found. */
  devicePreview(asker: DeviceAsker, userCode: string) {
    return previewJson(this.deps.deviceFlow.preview({ userCode, ...this.askerOf(asker) }));
  }

  /** Approves (with an optional token lifetime) or denies a pending device login for the account. */
  decideDevice(asker: DeviceAsker, userCode: string, decision: Decision, body: unknown) {
    const o = objectBody(body ?? {}, decision === "approve" ? ["token_expires_in_seconds"] : []);
    const lifetime = optionalInt(o, "token_expires_in_seconds", 1, MAX_PROVIDER_TOKEN_LIFETIME_SECONDS) ?? null;
    const decided = this.deps.deviceFlow.decide({
      userCode,
      decision,
      accountId: asker.accountId,
      tokenExpiresInSeconds: lifetime,
      ...this.askerOf(asker),
    });
    return {
      user_code: decided.userCode,
      decision: decided.decision,
      machine_name: decided.machineName,
      token_expires_in_seconds: decided.tokenExpiresInSeconds,
    };
  }

  private askerOf(asker: DeviceAsker) {
    return { credential: `console:${asker.accountId}`, address: asker.address, viewer: asker.accountId };
  }

  private async ownKey(accountId: string, keyId: string): Promise<ApiKeyRecord> {
    const key = await this.deps.store.keys.get(keyId);
    if (!key || key.accountId !== accountId) throw notFound("API key", keyId, "id");
    return key;
  }

  /** The account's key names by id; a `key_id` filter must name one of its keys (else 404, param key_id). */
  private async keyNames(accountId: string, keyId: string | undefined): Promise<ReadonlyMap<string, string | null>> {
    const keys = await this.deps.store.keys.list(accountId);
    if (keyId !== undefined && !keys.some((k) => k.id === keyId)) throw notFound("API key", keyId, "key_id");
    return new Map(keys.map((k) => [k.id, k.name]));
  }
}

function readDays(value: string | undefined): number {
  if (value === undefined) return DAYS.fallback;
  const n = /^[0-9]{1,4}$/.test(value) ? Number(value) : Number.NaN;
  if (!(n >= DAYS.min && n <= DAYS.max)) throw Errors.invalidValue(`'days' must be an integer between ${DAYS.min} and ${DAYS.max}`, "days");
  return n;
}
