/** A logger that records every line (level, message, fields) for tests to inspect. */
import type { LogFields, Logger } from "../../src/observability/logger.ts";

export interface LogLine {
  readonly level: string;
  readonly msg: string;
  readonly fields: LogFields | undefined;
}

export function recordingLogger(lines: LogLine[]): Logger {
  const at = (level: string) => (msg: string, fields?: LogFields) => void lines.push({ level, msg, fields });
  return { error: at("error"), warn: at("warn"), info: at("info"), debug: at("debug") };
}
