/**
 * Prometheus metrics through prom-client, one Registry per app (no global default registry), so two apps
 * in one test process never share counters. Labels are route templates and statuses, never ids or content.
 */
import { Counter, Gauge, Registry } from "prom-client";
import { monitorLoopDelay } from "./loop-delay.ts";
import { TalliedCounter, TalliedHistogram } from "./tallies.ts";

export interface Metrics {
  readonly registry: Registry;
  observeHttp(method: string, route: string, status: number, seconds: number): void;
  /** One chat answer's end: completed, failed or cancelled; streamed or not. */
  observeChat(outcome: string, stream: boolean): void;
  /** A provider's usage report beyond a bound (billing/usage-bounds.ts): its answer failed, it was cut off. */
  observeUsageRejected(bound: string): void;
  /** One group commit of settlements: how many, and how long the commit took. */
  observeSettlementCommit(settlements: number, seconds: number): void;
  /** Where rate limits are decided: shared in Redis, or on this replica alone (Redis unreachable). */
  observeRateLimitMode(mode: "redis" | "local"): void;
  /** Cluster mode: gauges of the replica's view, read from `view` when /metrics is rendered. */
  watchCluster(view: ClusterView): void;
  render(): Promise<string>;
  /** Stops the event-loop delay timer (the app's close). */
  close(): void;
}

/** Bounds of the event-loop delay histogram, in seconds: 1, 2, 5, 10, 20, 50 ms and beyond. */
export const LOOP_DELAY_BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1];

/** What a replica sees of the cluster (src/coordinator/cluster-link.ts, the Postgres change feed). */
export interface ClusterView {
  /** This replica and those whose fleet digests arrive. */
  replicas(): number;
  /** Providers connected to the other replicas, at their last digests. */
  remoteProviders(): number;
  /** The read caches are in use: the store's change feed delivers (undefined: a store without one). */
  cachesLive(): boolean | undefined;
  /** This replica's balance leases (store/pg/money-leases.ts): how many, and the money they hold. */
  leases?(): { readonly count: number; readonly heldMicroUsd: number };
}

export interface MetricsOptions {
  /** Interval of the event-loop delay timer in ms (loop-delay.ts; 2). */
  readonly loopDelayIntervalMs?: number;
}

export function createMetrics(options: MetricsOptions = {}): Metrics {
  const registry = new Registry();
  // Per request (and per loop tick): tallied, without prom-client's garbage per call (tallies.ts).
  const requests = new TalliedCounter({
    name: "umbra_http_requests_total",
    help: "HTTP requests by method, route template and status",
    labelNames: ["method", "route", "status"],
    registers: [registry],
  });
  const duration = new TalliedHistogram({
    name: "umbra_http_request_duration_seconds",
    help: "HTTP request handling time until the response head",
    labelNames: ["method", "route"],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers: [registry],
  });
  const chats = new TalliedCounter({
    name: "umbra_chat_completions_total",
    help: "Chat answers by outcome after dispatch committed",
    labelNames: ["outcome", "stream"],
    registers: [registry],
  });
  const usageRejected = new Counter({
    name: "umbra_provider_usage_rejected_total",
    help: "Provider usage reports beyond the coordinator's bounds (answer failed as invalid_provider_output, provider cut off), by bound",
    labelNames: ["bound"] as const,
    registers: [registry],
  });
  const commitSizes = new TalliedHistogram({
    name: "umbra_settlement_batch_size",
    help: "Settlements per group commit (durable before their responses complete)",
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    registers: [registry],
  });
  const commitTime = new TalliedHistogram({
    name: "umbra_settlement_commit_seconds",
    help: "Time of one group commit of settlements",
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.0025, 0.005, 0.01, 0.05, 0.25, 1],
    registers: [registry],
  });
  const rateLimitMode = new Gauge({
    name: "umbra_rate_limit_mode",
    help: "1 for the mode rate limits are decided in: redis (shared by the replicas) or local (Redis unreachable: each replica limits alone at limit / live replicas)",
    labelNames: ["mode"] as const,
    registers: [registry],
  });
  const loopDelay = new TalliedHistogram({
    name: "umbra_event_loop_delay_seconds",
    help: "Lateness of a short self-rescheduling timer (every 2 ms): how long the event loop was held up; a stall of S shows as S - 2 ms to S",
    buckets: LOOP_DELAY_BUCKETS,
    registers: [registry],
  });
  const monitor = monitorLoopDelay((seconds) => loopDelay.observe(seconds), options.loopDelayIntervalMs);
  return {
    registry,
    close: () => monitor.stop(),
    watchCluster(view) {
      const gauge = (name: string, help: string, read: () => number | undefined) =>
        new Gauge({
          name,
          help,
          registers: [registry],
          collect() {
            const value = read();
            if (value !== undefined) this.set(value);
          },
        });
      gauge("umbra_cluster_replicas", "Replicas this one sees: itself and those whose NATS fleet digests arrive", view.replicas);
      gauge("umbra_cluster_remote_providers", "Providers connected to the other replicas, at their last digests", view.remoteProviders);
      const leases = view.leases;
      if (leases) {
        gauge("umbra_money_leases", "Balance leases this replica holds", () => leases().count);
        gauge("umbra_money_leased_micro_usd", "Money this replica's balance leases hold, in µUSD", () => leases().heldMicroUsd);
      }
      gauge(
        "umbra_store_caches_live",
        "1 while the Postgres change feed delivers and the read caches are used, 0 while they are bypassed",
        () => {
          const live = view.cachesLive();
          return live === undefined ? undefined : Number(live);
        },
      );
    },
    observeRateLimitMode(mode) {
      rateLimitMode.set({ mode: "redis" }, mode === "redis" ? 1 : 0);
      rateLimitMode.set({ mode: "local" }, mode === "local" ? 1 : 0);
    },
    observeSettlementCommit(settlements, seconds) {
      commitSizes.observe(settlements);
      commitTime.observe(seconds);
    },
    observeUsageRejected(bound) {
      usageRejected.inc({ bound });
    },
    observeChat(outcome, stream) {
      chats.inc(outcome, stream ? "true" : "false");
    },
    observeHttp(method, route, status, seconds) {
      requests.inc(method, route, status);
      duration.observe(seconds, method, route);
    },
    render: () => registry.metrics(),
  };
}
