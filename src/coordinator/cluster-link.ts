/**
 * The app's place in the cluster (config.cluster): a NATS connection (the configured servers, TLS when
 * asked, user and password or token) carrying a ClusterNode, which the chat path uses as its remote
 * providers and whose RemoteFleet counts the live replicas. A NATS that does not answer at start is
 * logged and retried in the background while the replica serves its own providers; once connected, the
 * client reconnects by itself. `close` stops the node and closes the connection (the app's close calls it).
 * /v1/models counts the other replicas' providers too, attestation figures included (withRemoteCapacity),
 * and GET /v1/providers/attestation lists them (Fleet.showRemote).
 */
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { mergeSummaries, type TrustLevel } from "../../attestation/provider/levels.ts";
import type { DigestProvider } from "../cluster/digest.ts";
import { ClusterNode } from "../cluster/node.ts";
import type { RemoteCapacity } from "../cluster/remote-fleet.ts";
import { isToken, subjects } from "../cluster/wire.ts";
import type { ClusterConfig } from "../config/config.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { FleetView } from "../fleet/fleet-view.ts";
import type { RemoteProviders } from "../inference/dispatch.ts";
import type { Logger } from "../observability/logger.ts";
import type { MoneyAuthority } from "../store/pg/money-authority.ts";

/** Between connection attempts while NATS has never answered. */
const RETRY_MS = 2000;

export interface ClusterLinkDeps {
  readonly cluster: ClusterConfig;
  readonly fleet: Fleet;
  readonly minTrust: TrustLevel;
  readonly logger: Logger;
  readonly now: () => number;
}

export interface AppCluster {
  /** The chat path's remote providers: none until NATS is connected. */
  readonly remote: RemoteProviders;
  /** This replica and the others whose digests arrive. */
  liveReplicas(): number;
  /** The other replicas' providers of a build (none while disconnected). */
  capacity(buildId: string): RemoteCapacity | undefined;
  /** The builds the account's routable machines on other replicas serve. */
  buildsOf(accountId: string): readonly string[];
  /** The account's machines on other replicas, from their digests (the console's machines list). */
  machinesOf(accountId: string): readonly DigestProvider[];
  /** The ClusterNode once connected (tests). */
  readonly node: ClusterNode | undefined;
  /** NATS is connected now (other replicas can reach this one). */
  connected(): boolean;
  /** Asks another replica to give back its balance leases on an account; resolves when it has, or after 1 s. */
  recall(replica: string, accountId: string): Promise<void>;
  /** What this replica does when asked (the money authority's leases give theirs back). */
  onRecall(handler: (accountId: string) => Promise<unknown>): void;
  close(): void;
}

/** How long a recall waits for the other replica's answer. */
const RECALL_MS = 1000;

/** The connection options of the configured servers (credentials apart from the addresses). */
export function natsOptions(cluster: ClusterConfig) {
  const urls = cluster.natsServers.map((s) => new URL(s));
  const user = urls.map((u) => decodeURIComponent(u.username)).find((u) => u !== "");
  const inline = urls.map((u) => decodeURIComponent(u.password)).find((p) => p !== "");
  const password = cluster.natsPassword ?? inline;
  const auth = user !== undefined ? { user, pass: password ?? "" } : password !== undefined ? { token: password } : {};
  return {
    servers: urls.map((u) => u.host),
    name: `umbra-${cluster.replicaId}`,
    ...(cluster.natsTls ? { tls: {} } : {}),
    ...auth,
  };
}

export function startCluster(deps: ClusterLinkDeps): AppCluster {
  const { cluster, logger } = deps;
  let node: ClusterNode | undefined;
  let nc: NatsConnection | undefined;
  let closed = false;
  let retry: ReturnType<typeof setTimeout> | undefined;
  let warned = false;
  let connectedNow = false;
  let recallHandler: ((accountId: string) => Promise<unknown>) | undefined;
  const recalls = (c: NatsConnection) =>
    c.subscribe(subjects.recall(cluster.prefix, cluster.replicaId), {
      callback: (err, msg) => {
        if (err || recallHandler === undefined) return;
        recallHandler(new TextDecoder().decode(msg.data)).then(
          () => msg.respond(),
          () => msg.respond(),
        );
      },
    });
  const attempt = () => {
    connect({ ...natsOptions(cluster), timeout: RETRY_MS, reconnect: true, maxReconnectAttempts: -1 }).then(
      (c) => {
        if (closed) return void c.close();
        nc = c;
        try {
          node = new ClusterNode({
            nc: c,
            prefix: cluster.prefix,
            replicaId: cluster.replicaId,
            fleet: deps.fleet,
            minTrust: deps.minTrust,
            logger,
            now: deps.now,
          }).start();
        } catch {
          // The configuration checks the names first: never expected, never a crash.
          logger.error("cluster node not started: serving local providers only", { replica_id: cluster.replicaId });
          return void c.close();
        }
        recalls(c);
        connectedNow = true;
        void (async () => {
          for await (const status of c.status()) {
            if (status.type === "disconnect") connectedNow = false;
            else if (status.type === "reconnect") connectedNow = true;
          }
        })().catch(() => {});
        const remoteFleet = node.remote;
        deps.fleet.showRemote({ version: () => remoteFleet.version, entries: () => remoteFleet.publicAttestations() });
        logger.info("cluster connected", { replica_id: cluster.replicaId });
        void c.closed().then(() => {
          if (!closed) logger.error("cluster connection closed", { replica_id: cluster.replicaId });
        });
      },
      (e: unknown) => {
        if (closed) return;
        if (!warned) {
          warned = true;
          logger.warn("NATS unreachable: serving local providers only, retrying", {
            replica_id: cluster.replicaId,
            reason: e instanceof Error ? e.name : "connect",
          });
        }
        retry = setTimeout(attempt, RETRY_MS);
        retry.unref?.();
      },
    );
  };
  attempt();
  const remote: RemoteProviders = {
    candidates: (buildId, accountId) => node?.candidates(buildId, accountId) ?? [],
    serves: (buildId, accountId) => node?.serves(buildId, accountId) ?? false,
    forward: (target, frame) => {
      if (node === undefined) throw new Error("cluster not connected");
      return node.forward(target, frame);
    },
  };
  return {
    remote,
    liveReplicas: () => 1 + (node?.remote.replicaIds.length ?? 0),
    capacity: (buildId) => node?.remote.capacity(buildId),
    buildsOf: (accountId) => node?.remote.buildsOf(accountId) ?? [],
    machinesOf: (accountId) => node?.remote.machinesOf(accountId) ?? [],
    get node() {
      return node;
    },
    connected: () => node !== undefined && nc !== undefined && !nc.isClosed() && connectedNow,
    recall: async (replica, accountId) => {
      if (nc === undefined || !isToken(replica)) return;
      await nc.request(subjects.recall(cluster.prefix, replica), accountId, { timeout: RECALL_MS }).catch(() => {});
    },
    onRecall: (handler) => {
      recallHandler = handler;
    },
    close: () => {
      closed = true;
      clearTimeout(retry);
      node?.stop();
      void nc?.close().catch(() => {});
    },
  };
}

/** /v1/models capacity: this replica's fleet plus the others' providers, attestation figures included. */
export function withRemoteCapacity(local: FleetView, cluster: AppCluster): FleetView {
  return {
    capacity: (buildId) => {
      const here = local.capacity(buildId);
      const away = cluster.capacity(buildId);
      if (away === undefined || away.providerCount === 0) return here;
      const { attestedProviders, trustLevel, attestation } = mergeSummaries(here, away);
      return {
        providerCount: here.providerCount + away.providerCount,
        attestedProviders,
        routableProviders: here.routableProviders + away.routableProviders,
        warmProviders: here.warmProviders + away.warmProviders,
        canAccept: here.canAccept || away.canAccept,
        trustLevel,
        ...(attestation ? { attestation } : {}),
      };
    },
  };
}

/**
 * Balance leases across replicas: taken only while NATS is up (so recalls reach this replica), recalled
 * from the others before a 402, given back here when another replica asks.
 */
export function linkLeases(authority: MoneyAuthority, cluster: AppCluster): void {
  authority.recaller = (replica, accountId) => cluster.recall(replica, accountId);
  authority.leases.enableWhen(() => cluster.connected());
  cluster.onRecall((accountId) => authority.leases.recall(accountId));
}

/** The leases' figures for /metrics. */
export function leasesOf(authority: MoneyAuthority) {
  return () => ({ count: authority.leases.size, heldMicroUsd: authority.leases.held });
}
