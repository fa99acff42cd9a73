/**
 * RequestLifecycle on fakes: what a chat request owes happens once and in order (settled before it ends,
 * the rate limit trued up once, a failed dispatch recorded with nothing charged), and the in-flight count
 * the shutdown drain waits on.
 */
import { describe, expect, test } from "bun:test";
import type { Ending, RequestMoney } from "../../../src/billing/billing.ts";
import { ApiError } from "../../../src/errors/api-error.ts";
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

  test("listed while it is answered, unlisted when it ends; stop before the deadline is armed does nothing", async () => {
    const { life, attempt, done } = setup();
    const answering = new Map<string, RequestLifecycle>();
    life.stop(new ApiError(503, "service_unavailable", "service_unavailable", "lost"));
    expect(attempt.done).toBe(false);
    life.listIn(answering, "req_1");
    expect(answering.get("req_1")).toBe(life);
    life.end();
    await done();
    expect(answering.size).toBe(0);
    life.listIn(answering, "req_1"); // an ended request is not listed again
    expect(answering.size).toBe(0);
  });

  test("the deadline: a stream's signal aborts with stop's error; a JSON answer's attempt is stopped without a signal", async () => {
    const stream = setup();
    const signal = stream.life.armDeadline(stream.attempt, 60_000, true);
    const lost = new ApiError(503, "service_unavailable", "service_unavailable", "lost");
    stream.life.stop(lost);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe(lost);
    expect(stream.attempt.done).toBe(true);

    const json = setup();
    expect(json.life.armDeadline(json.attempt, 5, false)).toBeUndefined();
    const event = await json.attempt.next();
    expect(event).toEqual({ type: "lost", reason: "cancelled: deadline" });
    json.life.end();
    stream.life.end();
    await Promise.all([json.done(), stream.done()]);
  });
});
