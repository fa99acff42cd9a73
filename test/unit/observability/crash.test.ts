/**
 * The serve command's handlers for errors nobody handled (src/observability/crash.ts): a rejected
 * promise without a handler and an exception from an event handler are logged with their class and
 * first stack frame, never their message, and the process keeps running.
 */
import { expect, test } from "bun:test";
import { describeCrash, keepServingOnCrash } from "../../../src/observability/crash.ts";
import { createLogger } from "../../../src/observability/logger.ts";

const SECRET = "prompt text the error quoted";

test("an error is described by its class and first stack frame, never its message", () => {
  const described = describeCrash(new TypeError(SECRET));
  expect([described.error_name, described.reason.startsWith("at "), described.reason.includes("crash.test.ts")]).toEqual([
    "TypeError",
    true,
    true,
  ]);
  expect(JSON.stringify(described)).not.toContain(SECRET);
  expect(describeCrash("a string")).toEqual({ error_name: "string", reason: "not an Error" });
});

test("an unhandled rejection and an uncaught exception are logged, and the process goes on", () => {
  const lines: string[] = [];
  const logger = createLogger("info", (line) => lines.push(line));
  const uninstall = keepServingOnCrash(() => logger);
  try {
    // As the runtime raises it (bun:test would fail on a real stray rejection of its own).
    process.emit("unhandledRejection", new RangeError(SECRET), Promise.resolve());
    process.emit("uncaughtException", new SyntaxError(SECRET));
  } finally {
    uninstall();
  }
  const logged = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(logged).toEqual([
    expect.objectContaining({ level: "error", msg: "unhandled rejection: kept serving", error_name: "RangeError" }),
    expect.objectContaining({ level: "error", msg: "uncaught exception: kept serving", error_name: "SyntaxError" }),
  ]);
  expect(lines.join("\n")).not.toContain(SECRET);
});
