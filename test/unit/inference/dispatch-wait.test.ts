/**
 * dispatch()'s wait for first content (src/inference/dispatch.ts, FirstContentWait), with attempts it
 * forwards to stand-in remote providers: events already queued decide at once; events arriving within
 * the bound decide; silence before `accepted` fails over after the accept timeout (the
 * silent attempt cancelled); `accepted` then silence ends at the first-content deadline (429); a client
 * that leaves during the wait ends it (ClientGone). And Attempt.unwait: a withdrawn wait leaves the next
 * event queued.
 */
import { describe, expect, test } from "bun:test";
import { usageLimits } from "../../../src/billing/usage-bounds.ts";
import { ApiError } from "../../../src/errors/api-error.ts";
import { Attempt } from "../../../src/fleet/attempt.ts";
import type { Fleet } from "../../../src/fleet/fleet.ts";
import { ClientGone, type DispatchRequest, dispatch, type RemoteProviders } from "../../../src/inference/dispatch.ts";

const body = { messages: [{ role: "user" as const, content: "hi" }], max_tokens: 16 };
const noLocal = { candidates: () => [], hasRoutable: () => false, serves: () => false, waiting: () => 0 } as unknown as Fleet;
const CHUNK = { type: "chunk", delta: { content: "Hi" } } as const;

/** Two stand-in remote providers; `behave` gets each attempt as it is forwarded. */
function remote(behave: (a: Attempt, n: number) => void): RemoteProviders & { attempts: Attempt[]; cancels: unknown[] } {
  const attempts: Attempt[] = [];
  const cancels: unknown[] = [];
  return {
    attempts,
    cancels,
    candidates: () => [
      { providerId: "prov_1", accountId: "acct_1" },
      { providerId: "prov_2", accountId: "acct_2" },
    ],
    serves: () => true,
    forward(target, frame) {
      const owner = { release: (_: Attempt, cancel: unknown) => void cancels.push(cancel) };
      const a = new Attempt(frame.request_id, frame.attempt, target.providerId, target.accountId, 0, owner);
      attempts.push(a);
      behave(a, attempts.length - 1);
      return a;
    },
  };
}

function request(signal = new AbortController().signal): DispatchRequest {
  return { requestId: "req_wait", buildId: "org/b", body, limits: usageLimits(body), signal, requestDeadline: Date.now() + 60_000 };
}

const settings = (acceptTimeoutMs: number, firstContentTimeoutMs = 10_000) => ({
  firstContentTimeoutMs,
  acceptTimeoutMs,
  maxAttempts: 2,
  maxQueuedPerModel: 0,
});

describe("the wait for first content", () => {
  test("events already queued decide at once", async () => {
    const r = remote((a) => {
      a.accepted(Date.now());
      a.push(CHUNK);
    });
    const committed = await dispatch(noLocal, settings(10_000), request(), Date.now, r);
    expect([committed.first, committed.attempt.providerId]).toEqual([CHUNK, "prov_1"]);
  });

  test("events arriving within the bound decide", async () => {
    const r = remote((a) => {
      setTimeout(() => a.accepted(Date.now()), 5);
      setTimeout(() => a.push(CHUNK), 10);
    });
    const committed = await dispatch(noLocal, settings(50), request(), Date.now, r);
    expect(committed.first).toEqual(CHUNK);
    expect(r.attempts).toHaveLength(1);
  });

  test("silence before accepting fails over after the accept timeout; the silent attempt is cancelled", async () => {
    const r = remote((a, n) => {
      if (n === 1) queueMicrotask(() => a.push(CHUNK));
    });
    const started = performance.now();
    const committed = await dispatch(noLocal, settings(30), request(), Date.now, r);
    expect(performance.now() - started).toBeGreaterThanOrEqual(25);
    expect(committed.attempt.providerId).toBe("prov_2");
    expect(r.cancels[0]).toBe("failover");
  });

  test("accepted, then silence: the first-content deadline, 429 first_content_timeout", async () => {
    const r = remote((a) => a.accepted(Date.now()));
    const error = await dispatch(noLocal, settings(10_000, 40), request(), Date.now, r).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect([(error as ApiError).status, (error as ApiError).code]).toEqual([429, "first_content_timeout"]);
    expect(r.attempts).toHaveLength(1);
  });

  test("a client that leaves during the wait ends it", async () => {
    const gone = new AbortController();
    const r = remote(() => setTimeout(() => gone.abort(), 5));
    const error = await dispatch(noLocal, settings(10_000), request(gone.signal), Date.now, r).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ClientGone);
    expect(r.cancels[0]).toBe("client_gone");
  });
});

describe("Attempt.unwait", () => {
  test("a withdrawn wait is not answered; the next event stays queued", async () => {
    const a = new Attempt("req_1", 0, "prov_1", "acct_1", 0, { release: () => {} });
    const got: unknown[] = [];
    const listener = { attemptEvent: (e: unknown) => got.push(e) };
    a.wait(listener);
    a.unwait(listener);
    a.push({ type: "accepted" });
    await Promise.resolve();
    expect(got).toEqual([]);
    expect(a.poll()).toEqual({ type: "accepted" });
  });
});
