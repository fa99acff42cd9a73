/**
 * The serve command's last line of defence: an error nobody handled (a promise rejected without a
 * handler, an exception thrown from an event handler) is logged and the coordinator keeps serving, so
 * one stray failure cannot take every answer in flight and every provider connection down with it.
 * Logged: the error's class and where it was thrown (its first stack frame: a file and line of the
 * code, never its message, which could quote input).
 */
import type { Logger } from "./logger.ts";

/** The error's class and first stack frame, for the log. */
export function describeCrash(error: unknown): { error_name: string; reason: string } {
  if (!(error instanceof Error)) return { error_name: typeof error, reason: "not an Error" };
  const frame = (error.stack ?? "")
    .split("\n")
    .map((line) => line.trim())
    .find((line) => line.startsWith("at "));
  return { error_name: error.name, reason: (frame ?? "no stack").slice(0, 200) };
}

/** Installs the handlers for the life of the process; `logger` is read at each event (the app may be replaced). */
export function keepServingOnCrash(logger: () => Pick<Logger, "error">): () => void {
  const rejected = (reason: unknown) => logger().error("unhandled rejection: kept serving", describeCrash(reason));
  const thrown = (error: unknown) => logger().error("uncaught exception: kept serving", describeCrash(error));
  process.on("unhandledRejection", rejected);
  process.on("uncaughtException", thrown);
  return () => {
    process.off("unhandledRejection", rejected);
    process.off("uncaughtException", thrown);
  };
}
