import { describe, expect, test } from "bun:test";
import { createLogger } from "../../../src/observability/logger.ts";

function capture(level: "error" | "warn" | "info" | "debug" = "debug") {
  const lines: string[] = [];
  const logger = createLogger(
    level,
    (l) => lines.push(l),
    () => Date.UTC(2026, 10, 21),
  );
  return { logger, lines, parsed: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe("logger", () => {
  test("writes one JSON line with time, level, message and allowed fields", () => {
    const { logger, parsed } = capture();
    logger.info("request done", { request_id: "req_1", status: 200, duration_ms: 1.5 });
    expect(parsed()).toEqual([
      { time: "2026-11-21T00:00:00.000Z", level: "info", msg: "request done", request_id: "req_1", status: 200, duration_ms: 1.5 },
    ]);
  });

  test("fields outside the allowlist are dropped and counted, never written", () => {
    const { logger, lines, parsed } = capture();
    logger.info("oops", { body: "CANARY-PROMPT", messages: "CANARY-PROMPT", content: "CANARY-PROMPT", model: "m" });
    expect(lines.join("")).not.toContain("CANARY");
    expect(parsed()).toEqual([{ time: "2026-11-21T00:00:00.000Z", level: "info", msg: "oops", model: "m", dropped: 3 }]);
  });

  test("long values are cut", () => {
    const { logger, parsed } = capture();
    logger.info("x", { reason: "a".repeat(1000) });
    expect(String(parsed()[0]?.reason).length).toBeLessThan(210);
  });

  test("levels below the threshold are not written", () => {
    const { logger, parsed } = capture("warn");
    logger.debug("d");
    logger.info("i");
    logger.warn("w");
    logger.error("e");
    expect(parsed().map((l) => l.level)).toEqual(["warn", "error"]);
  });

  test("enabled() says which levels are written (hot paths skip building a dropped line's fields)", () => {
    const warn = capture("warn").logger;
    expect(["error", "warn", "info", "debug"].map((l) => warn.enabled?.(l as "debug"))).toEqual([true, true, false, false]);
    expect(capture("debug").logger.enabled?.("debug")).toBe(true);
  });
});
