/**
 * A provider that names an alias or an unknown id in its hello: requests are routed by build, so that id
 * would get none while the provider looks "ready" and "warm". The coordinator welcomes it with
 * `model_warnings` (the alias's build to serve, or "not in the catalog") and logs a warning; the agent
 * reports them in its state. A provider serving only builds gets no warnings (provider-socket.test.ts).
 */
import { describe, expect, test } from "bun:test";
import { startAgent } from "../../src/provider/agent.ts";
import { createEchoEngine } from "../../src/provider/engines/echo.ts";
import { describeModelWarning } from "../../src/provider/runtime.ts";
import { chatEnv } from "../support/chat-env.ts";
import { chatBody, postChat } from "../support/server.ts";
import { waitFor } from "../support/wait.ts";

const BUILD = "org/base-build-4bit";
const ALIAS = "org/model";

describe("hello with ids that are not catalog builds", () => {
  test("welcome.model_warnings names the alias's build and the unknown id; the coordinator logs them", async () => {
    await using ctx = await chatEnv();
    const { t } = ctx;
    const p = await ctx.provider({ models: [BUILD, ALIAS, "org/no-such-build"] });
    expect(p.received[0]).toEqual({
      type: "welcome",
      protocol_version: 2,
      provider_id: p.providerId,
      trust_level: "none",
      heartbeat_interval_ms: expect.any(Number),
      liveness_timeout_ms: expect.any(Number),
      batch_frames: true,
      model_warnings: [
        { model: ALIAS, reason: "alias", build_id: BUILD },
        { model: "org/no-such-build", reason: "not_in_catalog" },
      ],
    });
    const warnings = t.logs
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === "provider serves a model that is not a catalog build")
      .map(({ model, reason, build_id, provider_id }) => ({ model, reason, build_id, provider_id }));
    expect(warnings).toEqual([
      { model: ALIAS, reason: "alias", build_id: BUILD, provider_id: p.providerId },
      { model: "org/no-such-build", reason: "not_in_catalog", build_id: undefined, provider_id: p.providerId },
    ]);
  });

  test("a provider serving only the alias is welcomed, warned, and gets no request for it (503)", async () => {
    await using ctx = await chatEnv();
    const { apiKey, server } = ctx;
    const p = await ctx.provider({ models: [ALIAS] });
    expect(p.received[0]?.type === "welcome" && p.received[0].model_warnings).toEqual([{ model: ALIAS, reason: "alias", build_id: BUILD }]);
    const response = await postChat(server.url, apiKey, chatBody("hello there"));
    expect(response.status).toBe(503);
    expect(p.received.filter((f) => f.type === "inference")).toEqual([]);
  });

  test("the agent keeps the warnings in its state; the tool's line names the build to serve", async () => {
    await using ctx = await chatEnv();
    const { token, server } = ctx;
    const agent = startAgent({
      url: `${server.url.replace(/^http/, "ws")}/v1/provider/connect`,
      token,
      engine: createEchoEngine({ models: [ALIAS] }),
      maxConcurrency: 1,
    });
    try {
      const state = await waitFor(() => (agent.state().connected ? agent.state() : undefined), "welcome");
      expect(state.modelWarnings).toEqual([{ model: ALIAS, reason: "alias", build_id: BUILD }]);
      expect((state.modelWarnings ?? []).map(describeModelWarning)).toEqual([
        `${ALIAS} is an alias; serve its build ${BUILD} (requests are routed by build: this id gets none)`,
      ]);
    } finally {
      await agent.stop();
    }
  });
});
