/**
 * Structured JSON logger. One line per event: `{"time","level","msg",...fields}`.
 *
 * Invariant: only fields named in ALLOWED_FIELDS are written, and only as numbers, booleans or short
 * strings, so a request or response body cannot be logged by accident. Messages are fixed strings
 * chosen by the caller (no interpolation of request data); a dropped field is counted in `dropped`.
 */
export const LOG_LEVELS = ["error", "warn", "info", "debug"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

const ALLOWED_FIELDS = new Set([
  "account_id",
  "attempt",
  "build_id",
  "check",
  "count",
  "db",
  "dropped",
  "duration_ms",
  "error_code",
  "error_name",
  "error_type",
  "host",
  "key_id",
  "method",
  "mode",
  "model",
  "port",
  "provider_id",
  "reason",
  "replica_id",
  "request_id",
  "route",
  "shape",
  "status",
  "tls_spki_sha256",
  "url",
  "version",
]);

/** Longest string value kept; longer values are cut, so free text cannot ride along in an id field. */
const MAX_VALUE_LENGTH = 200;
const RANK: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

export type LogFields = Readonly<Record<string, string | number | boolean | undefined>>;

export interface Logger {
  error(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  debug(msg: string, fields?: LogFields): void;
  /**
   * False when lines of `level` are dropped, so a caller on the hot path can skip building their fields;
   * absent (a test's recording logger): every level is written.
   */
  enabled?(level: LogLevel): boolean;
}

export type LogSink = (line: string) => void;

export function createLogger(level: LogLevel, sink: LogSink = (line) => process.stderr.write(`${line}\n`), now = () => Date.now()): Logger {
  const threshold = RANK[level];
  const write = (lvl: LogLevel, msg: string, fields?: LogFields) => {
    if (RANK[lvl] > threshold) return;
    const out: Record<string, string | number | boolean> = { time: new Date(now()).toISOString(), level: lvl, msg };
    let dropped = 0;
    if (fields) {
      for (const [k, v] of Object.entries(fields)) {
        if (v === undefined) continue;
        if (!ALLOWED_FIELDS.has(k) || (typeof v === "number" && !Number.isFinite(v))) {
          dropped++;
          continue;
        }
        out[k] = typeof v === "string" && v.length > MAX_VALUE_LENGTH ? `${v.slice(0, MAX_VALUE_LENGTH)}...` : v;
      }
    }
    if (dropped > 0) out.dropped = dropped;
    sink(JSON.stringify(out));
  };
  return {
    error: (m, f) => write("error", m, f),
    warn: (m, f) => write("warn", m, f),
    info: (m, f) => write("info", m, f),
    debug: (m, f) => write("debug", m, f),
    enabled: (lvl) => RANK[lvl] <= threshold,
  };
}

export const silentLogger: Logger = { error() {}, warn() {}, info() {}, debug() {}, enabled: () => false };
