/**
 * The console's usage query (`GET /console/api/usage` and `usage.csv`): filters `from` (inclusive) and
 * `to` (exclusive) in Unix ms, `key_id`, `model`, `outcome`; `limit` and an opaque `cursor` for pages.
 * Each parameter read once, 400 `invalid_value` with `param` naming a bad one. A cursor is the last
 * row's start time and request id, base64url: it reveals nothing the page did not already show.
 */
import { Errors } from "../errors/api-error.ts";
import type { UsageCursor, UsageFilter } from "../store/types.ts";
import { MODEL_ID, optionalString } from "../validation/fields.ts";

/** The outcomes usage rows record (billing.ts `Ending`). */
export const USAGE_OUTCOMES = ["completed", "failed", "cancelled"] as const;
export const USAGE_PARAMS = ["from", "to", "key_id", "model", "outcome", "limit", "cursor"] as const;
const LIMIT = { min: 1, max: 500, fallback: 50 } as const;
/** 9999-12-31T23:59:59.999Z. */
const MAX_TIME = 253_402_300_799_999;
const ID = { max: 128, pattern: /^[\x21-\x7e]+$/, patternHint: "must be printable ASCII without spaces" };

export interface UsageQuery {
  readonly filter: UsageFilter;
  readonly keyId: string | undefined;
  readonly limit: number;
  readonly cursor: string | undefined;
}

function time(raw: Readonly<Record<string, string>>, param: "from" | "to"): number | undefined {
  const v = raw[param];
  if (v === undefined) return undefined;
  const n = /^[0-9]{1,15}$/.test(v) ? Number(v) : Number.NaN;
  if (!(n <= MAX_TIME)) throw Errors.invalidValue(`'${param}' must be a time in Unix milliseconds`, param);
  return n;
}

/** Reads the query's parameters (already one value each); `paged: false` refuses `limit` and `cursor` (CSV). */
export function readUsageQuery(raw: Readonly<Record<string, string>>, { paged = true } = {}): UsageQuery {
  for (const name of Object.keys(raw)) {
    const known = (USAGE_PARAMS as readonly string[]).includes(name) && (paged || (name !== "limit" && name !== "cursor"));
    if (!known) throw Errors.unsupportedValue(`unknown query parameter '${name.slice(0, 64)}'`, name.slice(0, 64));
  }
  const since = time(raw, "from");
  const until = time(raw, "to");
  if (since !== undefined && until !== undefined && until <= since) throw Errors.invalidValue("'to' must be after 'from'", "to");
  const keyId = optionalString(raw, "key_id", ID);
  const model = optionalString(raw, "model", MODEL_ID);
  const outcome = optionalString(raw, "outcome", { max: 32 });
  if (outcome !== undefined && !(USAGE_OUTCOMES as readonly string[]).includes(outcome)) {
    throw Errors.invalidValue(`'outcome' must be one of ${USAGE_OUTCOMES.join(", ")}`, "outcome");
  }
  let limit: number = LIMIT.fallback;
  if (raw.limit !== undefined) {
    limit = /^[0-9]{1,4}$/.test(raw.limit) ? Number(raw.limit) : Number.NaN;
    if (!(limit >= LIMIT.min && limit <= LIMIT.max)) {
      throw Errors.invalidValue(`'limit' must be an integer between ${LIMIT.min} and ${LIMIT.max}`, "limit");
    }
  }
  const cursor = optionalString(raw, "cursor", { max: 512 });
  if (cursor !== undefined) decodeCursor(cursor);
  const filter: UsageFilter = {
    ...(since !== undefined ? { since } : {}),
    ...(until !== undefined ? { until } : {}),
    ...(keyId !== undefined ? { keyId } : {}),
    ...(model !== undefined ? { model } : {}),
    ...(outcome !== undefined ? { outcome } : {}),
  };
  return { filter, keyId, limit, cursor };
}

export function encodeCursor(row: UsageCursor): string {
  return Buffer.from(`${row.startedAt}.${row.requestId}`).toString("base64url");
}

/** Throws 400 invalid_value (param cursor) for anything `encodeCursor` did not make. */
export function decodeCursor(cursor: string): UsageCursor {
  const text = /^[A-Za-z0-9_-]+$/.test(cursor) ? Buffer.from(cursor, "base64url").toString("utf8") : "";
  const m = /^([0-9]{1,15})\.([\x21-\x7e]{1,256})$/.exec(text);
  if (!m?.[1] || !m[2]) throw Errors.invalidValue("'cursor' is not a cursor this API gave", "cursor");
  return { startedAt: Number(m[1]), requestId: m[2] };
}
