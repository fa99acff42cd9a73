/**
 * RequestLifecycle on fakes: what a chat request owes happens once and in order (settled before it ends,
 * the rate limit trued up once, a failed dispatch recorded with nothing charged), and the in-flight count
 * the shutdown drain waits on.
 */
import { describe, expect, test } from "bun:test";
import type { Ending, RequestMoney } from "../../../src/billing/billing.ts";
import { Attempt } from "../../../src/fleet/attempt.ts";
import { InFlight, RequestLifecycle } from "../../../src/inference/request-lifecycle.ts";
import { createLogger } from "../../../src/observability/logger.ts";
import { createMetrics } from "../../../src/observability/metrics.ts";

const MONEY: RequestMoney = {
  requestId: "req_1",
  accountId: "acct_1",
  keyId: null,
  model: "org/model",
  buildId: "org/model",
  rates: { input: 1, output: 1, cacheRead: 1, source: "model" },
  startedAt: 1_000,
  hold: undefined,
  free: false,
};

function setup() {
  const log: string[] = [];
  const settled: Ending[] = [];
  let finishSettle: () => void = () => {};
  const deps = {
    billing: {
      settle: (_money: RequestMoney, ending: Ending) => {
        settled.push(ending);
        log.push(`settle ${ending.outcome}`);
        return new Promise<void>((resolve) => {
          finishSettle = resolve;
        });
      },
    },
    metrics: createMetrics(),
    logger: createLogger("error", () => {}),
    now: () => 1_000,
    settings: { metering: true },
  };
  const inFlight = new InFlight();
  const life = new RequestLifecycle(deps, inFlight);
  life.limited((tokens) => log.push(`trueUp ${tokens}`));
  const idle = inFlight.idle().then(() => log.push("idle"));
  const ended = life.ended().then(() => log.push("ended"));
  const attempt = new Attempt("req_1", 0, "prov_1", "acct_provider", 0, { release: () => {} });
  const durable = () => {
    log.push("durable");
    finishSettle();
  };
  return { life, log, settled, attempt, durable, done: () => Promise.all([idle, ended]) };
}

describe("RequestLifecycle", () => {
  test("an answer: trued up and settled with its usage; the request ends (and is idle) only once that is durable", async () => {
    const { life, log, settled, attempt, durable, done } = setup();
    const usage = { prompt_tokens: 3, completion_tokens: 2 };
    const finished = life.finish(
      { status: "completed", usage, completionChars: 9, finishReason: "stop" },
      { money: MONEY, attempt, promptEstimate: 3, maxTokens: 10, stream: true },
    );
    await Promise.resolve(); // an end before the settlement is durable would have shown by now
    expect(log).toEqual(["trueUp 5", "settle completed"]);
    durable();
    await finished;
    life.end();
    await done();
    expect(log).toEqual(["trueUp 5", "settle completed", "durable", "idle", "ended"]);
    expect(settled.map((e) => [e.outcome, e.usage, e.providerId])).toEqual([["completed", usage, "prov_1"]]);
  });

  test("a failed dispatch: the limit given back, the attempt recorded with nothing, not waited for; end is idempotent", async () => {
    const { life, log, settled, done } = setup();
    life.dispatchFailed(MONEY);
    life.end();
    life.end();
    await done();
    await life.ended();
    expect(log).toEqual(["trueUp 0", "settle failed", "idle", "ended"]);
    expect(settled.map((e) => [e.usage, e.providerId])).toEqual([[{ prompt_tokens: 0, completion_tokens: 0 }, null]]);
  });
});
