/**
 * `welcome.model_warnings` on the wire (docs/protocol.md "Models that are not catalog builds"): read as
 * sent, absent when absent, malformed lists refused; an unknown `reason` is kept (the provider prints a
 * line it cannot explain); the provider tool's line for each reason.
 */
import { describe, expect, test } from "bun:test";
import { ProtocolError, parseCoordinatorFrame } from "../../../src/protocol/parse.ts";
import { describeModelWarning } from "../../../src/provider/runtime.ts";
import { WELCOME } from "../../support/frames.ts";

const parse = (o: unknown) => parseCoordinatorFrame(JSON.stringify(o));

describe("welcome.model_warnings", () => {
  test("read as sent; absent when absent", () => {
    const warnings = [
      { model: "qwen/qwen3-8b", reason: "alias", build_id: "mlx-community/Qwen3-8B-8bit" },
      { model: "org/typo", reason: "not_in_catalog" },
      { model: "org/x", reason: "some_future_reason" },
    ];
    expect(parse({ ...WELCOME, model_warnings: warnings })).toEqual({ ...WELCOME, model_warnings: warnings });
    expect(parse(WELCOME)).not.toHaveProperty("model_warnings");
  });

  test("a malformed list is a protocol error", () => {
    const ok = { model: "a/b", reason: "alias", build_id: "a/c" };
    for (const bad of [[], "alias", [{ reason: "alias" }], [{ model: "a/b" }], [{ ...ok, build_id: 3 }], Array(65).fill(ok)]) {
      expect(() => parse({ ...WELCOME, model_warnings: bad })).toThrow(ProtocolError);
    }
  });

  test("the provider tool's line names the build to serve, or says the id is unknown", () => {
    expect(
      [
        { model: "qwen/qwen3-8b", reason: "alias", build_id: "mlx-community/Qwen3-8B-8bit" },
        { model: "org/typo", reason: "not_in_catalog" },
        { model: "org/x\u001b[2J", reason: "later" },
      ].map(describeModelWarning),
    ).toEqual([
      "qwen/qwen3-8b is an alias; serve its build mlx-community/Qwen3-8B-8bit (requests are routed by build: this id gets none)",
      "org/typo is not a build in the coordinator's catalog: it gets no requests (check the id; umbra-provider doctor lists the builds)",
      "org/x?[2J: the coordinator routes no requests to it (later)",
    ]);
  });
});
