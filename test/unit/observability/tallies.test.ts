/**
 * observability/tallies.ts against prom-client itself: the same observations into a prom-client Counter and
 * Histogram in one registry and into a TalliedCounter and TalliedHistogram in another render the same
 * /metrics text and the same JSON, scrape after scrape (counts keep adding up between scrapes), with
 * labels or none, values on a bound and above every bound, label sets first seen in any order.
 */
import { describe, expect, test } from "bun:test";
import { Counter, Histogram, Registry } from "prom-client";
import { TalliedCounter, TalliedHistogram } from "../../../src/observability/tallies.ts";

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5];

function pair() {
  const [ours, theirs] = [new Registry(), new Registry()];
  const config = { name: "t_requests_total", help: "requests", labelNames: ["method", "route", "status"] };
  const counter = { ours: new TalliedCounter({ ...config, registers: [ours] }), theirs: new Counter({ ...config, registers: [theirs] }) };
  const hConfig = { name: "t_duration_seconds", help: "a \\ help\nline", labelNames: ["method", "route"], buckets: BUCKETS };
  const histogram = {
    ours: new TalliedHistogram({ ...hConfig, registers: [ours] }),
    theirs: new Histogram({ ...hConfig, registers: [theirs] }),
  };
  const bare = {
    ours: new TalliedHistogram({ name: "t_batch", help: "batch", buckets: [1, 2, 4, 8], registers: [ours] }),
    theirs: new Histogram({ name: "t_batch", help: "batch", buckets: [1, 2, 4, 8], registers: [theirs] }),
  };
  const observe = (method: string, route: string, status: number, seconds: number) => {
    counter.ours.inc(method, route, status);
    counter.theirs.inc({ method, route, status: String(status) });
    histogram.ours.observe(seconds, method, route);
    histogram.theirs.observe({ method, route }, seconds);
  };
  const batch = (n: number) => {
    bare.ours.observe(n);
    bare.theirs.observe(n);
  };
  return { ours, theirs, observe, batch };
}

describe("tallied metrics render as prom-client's", () => {
  test("text and JSON, scrape after scrape", async () => {
    const p = pair();
    // Nothing observed yet: the same (empty) exposition.
    expect(await p.ours.metrics()).toBe(await p.theirs.metrics());
    const samples: [string, string, number, number][] = [
      ["POST", "/v1/chat/completions", 200, 0.0012],
      ["GET", "/v1/models", 200, 0.0005],
      ["POST", "/v1/chat/completions", 429, 0.00003],
      ["POST", "/v1/chat/completions", 200, 7.5],
      ["GET", 'a "quoted" \\ route\n', 404, 1],
      ["POST", "/v1/chat/completions", 200, 0.1],
    ];
    for (const s of samples) p.observe(...s);
    for (const n of [1, 3, 3, 9, 0.5]) p.batch(n);
    expect(await p.ours.metrics()).toBe(await p.theirs.metrics());
    expect(await p.ours.getMetricsAsJSON()).toEqual(await p.theirs.getMetricsAsJSON());
    for (const s of samples.reverse()) p.observe(...s);
    p.observe("DELETE", "/v1/admin/keys/:id", 204, 0.003);
    p.batch(8);
    const text = await p.ours.metrics();
    expect(text).toBe(await p.theirs.metrics());
    expect(text).toContain('t_requests_total{method="POST",route="/v1/chat/completions",status="200"} 6');
    expect(text).toContain('t_duration_seconds_bucket{le="0.001",method="GET",route="/v1/models"} 2');
  });

  test("a value that is not a number throws, as prom-client's", () => {
    const h = new TalliedHistogram({ name: "t_x", help: "x", buckets: [1], registers: [] });
    expect(() => h.observe(Number.NaN)).toThrow(TypeError);
    expect(() => h.observe(Number.POSITIVE_INFINITY)).toThrow(TypeError);
  });

  test("more than three labels are refused", () => {
    expect(() => new TalliedCounter({ name: "t_y", help: "y", labelNames: ["a", "b", "c", "d"], registers: [] })).toThrow(RangeError);
  });
});
